"""Prometheus metrics of usage, for Grafana: each unit × flavor's latest rolled-up hour, as average
devices over the minutes that had telemetry (``GET /metrics/usage``; deploy/grafana/ has a dashboard).

    allot_unit_guarantee, allot_unit_allocated, allot_unit_borrowed, allot_unit_lent, allot_unit_pending
      {unit="acme/research/nlp", flavor="a100-80gb", cluster="k8s-west",
       department="research", cost_centre="CC-1100", kueue_unit="acme.research.nlp"}
    allot_unit_active   measured activity (DCGM), only where it was measured
    allot_usage_hour_timestamp_seconds   the hour they describe
    allot_reclaim_wait_seconds{contract="standard"}   a histogram of the reclaims of the trailing 30 days:
      from the owner's ask to its admission (accounting/reclaims.py), buckets around the usual promises

``department``, ``cost_centre`` and ``kueue_unit`` are the values Allot stamps on the unit's Kueue objects,
which Kueue's ``metrics.customLabels`` promote onto its own metrics as ``custom_department``,
``custom_cost_centre`` and ``custom_unit``: the two sets join in PromQL (the dashboard's "Kueue beside
Allot" panels).
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from accounting.selectors.usage import latest_usage, unit_org_labels
from quotas.access import is_platform_admin

MEASURES = {
    "guarantee": "Guarantee, in devices",
    "allocated": "Devices held by running workloads",
    "borrowed": "Devices held above the guarantee",
    "lent": "Devices of the idle guarantee that others used",
    "pending": "Devices asked for by queued workloads",
}


class UsageCollector(Collector):
    def collect(self):  # type: ignore[no-untyped-def]
        rows = latest_usage()
        org = unit_org_labels() if rows else {}
        names = ["unit", "flavor", "cluster", "department", "cost_centre", "kueue_unit"]
        families = {
            m: GaugeMetricFamily(f"allot_unit_{m}", help_text, labels=names) for m, help_text in MEASURES.items()
        }
        active = GaugeMetricFamily(
            "allot_unit_active", "Devices busy, as DCGM measured them (absent where unmeasured)", labels=names
        )
        for row in rows:
            hours = row["minutes"] / 60
            path = row["unit__path"]
            labels = [path, row["flavor__name"], row["flavor__cluster__name"], *org.get(path, ("", "", ""))]
            for measure, family in families.items():
                family.add_metric(labels, row[measure] / hours)
            if row["active"] is not None:
                active.add_metric(labels, row["active"] / hours)
        yield from families.values()
        yield active
        stamp = GaugeMetricFamily("allot_usage_hour_timestamp_seconds", "Start of the hour the usage metrics describe")
        if rows:
            stamp.add_metric([], rows[0]["hour"].timestamp())
        yield stamp


class ReclaimCollector(Collector):
    def collect(self):  # type: ignore[no-untyped-def]
        from datetime import timedelta

        from django.utils import timezone

        from accounting.policy.reclaim_slo import BUCKETS_S, histograms
        from accounting.reclaims import reclaims

        now = timezone.now()
        family = HistogramMetricFamily(
            "allot_reclaim_wait_seconds",
            "Reclaims of the trailing 30 days: seconds from the owner's ask to its admission, per contract",
            labels=["contract"],
        )
        for contract, (counts, total, _n) in sorted(histograms(reclaims(now - timedelta(days=30), now, {})).items()):
            buckets = [(str(float(b)), c) for b, c in zip(BUCKETS_S, counts, strict=False)] + [("+Inf", counts[-1])]
            family.add_metric([contract], buckets, total)
        yield family


def usage_metrics(request: HttpRequest) -> HttpResponse:
    """For a signed-in user, or a scraper sending ``Authorization: Bearer <ALLOT_METRICS_TOKEN>``; under
    ALLOT_SHOWBACK_VISIBILITY=leads (every unit's usage at once) a platform admin or the scraper only."""
    token = settings.ALLOT_METRICS_TOKEN
    sent = request.META.get("HTTP_AUTHORIZATION", "")
    scraper = bool(token) and sent.startswith("Bearer ") and hmac.compare_digest(sent[7:].encode(), token.encode())
    if not (scraper or request.user.is_authenticated):
        return HttpResponse("sign in, or send Authorization: Bearer <ALLOT_METRICS_TOKEN>\n", status=401)
    if not scraper and settings.ALLOT_SHOWBACK_VISIBILITY == "leads" and not is_platform_admin(request.user):
        return HttpResponse(
            "every unit's usage: under ALLOT_SHOWBACK_VISIBILITY=leads for platform admins and the scraper's token; "
            "a lead reads their units' on their pages and in /api/v1/usage/\n",
            status=403,
        )
    registry = CollectorRegistry()
    registry.register(UsageCollector())
    registry.register(ReclaimCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
