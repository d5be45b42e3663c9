"""The quota pillar's API resources. The API (one router, every app's resources) is composed in
config/api.py."""

from django.urls import path
from rest_framework.routers import BaseRouter

from . import views


def register(router: BaseRouter) -> None:
    router.register("clusters", views.ClusterViewSet)
    router.register("flavors", views.FlavorViewSet)
    router.register("reservations", views.ReservationViewSet)
    router.register("contracts", views.ContractViewSet)
    router.register("tiers", views.TierViewSet)
    router.register("units", views.UnitViewSet)
    router.register("quotas", views.QuotaViewSet)
    router.register("audit", views.AuditViewSet)
    router.register("sync-runs", views.SyncRunViewSet)
    router.register("change-requests", views.ChangeRequestViewSet)


urlpatterns = [
    path("policy/", views.policy_report, name="policy-report"),
    path("preview/", views.preview_view, name="preview"),
    path("lockouts/", views.lockouts_view, name="lockouts"),
    path("lockouts/unlock/", views.unlock_view, name="lockouts-unlock"),
]
