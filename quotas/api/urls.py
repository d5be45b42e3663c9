"""The quota pillar's API resources. The API (one router, every app's resources) is composed in
config/api.py."""

from django.urls import path
from rest_framework.routers import BaseRouter

from .views import catalogue, fleets, quota, records, requests, units


def register(router: BaseRouter) -> None:
    router.register("clusters", catalogue.ClusterViewSet)
    router.register("flavors", catalogue.FlavorViewSet)
    router.register("reservations", catalogue.ReservationViewSet)
    router.register("contracts", catalogue.ContractViewSet)
    router.register("tiers", catalogue.TierViewSet)
    router.register("fleets", fleets.FleetViewSet)
    router.register("units", units.UnitViewSet)
    router.register("quotas", quota.QuotaViewSet)
    router.register("audit", records.AuditViewSet)
    router.register("sync-runs", records.SyncRunViewSet)
    router.register("change-requests", requests.ChangeRequestViewSet)


urlpatterns = [
    path("policy/", records.policy_report, name="policy-report"),
    path("preview/", quota.preview_view, name="preview"),
    path("lockouts/", records.lockouts_view, name="lockouts"),
    path("lockouts/unlock/", records.unlock_view, name="lockouts-unlock"),
]
