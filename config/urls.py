from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest, JsonResponse
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerSplitView

from accounting import urls as accounting_pages
from accounting.metrics import usage_metrics
from quotas import urls as quota_pages
from quotas.portal.accounts import account_urls


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness of the web process (no database call: a database outage is not a reason to restart)."""
    return JsonResponse({"ok": True})


urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("metrics/usage", usage_metrics, name="usage-metrics"),
    # the portal: each app's pages, under one set of names (quotas:…)
    path("", include(([*quota_pages.urlpatterns, *accounting_pages.urlpatterns], "quotas"))),
    path("accounts/", include(account_urls())),
    path("admin/", admin.site.urls),
    path("admission/", include("admission.urls")),
    path("api/v1/", include("config.api")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # the split view serves its script from a URL: no inline script (Content-Security-Policy)
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="schema"), name="api-redoc"),
    path("api-auth/", include("rest_framework.urls")),
]

if settings.ALLOT_OIDC_ENABLED:
    urlpatterns.append(path("oidc/", include("mozilla_django_oidc.urls")))
