from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest


def portal(request: HttpRequest) -> dict[str, object]:
    return {"oidc_enabled": settings.ALLOT_OIDC_ENABLED, "currency": settings.ALLOT_CURRENCY}
