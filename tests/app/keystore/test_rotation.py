"""The rules of automatic rotation (:mod:`app.keystore.rotation`): reading a period, its bounds, when a key is
due."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.api.errors import http_status
from app.errors import BadRequestError
from app.keystore.rotation import (
    MAX_AUTO_ROTATE_PERIOD,
    MIN_AUTO_ROTATE_PERIOD,
    check_auto_rotate_min_period,
    check_auto_rotate_period,
    is_due,
    next_rotation,
)

T0 = datetime(2026, 11, 26, 8, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (0, 0),
        ("0", 0),
        (3600, 3600),
        ("3600", 3600),
        ("1h", 3600),
        ("24h", 86_400),
        ("90m", 5400),
        ("1h30m", 5400),
        ("7d", 604_800),
        ("1d2h3m4s", 93_784),
        ("1d30m", 88_200),
        ("0d1h", 3600),
        (MAX_AUTO_ROTATE_PERIOD, MAX_AUTO_ROTATE_PERIOD),
    ],
)
def test_periods_in_seconds_or_durations(value: int | str, seconds: int) -> None:
    assert check_auto_rotate_period(value) == seconds


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (1, "at least 3600 seconds (1h), got 1"),
        ("59m", "at least 3600 seconds (1h), got 3540"),
        (3599, "at least 3600 seconds (1h), got 3599"),
        (-1, "0 (off) or positive, got -1"),
        (MAX_AUTO_ROTATE_PERIOD + 1, "at most 315360000 seconds (10 years)"),
        ("1y", "seconds (an integer) or a duration such as 24h"),
        ("-3600", "got '-3600'"),
        ("h", "got 'h'"),
        ("", "got ''"),
        ("1.5h", "got '1.5h'"),
        (True, "got a bool"),
        (3600.0, "got a float"),
        (None, "got a NoneType"),
    ],
)
def test_invalid_periods_are_bad_requests_that_say_what_is_allowed(value: object, message: str) -> None:
    with pytest.raises(BadRequestError, match="auto_rotate_period must") as caught:
        check_auto_rotate_period(value)
    assert message in str(caught.value)
    assert http_status(caught.value) == 400


@pytest.mark.parametrize(
    "value",
    [
        "1d1d",
        "1h1h1h",
        "1h1h",
        "30m1h",
        "1s1h",
        "1h30m1h",
        " 1h",
        "1h ",
        " 24h ",
        "1h 30m",
        "\t1h",
        "1h\n",
        " 3600",
        "3600 ",
        "\u00a03600",
    ],
)
def test_one_duration_grammar_each_unit_once_in_order_no_spaces(value: str) -> None:
    """d, h, m, s each at most once and in that order, nothing around them: a value two readers cannot
    sum differently (is "1h1h" one hour or two?) and that an equality check on the stored text agrees with.
    """
    with pytest.raises(BadRequestError, match="auto_rotate_period must") as caught:
        check_auto_rotate_period(value)
    assert "each unit at most once" in str(caught.value)
    assert http_status(caught.value) == 400


def test_a_lowered_minimum_accepts_short_periods_for_tests() -> None:
    assert check_auto_rotate_period("2s", minimum=1) == 2
    with pytest.raises(BadRequestError, match="at least 5 seconds, got 2"):
        check_auto_rotate_period(2, minimum=5)
    assert check_auto_rotate_min_period(1) == 1
    assert check_auto_rotate_min_period(MIN_AUTO_ROTATE_PERIOD) == MIN_AUTO_ROTATE_PERIOD
    for wrong in (0, 3601, True, 1.5):
        with pytest.raises(BadRequestError, match="auto_rotate_min_period must be an integer from 1 to 3600"):
            check_auto_rotate_min_period(wrong)


def test_due_once_the_latest_version_is_a_period_old() -> None:
    assert next_rotation(3600, T0) == T0 + timedelta(hours=1)
    assert not is_due(3600, T0, T0 + timedelta(seconds=3599, microseconds=999_999))
    assert is_due(3600, T0, T0 + timedelta(hours=1))  # last rotation + period <= now
    assert is_due(3600, T0, T0 + timedelta(days=30))


def test_period_0_is_never_due() -> None:
    assert next_rotation(0, T0) is None
    assert not is_due(0, T0, T0 + timedelta(days=10_000))
