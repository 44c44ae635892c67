"""Per-request metric updates, buffered in plain Python and applied to prometheus_client in batches.

A request updates five metric children (in-flight gauge up and down, the request histogram, the crypto
histogram and byte counter, a key-cache counter). Each prometheus_client call checks its arguments and takes
a lock per value it touches (a histogram observation takes two): measured under callgrind, about 45k of the
390k instructions a 1 KiB encrypt costs in process. Here a call appends the value to a ``deque`` (atomic
under the GIL, so worker threads may record too), and :func:`flush` applies everything pending: a
histogram's observations become one increment per touched bucket and one of its sum, a counter's become one
increment. The in-flight gauge is cheaper still: :class:`InFlight` counts requests started and
finished in two integers the event loop's thread alone writes, and a flush adds their net change.

When values become visible:

* a scrape of this process's registry (``/metrics`` in one worker, or any
  :meth:`~prometheus_client.registry.CollectorRegistry.collect`, such as
  ``REGISTRY.get_sample_value``) flushes first: it sees every update made before it;
* with several workers, ``/metrics`` is answered by one of them and reads the others' files: their updates
  show after their next periodic flush (``metrics_flush_seconds``, :func:`run_periodic_flush` in each
  worker's lifespan) — the lag is bounded by that interval plus however long the worker's event loop is busy;
* a worker flushes once more when its lifespan ends, and a buffer flushes itself at
  :data:`MAX_PENDING` values, so memory stays bounded even without a loop (an :class:`InFlight` holds two
  integers, whatever it counts).

:func:`set_buffering` (``False`` when ``metrics_flush_seconds`` is 0) turns the buffers into pass-throughs.

Applying a batch to a histogram writes its bucket and sum values (``_buckets``, ``_sum``,
``_upper_bounds`` of prometheus_client's ``Histogram``, version pinned in requirements/); those are checked
once per child, and a child without them gets its observations replayed through the public ``observe()``
instead. tests/app/core/test_metric_buffer.py compares both against plain ``observe()``.
"""

from __future__ import annotations

import abc
import asyncio
import bisect
import threading
from collections import deque
from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, Metric
from prometheus_client.registry import Collector

#: A buffer holding this many values flushes itself on the next update.
MAX_PENDING = 65536

_buffering = True
_buffers: list[_Flushed] = []
_buffers_lock = threading.Lock()


class Observer(Protocol):
    """What a timed call records into: a histogram child or its buffer."""

    def observe(self, amount: float) -> None: ...


class _Flushed(abc.ABC):
    """Something :func:`flush` applies: registered when made, applied by :meth:`apply`."""

    __slots__ = ()

    def __init__(self) -> None:
        with _buffers_lock:
            _buffers.append(self)

    @abc.abstractmethod
    def apply(self) -> None:
        """Apply what is pending to the child (each kind of metric its own way)."""


