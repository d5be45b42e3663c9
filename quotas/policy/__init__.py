"""Allot's quota policy core: pure Python, no Django (enforced by import-linter).

Inputs are frozen snapshots, outputs are result objects, and the clock is passed in.
"""

from .quantity import QuantityError, Resource, format_quantity, parse_quantity, parse_resource
from .snapshot import Contract, Flavor, OrgSnapshot, Quota, QuotaKey, Reservation, Tier, Unit, UnitKind
from .violations import PolicyViolationError, Violation, ViolationCode

__all__ = [
    "Contract",
    "Flavor",
    "OrgSnapshot",
    "PolicyViolationError",
    "QuantityError",
    "Quota",
    "QuotaKey",
    "Reservation",
    "Resource",
    "Tier",
    "Unit",
    "UnitKind",
    "Violation",
    "ViolationCode",
    "format_quantity",
    "parse_quantity",
    "parse_resource",
]
