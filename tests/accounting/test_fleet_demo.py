"""The cluster of Example 8.2 (the domain background's section 8.12.2): Table 8's inventory, a month
built to Table 9's before-state, and the findings that name the mismatch — work pinned to the
A100-80GB pool that fits the smaller ones, a V100 pool stranded beside the queue."""

from __future__ import annotations

from collections import defaultdict

import pytest
from django.db.models import Sum

from accounting.demo_fleet import MONTH, POOLS, fleet_demo_findings, load_fleet_demo
from accounting.models import Finding, MemoryHour, UsageHour
from accounting.pools import pool_report
from quotas.models import ResourceFlavor

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet(demo):
    assert load_fleet_demo() and not load_fleet_demo()  # once
    return fleet_demo_findings()


def test_table_8s_inventory_and_table_9s_before_state(fleet):
    inventory = {
        f.name: (f.physical_devices, f.device_memory_gb)
        for f in ResourceFlavor.objects.filter(cluster__name="example-8-2")
    }
    assert inventory == {"a100-80gb": (400, 80), "a100-40gb": (424, 40), "v100-32gb": (200, 32)}
    assert [n for *_, n in POOLS] == [50, 53, 50]  # nodes of 8, 8 and 4 GPUs
    report = pool_report("2026-10")
    rows = {p["flavor"]: p for p in report["pools"]}
    big, mid, old = rows["example-8-2/a100-80gb"], rows["example-8-2/a100-40gb"], rows["example-8-2/v100-32gb"]
    assert (big["allocated_pct"], big["active_pct"]) == (95.0, 72.0)  # Table 9, before: 95 % allocated, 72 % active
    assert round(mid["allocated_pct"]) == 64 and old["allocated_pct"] == 0.0  # 64 % and 0 %
    assert big["pending_h"] == 64 * 744  # over 50 jobs waiting, every hour
    assert [p["flavor"] for p in report["pools"]] == [f"example-8-2/{n}" for n, *_ in POOLS]  # by memory


def test_the_pool_table_shows_the_a100_80gb_pool_fragmented_for_its_waiting_gangs(fleet, admin_client):
    """380 of 400 held by 8-GPU workloads (and recsys's 4), packed node by node: 47 full nodes, one with
    4 free, two whole nodes free (20 free). Waiting: gangs of 8 per node — llm 3 × 8, research and
    vision 2 × 8, speech 1 × 8. Two whole nodes start the 2 × 8 and 1 × 8 gangs (16 usable); the 4 on
    the shared node serve nothing that waits, and llm's 3 × 8 cannot start: index 1 − 16/20 = 0.2."""
    rows = {p["flavor"]: p for p in pool_report("2026-10")["pools"]}
    frag = rows["example-8-2/a100-80gb"]["fragmentation"]
    assert (frag["free"], frag["usable"], frag["whole_free_nodes"], frag["largest_block"]) == (20, 16, 2, 8)
    assert frag["index"] == round(1 - 16 / 20, 3) and frag["mean_index_while_waiting"] == 0.2
    assert frag["placeable"] == "8 × 2" and frag["waiting"] == ["llm/train: 3 × 8 GPUs"]
    assert rows["example-8-2/a100-40gb"]["fragmentation"]["index"] == 0.0  # nothing waits there
    page = admin_client.get("/pools/", {"month": "2026-10"}).content.decode()
    assert "largest gang that could start (GPUs per node × nodes): 8 × 2" in page and "fragmentation 0.20" in page


def test_the_memory_measurements_add_up_to_the_devices_held(fleet):
    held: defaultdict[tuple[str, str], float] = defaultdict(float)
    for unit, flavor, allocated in UsageHour.objects.filter(hour__gte=MONTH[0], hour__lt=MONTH[1]).values_list(
        "unit__slug", "flavor__name", "allocated"
    ):
        held[(unit, flavor)] += allocated
    measured: defaultdict[tuple[str, str], float] = defaultdict(float)
    for row in MemoryHour.objects.values("unit__slug", "flavor__name").annotate(d=Sum("devices")):
        measured[(row["unit__slug"], row["flavor__name"])] = row["d"]
    assert {k: v for k, v in held.items() if v} == dict(measured)
    assert sum(h for (_, f), h in held.items() if f == "a100-80gb") == 380 * 744


def test_the_findings_name_the_mismatch(fleet):
    over = {f.unit.slug: f for f in Finding.objects.filter(kind="over_specified", flavor__name="a100-80gb") if f.unit}
    assert set(over) == {"research", "vision", "speech", "recsys"}  # llm's 71 GB jobs need the 80 GB
    research = over["research"]
    assert research.evidence["fits"] == "example-8-2/a100-40gb" and research.evidence["peak_p95_gb"] == 35.0
    # 12 eight-GPU workloads a day for 31 days, 96 devices every hour
    assert research.summary.startswith("research: 372 workloads (71,424 device-hours) on example-8-2/a100-80gb (80 GB)")
    assert over["vision"].evidence["fits"] == "example-8-2/v100-32gb"  # 22 GB jobs: even the V100 pool would do
    assert "flavor order" in research.suggestion and "job_submit" in research.suggestion
    (stranded,) = Finding.objects.filter(kind="stranded_pool")
    assert (
        stranded.flavor is not None
        and stranded.flavor.name == "v100-32gb"
        and stranded.evidence["busy_flavor"] == "example-8-2/a100-80gb"
    )
    assert stranded.evidence["hours"] == 744 and stranded.evidence["waited_h"] == 64 * 744
    assert stranded.evidence["fits_share"] == round((80 + 56 + 36) / 380, 3)
    on_40 = {f.unit.slug for f in Finding.objects.filter(kind="over_specified", flavor__name="a100-40gb") if f.unit}
    assert on_40 == {"speech", "recsys", "vision"}  # 24, 26 and some of vision's 28-30 GB jobs fit in 32 GB
    assert fleet == {"over_specified": 7, "stranded_pool": 1}


def test_a_quota_remedy_is_offered_only_where_it_passes_as_one_change_and_then_applies(demo):
    from django.contrib.auth.models import User

    from accounting.services.finding_actions import finding_request_change
    from quotas import services
    from quotas.models import OrgUnit, Quota
    from quotas.policy import Resource

    load_fleet_demo()
    admin = User.objects.get(username="admin")
    v100 = ResourceFlavor.objects.get(cluster__name="example-8-2", name="v100-32gb")
    vision = OrgUnit.objects.get(path="acme/fleet-lab/vision")
    services.quota_set_bulk(  # vision never used its V100 guarantee: it goes, leaving room under fleet-lab
        actor=admin, reason="t", changes=[services.QuotaChange(vision.pk, v100.pk, Resource.GPU, 0, 0, 0)]
    )
    fleet_demo_findings()
    over = {f.unit.slug: f for f in Finding.objects.filter(kind="over_specified", flavor__name="a100-80gb") if f.unit}
    assert over["speech"].action == {"unit": over["speech"].unit_id, "flavor": v100.pk, "guarantee": 80 + 56}
    assert over["vision"].action is None and "does not fit as things stand" in over["vision"].suggestion
    assert over["research"].action is None  # 96 more on A100-40GB: no room under fleet-lab
    request = finding_request_change(actor=User.objects.get(username="head-fleet-lab"), finding=over["speech"])
    services.change_request_approve(actor=admin, request=request)
    request.refresh_from_db()
    assert request.status == "applied", request.outcome
    assert (
        Quota.objects.get(unit__path="acme/fleet-lab/speech", flavor=v100, resource="nvidia.com/gpu").guarantee == 136
    )
