"""Fields every resource's serializers share: durations, quantities, bounded text, the reason every
write carries."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from quotas.errors import MAX_TEXT
from quotas.policy.durations import DurationError, parse_duration
from quotas.policy.quantity import QuantityError, Resource, parse_quantity


@extend_schema_field(
    {
        "oneOf": [{"type": "integer", "minimum": 0}, {"type": "string", "example": "15m"}],
        "description": 'Seconds, or a duration such as "15m", "1h30m" or "PT15M"; read back in seconds.',
    }
)
class DurationField(serializers.Field):
    """Seconds on output; seconds or a duration string on input."""

    def to_internal_value(self, data: Any) -> int:
        try:
            return parse_duration(data)
        except DurationError as exc:
            raise serializers.ValidationError(f"{exc}: {exc.hint}") from exc

    def to_representation(self, value: int) -> int:
        return value


class Text(serializers.CharField):
    """A string field that takes only JSON strings: a number or a boolean where text belongs (``"reason":
    5``) is a client's mistake, refused with the field's name rather than turned into "5"."""

    default_error_messages = {"not_text": "Must be a JSON string (text in quotes), not {kind}."}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("not_text", kind=type(data).__name__)
        return str(super().to_internal_value(data))


class Count(serializers.IntegerField):
    """A whole number as JSON writes it, or as text of the ASCII digits 0-9 (``"47"``). DRF's own field takes
    ``"٤٧"`` and ``"４７"`` through ``int()``, and ``true`` as 1: refused here, naming the field."""

    default_error_messages = {
        "ascii": "Must be a whole number written with the digits 0-9 (got {value!r}).",
        "boolean": "Must be a whole number, not true or false.",
    }

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool):
            self.fail("boolean")
        if isinstance(data, str):
            text = data.strip()
            digits = text[1:] if text.startswith("-") else text
            if not (digits.isascii() and digits.isdigit()):
                self.fail("ascii", value=data[:40])
        return int(super().to_internal_value(data))


class ReasonMixin(serializers.Serializer):
    reason = Text(max_length=MAX_TEXT, help_text="Why this change is made; kept in the audit trail.")


def quantity_value(field: str, resource: Resource, raw: Any) -> int:
    try:
        return parse_quantity(resource, raw)
    except QuantityError as exc:
        raise serializers.ValidationError({field: [f"{exc.message}: {exc.hint}"]}) from exc
