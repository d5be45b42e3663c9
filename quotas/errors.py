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


def full_clean(obj: Any, exclude: Iterable[str] = ()) -> None:
    """``obj.full_clean()`` (field validators, no constraints), its errors as an InputError per field."""
    from django.core.exceptions import ValidationError

    try:
        obj.full_clean(exclude=list(exclude), validate_constraints=False)
    except ValidationError as exc:
        raise InputError.from_dict({k: [str(m) for m in v] for k, v in exc.message_dict.items()}) from exc
