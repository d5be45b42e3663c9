"""Costs and hours as people read them (issue #42): one format on every page — thousands grouped, costs
with two decimals and the instance's currency (ALLOT_CURRENCY), and "no price" only where there is none
(a cost of 0.00 is a cost, not a missing price)."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from django import template
from django.conf import settings

register = template.Library()


def _decimal(value: object) -> Decimal | None:
    if value is None or value == "":
        return None
    try:
        return Decimal(str(value))
    except InvalidOperation:
        return None


@register.filter
def amount(value: object, missing: str = "no price") -> str:
    """16211.4 → "16,211.40"; None → ``missing``."""
    number = _decimal(value)
    return missing if number is None else f"{number:,.2f}"


@register.filter
def money(value: object, missing: str = "no price") -> str:
    """16211.4 → "16,211.40 USD"; None → ``missing``."""
    number = _decimal(value)
    return missing if number is None else f"{number:,.2f} {settings.ALLOT_CURRENCY}"


@register.simple_tag
def currency() -> str:
    """The instance's currency, for a column heading (documents render without the portal's context)."""
    return str(settings.ALLOT_CURRENCY)
