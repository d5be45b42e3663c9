"""The API (``/api/v1/``): one router holding every app's resources, and each app's other routes.
Each app owns its part (``quotas/api/urls.py``, ``accounting/api/urls.py``, ``admission/api_urls.py``);
this module only composes them, so no app imports another's routes."""

from django.urls import include, path
from rest_framework.routers import DefaultRouter

from accounting.api import urls as accounting_api
from admission import api_urls as admission_api
from quotas.api import urls as quotas_api

router = DefaultRouter()
for app in (quotas_api, admission_api, accounting_api):
    app.register(router)

urlpatterns = [*quotas_api.urlpatterns, *accounting_api.urlpatterns, path("", include(router.urls))]
