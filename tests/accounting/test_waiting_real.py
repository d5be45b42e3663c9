"""Waiting, explained, on a real Kueue (issue #44.6): the watcher's live view, the explanation naming the real
cause, and each way out, applied, making the job run."""

from __future__ import annotations

import re

import pytest

from accounting.services.kueue import kueue_client, usage_resync_kueue
from accounting.services.kueue_queues import queues_resync
from accounting.services.waiting import explain_record, find_waiting, unit_waiting
from quotas.models import Cluster, NamespaceBinding, SyncStatus
from quotas.services.sync import cluster_sync
from tests.kube_work import admitted, condition, delete_jobs, gpu_job, wait_for, workloads
from tests.quotas.test_kube_real import active, demo_on_the_plane

pytestmark = [pytest.mark.kube, pytest.mark.django_db]


def test_a_job_beyond_its_units_ceiling_is_explained_and_each_way_out_makes_it_run(kube_plane, demo):
    from admission.selectors import admission_policy

    demo_on_the_plane(kube_plane, demo)
    run = cluster_sync(actor=None, reason="t", cluster=demo)
    assert run.status in (SyncStatus.APPLIED, SyncStatus.IN_SYNC), run.message
    policy = admission_policy(Cluster.objects.get(pk=demo.pk))
    labels = {f.name: dict(f.node_labels) for f in policy.flavors}
    ns = "speech"
    rule = policy.namespaces[ns]
    active(kube_plane, [rule.queue])
    full, other = sorted((c, f) for f, c in rule.ceilings.items() if c)[:2]
    ceiling, flavor = full
    try:
        kube_plane.apply_manifest(gpu_job("first", ns, rule.queue, ceiling, node_selector=labels[flavor]))
        wait_for("first admitted at the ceiling", lambda: admitted(workloads(kube_plane, ns).get("first")))
        kube_plane.apply_manifest(gpu_job("second", ns, rule.queue, 1, node_selector=labels[flavor]))
        said = wait_for(
            "Kueue's word on second",
            lambda: (condition(workloads(kube_plane, ns).get("second"), "QuotaReserved") or {}).get("message"),
        )
        resync = usage_resync_kueue(cluster=demo)
        assert resync.status != "failed", resync.message
        record = find_waiting(demo, ns, "job/second")
        assert record is not None and record.state == "pending"

        # Kueue's own figures for the queue, as the watcher keeps them: the ClusterQueue's status as served
        def served():  # Kueue updates a ClusterQueue's status a moment after its Workloads change
            status = kube_plane.get(f"/apis/kueue.x-k8s.io/v1beta1/clusterqueues/{rule.queue}").get("status") or {}
            return (status.get("pendingWorkloads"), status.get("admittedWorkloads")) == (1, 1)

        wait_for("Kueue counts 1 pending and 1 admitted in the queue", served, 30)
        queues, _ = queues_resync(cluster=demo, client=kueue_client(demo))
        assert queues >= len(policy.namespaces)
        answer = explain_record(record)
        borrowed = ceiling - answer.explanation.room[f"{demo.name}/{flavor}"]["guarantee"]  # Kueue and Allot agree
        assert answer.queue_says.startswith(
            f"Kueue: ClusterQueue {rule.queue} — {demo.name}/{flavor} {ceiling} used ({borrowed} borrowed); 1 pending, "
            "1 admitted (read "
        ), answer.queue_says
        found = answer.explanation
        first = workloads(kube_plane, ns)["first"]["metadata"]["name"]
        top = found.top
        assert top is not None and top.code == "borrowing-limit", found.causes
        assert f"{ns}/{first} ({ceiling} devices" in " ".join(top.evidence)
        assert said in found.scheduler_says and answer.age_s is not None and answer.age_s >= 0
        ways = {w.kind: (w, problem) for w, problem in answer.ways_out}
        assert "wait-finish" in ways and first in ways["wait-finish"][0].text
        assert ways["other-flavor"][0].flavor == f"{demo.name}/{other[1]}", ways
        # the way out to another flavor, taken: the same job pinned there runs
        kube_plane.apply_manifest(gpu_job("moved", ns, rule.queue, 1, node_selector=labels[other[1]]))
        wait_for("the job moved to the other flavor runs", lambda: admitted(workloads(kube_plane, ns).get("moved")))
        # waiting for its own work to finish, taken: first goes, second runs
        kube_plane.request("DELETE", f"/apis/batch/v1/namespaces/{ns}/jobs/first", {"propagationPolicy": "Background"})
        kube_plane.delete(f"/apis/kueue.x-k8s.io/v1beta1/namespaces/{ns}/workloads/{first}")
        wait_for("second runs once first is gone", lambda: admitted(workloads(kube_plane, ns).get("second")), 60)
        usage_resync_kueue(cluster=demo)
        unit = NamespaceBinding.objects.get(cluster=demo, namespace=ns).unit_id
        assert [a.record.job_id for a in unit_waiting([unit])] == []
    finally:
        delete_jobs(kube_plane, ns)


