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


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("timeout", "99999999999h", "99999999999h is longer than the most sbx accepts, 7d"),
        ("timeout", "9" * 400, "is longer than the most sbx accepts, 7d"),
        ("timeout", float("inf"), "inf is longer than the most sbx accepts"),
        ("timeout", "25h", "25h is longer than the most allowed, 1d"),
        ("memory", "9" * 400 + "g", "is more than the most sbx accepts, 1 TiB"),
        ("memory", 10**30, "is more than the most sbx accepts, 1 TiB"),
        ("memory", "2t", "2t is more than the most sbx accepts, 1 TiB"),
        ("stdout_bytes", "1g", "1 GiB is more than the most allowed, 64 MiB"),
        ("stderr_bytes", "65m", "65 MiB is more than the most allowed, 64 MiB"),
        ("max_code_bytes", "100m", "100 MiB is more than the most allowed, 64 MiB"),
        ("tmp_size", "5t", "is more than the most sbx accepts, 1 TiB"),
        ("output_size", "5t", "is more than the most sbx accepts, 1 TiB"),
        ("max_artifact_bytes", "5t", "is more than the most sbx accepts, 1 TiB"),
        ("fsize", "5t", "is more than the most sbx accepts, 1 TiB"),
        ("cpus", "inf", "is not a CPU count"),
        ("cpus", "65", "less than or equal to 64"),
    ],
)
def test_every_size_and_duration_has_an_upper_bound_named_in_the_message(
    field, value, message
) -> None:
    with pytest.raises(ValidationError) as info:
        Limits(**{field: value})
    assert message in str(info.value)
    assert info.value.errors()[0]["loc"] == (field,)


def test_the_bounds_themselves_are_accepted() -> None:
    limits = Limits(timeout="1d", memory="1t", stdout_bytes="64m", max_code_bytes="64m")
    assert (limits.timeout, limits.memory) == (86400.0, 1024**4)
    assert parse_duration("7d") == 7 * 86400.0


@pytest.mark.parametrize("bad", [{"pids": "256"}, {"pids": 256.0}, {"nofile": True},
                                 {"max_artifacts": "64"}])
def test_counts_are_strict_integers(bad) -> None:
    with pytest.raises(ValidationError):
        Limits(**bad)
