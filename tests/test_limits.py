"""Limits parse the units people write and refuse what they should."""

import pytest
from pydantic import ValidationError

from sbx.sandbox.limits import Limits
from sbx.sandbox.units import format_size, parse_duration, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("512m", 512 * 1024**2),
        ("1.5g", int(1.5 * 1024**3)),
        ("64MiB", 64 * 1024**2),
        ("4096", 4096),
        ("2G", 2 * 1024**3),
        ("100k", 102400),
        (1000, 1000),
    ],
)
def test_sizes(text, expected) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30s", 30.0),
        ("2m", 120.0),
        ("500ms", 0.5),
        ("1h", 3600.0),
        ("7", 7.0),
        (2.5, 2.5),
    ],
)
def test_durations(text, expected) -> None:
    assert parse_duration(text) == expected


def test_limits_accept_human_units() -> None:
    limits = Limits(memory="1g", cpus="1.5", timeout="2m")
    assert (limits.memory, limits.cpus, limits.timeout) == (1024**3, 1.5, 120.0)


@pytest.mark.parametrize(
    "bad",
    [
        {"memory": "12q"},
        {"memory": "-1"},
        {"cpus": "0"},
        {"cpus": "many"},
        {"timeout": "soon"},
        {"network": "host"},
        {"pids": 1},
        {"privileged": True},
        {"runtime": "Bad Runtime!"},
        {"memory": True},
    ],
)
def test_limits_refuse_bad_values_and_unknown_keys(bad) -> None:
    with pytest.raises(ValidationError):
        Limits(**bad)


def test_format_size() -> None:
    assert format_size(512 * 1024**2) == "512 MiB"
    assert format_size(1536) == "1.5 KiB"
