"""URLs of the webhook deployment (ALLOT_WEBHOOK_ONLY=true): the admission endpoints only."""

from django.urls import include, path

urlpatterns = [path("admission/", include("admission.urls"))]
handler404 = "admission.views.not_found"
