"""Domain errors → HTTP: violations and bad input are 400 with structure, stale versions 412."""

from __future__ import annotations

from typing import Any

from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from quotas.access import NotAllowedError
from quotas.errors import InputError, StaleVersionError
from quotas.policy.violations import PolicyViolationError


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, PolicyViolationError):
        return Response(
            {
                "detail": "The change would break the quota policy; nothing was saved.",
                "violations": [v.as_dict() for v in exc.violations],
            },
            status=status.HTTP_400_BAD_REQUEST,
        )
    if isinstance(exc, InputError):
        return Response(
            {"detail": "Invalid input; nothing was saved.", **exc.errors}, status=status.HTTP_400_BAD_REQUEST
        )
    if isinstance(exc, NotAllowedError):
        return Response({"detail": str(exc)}, status=status.HTTP_403_FORBIDDEN)
    if isinstance(exc, StaleVersionError):
        return Response(
            {
                "detail": f"{exc}. Nothing was saved: reload, re-apply your edit to the current "
                f"values, and send the new version in If-Match.",
                "current": exc.current,
            },
            status=status.HTTP_412_PRECONDITION_FAILED,
        )
    return drf_exception_handler(exc, context)
