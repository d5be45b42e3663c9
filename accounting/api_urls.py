"""The accounting pillar's API resources (composed into the one API in config/api.py)."""

from django.urls import path
from rest_framework.routers import BaseRouter

from accounting.budget_api import budget_delete_view, budgets_view
from accounting.finding_api import FindingViewSet
from accounting.plan_api import backtest_view, plan_accept_view, plan_view
from accounting.pool_api import pools_view
from accounting.review_api import ReviewViewSet
from accounting.showback_api import fairness, fairshare, showback
from accounting.usage_api import SourceRunViewSet, WorkloadRecordViewSet, usage


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
]
