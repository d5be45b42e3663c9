"""Edits reach the clusters by themselves: a committed policy change queues one debounced enforcement
per enabled cluster; other changes queue none; one run per cluster at a time."""

from __future__ import annotations

import pytest
from django.core.cache import cache

from quotas import services
from quotas.policy import Resource
from quotas.services import enforce
from quotas.tasks import enforce_cluster

pytestmark = pytest.mark.django_db


@pytest.fixture
def queued(settings, monkeypatch):
    settings.ALLOT_ENFORCE_ON_CHANGE = True
    cache.clear()
    calls = []
    monkeypatch.setattr(enforce_cluster, "apply_async", lambda args, countdown: calls.append((args[0], countdown)))
    return calls


def _edit(org, guarantee):
    services.quota_set(
        actor=org.admin, reason="t", unit_id=org.llm.pk, flavor_id=org.flavor.pk, resource=Resource.GPU,
        guarantee=guarantee,
    )  # fmt: skip


def test_a_committed_policy_change_queues_one_debounced_run_per_enabled_cluster(
    org, queued, settings, django_capture_on_commit_callbacks
):
    from quotas.models import Cluster

    settings.ALLOT_ENFORCE_DELAY_SECONDS = 7
    enabled = set(Cluster.objects.filter(enabled=True).values_list("pk", flat=True))
    with django_capture_on_commit_callbacks(execute=False) as pending:
        _edit(org, 12)
    assert queued == []  # nothing before the commit
    for callback in pending:
        callback()
    assert sorted(queued) == sorted((pk, 7) for pk in enabled) and enabled
    with django_capture_on_commit_callbacks(execute=True):
        _edit(org, 13)  # a second edit while the first run waits: the same run takes both
    assert len(queued) == len(enabled)
    cache.delete(enforce.PENDING.format(min(enabled)))  # that cluster's run started
    with django_capture_on_commit_callbacks(execute=True):
        _edit(org, 14)
    assert len(queued) == len(enabled) + 1 and queued[-1][0] == min(enabled)


def test_changes_that_are_not_policy_queue_nothing_and_the_switch_turns_it_off(
    org, queued, settings, django_capture_on_commit_callbacks
):
    from quotas.models import AuditEvent
    from quotas.services.audit import audit_event, audit_write

    with django_capture_on_commit_callbacks(execute=True):
        audit_write([audit_event(actor=None, action="cluster_sync", obj_type="cluster", obj_id=1, obj_repr="x",
                                 before=None, after=None, reason="a sync")])  # fmt: skip
    assert queued == [] and AuditEvent.objects.filter(action="cluster_sync").exists()
    settings.ALLOT_ENFORCE_ON_CHANGE = False
    with django_capture_on_commit_callbacks(execute=True):
        _edit(org, 12)
    assert queued == []


def test_one_run_per_cluster_at_a_time(org, settings):
    cache.clear()
    cache.add(enforce.RUNNING.format(org.cluster.pk), 1)
    assert enforce.cluster_enforce(cluster=org.cluster) == {"busy": True}
    from celery.exceptions import Retry

    with pytest.raises(Retry):
        enforce_cluster.apply(args=(org.cluster.pk,), throw=True).get()
    cache.clear()


def test_two_slurm_clusters_never_share_one_snapshot_file(org, settings, tmp_path):
    """Issue #41: ALLOT_SLURM_POLICY_OUT without {cluster} let each Slurm cluster overwrite the other's
    job_submit snapshot silently; now it is refused, naming the clusters and the fix, while a second is enabled."""
    from quotas.models import Cluster, ClusterKind

    for name in Cluster.objects.filter(kind=ClusterKind.SLURM).values_list("name", flat=True):  # the fixture's
        services.cluster_set(actor=org.admin, reason="t", name=name, enabled=False)
    east = services.cluster_set(actor=org.admin, reason="t", name="slurm-east", kind=ClusterKind.SLURM,
                                connection_ref="slurm:east")  # fmt: skip
    settings.ALLOT_SLURM_POLICY_OUT = str(tmp_path / "policy")
    assert enforce.policy_out(east) == tmp_path / "policy"  # the only Slurm cluster: one file is fine
    west = services.cluster_set(actor=org.admin, reason="t", name="slurm-west", kind=ClusterKind.SLURM,
                                connection_ref="slurm:west")  # fmt: skip
    with pytest.raises(ValueError, match=r"slurm-east, slurm-west would overwrite .* put \{cluster\} in the path"):
        enforce.policy_out(east)
    settings.ALLOT_SLURM_POLICY_OUT = str(tmp_path / "{cluster}-policy")
    assert {enforce.policy_out(c) for c in (east, west)} == {
        tmp_path / "slurm-east-policy",
        tmp_path / "slurm-west-policy",
    }
