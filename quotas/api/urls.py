from django.urls import include, path
from rest_framework.routers import DefaultRouter

from accounting.api import (
    FindingViewSet,
    ReviewViewSet,
    SourceRunViewSet,
    WorkloadRecordViewSet,
    fairness,
    fairshare,
    showback,
    usage,
)
from accounting.budget_api import budget_delete_view, budgets_view
from accounting.plan_api import backtest_view, plan_accept_view, plan_view
from accounting.pool_api import pools_view
from admission.api import AdmissionDecisionViewSet

from . import views

router = DefaultRouter()
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
router.register("admission-decisions", AdmissionDecisionViewSet)
router.register("workload-records", WorkloadRecordViewSet)
router.register("usage-sources", SourceRunViewSet)
router.register("findings", FindingViewSet)
router.register("reviews", ReviewViewSet)

urlpatterns = [
    path("policy/", views.policy_report, name="policy-report"),
    path("preview/", views.preview_view, name="preview"),
    path("lockouts/", views.lockouts_view, name="lockouts"),
    path("lockouts/unlock/", views.unlock_view, name="lockouts-unlock"),
    path("usage/", usage, name="usage"),
    path("showback/", showback, name="showback"),
    path("fairness/", fairness, name="fairness"),
    path("fairshare/", fairshare, name="fairshare"),
    path("plans/", plan_view, name="plan"),
    path("plans/accept/", plan_accept_view, name="plan-accept"),
    path("backtest/", backtest_view, name="backtest"),
    path("budgets/", budgets_view, name="budgets"),
    path("pools/", pools_view, name="pools"),
    path("budgets/<int:pk>/", budget_delete_view, name="budget-delete"),
    path("", include(router.urls)),
]
