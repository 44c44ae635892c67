"""Attempt limits for the routes a client may call without a token (unseal shares, logins).

:class:`AttemptLimiter` keeps a token bucket per key (a client address, or an address and a role): a burst
of attempts at once, then one per refill interval, and it remembers a bounded number of keys (the oldest
forgotten first), so a flood of distinct keys cannot fill a worker's memory. Each worker counts on its own.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict

from app.errors import TooManyRequestsError

__all__ = ["AttemptLimiter"]

#: The limiter's clock (tests stop it to count a burst without the refill running meanwhile).
_now = time.monotonic


class AttemptLimiter:
    """A token bucket per key: ``burst`` attempts at once, then one per ``refill_seconds``.

    Args:
        burst: attempts a fresh key may make at once.
        refill_seconds: seconds for one more attempt.
        tracked: keys remembered at most.
        what: what is counted, for the 429's message ("unseal attempts").
    """

    def __init__(self, burst: int, refill_seconds: float, tracked: int, what: str) -> None:
        self._burst = burst
        self._refill = refill_seconds
        self._tracked = tracked
        self._what = what
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def attempt(self, key: str) -> None:
        """Count one attempt under ``key``.

        Raises:
            TooManyRequestsError: its bucket is empty (429 with the seconds until the next attempt).
        """
        now = _now()
        with self._lock:
            tokens, since = self._buckets.pop(key, (float(self._burst), now))
            tokens = min(float(self._burst), tokens + (now - since) / self._refill)
            if tokens < 1.0:
                self._buckets[key] = (tokens, now)
                wait = math.ceil((1.0 - tokens) * self._refill)
                raise TooManyRequestsError(
                    f"too many {self._what}: retry in {wait} s", retry_after_seconds=wait
                )
            self._buckets[key] = (tokens - 1.0, now)
            while len(self._buckets) > self._tracked:
                self._buckets.popitem(last=False)
