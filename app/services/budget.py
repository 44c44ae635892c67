"""A budget of bytes that concurrent requests may hold in memory at once (the batch routes' bodies).

A batch body is buffered whole, and while its request runs the service also holds the decoded items and the
results (a few times the body). Without a bound, many concurrent big batches multiply that: 16 concurrent
14 MiB batches took a worker from 85 to 727 MiB. :class:`ByteBudget` admits a request once its bytes fit
under the limit; a request that cannot get them within ``wait_seconds`` gets
:class:`~app.errors.OverloadedError` (503 + ``Retry-After``). The budget is per worker process.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

from app.errors import ServiceUnavailableError

__all__ = ["ByteBudget", "OverloadedError"]


class OverloadedError(ServiceUnavailableError):
    """Too much work of this kind is in flight; the same request may succeed after ``retry_after_seconds``."""

    code = "overloaded"

    def __init__(self, message: str, retry_after_seconds: int = 1) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds


class ByteBudget:
    """Admit byte reservations while their sum stays at most ``limit``; others wait up to ``wait_seconds``.

    A reservation larger than ``limit`` is clamped to ``limit`` (it then runs alone), so every request that
    passes the body-size limit can eventually run.

    Args:
        limit: most bytes held at once (>= 1).
        wait_seconds: how long a reservation may wait before :class:`~app.errors.OverloadedError`.
        on_change: called with the bytes held after every reservation and release (a metric's setter: the
            dashboards draw the budget's use); it runs on the event loop, so it must be quick.
    """

    def __init__(
        self, limit: int, wait_seconds: float, on_change: Callable[[int], None] | None = None
    ) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        if wait_seconds < 0:
            raise ValueError(f"wait_seconds must be >= 0, got {wait_seconds}")
        self.limit = limit
        self.wait_seconds = wait_seconds
        self._held = 0
        self._changed: asyncio.Condition | None = None
        self._on_change = on_change

    @property
    def held(self) -> int:
        """Bytes reserved right now."""
        return self._held

    def _condition(self) -> asyncio.Condition:
        # Created on first use, inside the event loop that serves the requests.
        if self._changed is None:
            self._changed = asyncio.Condition()
        return self._changed

    async def reserve(self, nbytes: int) -> int:
        """Reserve ``nbytes`` (clamped to ``limit``); returns the amount reserved, for :meth:`release`.

        Raises:
            OverloadedError: the bytes did not fit within ``wait_seconds`` (503, ``Retry-After``).
        """
        amount = min(max(nbytes, 0), self.limit)
        if self._held + amount <= self.limit:
            self._held += amount  # the common case: no waiting, no lock
            self._report()
            return amount
        changed = self._condition()
        async with changed:
            try:
                await asyncio.wait_for(
                    changed.wait_for(lambda: self._held + amount <= self.limit), self.wait_seconds
                )
            except TimeoutError:
                raise OverloadedError(
                    f"too many large batch requests in flight ({self._held} of {self.limit} buffer bytes "
                    f"held; this one needs {amount}): retry later",
                    retry_after_seconds=max(1, math.ceil(self.wait_seconds)),
                ) from None
            self._held += amount
        self._report()
        return amount

    async def release(self, amount: int) -> None:
        """Return ``amount`` reserved bytes and wake the waiters."""
        self._held -= amount
        self._report()
        if self._changed is not None:
            async with self._changed:
                self._changed.notify_all()

    def _report(self) -> None:
        if self._on_change is not None:
            self._on_change(self._held)
