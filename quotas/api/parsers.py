"""The API's JSON parser: the body's size and nesting are bounded before it is parsed, so a hostile body is a 400
naming the problem, never a 500 (Python's parser recurses once per level: ``"[" * 5000`` raised RecursionError in
every JSON write endpoint) nor a worker held parsing megabytes."""

from __future__ import annotations

import io
import re
from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


def too_large(limit: int) -> str:
    """What a body over ``limit`` bytes is told (here, and by the input rule before anything reads it)."""
    return f"the body is larger than {limit} bytes: send less at once"


MAX_DEPTH = 64
"""Arrays and objects inside one another: no request body of the API comes near it (a quota change is 3 deep)."""
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS = re.compile(rb"[\[\]{}]")


def too_deep(raw: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether JSON text nests arrays and objects more than ``limit`` deep (brackets inside strings do not
    count). Linear in the body; a body with fewer brackets than the limit is answered without a scan."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    depth = 0
    for bracket in _BRACKETS.findall(_STRINGS.sub(b"", raw)):
        if bracket in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser behind two bounds: the body at most Django's DATA_UPLOAD_MAX_MEMORY_SIZE, and nested at
    most MAX_DEPTH deep; either is a ParseError (400) that says which."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE or 2_621_440
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise ParseError(too_large(limit))
        if too_deep(raw):
            raise ParseError(f"the body nests arrays and objects more than {MAX_DEPTH} deep: no field of the API does")
        return super().parse(io.BytesIO(raw), media_type, parser_context)