def lending_org(plane, admin, name: str, reclaim: str):
    """In Allot, synced to the plane: ``name`` (8 devices) → owner (4, lendable 4, no burst) and borrower (4,
    burst 4), on one flavor, under a contract reclaiming within 300 s with Kueue's reclaimWithinCohort ``reclaim``."""
    from quotas import services
    from quotas.models import ClusterKind
    from quotas.policy import Resource

    why = "reclaim test"
    cluster = services.cluster_set(
        actor=admin, reason=why, name=name, kind=ClusterKind.KUBERNETES,
        connection_ref=f"kubeconfig:{plane.sync_kubeconfig}",
    )  # fmt: skip
    flavor = services.flavor_set(
        actor=admin, reason=why, cluster=cluster, name=f"{name}-gpu", accelerator_model="A100",
        device_memory_gb=80, physical_devices=8, node_labels={"gpu": f"{name}-gpu"},
    )  # fmt: skip
    contract = services.contract_set(
        actor=admin, reason=why, name=f"{name}-c", reclaim_within=300, grace_period=30, reclaim_within_cohort=reclaim
    )
    root = services.org_unit_create(
        actor=admin, reason=why, parent=None, kind="organisation", slug=name, contract=contract
    )
    units = {t: services.org_unit_create(actor=admin, reason=why, parent=root, kind="team", slug=t)
             for t in ("owner", "borrower")}  # fmt: skip
    gpu = Resource.GPU
    services.quota_set_bulk(actor=admin, reason=why, changes=[services.QuotaChange(root.pk, flavor.pk, gpu, 8, 0, 8)])
    services.quota_set_bulk(
        actor=admin, reason=why,
        changes=[services.QuotaChange(units["owner"].pk, flavor.pk, gpu, 4, 0, 4),
                 services.QuotaChange(units["borrower"].pk, flavor.pk, gpu, 4, 4, 4)],
    )  # fmt: skip
    bind_and_sync(plane, admin, cluster, units, name)
    return cluster, flavor


def bind_and_sync(plane, admin, cluster, units, prefix: str) -> None:
    """Each team's namespace ``<prefix>-<team>`` made on the plane and bound, and the cluster synced."""
    from quotas import services
    from tests.kube_work import namespace
    from tests.quotas.test_kube_real import shipped_rbac

    shipped_rbac(plane)
    for team, unit in units.items():
        namespace(plane, f"{prefix}-{team}")
        services.namespace_bind(actor=admin, reason="t", unit=unit, cluster=cluster, namespace=f"{prefix}-{team}")
    run = cluster_sync(actor=None, reason="t", cluster=cluster)
    assert run.status in (SyncStatus.APPLIED, SyncStatus.IN_SYNC), run.message


