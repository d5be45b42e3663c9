"""Adopting an existing Kueue setup: import → compile reproduces the same objects."""

from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from quotas import services
from quotas.models import AuditEvent, Cluster, NamespaceBinding, OrgUnit, Quota
from quotas.policy import Resource
from quotas.policy.invariants import validate_tree
from quotas.policy.kueue import compile_kueue, render_yaml
from quotas.policy.kueue.importer import semantic
from quotas.selectors import kueue_target, org_snapshot
from tests.kube_fake import FakeKueueServer

pytestmark = pytest.mark.django_db
DOCS = Path(__file__).resolve().parent.parent / "fixtures" / "kueue-docs"


def compiled(cluster_name):
    return compile_kueue(org_snapshot(), kueue_target(Cluster.objects.get(name=cluster_name)))


def relative_weights(objects):
    """Weights as shares of the largest sibling's: what Kueue compares (and how Allot compiles them, issue #39.4),
    so hand-written weights 2 and 1 mean what compiled 1 and 0.5 do."""
    from decimal import Decimal

    def parent(o):
        return o["spec"].get("parentName") or o["spec"].get("cohortName")

    def weight(o):
        return Decimal(str((o["spec"].get("fairSharing") or {}).get("weight", "1")))

    nodes = [o for o in objects if o["kind"] in ("Cohort", "ClusterQueue")]
    largest: dict[str | None, Decimal] = {}
    for o in nodes:
        largest[parent(o)] = max(largest.get(parent(o), Decimal(0)), weight(o))
    out = []
    for o in objects:
        if o in nodes and largest[parent(o)] > 0:
            share = (weight(o) / largest[parent(o)]).quantize(Decimal("0.000000001")).normalize()
            o = {**o, "spec": {**o["spec"], "fairSharing": {"weight": str(share)}}}
        out.append(o)
    return out


def test_hand_written_yaml_in_the_style_of_kueues_docs_round_trips(capsys):
    call_command("allot_import_kueue", from_dir=DOCS, cluster="docs")
    assert "imported 3 units, 18 quotas, 2 flavors, 3 namespaces into docs" in capsys.readouterr().out
    original = relative_weights([d for d in yaml.safe_load_all((DOCS / "cluster-queues.yaml").read_text()) if d])
    output = relative_weights(compiled("docs"))
    produced = {semantic(o) for o in output}
    assert [semantic(o) for o in original if semantic(o) not in produced] == []
    # the only addition: the implicit cohort made explicit, adding no capacity
    extra = [o for o in output if semantic(o) not in {semantic(x) for x in original}]
    assert [(o["kind"], o["metadata"]["name"]) for o in extra] == [("Cohort", "team-ab")]
    assert all(
        r["nominalQuota"] == "0" for f in extra[0]["spec"]["resourceGroups"][0]["flavors"] for r in f["resources"]
    )
    team_a = OrgUnit.objects.get(kueue_name="team-a-cq")
    assert (team_a.path, team_a.kind, team_a.contract and team_a.contract.name) == (
        "team-ab/team-a-cq",
        "team",
        "imported-any-lowerpriority",
    )
    assert set(NamespaceBinding.objects.values_list("namespace", "local_queue_name")) == {
        ("team-a", "user-queue"),
        ("team-b", "user-queue"),
        ("team-b-dev", "user-queue"),
    }
    assert validate_tree(org_snapshot()) == []
    assert AuditEvent.objects.filter(reason="adopted from an existing Kueue setup").count() > 10


def test_the_demo_survives_compile_import_compile():
    call_command("allot_demo")
    before = compiled("k8s-west")
    services.org_unit_archive(actor=None, reason="re-import", unit=OrgUnit.objects.get(path="acme"))
    east = services.cluster_set(actor=None, reason="t", name="k8s-east", kind="kubernetes")
    from quotas.services.kueue_import import kueue_import

    kueue_import(actor=None, reason="round trip", cluster=east, objects=yaml.safe_load_all(render_yaml(before)))
    after = compiled("k8s-east")
    assert len(after) == len(before) == 45
    assert sorted(map(semantic, after), key=repr) == sorted(map(semantic, before), key=repr)
    # and the comparison can fail: one guarantee one device lower is a different object
    rl = Quota.objects.get(
        unit__path="acme/research/rl",
        flavor__cluster__name="k8s-east",
        flavor__name="a100-80gb",
        resource="nvidia.com/gpu",
        unit__archived_at__isnull=True,
    )
    services.quota_set(
        actor=None,
        reason="t",
        unit_id=rl.unit_id,
        flavor_id=rl.flavor_id,
        resource=Resource(rl.resource),
        guarantee=rl.guarantee - 1,
    )
    changed = {semantic(o) for o in compiled("k8s-east")} - {semantic(o) for o in before}
    assert sorted(s[:3] for s in changed) == [("ClusterQueue", "", "acme.research.rl"), ("Cohort", "", "acme.research")]


