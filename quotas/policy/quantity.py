"""Resources and their quantities.

Every quantity is stored and compared as an integer in the resource's base unit: whole devices
for accelerators, millicores for CPU, bytes for memory. Input may use Kubernetes quantity syntax
(``"64"``, ``"500m"``, ``"512Gi"``, ``"1.5e3"``); :func:`parse_quantity` normalises it and
:func:`format_quantity` renders the canonical short form back.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from enum import StrEnum


class Resource(StrEnum):
    """A resource a quota can be set on. The value is the Kubernetes resource name."""

    GPU = "nvidia.com/gpu"
    CPU = "cpu"
    MEMORY = "memory"

    @property
    def unit_label(self) -> str:
        return _UNIT_LABELS[self]


_UNIT_LABELS = {Resource.GPU: "devices", Resource.CPU: "millicores", Resource.MEMORY: "bytes"}

# Short aliases people type in forms and CLIs.
RESOURCE_ALIASES: dict[str, Resource] = {
    "gpu": Resource.GPU,
    "gpus": Resource.GPU,
    "nvidia.com/gpu": Resource.GPU,
    "cpu": Resource.CPU,
    "cpus": Resource.CPU,
    "memory": Resource.MEMORY,
    "mem": Resource.MEMORY,
}

_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_QUANTITY_RE = re.compile(
    r"^(?P<num>[+-]?(?:\d+\.?\d*|\.\d+))(?:(?P<exp>[eE][+-]?\d+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$",
    re.ASCII,  # \d is 0-9 only: "１２" (full-width digits) is not a quantity
)
# Base-unit multiplier applied after the quantity is read: CPU is kept in millicores.
_BASE_SCALE = {Resource.GPU: Decimal(1), Resource.CPU: Decimal(1000), Resource.MEMORY: Decimal(1)}
MAX_QUANTITY = 2**62


class QuantityError(ValueError):
    """A quantity that cannot be read. Carries the resource, the raw input and a hint."""

    def __init__(self, resource: str, raw: object, message: str, hint: str) -> None:
        super().__init__(f"{resource}: {message}")
        self.resource = resource
        self.raw = raw
        self.message = message
        self.hint = hint


def parse_resource(raw: str) -> Resource:
    """Return the :class:`Resource` named by ``raw`` (aliases accepted), or raise QuantityError."""
    found = RESOURCE_ALIASES.get(raw.strip().lower()) if isinstance(raw, str) else None
    if found is None:
        known = ", ".join(r.value for r in Resource)
        raise QuantityError(str(raw), raw, f"unknown resource {raw!r}", f"use one of: {known}")
    return found


def parse_quantity(resource: Resource, raw: object) -> int:
    """Parse ``raw`` as a non-negative quantity of ``resource`` and return it in base units.

    Accepts ints, and strings in Kubernetes quantity syntax. Floats are refused (they lose
    precision silently); pass strings instead.

    Raises:
        QuantityError: not a quantity, negative, too large, or not whole in the base unit
            (a fraction of a GPU, less than a millicore, a fraction of a byte).
    """
    if isinstance(raw, bool) or raw is None:
        raise QuantityError(resource, raw, f"{raw!r} is not a quantity", _example(resource))
    if isinstance(raw, int):
        value = Decimal(raw)
    elif isinstance(raw, (str, Decimal)):
        value = _read_text(resource, str(raw).strip())
    else:
        raise QuantityError(resource, raw, f"{raw!r} is not a quantity", _example(resource))
    if value < 0:
        raise QuantityError(resource, raw, f"{raw!r} is negative", "quantities must be 0 or more")
    scaled = value * _BASE_SCALE[resource]
    if scaled != scaled.to_integral_value():
        raise QuantityError(
            resource, raw, f"{raw!r} is not a whole number of {resource.unit_label}", _example(resource)
        )
    result = int(scaled)
    if result > MAX_QUANTITY:
        raise QuantityError(resource, raw, f"{raw!r} is too large", "use a realistic quantity")
    return result


def _read_text(resource: Resource, text: str) -> Decimal:
    if not text.isascii():
        odd = next(c for c in text if not c.isascii())
        raise QuantityError(
            resource, text, f"{text!r} has the character {odd!r} (U+{ord(odd):04X})", "type it with the digits 0-9"
        )
    match = _QUANTITY_RE.match(text)
    if not match:
        raise QuantityError(resource, text, f"{text!r} is not a quantity", _example(resource))
    if resource is Resource.GPU and (match["suffix"] or match["exp"]):
        raise QuantityError(
            resource,
            text,
            f"{text!r} has a suffix or an exponent, and GPUs are counted one by one ({text!r} would be "
            f"{_scaled_for_message(match)} GPUs)",
            'write the number of GPUs, e.g. "8"',
        )
    try:
        number = Decimal(match["num"])
        if match["exp"]:
            return number * (Decimal(10) ** int(match["exp"][1:]))
    except (InvalidOperation, ValueError, OverflowError) as exc:
        raise QuantityError(resource, text, f"{text!r} is not a quantity", _example(resource)) from exc
    return number * _SUFFIXES[match["suffix"] or ""]


def _scaled_for_message(match: re.Match[str]) -> str:
    try:
        number = Decimal(match["num"])
        value = number * (Decimal(10) ** int(match["exp"][1:])) if match["exp"] else number * _SUFFIXES[match["suffix"]]
    except (InvalidOperation, ValueError, OverflowError):
        return "an unreadable number of"
    return f"{value.normalize():f}"


def parse_decimal_quantity(text: str) -> Decimal:
    """Any Kubernetes quantity (``"1.5"``, ``"500m"``, ``"64Gi"``) as an exact Decimal; ValueError if not one."""
    match = _QUANTITY_RE.match(text.strip()) if isinstance(text, str) else None
    if not match:
        raise ValueError(f"{text!r} is not a Kubernetes quantity")
    number = Decimal(match["num"])
    if match["exp"]:
        return number * (Decimal(10) ** int(match["exp"][1:]))
    return number * _SUFFIXES[match["suffix"] or ""]


def _example(resource: Resource) -> str:
    return {
        Resource.GPU: 'GPUs are whole devices: write e.g. "8"',
        Resource.CPU: 'write cores or millicores, e.g. "64" or "500m"',
        Resource.MEMORY: 'write bytes with a suffix, e.g. "512Gi" or "1Ti"',
    }[resource]


def format_quantity(resource: Resource, value: int) -> str:
    """Render a base-unit integer in the canonical Kubernetes form (``"64"``, ``"500m"``, ``"2Ti"``)."""
    if resource is Resource.CPU:
        return str(value // 1000) if value % 1000 == 0 else f"{value}m"
    if resource is Resource.MEMORY and value:
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            size = int(_SUFFIXES[suffix])
            if value % size == 0:
                return f"{value // size}{suffix}"
    return str(value)