@pytest.mark.parametrize("reclaim", ["Any", "Never"])
def test_a_lender_waiting_for_its_guarantee_is_explained_and_the_reclaim_timed_by_the_schedulers_clock(
    kube_plane, admin_user, reclaim
):
    """The borrower holds 8 (4 of them the owner's, lent); the owner asks for 4. With reclaimWithinCohort Any the
    real Kueue preempts the borrower; with Never the owner waits until the borrower's job is gone — the reclaim
    that never preempted anyone (issue #44.4). While it waits it is explained as a reclaim naming the borrower;
    either way the reclaim is timed from the Workloads' own condition times."""
    import time
    from datetime import timedelta

    from django.utils import timezone

    from accounting.policy.kueue import parse_time
    from admission.selectors import admission_policy
    from tests.kube_work import condition
    from tests.quotas.test_kube_real import active

    name = f"slo-{reclaim.lower()}"
    cluster, flavor = lending_org(kube_plane, admin_user, name, reclaim)
    policy = admission_policy(cluster)
    queues = {t: policy.namespaces[f"{name}-{t}"].queue for t in ("owner", "borrower")}
    pin = {"gpu": flavor.name}
    active(kube_plane, [r.queue for r in policy.namespaces.values()])
    ns = {t: f"{name}-{t}" for t in queues}
    try:
        kube_plane.apply_manifest(gpu_job("big", ns["borrower"], queues["borrower"], 8, node_selector=pin))
        wait_for("the borrower holds 8", lambda: admitted(workloads(kube_plane, ns["borrower"]).get("big")))
        usage_resync_kueue(cluster=cluster)  # the watcher sees it run (a Workload first seen preempted shows no run)
        kube_plane.apply_manifest(gpu_job("mine", ns["owner"], queues["owner"], 4, node_selector=pin))
        if reclaim == "Never":
            said = lambda: condition(workloads(kube_plane, ns["owner"]).get("mine"), "QuotaReserved") or {}
            wait_for("Kueue's word on the owner's job", lambda: said().get("message"))
            usage_resync_kueue(cluster=cluster)
            record = find_waiting(cluster, ns["owner"], "job/mine")
            assert record is not None
            found = explain_record(record).explanation
            assert found.top is not None and found.top.code == "reclaim", found.causes
            big = workloads(kube_plane, ns["borrower"])["big"]["metadata"]["name"]
            assert f"{ns['borrower']}/{big} (8 devices, 4 borrowed, {name}/borrower)" in " ".join(found.top.evidence)
            assert any(w.kind == "wait-reclaim" for w in found.ways_out)
            # it waits longer than a scheduling pass (a shorter wait is not a reclaim), then the borrower goes
            created = parse_time(workloads(kube_plane, ns["owner"])["mine"]["metadata"]["creationTimestamp"])
            assert created is not None
            time.sleep(max(0.0, 12 - (timezone.now() - created).total_seconds()))
            kube_plane.request("DELETE", f"/apis/batch/v1/namespaces/{ns['borrower']}/jobs/big",
                               {"propagationPolicy": "Background"})  # fmt: skip
            kube_plane.delete(f"/apis/kueue.x-k8s.io/v1beta1/namespaces/{ns['borrower']}/workloads/{big}")
        wait_for("the owner admitted", lambda: admitted(workloads(kube_plane, ns["owner"]).get("mine")), 60)
        owner = workloads(kube_plane, ns["owner"])["mine"]
        run = usage_resync_kueue(cluster=cluster)
        assert run.status != "failed", run.message
        from accounting.reclaims import reclaims

        timed = [
            r
            for r in reclaims(timezone.now() - timedelta(hours=1), timezone.now(), {})
            if r.lender_path == f"{name}/owner"
        ]
        assert len(timed) == 1, timed
        reclaimed = timed[0]

        def at(obj, kind):
            when = parse_time((condition(obj, kind) or {}).get("lastTransitionTime"))
            assert when is not None, (kind, obj["status"])
            return when

        assert reclaimed.borrower_path == f"{name}/borrower" and reclaimed.contract == f"{name}-c"
        assert reclaimed.promised_s == 300
        assert abs((reclaimed.admitted - at(owner, "Admitted")).total_seconds()) < 1
        created = parse_time(owner["metadata"]["creationTimestamp"])
        assert created is not None and abs((reclaimed.submitted - created).total_seconds()) < 1
        if reclaim == "Any":
            evicted = at(workloads(kube_plane, ns["borrower"])["big"], "Evicted")
            assert reclaimed.preempted is not None and abs((reclaimed.preempted - evicted).total_seconds()) < 1
        else:
            assert reclaimed.preempted is None
    finally:
        for n in ns.values():
            delete_jobs(kube_plane, n)


