"""One workload mix through the three usage paths (issue #45.5): a Kueue cluster's Workloads (as the real Kueue
v0.13 shows slices: admitted in the currency ``allot.dev/gpu-equivalent-millionths``), a Slurm cluster's sacct
(slices as typed GPU TRES, ``gres/gpu:h100-mig_1g.10gb=7``) and dcgm-exporter's series of each MIG instance
(``GPU_I_PROFILE``) in a real Prometheus — the same GPU-equivalent-hours per unit and hour on every path, and
the hours a reader can check by hand.

The mix, from T0 (three hours ago, on the hour):
* A — inference, 7 × 1g.10gb (7 × 1/7 = 1 GPU-equivalent), T0 → T0 + 2 h;
* B — inference, one pod of 2 × 1g.10gb + 1 × 3g.40gb (2/7 + 1/2 = 11/14), T0 + 30 min → T0 + 2 h;
* C — nlp, 2 whole L40S GPUs, T0 → T0 + 1 h.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

import pytest
from django.utils import timezone

from accounting.models import ActivityHour, SourceStatus, UsageHour, WorkloadRecord
from accounting.services import usage_ingest_dcgm, usage_ingest_slurm, usage_resync_kueue, usage_rollup
from quotas import services
from quotas.integrations.kubernetes import KueueClient, api_client_for
from quotas.policy import Resource
from quotas.policy.sharing import EQUIVALENTS
from tests.dcgm_prometheus import Exporter, PrometheusServer, real_series
from tests.kube_watch import WatchScriptServer, list_step

pytestmark = [pytest.mark.django_db, pytest.mark.prometheus]
ONE_G, THREE_G = "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb"
B_WEIGHS = Fraction(2, 7) + Fraction(1, 2)
MIG_LINE = real_series()["DCGM_FI_PROF_GR_ENGINE_ACTIVE@text-embedding-predictor-00008-deployment-57946f6c67-vdtjl@0/7"]
L40S_LINES = [real_series()[f"DCGM_FI_PROF_GR_ENGINE_ACTIVE@tensorflow-0@{gpu}/"] for gpu in (0, 1)]


@pytest.fixture
def fleet(org):
    """inference (a team of research) on an H100 MIG flavor and nlp on L40S, on the Kubernetes cluster west and
    the Slurm cluster lab alike; inference's namespace model-playground-stg (the real series' own), nlp's
    redacted."""
    why = "shared GPUs"
    org.inference = services.org_unit_create(
        actor=org.admin, reason=why, parent=org.research, kind="team", slug="inference"
    )
    org.flavors = {}
    for cluster in (org.cluster, org.slurm):
        mig = services.flavor_set(
            actor=org.admin, reason=why, cluster=cluster, name="h100-mig", accelerator_model="NVIDIA H100 80GB HBM3",
            device_memory_gb=80, physical_devices=2, sharing="mig", mig_profiles=["1g.10gb", "3g.40gb"],
        )  # fmt: skip
        l40s = services.flavor_set(
            actor=org.admin, reason=why, cluster=cluster, name="l40s", accelerator_model="NVIDIA L40S",
            device_memory_gb=48, physical_devices=8,
        )  # fmt: skip
        org.flavors[cluster.name] = (mig, l40s)
        changes = [
            services.QuotaChange(unit.pk, flavor.pk, Resource.GPU, n, 0, 0)
            for flavor, units in (
                (mig, (org.acme, org.research, org.inference)),
                (l40s, (org.acme, org.research, org.nlp)),
            )
            for unit, n in zip(units, (2, 2, 2), strict=True)
        ]
        services.quota_set_bulk(actor=org.admin, reason=why, changes=changes)
    for unit, namespace in ((org.inference, "model-playground-stg"), (org.nlp, "redacted")):
        services.namespace_bind(actor=org.admin, reason=why, unit=unit, cluster=org.cluster, namespace=namespace)
    now = timezone.now()
    org.now, org.t0 = now, now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    return org


def at(org, minutes):
    return org.t0 + timedelta(minutes=minutes)


def stamp(org, minutes):
    return at(org, minutes).isoformat().replace("+00:00", "Z")


MIX = (  # name, namespace/account, pod sets (count, per-pod asks), flavor, Kueue's usage, minutes from T0
    ("a", "model-playground-stg", [(7, {ONE_G: 1})], "h100-mig", {EQUIVALENTS: "999999"}, (0, 120)),
    ("b", "model-playground-stg", [(1, {ONE_G: 2, THREE_G: 1})], "h100-mig", {EQUIVALENTS: "785714"}, (30, 120)),
    ("c", "redacted", [(1, {"nvidia.com/gpu": 2})], "l40s", {"nvidia.com/gpu": "2"}, (0, 60)),
)


def condition(kind, reason, when):
    return {"type": kind, "status": "True", "reason": reason, "lastTransitionTime": when}


def pod_set(i, count, asks):
    requests = {k: str(v) for k, v in asks.items()}
    return {
        "name": f"ps{i}",
        "count": count,
        "template": {"spec": {"containers": [{"name": "main", "resources": {"requests": requests}}]}},
    }


def workload(org, name, namespace, pod_sets, flavor, usage, span):
    """A finished Workload as Kueue keeps it: the pod sets as the job asked, the admission in Kueue's units."""
    began, ended = stamp(org, span[0]), stamp(org, span[1])
    assignment = {
        "name": "ps0",
        "count": pod_sets[0][0],
        "flavors": dict.fromkeys(usage, flavor),
        "resourceUsage": usage,
    }
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {
            "uid": f"uid-{name}",
            "name": f"job-{name}-5c7f2",
            "namespace": namespace,
            "resourceVersion": "10",
            "creationTimestamp": stamp(org, span[0] - 1),
            "labels": {"allot.dev/owner": "ann", "allot.dev/project": "serve", "allot.dev/tier": "P1"},
        },
        "spec": {"queueName": namespace, "podSets": [pod_set(i, n, asks) for i, (n, asks) in enumerate(pod_sets)]},
        "status": {
            "conditions": [
                condition("QuotaReserved", "QuotaReserved", began),
                condition("Admitted", "Admitted", began),
                condition("Finished", "Succeeded", ended),
            ],
            "admission": {"clusterQueue": f"acme.research.{namespace}", "podSetAssignments": [assignment]},
        },
    }