def test_import_from_a_live_cluster(crd_schemas, capsys):
    objects = [d for d in yaml.safe_load_all((DOCS / "cluster-queues.yaml").read_text()) if d]
    with FakeKueueServer(crd_schemas) as fake:
        for obj in objects:
            fake.put_unmanaged(obj)
        services.cluster_set(actor=None, reason="t", name="live", kind="kubernetes", connection_ref=f"url:{fake.url}")
        call_command("allot_import_kueue", from_cluster=True, cluster="live")
    assert "imported 3 units" in capsys.readouterr().out
    assert Quota.objects.filter(unit__kueue_name="team-b-cq", resource="nvidia.com/gpu").count() == 2


def test_bad_imports_change_nothing(tmp_path):
    with pytest.raises(CommandError, match="not a directory"):
        call_command("allot_import_kueue", from_dir=tmp_path / "missing", cluster="docs")
    (tmp_path / "broken.yaml").write_text("kind: [unclosed")
    with pytest.raises(CommandError, match="not valid YAML"):
        call_command("allot_import_kueue", from_dir=tmp_path, cluster="docs")
    (tmp_path / "broken.yaml").unlink()
    (tmp_path / "empty.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    with pytest.raises(CommandError, match="no Cohort or ClusterQueue"):
        call_command("allot_import_kueue", from_dir=tmp_path, cluster="docs")
    text = (DOCS / "cluster-queues.yaml").read_text().replace("borrowingLimit: 4\n", "borrowingLimit: 40\n")
    (tmp_path / "empty.yaml").write_text(text)
    with pytest.raises(CommandError, match="break Allot's invariants") as info:
        call_command("allot_import_kueue", from_dir=tmp_path, cluster="docs")
    assert "team-ab/team-b-cq" in str(info.value) and "ceiling" in str(info.value)
    assert not OrgUnit.objects.exists() and not Quota.objects.exists()
    call_command("allot_import_kueue", from_dir=DOCS, cluster="docs")
    with pytest.raises(CommandError, match="exists already"):
        call_command("allot_import_kueue", from_dir=DOCS, cluster="docs")


def test_settings_the_import_cannot_carry_are_listed_and_need_accepting(tmp_path, capsys):
    """Issue #15.7: taints, StrictFIFO, selectors, unlimited borrowing and tier limits changed silently."""
    setup = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "a100"},
         "spec": {"nodeLabels": {"gpu": "a100"}, "nodeTaints": [{"key": "gpu", "effect": "NoSchedule"}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": "org"}, "spec": {}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "team"},
         "spec": {"cohortName": "org", "queueingStrategy": "StrictFIFO", "namespaceSelector": {},
                  "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
                      {"name": "a100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "8"}]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "team", "namespace": "ml"},
         "spec": {"clusterQueue": "team"}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": "allot-p2"},
         "value": 200},
    ]  # fmt: skip
    (tmp_path / "setup.yaml").write_text(yaml.safe_dump_all(setup))
    with pytest.raises(CommandError, match=r"5 setting\(s\) above would change meaning"):
        call_command("allot_import_kueue", from_dir=tmp_path, cluster="hand")
    said = capsys.readouterr().out
    for words in (
        "ResourceFlavor a100: nodeTaints not imported",
        "ClusterQueue team: queueingStrategy StrictFIFO becomes BestEffortFIFO",
        "ClusterQueue team: namespaceSelector {} (every namespace) becomes the namespaces of its LocalQueues (ml)",
        "ClusterQueue team: a100/nvidia.com/gpu may borrow without limit in Kueue",
        "WorkloadPriorityClass allot-p2: imported as tier P2 with its value only",
    ):
        assert f"would change: {words}" in said, words
    assert not OrgUnit.objects.exists()  # nothing imported until accepted
    call_command("allot_import_kueue", from_dir=tmp_path, cluster="hand", accept_notes=True)
    assert "imported 2 units" in capsys.readouterr().out and OrgUnit.objects.filter(kueue_name="team").exists()
