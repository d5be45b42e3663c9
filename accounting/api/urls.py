"""The accounting pillar's API resources (composed into the one API in config/api.py)."""

from django.urls import path
from rest_framework.routers import BaseRouter

from accounting.api.budgets import budget_delete_view, budgets_view
from accounting.api.findings import FindingViewSet
from accounting.api.mcp import mcp_view
from accounting.api.plans import backtest_view, plan_accept_view, plan_view
from accounting.api.pools import pools_view
from accounting.api.reclaims import reclaim_slo_view
from accounting.api.reviews import ReviewViewSet
from accounting.api.showback import fairness, fairshare, showback
from accounting.api.usage import SourceRunViewSet, WorkloadRecordViewSet, usage
from accounting.api.waiting import waiting_list, waiting_slurm_job, waiting_workload


def register(router: BaseRouter) -> None:
    router.register("workload-records", WorkloadRecordViewSet)
    router.register("usage-sources", SourceRunViewSet)
    router.register("findings", FindingViewSet)
    router.register("reviews", ReviewViewSet)


urlpatterns = [
    path("usage/", usage, name="usage"),
    path("showback/", showback, name="showback"),
    path("fairness/", fairness, name="fairness"),
    path("fairshare/", fairshare, name="fairshare"),
    path("plans/", plan_view, name="plan"),
    path("plans/accept/", plan_accept_view, name="plan-accept"),
    path("backtest/", backtest_view, name="backtest"),
    path("budgets/", budgets_view, name="budgets"),
    path("budgets/<int:pk>/", budget_delete_view, name="budget-delete"),
    path("pools/", pools_view, name="pools"),
    path("reclaim-slo/", reclaim_slo_view, name="reclaim-slo"),
    path("mcp/", mcp_view, name="mcp"),
    path("waiting/", waiting_list, name="waiting"),
    path("waiting/<str:cluster>/<str:job>/", waiting_slurm_job, name="waiting-slurm-job"),
    path("waiting/<str:cluster>/<str:namespace>/<path:name>/", waiting_workload, name="waiting-workload"),
]