def test_a_job_held_by_a_spent_budget_is_explained_and_a_raise_makes_it_run(kube_plane, demo):
    """A ``hold`` budget covering every tier, spent: the sync stops the unit's LocalQueue (``stopPolicy: Hold``),
    the real Kueue admits nothing new from it, the explanation names the budget and its way out, and the budget
    raised (evaluated, synced) lets the job run."""
    from datetime import timedelta

    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from accounting.models import UsageHour
    from accounting.services.budgets import budgets_evaluate
    from admission.selectors import admission_policy
    from quotas import services
    from quotas.models import ResourceFlavor, WorkloadTier

    demo_on_the_plane(kube_plane, demo)
    policy = admission_policy(Cluster.objects.get(pk=demo.pk))
    labels = {f.name: dict(f.node_labels) for f in policy.flavors}
    ns = "speech"
    rule = policy.namespaces[ns]
    _, name = max((c, f) for f, c in rule.ceilings.items() if c)
    flavor = ResourceFlavor.objects.get(cluster=demo, name=name)
    unit = NamespaceBinding.objects.get(cluster=demo, namespace=ns).unit
    admin = get_user_model().objects.get(username="admin")
    tiers = sorted(WorkloadTier.objects.values_list("name", flat=True))
    budget = services.budget_set(
        actor=admin, reason="speech's monthly hours",
        change=services.BudgetChange(unit.pk, flavor.pk, device_hours=10, action="hold", tiers=tiers),
    )  # fmt: skip
    now = timezone.now()
    hour = now.replace(minute=0, second=0, microsecond=0)
    for back in range(1, 4):  # 12 device-hours of the 10, inside this month
        at = max(hour - timedelta(hours=back), now.replace(day=1, hour=0, minute=0, second=0, microsecond=0))
        UsageHour.objects.update_or_create(
            unit=unit, flavor=flavor, hour=at, defaults={"minutes": 60, "allocated": 4, "within": 4, "borrowed": 0}
        )
    assert budgets_evaluate(now=now)["exhausted"] == 1
    run = cluster_sync(actor=None, reason="t", cluster=demo)
    assert run.status in (SyncStatus.APPLIED, SyncStatus.IN_SYNC), run.message
    assert f"held: budget spent — {unit.path} on {demo.name}/{name}" in run.message, run.message
    local = f"/apis/kueue.x-k8s.io/v1beta1/namespaces/{ns}/localqueues/{rule.queue}"
    assert kube_plane.get(local)["spec"].get("stopPolicy") == "Hold"
    active(kube_plane, [rule.queue])
    try:
        kube_plane.apply_manifest(gpu_job("held", ns, rule.queue, 1, node_selector=labels[name]))
        wait_for("Kueue's Workload for held", lambda: workloads(kube_plane, ns).get("held"))
        import time

        time.sleep(3)  # several scheduling passes: a stopped LocalQueue admits nothing
        assert not admitted(workloads(kube_plane, ns)["held"])
        usage_resync_kueue(cluster=demo)
        record = find_waiting(demo, ns, "job/held")
        assert record is not None and record.state == "pending"
        found = explain_record(record).explanation
        top = found.top
        assert top is not None and top.code == "budget", found.causes
        spent = f"held: {unit.path} spent 12 of 10 device-hours on {demo.name}/{name} (hold, since "
        assert top.title.startswith(spent), top
        month = now.replace(day=28) + timedelta(days=4)
        resets = f"{month.year}-{month.month:02d}-01"
        assert top.evidence == (f"until the period resets on {resets} UTC, or a budget raise",), top
        assert any(w.kind == "budget" for w in found.ways_out), found.ways_out
        # the way out, taken: the budget raised, evaluated and synced; the queue runs again
        services.budget_set(
            actor=admin, reason="speech needs the hours",
            change=services.BudgetChange(unit.pk, flavor.pk, device_hours=1000, expected_version=budget.version),
        )  # fmt: skip
        assert budgets_evaluate(now=timezone.now())["released"] == 1
        again = cluster_sync(actor=None, reason="t", cluster=demo)
        assert again.status == SyncStatus.APPLIED, again.message
        assert kube_plane.get(local)["spec"].get("stopPolicy") in (None, "None")
        wait_for("held runs once the budget is raised", lambda: admitted(workloads(kube_plane, ns).get("held")), 60)
    finally:
        delete_jobs(kube_plane, ns)


