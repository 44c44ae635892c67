"""Automatic rotation: a key's ``auto_rotate_period``, how it is written, and when a rotation is due.

A key with ``auto_rotate_period`` P > 0 seconds is due for rotation once its latest version is P seconds old
(the latest version's ``created_at`` is the time of its last rotation, or of its creation). 0 turns automatic
rotation off. Like Vault's ``auto_rotate_period``, a period is at least one hour
(:data:`MIN_AUTO_ROTATE_PERIOD`); a test setting may lower that floor (``KEYSTREAM_AUTO_ROTATE_MIN_PERIOD``)
so tests can watch a key rotate within seconds.

The keystore decides, not the caller: :meth:`~app.keystore.KeyStore.rotate_if_due` re-checks :func:`is_due`
inside the write transaction that holds the key (SQLite ``BEGIN IMMEDIATE``, PostgreSQL ``SELECT ... FOR
UPDATE``), so of any number of workers and replicas that find a key due at once exactly one rotates it; the
others then see a fresh latest version and do nothing.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from app.errors import BadRequestError

__all__ = [
    "MAX_AUTO_ROTATE_PERIOD",
    "MIN_AUTO_ROTATE_PERIOD",
    "check_auto_rotate_min_period",
    "check_auto_rotate_period",
    "is_due",
    "next_rotation",
]

#: Shortest automatic rotation period, in seconds (Vault's floor too); 0 means off.
MIN_AUTO_ROTATE_PERIOD = 3600
#: Longest automatic rotation period, in seconds (10 years of 365 days; fits a 32-bit column).
MAX_AUTO_ROTATE_PERIOD = 10 * 365 * 86_400

#: Seconds per unit of a duration string (``"24h"``, ``"1h30m"``, ``"7d"``), as Vault's duration fields, in
#: the order a duration must give them.
_UNITS = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
#: The one grammar of a period given as text: up to 10 ASCII digits (seconds), or each unit of
#: :data:`_UNITS` at most once, in that order, with up to 10 ASCII digits each, and nothing else (no spaces,
#: no sign). ``"1h1h"`` or ``" 1h"`` would leave two readers of the same value free to disagree.
_DURATION = re.compile(
    r"([0-9]{1,10})|(?=[0-9])" + "".join(rf"(?:([0-9]{{1,10}}){unit})?" for unit in _UNITS)
)
_HINT = (
    "seconds (an integer) or a duration such as 24h, 90m, 1h30m or 7d (units d, h, m, s, each unit at most "
    "once and in that order, no spaces)"
)


def check_auto_rotate_min_period(value: object) -> int:
    """Return ``value`` if it may be a keystore's floor for ``auto_rotate_period`` (1 .. 3600 seconds).

    Raises:
        BadRequestError: not an int in 1 .. :data:`MIN_AUTO_ROTATE_PERIOD`.
    """
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MIN_AUTO_ROTATE_PERIOD:
        raise BadRequestError(
            f"auto_rotate_min_period must be an integer from 1 to {MIN_AUTO_ROTATE_PERIOD} seconds, "
            f"got {value!r}"
        )
    return value


def _seconds(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise BadRequestError(f"auto_rotate_period must be {_HINT}, got a {type(value).__name__}")
    if isinstance(value, int):
        return value
    found = _DURATION.fullmatch(value)
    if found is None:
        raise BadRequestError(f"auto_rotate_period must be {_HINT}, got {value[:40]!r}")
    seconds, *parts = found.groups()
    if seconds is not None:
        return int(seconds)
    return sum(int(number) * size for number, size in zip(parts, _UNITS.values(), strict=True) if number)


def check_auto_rotate_period(value: object, minimum: int = MIN_AUTO_ROTATE_PERIOD) -> int:
    """Return ``value`` in seconds if it is a valid period: 0 (off), or ``minimum`` to 10 years.

    Args:
        value: an int of seconds, or a str of seconds or of a duration (``"24h"``, ``"1h30m"``, ``"7d"``:
            d, h, m, s each at most once, in that order, no spaces).
        minimum: the shortest period allowed (:data:`MIN_AUTO_ROTATE_PERIOD` unless a test lowered it).

    Raises:
        BadRequestError: another type, an unreadable string, a negative number, or a period outside
            ``minimum`` .. :data:`MAX_AUTO_ROTATE_PERIOD`; the message says what is allowed.
    """
    seconds = _seconds(value)
    if seconds == 0:
        return 0
    if seconds < 0:
        raise BadRequestError(f"auto_rotate_period must be 0 (off) or positive, got {seconds}")
    if seconds < minimum:
        raise BadRequestError(
            f"auto_rotate_period must be 0 (off) or at least {minimum} seconds"
            f"{' (1h)' if minimum == MIN_AUTO_ROTATE_PERIOD else ''}, got {seconds}"
        )
    if seconds > MAX_AUTO_ROTATE_PERIOD:
        raise BadRequestError(
            f"auto_rotate_period must be at most {MAX_AUTO_ROTATE_PERIOD} seconds (10 years), got {seconds}"
        )
    return seconds


def next_rotation(period: int, last_rotated: datetime) -> datetime | None:
    """When a key whose latest version dates from ``last_rotated`` is due; ``None`` when ``period`` is 0."""
    if period <= 0:
        return None
    return last_rotated + timedelta(seconds=period)


def is_due(period: int, last_rotated: datetime, now: datetime) -> bool:
    """Whether a key with period ``period``, last rotated at ``last_rotated``, is due for rotation at ``now``.

    Due when ``last_rotated + period <= now``; never when ``period`` is 0.
    """
    due = next_rotation(period, last_rotated)
    return due is not None and due <= now
