from django.urls import path

from accounting import budget_views, plan_views
from accounting import views as accounting_views
from quotas.portal import admin, clusters, edit, rebalance, views

app_name = "quotas"
urlpatterns = [
    path("", views.tree, name="home"),
    path("start/", views.start, name="start"),
    path("setup/", admin.setup, name="setup"),
    path("units/<int:unit_id>/administer/", admin.unit_admin, name="unit-admin"),
    path("units/<int:unit_id>/", views.unit_detail, name="unit"),
    path("units/<int:unit_id>/quotas/", edit.quota_edit, name="unit-edit"),
    path("units/<int:unit_id>/quotas/check/", edit.quota_check, name="unit-check"),
    path("units/<int:unit_id>/budgets/", budget_views.budgets_edit, name="unit-budgets"),
    path("units/<int:unit_id>/history/", views.unit_history, name="unit-history"),
    path("units/<int:unit_id>/rebalance/", rebalance.rebalance, name="unit-rebalance"),
    path("capacity/", views.capacity, name="capacity"),
    path("requests/", views.requests_list, name="requests"),
    path("requests/<int:request_id>/", views.request_detail, name="request"),
    path("clusters/", clusters.clusters, name="clusters"),
    path("clusters/<str:name>/slurm/<str:what>/", clusters.slurm_file, name="slurm-file"),
    path("sync-runs/<int:run_id>/", clusters.sync_run, name="sync-run"),
    path("usage/sources/", accounting_views.sources, name="usage-sources"),
    path("showback/", accounting_views.showback_page, name="showback"),
    path("findings/", accounting_views.findings_page, name="findings"),
    path("fairness/", accounting_views.fairness_page, name="fairness"),
    path("pools/", accounting_views.pools_page, name="pools"),
    path("reviews/", accounting_views.reviews_page, name="reviews"),
    path("reviews/<int:review_id>/", accounting_views.review_page, name="review"),
    path("reviews/<int:review_id>/files/<path:name>", accounting_views.review_file, name="review-file"),
    path("findings/<int:finding_id>/act/", accounting_views.finding_act, name="finding-act"),
    path("units/<int:unit_id>/what-if/", plan_views.quota_what_if, name="what-if"),
]