def test_a_job_pinned_to_a_full_flavor_is_explained_and_moving_it_makes_it_run(kube_plane, admin_user):
    """Two flavors of 4: ``other`` holds all of pin-a inside its guarantee; ``mine`` (burst 4 on pin-a, a guarantee
    of 4 on pin-b) pins a job to pin-a. The real Kueue keeps it waiting; the explanation says pin-a is held by
    other's named work and that pin-b has room, and the job pinned to pin-b instead runs."""
    from quotas import services
    from quotas.models import ClusterKind
    from quotas.policy import Resource

    why, gpu = "pin test", Resource.GPU
    cluster = services.cluster_set(
        actor=admin_user, reason=why, name="pin", kind=ClusterKind.KUBERNETES,
        connection_ref=f"kubeconfig:{kube_plane.sync_kubeconfig}",
    )  # fmt: skip
    flavors = {}
    for f in ("a", "b"):
        flavors[f] = services.flavor_set(
            actor=admin_user, reason=why, cluster=cluster, name=f"pin-{f}", accelerator_model="A100",
            device_memory_gb=80, physical_devices=4, node_labels={"gpu": f"pin-{f}"},
        )  # fmt: skip
    root = services.org_unit_create(actor=admin_user, reason=why, parent=None, kind="organisation", slug="pin")
    units = {t: services.org_unit_create(actor=admin_user, reason=why, parent=root, kind="team", slug=t)
             for t in ("mine", "other")}  # fmt: skip
    change = services.QuotaChange
    services.quota_set_bulk(
        actor=admin_user, reason=why, changes=[change(root.pk, f.pk, gpu, 4, 0, 4) for f in flavors.values()]
    )
    services.quota_set_bulk(
        actor=admin_user, reason=why,
        changes=[change(units["mine"].pk, flavors["a"].pk, gpu, 0, 4, 0),
                 change(units["mine"].pk, flavors["b"].pk, gpu, 4, 0, 4),
                 change(units["other"].pk, flavors["a"].pk, gpu, 4, 0, 0)],
    )  # fmt: skip
    bind_and_sync(kube_plane, admin_user, cluster, units, "pin")
    from admission.selectors import admission_policy

    policy = admission_policy(cluster)
    queues = {t: policy.namespaces[f"pin-{t}"].queue for t in units}
    active(kube_plane, list(queues.values()))
    try:
        kube_plane.apply_manifest(gpu_job("full", "pin-other", queues["other"], 4, node_selector={"gpu": "pin-a"}))
        wait_for("other holds pin-a", lambda: admitted(workloads(kube_plane, "pin-other").get("full")))
        kube_plane.apply_manifest(gpu_job("pinned", "pin-mine", queues["mine"], 2, node_selector={"gpu": "pin-a"}))
        wait_for(
            "Kueue's word on pinned",
            lambda: (condition(workloads(kube_plane, "pin-mine").get("pinned"), "QuotaReserved") or {}).get("message"),
        )
        usage_resync_kueue(cluster=cluster)
        record = find_waiting(cluster, "pin-mine", "job/pinned")
        assert record is not None and record.state == "pending"
        found = explain_record(record).explanation
        codes = [c.code for c in found.causes]
        assert codes[:2] == ["flavor-full", "pin"], found.causes
        full = workloads(kube_plane, "pin-other")["full"]["metadata"]["name"]
        assert f"pin-other/{full} (4 devices, pin/other)" in found.causes[0].evidence[0], found.causes
        assert found.causes[1].title == "pinned to pin/pin-a, while pin/pin-b has room for it"
        moves = [w for w in found.ways_out if w.kind == "other-flavor"]
        assert [w.flavor for w in moves] == ["pin/pin-b"], found.ways_out
        # the way out, taken: the same job pinned to pin-b runs
        kube_plane.apply_manifest(gpu_job("moved", "pin-mine", queues["mine"], 2, node_selector={"gpu": "pin-b"}))
        wait_for("the job moved to pin-b runs", lambda: admitted(workloads(kube_plane, "pin-mine").get("moved")))
    finally:
        for ns in ("pin-mine", "pin-other"):
            delete_jobs(kube_plane, ns)


