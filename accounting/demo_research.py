"""The demo's research department at work: a synthetic recent month, so that ``lead-nlp`` and
``head-research`` — the first users the README names — meet what the portal does with usage.

Hourly rollups on Kubernetes West's A100-80GB from the first day of last month to the current hour, per
research unit that runs work: llm-pretrain holds its guarantee, borrows and still queues every working
day; vision's detection holds a small part of its guarantee; the rest follow a working-day cycle. Then a
GPU-hour budget for nlp (its burn-down is this month's), a change request from lead-nlp waiting for
head-research, and the findings over the last days. Deterministic (a seeded generator), idempotent; a
reconstruction, not a trace — the page that shows it says where it comes from.
"""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta

from django.db import transaction
from django.utils import timezone

from accounting.models import SourceKind, SourceRun, SourceStatus, UsageHour
from accounting.services.usage_version import usage_changed
from quotas import services
from quotas.demo import demo_user
from quotas.models import OrgUnit, Quota, ResourceFlavor
from quotas.policy import Resource
from quotas.services.budgets import BudgetChange

REASON = "demo: the research department's recent month (synthetic)"
# unit under acme/research: (share of its guarantee held at the busiest hour, at the quietest, extra
# devices borrowed at the busiest, devices queued at the busiest, share of held devices active)
PROFILE: dict[str, tuple[float, float, int, int, float]] = {
    "nlp/llm-pretrain": (1.0, 0.85, 4, 32, 0.93),
    "nlp/llm-eval": (0.9, 0.2, 0, 0, 0.7),
    "vision/detection": (0.2, 0.05, 0, 0, 0.35),
    "vision/segmentation": (0.8, 0.3, 0, 4, 0.8),
    "speech": (0.7, 0.2, 0, 0, 0.75),
    "rl": (1.0, 0.5, 8, 8, 0.85),
}
FLAVOR = ("k8s-west", "a100-80gb")
ASKED = 8
"""lead-nlp's pending request: nlp's A100-80GB guarantee up by this much (above lead-nlp's envelope)."""


def research_window(now: datetime | None = None) -> tuple[datetime, datetime]:
    """From the first day of last month to the current hour (UTC)."""
    now = (now or timezone.now()).astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    first = now.replace(day=1, hour=0)
    return (first - timedelta(days=1)).replace(day=1), now


def load_research_demo(now: datetime | None = None) -> bool:
    """Build it once; False when research has usage already."""
    flavor = ResourceFlavor.objects.get(cluster__name=FLAVOR[0], name=FLAVOR[1])
    units = {path: OrgUnit.objects.get(path=f"acme/research/{path}") for path in PROFILE}
    if UsageHour.objects.filter(unit__in=units.values(), flavor=flavor).exists():
        return False
    start, end = research_window(now)
    with transaction.atomic():
        _hours(flavor, units, start, end)
        SourceRun.objects.create(
            source=SourceKind.REPLAY, cluster=flavor.cluster, name="research-demo (synthetic)", status=SourceStatus.OK,
            started_at=end, finished_at=end, window_start=start, window_end=end, watermark=end,
            counts={"units": len(units), "hours": UsageHour.objects.filter(unit__in=units.values()).count()},
            message="The demo's research month: a reconstruction (accounting/demo_research.py), not a trace.",
        )  # fmt: skip
        _budget(flavor, end)
        _request(flavor)
    return True


def _hours(flavor: ResourceFlavor, units: dict[str, OrgUnit], start: datetime, end: datetime) -> None:
    guarantees = dict(
        Quota.objects.filter(unit__in=units.values(), flavor=flavor, resource=Resource.GPU.value).values_list(
            "unit_id", "guarantee"
        )
    )
    draw = random.Random(8_412)
    rows = []
    hour = start
    while hour < end:
        working = hour.weekday() < 5
        # busiest at 15:00 UTC on working days, a third of that on weekends
        cycle = (1 + math.cos((hour.hour - 15) / 24 * 2 * math.pi)) / 2 * (1.0 if working else 0.35)
        for path, (busy, quiet, borrow, queue, active) in PROFILE.items():
            unit = units[path]
            guarantee = guarantees.get(unit.pk, 0)
            share = quiet + (busy - quiet) * cycle
            held = max(0, round(guarantee * share * draw.uniform(0.92, 1.0) + borrow * cycle**2))
            within = min(held, guarantee)
            queued = round(queue * cycle**2 * draw.uniform(0.7, 1.0)) if working else 0
            rows.append(
                UsageHour(
                    unit=unit, flavor=flavor, hour=hour, minutes=60, guarantee=guarantee, allocated=held,
                    within=within, borrowed=held - within, pending=queued, active=held * active,
                    productive=held * active, productive_estimated=True, minutes_queued=60 if queued else 0,
                    minutes_full=60 if guarantee and held >= guarantee else 0,
                )
            )  # fmt: skip
        hour += timedelta(hours=1)
    UsageHour.objects.bulk_create(rows, batch_size=5000)
    usage_changed()


def _budget(flavor: ResourceFlavor, end: datetime) -> None:
    """nlp's monthly A100-80GB budget: 70 % of its guarantee's hours, warned at 80 %."""
    nlp = OrgUnit.objects.get(path="acme/research/nlp")
    guarantee = Quota.objects.get(unit=nlp, flavor=flavor, resource=Resource.GPU.value).guarantee
    hours = guarantee * 24 * 30 * 7 // 10
    change = BudgetChange(
        nlp.pk, flavor.pk, device_hours=hours, period="month", action="no-borrowing", warn_percent=80,
        starts_on=end.date().replace(day=1),
    )  # fmt: skip
    services.budget_set_bulk(actor=demo_user("head-research"), reason=REASON, changes=[change])


def _request(flavor: ResourceFlavor) -> None:
    nlp = Quota.objects.get(unit__path="acme/research/nlp", flavor=flavor, resource=Resource.GPU.value)
    change = services.QuotaChange(nlp.unit_id, flavor.pk, Resource.GPU, nlp.guarantee + ASKED, None, None, nlp.version)
    services.change_request_submit(
        actor=demo_user("lead-nlp"),
        reason="llm-pretrain queues every working afternoon: 8 more A100-80GB for the December run",
        changes=[change],
    )
