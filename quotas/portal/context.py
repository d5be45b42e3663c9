from __future__ import annotations

from functools import cache

from django.conf import settings
from django.http import HttpRequest

from quotas.access import waiting_for


def portal(request: HttpRequest) -> dict[str, object]:
    """What every page may show: the sign-in options, the currency, and the change requests waiting for the
    reader's decision (read only by a page that shows the badge, once per page)."""

    @cache
    def waiting() -> int:
        user = getattr(request, "user", None)
        return len(waiting_for(user)) if user is not None else 0

    return {"oidc_enabled": settings.ALLOT_OIDC_ENABLED, "currency": settings.ALLOT_CURRENCY, "waiting_count": waiting}