LISTS = re.compile(r'apiserver_request_total\{[^}]*resource="clusterqueues"[^}]*verb="LIST"[^}]*\} (\d+)')


def clusterqueue_lists(plane) -> int:
    """How many LISTs of ClusterQueues the API server has answered, by its own /metrics."""
    return sum(int(n) for n in LISTS.findall(plane.get("/metrics", raw=True).decode()))


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_the_clusterqueues_are_followed_by_a_watch_and_each_change_is_in_the_cache(kube_plane, demo):
    """The watcher as it runs (``manage.py allot_watch_kueue``, a process of its own) lists the ClusterQueues
    once, then a job admitted in a queue reaches the shared cache the web processes read through the watch
    alone: the API server answers no second LIST, and no question asks it anything."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from accounting.services.kueue_queues import cached_queue
    from admission.selectors import admission_policy
    from tests.quotas.test_tasks import _test_database_url

    demo_on_the_plane(kube_plane, demo)
    cluster_sync(actor=None, reason="t", cluster=demo)
    policy = admission_policy(Cluster.objects.get(pk=demo.pk))
    labels = {f.name: dict(f.node_labels) for f in policy.flavors}
    ns = "vision"
    rule = policy.namespaces[ns]
    active(kube_plane, [rule.queue])
    _, flavor = max((c, f) for f, c in rule.ceilings.items() if c)
    watcher = subprocess.Popen(
        [sys.executable, "manage.py", "allot_watch_kueue", "--cluster", demo.name, "--timeout-seconds", "30"],
        cwd=Path(__file__).resolve().parents[2], env={**os.environ, "DATABASE_URL": _test_database_url()},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        wait_for("the watcher's first list in the shared cache", lambda: cached_queue(demo, rule.queue)[0], 60)
        listed = clusterqueue_lists(kube_plane)
        assert listed >= 1  # the watcher's own list (and the sync's) are counted: the metric is read
        kube_plane.apply_manifest(gpu_job("seen", ns, rule.queue, 1, node_selector=labels[flavor]))
        wait_for("the job admitted", lambda: admitted(workloads(kube_plane, ns).get("seen")))
        status = wait_for(
            "the watch brings Kueue's count of it",
            lambda: (lambda s: s if s and s.admitted == 1 and s.gpus.get(flavor, (0, 0))[0] == 1 else None)(
                cached_queue(demo, rule.queue)[0]
            ),
            30,
        )
        assert status.name == rule.queue
        assert clusterqueue_lists(kube_plane) == listed  # no second list: the change came by the watch
    finally:
        watcher.send_signal(signal.SIGTERM)
        try:
            watcher.wait(timeout=30)
        finally:
            watcher.kill()
        delete_jobs(kube_plane, ns)
    assert watcher.returncode == 0, watcher.stdout.read() if watcher.stdout else ""
