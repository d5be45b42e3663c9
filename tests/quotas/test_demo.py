"""The demo organisation the README's run command loads."""

import pytest
from django.core.management import call_command

from quotas.models import AuditEvent, Cluster, OrgUnit, ResourceFlavor
from quotas.policy import Resource
from quotas.policy.capacity import capacity_report
from quotas.policy.invariants import validate_tree
from quotas.selectors import org_snapshot

pytestmark = pytest.mark.django_db


def test_demo_loads_a_realistic_valid_organisation(capsys):
    call_command("allot_demo")
    out = capsys.readouterr().out
    assert "0 invariant violations" in out and "allot-demo" in out and "lead-nlp" in out
    snapshot = org_snapshot()
    assert validate_tree(snapshot) == []
    kinds = list(OrgUnit.objects.values_list("kind", flat=True))
    assert kinds.count("organisation") == 1 and kinds.count("department") == 3 and kinds.count("team") == 10
    assert set(Cluster.objects.values_list("kind", flat=True)) == {"kubernetes", "slurm"}
    devices = dict(ResourceFlavor.objects.values_list("name", "physical_devices"))
    assert (devices["a100-80gb"], devices["a100-40gb"], devices["v100-32gb"]) == (400, 424, 200)  # seed table 8
    # some burst and some lending, and capacity fully promised but never over-promised
    assert any(q.burst > 0 for q in snapshot.quotas.values())
    assert any(0 < q.lendable < q.guarantee for q in snapshot.quotas.values())
    assert all(line.left_to_promise >= 0 for line in capacity_report(snapshot))
    gpu_keys = [k for k in snapshot.quotas if k[2] is Resource.GPU]
    assert len(gpu_keys) == 19 * 5
    assert AuditEvent.objects.filter(reason="demo organisation").count() > 100


def test_demo_is_idempotent(capsys):
    call_command("allot_demo")
    events = AuditEvent.objects.count()
    call_command("allot_demo")
    assert "Found the demo organisation" in capsys.readouterr().out
    assert AuditEvent.objects.count() == events
