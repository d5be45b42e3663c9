"""The accounting pillar's pages (usage sources, showback, findings, fairness, pools, reviews, the
what-if panel, the budget form). Composed with the quota pages in config/urls.py under the portal's
``quotas:`` names, so links stay as they were."""

from django.urls import path

from accounting.portal import budgets, plans, views, waiting

urlpatterns = [
    path("units/<int:unit_id>/budgets/", budgets.budgets_edit, name="unit-budgets"),
    path("units/<int:unit_id>/what-if/", plans.quota_what_if, name="what-if"),
    path("usage/sources/", views.sources, name="usage-sources"),
    path("showback/", views.showback_page, name="showback"),
    path("findings/", views.findings_page, name="findings"),
    path("findings/<int:finding_id>/act/", views.finding_act, name="finding-act"),
    path("fairness/", views.fairness_page, name="fairness"),
    path("pools/", views.pools_page, name="pools"),
    path("reviews/", views.reviews_page, name="reviews"),
    path("reviews/<int:review_id>/", views.review_page, name="review"),
    path("reviews/<int:review_id>/files/<path:name>", views.review_file, name="review-file"),
    path("waiting-slurm/<str:cluster>/<str:job>/", waiting.slurm_waiting_page, name="waiting-slurm"),
    path("waiting/<str:cluster>/<str:namespace>/<path:name>/", waiting.waiting_page, name="waiting"),
]
