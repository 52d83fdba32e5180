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
    ("bad", "message"),
    [
        ({"memory": "12q"}, "'12q' is not a size; write e.g. '512m', '2g', '64k' or a byte count"),
        ({"memory": "-1"}, "'-1' is not a size; write e.g."),
        ({"cpus": "0"}, "cpus must be greater than 0"),
        ({"cpus": "many"}, "'many' is not a CPU count; write e.g. '1', '1.5' or '0.5'"),
        ({"timeout": "soon"}, "'soon' is not a duration; write e.g. '30s', '2m', '500ms'"),
        ({"network": "host"}, "Input should be 'none' or 'bridge'"),
        ({"pids": 1}, "Input should be greater than or equal to 16"),
        ({"privileged": True}, "Extra inputs are not permitted"),
        ({"runtime": "Bad Runtime!"}, "String should match pattern '^[a-z][a-z0-9._-]{0,63}$'"),
        ({"memory": True}, "expected a size such as '512m', not a boolean"),
    ],
)
def test_limits_refuse_bad_values_and_unknown_keys(bad, message) -> None:
    with pytest.raises(ValidationError) as info:
        Limits(**bad)
    (error,) = info.value.errors()
    assert error["loc"] == tuple(bad) and message in error["msg"]


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
    with pytest.raises(ValidationError) as info:
        Limits(**bad)
    (error,) = info.value.errors()
    assert (error["loc"], error["type"]) == (tuple(bad), "int_type")  # not coerced
