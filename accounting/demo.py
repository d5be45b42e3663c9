"""The demo's real usage: the Helios "Earth" cluster's 16 teams and their May 2020 (accounting/demo_data/).

Adds a cluster ``helios-earth`` (switched off: nothing to sync) with a flavor ``v100`` of 856 GPUs, a
department ``earth`` under the demo organisation holding them, one team per VC with the VC's quota
as its guarantee, then loads the month through the replay source and rolls it up. Idempotent: a
demo that has it already is left alone.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from django.contrib.auth import get_user_model
from django.db import transaction

from accounting.models import SourceRun
from accounting.services import usage_replay_load, usage_rollup
from quotas import services
from quotas.demo import demo_user
from quotas.models import Cluster, ClusterKind, OrgUnit
from quotas.policy import Resource

DATA = Path(__file__).resolve().parent / "demo_data" / "helios-earth-2020-05.csv.gz"
REASON = "demo: the Helios Earth cluster, May 2020 (Hu et al., SC '21, CC-BY-4.0)"
QUOTAS = {
    "vc6YE": 208, "vcvlY": 96, "vchbv": 64, "vcMod": 64, "vc3sl": 64, "vcLJZ": 64, "vcpDC": 56, "vcTJs": 48,
    "vc8Sj": 48, "vccaA": 32, "vcSoL": 32, "vcira": 24, "vcJLV": 16, "vcJkd": 16, "vcdI0": 16, "vcgkz": 8,
}  # fmt: skip
MONTH = (datetime(2020, 5, 1, tzinfo=UTC), datetime(2020, 6, 1, tzinfo=UTC))
LEADS = {"vc6YE": "lead-vc6ye", "vcpDC": "lead-vcpdc", "vcira": "lead-vcira", "vchbv": "lead-vchbv"}
"""Demo leads of Earth's teams: the busiest (vc6YE, vcpDC, which queued most), the nearly idle vcira and
the small-jobs team vchbv. ``head-earth`` leads the department: the one who acts on its review."""
ATTRIBUTION = (
    "Helios Earth usage: Hu et al., Characterization and Prediction of Deep Learning Workloads in "
    "Large-Scale GPU Datacenters, SC '21 (CC-BY-4.0)"
)


def lines() -> Iterator[str]:
    with gzip.open(DATA, "rt") as f:
        yield from f


ROWS = 16 * 43_200


def load_usage_demo(progress: Callable[[int], None] | None = None) -> SourceRun | None:
    """Load the Helios month into the demo organisation (``acme``). None when it is there already.
    ``progress`` is told the team-minutes loaded so far (of ``ROWS``)."""
    if SourceRun.objects.filter(name=DATA.name).exists():
        return None
    with transaction.atomic():
        cluster, units = _tree()
    run = usage_replay_load(lines=lines(), cluster=cluster, units=units, name=DATA.name, progress=progress)
    usage_rollup(start=MONTH[0], end=MONTH[1])
    return run


def _tree() -> tuple[Cluster, dict[str, OrgUnit]]:
    admin = get_user_model().objects.get(username="admin")
    cluster = services.cluster_set(
        actor=admin,
        reason=REASON,
        name="helios-earth",
        kind=ClusterKind.SLURM,
        display_name="Helios Earth (May 2020)",
        description=ATTRIBUTION,
        enabled=False,
    )
    flavor = services.flavor_set(
        actor=admin,
        reason=REASON,
        cluster=cluster,
        name="v100",
        accelerator_model="NVIDIA Tesla V100",
        device_memory_gb=32,
        physical_devices=sum(QUOTAS.values()),
        price_per_device_hour="1.2000",
    )
    acme = OrgUnit.objects.get(path="acme")
    total = sum(QUOTAS.values())

    def gpus(unit: OrgUnit, guarantee: int) -> services.QuotaChange:
        return services.QuotaChange(unit.pk, flavor.pk, Resource.GPU, guarantee, 0, 0)

    services.quota_set_bulk(actor=admin, reason=REASON, changes=[gpus(acme, total)])
    earth = services.org_unit_create(
        actor=admin, reason=REASON, parent=acme, kind="department", slug="earth", name="Earth (Helios)",
        leads=[demo_user("head-earth")],
    )  # fmt: skip
    services.quota_set_bulk(actor=admin, reason=REASON, changes=[gpus(earth, total)])
    units = {}
    for vc in QUOTAS:
        lead = LEADS.get(vc)
        unit = services.org_unit_create(
            actor=admin, reason=REASON, parent=earth, kind="team", slug=vc.lower(), name=vc, slurm_account=vc.lower(),
            leads=[demo_user(lead)] if lead else [],
        )  # fmt: skip
        units[vc] = unit
    services.quota_set_bulk(actor=admin, reason=REASON, changes=[gpus(u, QUOTAS[vc]) for vc, u in units.items()])
    return cluster, units