def sacct_lines(org):
    """The same mix as sacct prints it for the jobs' allocations (FIELDS order; the lab stack's TRES spelling)."""
    local = "%Y-%m-%dT%H:%M:%S"
    tres = {
        "a": "billing=17,cpu=7,gres/gpu:h100-mig_1g.10gb=7,gres/gpu=7,mem=7G,node=1",
        "b": "billing=15,cpu=3,gres/gpu:h100-mig_1g.10gb=2,gres/gpu:h100-mig_3g.40gb=1,gres/gpu=3,mem=3G,node=1",
        "c": "billing=22,cpu=2,gres/gpu:l40s=2,gres/gpu=2,mem=2G,node=1",
    }
    accounts = {"model-playground-stg": "inference", "redacted": "nlp"}
    return [
        f"{100 + i}|{200 + i}|lab|{accounts[ns]}|ann|normal|gpu|COMPLETED|{at(org, span[0] - 1):{local}}|"
        f"{at(org, span[0]):{local}}|{at(org, span[1]):{local}}|{tres[name]}|0:0"
        for i, (name, ns, _, _, _, span) in enumerate(MIX)
    ]


def dcgm_history(org):
    """dcgm-exporter's series of the mix, every 30 s while each ran, 0.5 busy: each MIG instance a series of its
    own (the real exporter's labels, its GPU_I_ID and GPU_I_PROFILE set), C's two L40S GPUs their real lines."""

    def instance(gpu, gi, profile, pod):  # A fills GPU 0 (seven 1g.10gb); B is on GPU 1
        line = re.sub(r'GPU_I_ID="\d+"', f'GPU_I_ID="{gi}"', MIG_LINE)
        line = re.sub(r'gpu="\d+"', f'gpu="{gpu}"', line).replace('UUID="GPU-58e8', f'UUID="GPU-{gpu}8e8')
        line = line.replace('GPU_I_PROFILE="1g.10gb"', f'GPU_I_PROFILE="{profile}"')
        return re.sub(r'pod="[^"]+"', f'pod="{pod}"', line)

    series = [(instance(0, gi, "1g.10gb", f"a-{gi}"), (0, 120)) for gi in range(1, 8)]
    series += [
        (instance(1, gi, profile, "b-0"), (30, 120))
        for gi, profile in ((9, "1g.10gb"), (10, "1g.10gb"), (2, "3g.40gb"))
    ]
    series += [(line, (0, 60)) for line in L40S_LINES]
    out = ["# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge"]
    for line, (begin, end) in series:
        first = int(at(org, begin).timestamp()) + 15  # never on an hour's edge
        out += [f"{line} 0.5 {t}" for t in range(first, int(at(org, end).timestamp()), 30)]
    return "\n".join([*out, "# EOF", ""])


