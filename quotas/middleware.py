"""The input rule every route shares before any view runs: no NUL byte in the path or the query string.
PostgreSQL cannot store or compare a string holding one ("A string literal cannot contain NUL
(0x00) characters"), so a ``?within=%00`` reached the database and answered 500 on 13 URLs any signed-in user
could open. Refused here with 400 and what to do, as JSON under ``/api/`` and as text elsewhere; so is an API body
larger than DATA_UPLOAD_MAX_MEMORY_SIZE (Django refuses it anyway, with an HTML page naming nothing). Bodies are
the forms' and serializers' to check, beside the field and keeping what was typed (``quotas.errors.clean_text``
refuses every control character; DRF's text fields refuse NUL)."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import unquote_to_bytes

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse

from quotas.api.parsers import too_large

SAID = "contains a NUL byte (%00), which no name, path or number holds: remove it"


def _nul(request: HttpRequest) -> str | None:
    """Where the request carries a NUL byte: ``path`` or ``query``; None when nowhere."""
    if "\x00" in request.path or b"\x00" in unquote_to_bytes(request.META.get("PATH_INFO", "")):
        return "path"
    if b"\x00" in unquote_to_bytes(request.META.get("QUERY_STRING", "").replace("+", " ")):
        return "query"
    return None


def _too_large(request: HttpRequest) -> str | None:
    """Why a body Django would refuse (DATA_UPLOAD_MAX_MEMORY_SIZE) is refused, in words; None when it is not."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return "the Content-Length header is not a number"
    if limit is not None and length > limit and not (request.content_type or "").startswith("multipart/"):
        return too_large(limit)
    return None


class InputRuleMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        too_large = _too_large(request)
        if too_large and request.path.startswith("/api/"):  # said as JSON, before anything reads the body
            return JsonResponse({"detail": too_large}, status=400)
        where = _nul(request)
        if where is None:
            return self.get_response(request)
        if request.path.replace("\x00", "").startswith("/api/"):
            return JsonResponse({where: [f"the {where} {SAID}"]}, status=400)
        return HttpResponseBadRequest(f"Bad request: the {where} {SAID}.", content_type="text/plain; charset=utf-8")
