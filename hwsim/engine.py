"""A small discrete-event engine: a virtual clock in integer nanoseconds and a heap of pending events.

The clock is independent of wall time: it only moves when :meth:`Simulator.run_until` or
:meth:`Simulator.step` pops an event. Events at the same instant run in the order they were scheduled
(a sequence number breaks ties), so a run is a pure function of its inputs; workloads draw their
randomness from :attr:`Simulator.random`, seeded at construction, which makes every run deterministic
for a given seed.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from typing import Any

__all__ = ["Simulator"]

Callback = Callable[..., None]


class Simulator:
    """Virtual-time event loop.

    Args:
        seed: seeds :attr:`random`, the only source of randomness a model should use.

    Attributes:
        now: the current virtual time in nanoseconds (starts at 0, never decreases).
        random: a :class:`random.Random` seeded with ``seed``.
        events_processed: how many events have run.
    """

    __slots__ = ("_heap", "_sequence", "events_processed", "now", "random")

    def __init__(self, seed: int = 0) -> None:
        self.now = 0
        self.random = random.Random(seed)
        self.events_processed = 0
        self._sequence = 0
        self._heap: list[tuple[int, int, Callback, tuple[Any, ...]]] = []

    def at(self, time_ns: int, callback: Callback, *args: Any) -> None:
        """Run ``callback(*args)`` at virtual time ``time_ns``.

        Raises:
            ValueError: ``time_ns`` lies in the past (before :attr:`now`).
        """
        if time_ns < self.now:
            raise ValueError(
                f"cannot schedule an event at {time_ns} ns, the clock is already at {self.now} ns"
            )
        self._sequence += 1
        heapq.heappush(self._heap, (time_ns, self._sequence, callback, args))

    def after(self, delay_ns: int, callback: Callback, *args: Any) -> None:
        """Run ``callback(*args)`` ``delay_ns`` nanoseconds from now.

        Raises:
            ValueError: ``delay_ns`` is negative.
        """
        if delay_ns < 0:
            raise ValueError(f"delay must be >= 0 ns, got {delay_ns}")
        self.at(self.now + delay_ns, callback, *args)

    def peek(self) -> int | None:
        """The time of the next pending event, or ``None`` when nothing is pending."""
        return self._heap[0][0] if self._heap else None

    def step(self) -> bool:
        """Run the next event; return ``False`` when none was pending."""
        if not self._heap:
            return False
        time_ns, _, callback, args = heapq.heappop(self._heap)
        self.now = time_ns
        self.events_processed += 1
        callback(*args)
        return True

    def run_until(self, time_ns: int) -> None:
        """Run every event due at or before ``time_ns``, then set the clock to ``time_ns``.

        A ``time_ns`` earlier than :attr:`now` runs nothing and leaves the clock where it is.
        """
        heap = self._heap
        while heap and heap[0][0] <= time_ns:
            self.step()
        if time_ns > self.now:
            self.now = time_ns

    def run_while(self, condition: Callable[[], bool], limit_ns: int | None = None) -> None:
        """Run events while ``condition()`` holds and events remain (and, if given, up to ``limit_ns``).

        Raises:
            RuntimeError: the condition still holds but no event is pending (the model is stuck).
        """
        heap = self._heap
        while condition():
            if not heap:
                raise RuntimeError("the model has no pending event but the awaited condition is not met")
            if limit_ns is not None and heap[0][0] > limit_ns:
                return
            self.step()

    def run(self) -> None:
        """Run until no event is pending."""
        while self.step():
            pass
