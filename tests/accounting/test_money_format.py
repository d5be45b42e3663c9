"""One number format on every page (issue #42): thousands grouped, costs with two decimals and the
instance's currency, and "no price" only where there is none — a cost of 0.00 is a cost."""

from decimal import Decimal

from django.template import Context, Template


def render(text, **context):
    return Template("{% load money %}" + text).render(Context(context))


def test_costs_carry_the_currency_and_group_thousands(settings):
    settings.ALLOT_CURRENCY = "EUR"
    assert render("{{ c|money }}", c=Decimal("16211.4")) == "16,211.40 EUR"
    assert render("{{ c|money }}", c="45672") == "45,672.00 EUR"  # a JSON summary keeps strings
    assert render("{{ c|amount }}", c=1234567.891) == "1,234,567.89"


def test_zero_is_a_cost_and_only_none_is_no_price(settings):
    settings.ALLOT_CURRENCY = "USD"
    assert render("{{ c|money }}", c=0) == "0.00 USD"  # `default:"no price"` said "no price" for 0
    assert render("{{ c|money }}", c=None) == "no price"
    assert render('{{ c|money:"—" }}', c=None) == "—"
    assert render("{{ c|amount }}", c="0.00") == "0.00"
