import pytest

from quotas.policy.durations import DurationError, format_duration, parse_duration
from quotas.policy.quantity import QuantityError, Resource, format_quantity, parse_quantity, parse_resource


@pytest.mark.parametrize(
    ("resource", "raw", "expected"),
    [
        (Resource.GPU, "8", 8),
        (Resource.GPU, 8, 8),
        (Resource.CPU, "64", 64_000),
        (Resource.CPU, "500m", 500),
        (Resource.CPU, "1.5", 1_500),
        (Resource.CPU, "2k", 2_000_000),
        (Resource.MEMORY, "512Gi", 512 * 2**30),
        (Resource.MEMORY, "1Ti", 2**40),
        (Resource.MEMORY, "1G", 10**9),
        (Resource.MEMORY, "128974848", 128974848),
        (Resource.MEMORY, "129e6", 129_000_000),
        (Resource.MEMORY, "123Mi", 123 * 2**20),
    ],
)
def test_parse_quantity_normalises_to_base_units(resource, raw, expected):
    assert parse_quantity(resource, raw) == expected


@pytest.mark.parametrize(
    ("resource", "raw", "fragment"),
    [
        (Resource.GPU, "0.5", "whole number of devices"),
        (Resource.GPU, "-1", "negative"),
        (Resource.GPU, -1, "negative"),
        (Resource.GPU, "eight", "not a quantity"),
        (Resource.GPU, 1.5, "not a quantity"),
        (Resource.GPU, True, "not a quantity"),
        (Resource.GPU, None, "not a quantity"),
        (Resource.CPU, "0.1m", "whole number of millicores"),
        (Resource.MEMORY, "12Gb", "not a quantity"),
        (Resource.MEMORY, "1e40", "too large"),
        # issue #13.4: a device count is a plain number; "1.5Ki" was taken as 1536 GPUs
        (Resource.GPU, "1.5Ki", "would be 1536 GPUs"),
        (Resource.GPU, "1e2", "would be 100 GPUs"),
        (Resource.GPU, "2k", "would be 2000 GPUs"),
        (Resource.GPU, "１２", "U+FF11"),  # full-width digits
        (Resource.CPU, "６４", "U+FF16"),
        (Resource.GPU, "٣", "U+0663"),  # Arabic-Indic digit three
    ],
)
def test_parse_quantity_refuses_with_a_hint(resource, raw, fragment):
    with pytest.raises(QuantityError) as info:
        parse_quantity(resource, raw)
    assert fragment in info.value.message
    assert info.value.hint  # every refusal says what to write instead


@pytest.mark.parametrize(
    ("resource", "value", "text"),
    [
        (Resource.CPU, 64_000, "64"),
        (Resource.CPU, 500, "500m"),
        (Resource.MEMORY, 512 * 2**30, "512Gi"),
        (Resource.MEMORY, 2**40, "1Ti"),
        (Resource.MEMORY, 1000, "1000"),
        (Resource.GPU, 8, "8"),
        (Resource.MEMORY, 0, "0"),
    ],
)
def test_format_quantity_round_trips(resource, value, text):
    assert format_quantity(resource, value) == text
    assert parse_quantity(resource, text) == value


def test_parse_resource_accepts_aliases_and_names_the_known_ones():
    assert parse_resource("GPU") is Resource.GPU
    assert parse_resource("nvidia.com/gpu") is Resource.GPU
    assert parse_resource("mem") is Resource.MEMORY
    with pytest.raises(QuantityError) as info:
        parse_resource("tpu")
    assert "nvidia.com/gpu" in info.value.hint


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [
        (90, 90),
        ("90", 90),
        ("15m", 900),
        ("1h30m", 5400),
        ("2d", 172800),
        ("1w", 604800),
        ("PT15M", 900),
        ("P1DT2H", 93600),
        ("0s", 0),
    ],
)
def test_parse_duration(raw, seconds):
    assert parse_duration(raw) == seconds


@pytest.mark.parametrize("raw", ["soon", "-5", -5, "15 minutes", None, True, 1.5, "P", ""])
def test_parse_duration_refuses(raw):
    with pytest.raises(DurationError):
        parse_duration(raw)


def test_format_duration():
    assert format_duration(5400) == "1h30m"
    assert format_duration(0) == "0s"
    assert format_duration(90061) == "1d1h1m1s"