class _Buffer(_Flushed):
    """Values waiting for :func:`flush`; subclasses know how to apply them to their child."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending: deque[float] = deque()
        super().__init__()

    def _take(self) -> list[float]:
        """Remove and return what is pending now; values appended meanwhile wait for the next flush."""
        pending = self._pending
        taken: list[float] = []
        try:
            for _ in range(len(pending)):
                taken.append(pending.popleft())
        except IndexError:  # another thread's flush took the rest
            pass
        return taken


class BufferedHistogram(_Buffer):
    """One labelled :class:`~prometheus_client.Histogram` child whose ``observe`` is batched."""

    __slots__ = ("_bounds", "_child", "_direct")

    def __init__(self, child: Histogram) -> None:
        bounds = getattr(child, "_upper_bounds", None)
        buckets = getattr(child, "_buckets", None)
        self._child = child
        self._bounds: list[float] = list(bounds) if isinstance(bounds, list) else []
        fits = isinstance(buckets, list) and len(buckets) == len(self._bounds) > 0
        self._direct = not (fits and _has_inc(child))
        super().__init__()

    def observe(self, amount: float) -> None:
        """Record one observation (applied at the next flush, or at once when buffering is off)."""
        if _buffering:  # appended here, not through a helper: one call less on every request's updates
            pending = self._pending
            pending.append(amount)
            if len(pending) >= MAX_PENDING:
                self.apply()
        else:
            self._child.observe(amount)

    def apply(self) -> None:
        values = self._take()
        if not values:
            return
        if self._direct:
            for value in values:
                self._child.observe(value)
            return
        counts: dict[int, int] = {}
        for value in values:
            index = bisect.bisect_left(self._bounds, value)  # first bound >= value, as observe() picks
            counts[index] = counts.get(index, 0) + 1
        child: Any = self._child
        child._sum.inc(sum(values))
        for index, count in counts.items():
            child._buckets[index].inc(count)


class BufferedCounter(_Buffer):
    """One labelled :class:`~prometheus_client.Counter` child whose ``inc`` is batched (what is pending is
    applied as one increment)."""

    __slots__ = ("_child",)

    def __init__(self, child: Counter) -> None:
        self._child = child
        super().__init__()

    def inc(self, amount: float = 1) -> None:
        """Add ``amount`` (>= 0) at the next flush, or at once when buffering is off."""
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        if _buffering:  # appended here (see BufferedHistogram.observe)
            pending = self._pending
            pending.append(amount)
            if len(pending) >= MAX_PENDING:
                self.apply()
        else:
            self._child.inc(amount)

    def apply(self) -> None:
        values = self._take()
        if values:
            self._child.inc(sum(values))


class InFlight(_Flushed):
    """A :class:`~prometheus_client.Gauge` (child) of things in progress, counted by the event loop's thread.

    :meth:`enter` and :meth:`leave` add one to :attr:`started` or :attr:`finished`, two plain integers that
    grow without bound (memory stays constant: nothing is held per update, so :data:`MAX_PENDING` has
    nothing to bound); :meth:`apply` adds to the gauge what ``started - finished`` gained since it last
    applied, so a request costs two integer increments instead of a gauge update up and one down. The two
    counts are not locked: only one thread may call :meth:`enter` and :meth:`leave` (the event loop's, where
    every request starts and ends; a count written by two threads could lose an update for good). Any
    thread may flush: it reads :attr:`finished` before :attr:`started`, so what it applies never counts a
    finished request as gone before it counted it in. When buffering is off they update the gauge at once.
    """

    __slots__ = ("_applied", "_child", "_lock", "finished", "started")

    def __init__(self, child: Gauge) -> None:
        self._child = child
        self._lock = threading.Lock()
        self.started = 0
        self.finished = 0
        self._applied = 0  # the part of started - finished already added to the gauge
        super().__init__()

    def enter(self) -> None:
        """One more in progress (on the gauge at the next flush, or at once when buffering is off)."""
        if _buffering:
            self.started += 1
        else:
            self._child.inc()

    def leave(self) -> None:
        """One fewer in progress (on the gauge at the next flush, or at once when buffering is off)."""
        if _buffering:
            self.finished += 1
        else:
            self._child.dec()

    def apply(self) -> None:
        with self._lock:
            finished = self.finished
            net = self.started - finished - self._applied
            if net:
                self._applied += net
                self._child.inc(net)


def _has_inc(child: Histogram) -> bool:
    total = getattr(child, "_sum", None)
    return callable(getattr(total, "inc", None))


def flush() -> None:
    """Apply every buffered update to its prometheus_client child (safe from any thread, concurrently)."""
    with _buffers_lock:
        buffers = list(_buffers)
    for buffer in buffers:
        buffer.apply()


def set_buffering(enabled: bool) -> None:
    """Buffer updates (the default) or apply each at once; turning it off flushes what is pending."""
    global _buffering
    _buffering = enabled
    if not enabled:
        flush()


def buffering() -> bool:
    """Whether updates are buffered (:func:`set_buffering`)."""
    return _buffering


async def run_periodic_flush(interval: float) -> None:
    """Flush every ``interval`` seconds until cancelled, then once more (a worker's lifespan runs this)."""
    try:
        while True:
            await asyncio.sleep(interval)
            flush()
    finally:
        flush()


class _FlushOnCollect(Collector):
    """Registered first in the default registry: any collection of it flushes before the metrics are read."""

    def collect(self) -> Iterator[Metric]:
        flush()
        return iter(())


REGISTRY.register(_FlushOnCollect())
