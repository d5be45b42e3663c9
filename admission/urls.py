from django.urls import path

from . import views

urlpatterns = [
    path("k8s/validate", views.validate, name="admission-validate"),
    path("k8s/mutate", views.mutate, name="admission-mutate"),
    path("k8s/noop", views.noop, name="admission-noop"),
    path("metrics", views.metrics, name="admission-metrics"),
    path("healthz", views.healthz, name="admission-healthz"),
    path("readyz", views.readyz, name="admission-readyz"),
]