def hours(rows):
    return {key: pytest.approx(value, abs=1e-9) for key, value in rows.items() if value}


def test_the_same_mix_is_the_same_gpu_equivalent_hours_on_kueue_slurm_and_dcgm(fleet, settings):
    org = fleet
    # Kueue: the Workloads listed by the API server (a scripted one: the real Kueue's own answers are in
    # tests/quotas/test_slices_real.py)
    with WatchScriptServer([list_step([workload(org, *m) for m in MIX], "10")]) as server:
        org.cluster.connection_ref = f"url:{server.url}"
        org.cluster.save()
        kueue = usage_resync_kueue(cluster=org.cluster, client=KueueClient(api_client_for(org.cluster.connection_ref)))
    assert kueue.status == SourceStatus.OK, (kueue.message, kueue.problems)
    # Slurm: sacct's lines
    slurm = usage_ingest_slurm(cluster=org.slurm, lines=sacct_lines(org), now=org.now)
    assert slurm.status == SourceStatus.OK, (slurm.message, slurm.problems)
    # DCGM: a real Prometheus holding the series (backfilled by promtool), read as every hour is
    settings.ALLOT_DCGM_SCRAPE_SECONDS = 30
    settings.ALLOT_USAGE_DCGM_LOOKBACK_SECONDS = 6 * 3600
    exporter = Exporter()
    prometheus = PrometheusServer(exporter, history=dcgm_history(org))
    try:
        settings.ALLOT_DCGM_PROMETHEUS = {"west": prometheus.url}
        dcgm = usage_ingest_dcgm(cluster=org.cluster, now=org.now)
    finally:
        prometheus.close()
        exporter.close()
    assert dcgm.status == SourceStatus.OK, dcgm.message
    assert "unresolved_flavor" not in dcgm.counts and "unresolved_owner" not in dcgm.counts, dcgm.counts

    # each record: its slices as the scheduler counted them, and what they weigh
    for cluster in (org.cluster, org.slurm):
        rows = WorkloadRecord.objects.filter(cluster=cluster).select_related("unit", "flavor")
        records = [(f"{r.unit and r.unit.slug}/{r.flavor and r.flavor.name}", r) for r in rows]
        shapes = sorted(((key, r.devices, r.equivalents) for key, r in records), key=lambda s: s[:2])
        assert shapes == [
            ("inference/h100-mig", 3, pytest.approx(float(B_WEIGHS))),
            ("inference/h100-mig", 7, 1.0),  # 7 × 1/7 exactly on both
            ("nlp/l40s", 2, None),  # whole GPUs: their devices
        ], shapes

    usage_rollup(start=org.t0, end=org.t0 + timedelta(hours=3), now=org.now)
    expected = {
        ("inference", "h100-mig", 0): 1 + float(B_WEIGHS) / 2,  # A the whole hour, B half of it
        ("inference", "h100-mig", 1): 1 + float(B_WEIGHS),
        ("nlp", "l40s", 0): 2.0,
    }

    def per_hour(rows, field):
        found: dict[tuple[str, str, int], float] = {}
        for row in rows:
            key = (row.unit.slug, row.flavor.name, int((row.hour - org.t0).total_seconds() // 3600))
            found[key] = found.get(key, 0.0) + getattr(row, field)
        return found

    usage = UsageHour.objects.filter(hour__gte=org.t0).select_related("unit", "flavor")
    on_kueue = per_hour(usage.filter(flavor__cluster=org.cluster), "allocated")
    on_slurm = per_hour(usage.filter(flavor__cluster=org.slurm), "allocated")
    activity = ActivityHour.objects.filter(cluster=org.cluster).select_related("unit", "flavor")
    measured = per_hour(activity, "observed")
    assert hours(on_kueue) == expected
    assert hours(on_slurm) == expected
    assert hours(measured) == expected
    assert hours(per_hour(activity, "active")) == {k: v / 2 for k, v in expected.items()}  # 0.5 busy
    # the slices' hours within the guarantee (2 GPU-equivalents): none borrowed on either scheduler
    assert sum(h.borrowed for h in usage) == 0
    assert hours(per_hour(usage.filter(flavor__cluster=org.cluster), "within")) == expected


def test_an_idle_slice_guarantee_is_idle_in_gpu_equivalents(fleet):
    """inference holds two 1g.10gb slices all day — 2/7 of a GPU-equivalent of its guarantee of 2 (14 %), though
    2 of 2 if slices were counted as devices — while vision borrows seven on the flavor: the idle-guarantee
    finding, its evidence and cost in GPU-equivalent-hours."""
    from accounting.models import Finding
    from accounting.policy.findings import Thresholds
    from accounting.services.findings import findings_detect

    org = fleet
    org.t0 = datetime(2026, 11, 2, tzinfo=UTC)
    services.namespace_bind(actor=org.admin, reason="t", unit=org.vision, cluster=org.cluster, namespace="vision")
    services.flavor_set(actor=org.admin, reason="t", cluster=org.cluster, name="h100-mig", price_per_device_hour="7.00")
    day = [
        workload(
            org, "idle", "model-playground-stg", [(2, {ONE_G: 1})], "h100-mig", {EQUIVALENTS: "285714"}, (0, 1440)
        ),
        workload(org, "lent", "vision", [(7, {ONE_G: 1})], "h100-mig", {EQUIVALENTS: "999999"}, (0, 1440)),
    ]
    with WatchScriptServer([list_step(day, "10")]) as server:
        org.cluster.connection_ref = f"url:{server.url}"
        org.cluster.save()
        run = usage_resync_kueue(cluster=org.cluster, client=KueueClient(api_client_for(org.cluster.connection_ref)))
    assert run.status == SourceStatus.OK, (run.message, run.problems)
    borrower = WorkloadRecord.objects.get(cluster=org.cluster, unit=org.vision)
    assert (borrower.devices, borrower.equivalents, borrower.borrowed) == (7, 1.0, 7)  # no guarantee there: all lent
    usage_rollup(start=org.t0, end=org.t0 + timedelta(days=1))
    findings_detect(end=org.t0 + timedelta(days=1), th=Thresholds(idle_window_days=1))
    idle = Finding.objects.get(kind="idle_guarantee", unit=org.inference)
    assert idle.evidence["used_share"] == pytest.approx(1 / 7, abs=1e-4)  # (2/7) / 2
    assert idle.evidence["idle_h"] == pytest.approx(24 * (2 - 2 / 7), abs=0.05)
    assert idle.cost == pytest.approx(Decimal("7.00") * Decimal(24 * 12 / 7), abs=Decimal("0.35"))


def test_untyped_gpus_on_a_mig_only_slurm_cluster_are_counted_whole_and_said(fleet):
    """sacct types a slice wherever gres.conf types it; a job whose AllocTRES names no type says no profile, so its
    GPUs are counted whole (never weighed as nothing) and the run counts them."""
    from quotas.models import ClusterKind

    org = fleet
    cluster = services.cluster_set(actor=org.admin, reason="t", name="mig-only", kind=ClusterKind.SLURM)
    services.flavor_set(
        actor=org.admin, reason="t", cluster=cluster, name="h100-mig", accelerator_model="NVIDIA H100 80GB HBM3",
        device_memory_gb=80, physical_devices=1, sharing="mig", mig_profiles=["1g.10gb"],
    )  # fmt: skip
    line = "7|8|mig-only|inference|ann|normal|gpu|COMPLETED|2026-11-02T08:59:00|2026-11-02T09:00:00|" + (
        "2026-11-02T10:00:00|billing=2,cpu=1,gres/gpu=2,mem=1G,node=1|0:0"
    )
    run = usage_ingest_slurm(cluster=cluster, lines=[line], now=org.now)
    assert run.status == SourceStatus.OK and run.counts["untyped_on_shared_flavor"] == 1, run.counts
    record = WorkloadRecord.objects.get(cluster=cluster)
    assert (record.flavor and record.flavor.name, record.devices, record.equivalents) == ("h100-mig", 2, None)
