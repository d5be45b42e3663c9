"""The quota pillar's pages. The site's page list is composed in config/urls.py (accounting's pages share
the portal's ``quotas:`` names)."""

from django.urls import path

from quotas.portal import admin, clusters, edit, rebalance, views

urlpatterns = [
    path("", views.tree, name="home"),
    path("start/", views.start, name="start"),
    path("setup/", admin.setup, name="setup"),
    path("units/<int:unit_id>/administer/", admin.unit_admin, name="unit-admin"),
    path("units/<int:unit_id>/", views.unit_detail, name="unit"),
    path("units/<int:unit_id>/quotas/", edit.quota_edit, name="unit-edit"),
    path("units/<int:unit_id>/quotas/check/", edit.quota_check, name="unit-check"),
    path("units/<int:unit_id>/history/", views.unit_history, name="unit-history"),
    path("units/<int:unit_id>/rebalance/", rebalance.rebalance, name="unit-rebalance"),
    path("capacity/", views.capacity, name="capacity"),
    path("requests/", views.requests_list, name="requests"),
    path("requests/<int:request_id>/", views.request_detail, name="request"),
    path("clusters/", clusters.clusters, name="clusters"),
    path("clusters/<str:name>/slurm/<str:what>/", clusters.slurm_file, name="slurm-file"),
    path("clusters/<str:name>/start/", clusters.cluster_start, name="cluster-start"),
    path("sync-runs/<int:run_id>/", clusters.sync_run, name="sync-run"),
]
