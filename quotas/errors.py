"""Errors services raise besides the core's PolicyViolationError. Each names the field and the fix."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class InputError(Exception):
    """Bad input for a service: ``errors`` maps each field to its messages; nothing was written."""

    def __init__(self, field: str, message: str, hint: str = "") -> None:
        self.errors: dict[str, list[str]] = {field: [f"{message}. {hint}".strip() if hint else message]}
        super().__init__(f"{field}: {message}")

    @classmethod
    def from_dict(cls, errors: dict[str, list[str]]) -> InputError:
        first = next(iter(errors.items()), ("non_field_errors", ["invalid input"]))
        error = cls(first[0], first[1][0])
        error.errors = errors
        return error


class StaleVersionError(Exception):
    """The caller's version (If-Match) is not the current one; nothing was written."""

    def __init__(self, what: str, expected: int, current: dict[str, Any]) -> None:
        self.what = what
        self.expected = expected
        self.current = current
        super().__init__(f"{what} changed since version {expected}: it is now version {current.get('version')}")


PLAIN_TEXT = "remove it (paste the text as plain text)"
MAX_TEXT = 4000
"""The longest reason or comment accepted (characters): a few paragraphs; link a document for more."""


BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
"""Characters that reorder the text around them (U+202A–U+202E, U+2066–U+2069): in a reason they make the
audit trail read otherwise than it was written ("Trojan Source")."""


def control_character(text: str) -> str | None:
    """The first control character in ``text`` other than tab and line breaks, or bidirectional control,
    as ``U+XXXX``."""
    for char in text:
        if (ord(char) < 32 and char not in "\t\n\r") or 127 <= ord(char) < 160 or char in BIDI_CONTROLS:
            return f"U+{ord(char):04X}"
    return None


def clean_text(field: str, value: Any, *, required: bool, max_length: int = MAX_TEXT, what: str = "") -> str:
    """``value`` as stripped text, or an InputError naming ``field``: not text (a JSON number where a
    sentence belongs), empty when ``required``, longer than ``max_length``, or with a control character
    (a NUL byte, which PostgreSQL cannot store, usually comes from pasting binary text)."""
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise InputError(field, f"must be text, got {type(value).__name__} {value!r}", "send it as a string")
    text = value.strip()
    if required and not text:
        raise InputError(field, f"{what or field} is required", "say in a sentence why")
    bad = control_character(text)
    if bad:
        raise InputError(field, f"contains the control character {bad}", PLAIN_TEXT)
    if len(text) > max_length:
        raise InputError(
            field, f"is {len(text)} characters long, above the limit of {max_length}", "shorten it, or link a document"
        )
    return text


def full_clean(obj: Any, exclude: Iterable[str] = ()) -> None:
    """``obj.full_clean()`` (field validators, no constraints), its errors as an InputError per field;
    first, no text field may hold a control character."""
    from django.core.exceptions import ValidationError
    from django.db import models

    for model_field in obj._meta.concrete_fields:
        if isinstance(model_field, (models.CharField, models.TextField)) and model_field.name not in exclude:
            value = getattr(obj, model_field.attname, None)
            bad = control_character(value) if isinstance(value, str) else None
            if bad:
                raise InputError(
                    model_field.name,
                    f"contains the control character {bad}",
                    "remove it (paste the text as plain text)",
                )
    try:
        obj.full_clean(exclude=list(exclude), validate_constraints=False)
    except ValidationError as exc:
        raise InputError.from_dict({k: [str(m) for m in v] for k, v in exc.message_dict.items()}) from exc


def form_id(raw: object) -> int:
    """An object id as a form sent it; 0 (no such object) for anything that is not ASCII digits, so
    ``pk="abc"`` or ``pk="²"`` reads as "not found" instead of an error."""
    text = str(raw).strip() if raw is not None else ""
    return int(text) if text.isascii() and text.isdigit() and len(text) < 19 else 0
