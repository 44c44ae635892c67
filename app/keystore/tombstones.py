"""Tombstones of deleted key names: a deleted name cannot be re-created until its tombstone expires.

Caches of other replicas learn of a deletion within the propagation bound (see :mod:`app.services.coherence`);
until then one of them could still encrypt under the deleted key's material. If the name already pointed to a
new key, that ciphertext would be undecryptable (the client got 200 and lost its data). So deleting a key
stores a tombstone in the keystore, shared by every replica, that holds the name for ``tombstone_seconds``
(the service sets 10 x its poll interval); create and import of that name meanwhile raise
:class:`~app.errors.KeyRecentlyDeletedError` saying when the name is free.
"""

from __future__ import annotations

import math
from datetime import datetime

from app.errors import BadRequestError, KeyRecentlyDeletedError

__all__ = ["check_tombstone_seconds", "recently_deleted"]


def check_tombstone_seconds(value: float) -> float:
    """Return ``value`` as a float if it is a number of seconds >= 0.

    Raises:
        BadRequestError: a negative value, or not a number.
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise BadRequestError(f"tombstone_seconds must be a number >= 0, got {value!r}")
    return float(value)


def recently_deleted(name: str, reusable_at: datetime, now: datetime) -> KeyRecentlyDeletedError:
    """The error for creating ``name`` at ``now`` while its tombstone lasts until ``reusable_at``."""
    rest = max((reusable_at - now).total_seconds(), 0.0)
    stamp = reusable_at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return KeyRecentlyDeletedError(
        f"key {name!r} was deleted less than the staleness bound ago; the name can be re-created "
        f"from {stamp} (in {rest:.2f} s), once no replica can still hold the deleted key",
        retry_after_seconds=max(1, math.ceil(rest)),
    )
