"""Buffered metric updates give the same exposition as prometheus_client's own calls, lose nothing across
threads, and become visible at a collection, at a periodic flush, or at once when buffering is off."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from app.core import metric_buffer
from app.core.metric_buffer import BufferedCounter, BufferedHistogram, InFlight

BUCKETS = (1e-4, 5e-4, 1e-3, 0.01, 0.1, 1.0)


@pytest.fixture(autouse=True)
def _buffering_on() -> Iterator[None]:
    metric_buffer.set_buffering(True)
    yield
    metric_buffer.set_buffering(True)


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample but the ``_created`` timestamps (they differ between two metrics made apart)."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in registry.collect()
        for sample in family.samples
        if not sample.name.endswith("_created")
    }


def _histogram_pair() -> tuple[CollectorRegistry, Histogram, CollectorRegistry, Histogram]:
    plain_registry, buffered_registry = CollectorRegistry(), CollectorRegistry()
    plain = Histogram("t_seconds", "t", ["route"], buckets=BUCKETS, registry=plain_registry)
    buffered = Histogram("t_seconds", "t", ["route"], buckets=BUCKETS, registry=buffered_registry)
    return plain_registry, plain, buffered_registry, buffered


# Each bound exactly (observe() puts a value equal to a bound in that bound's bucket), between bounds, below
# the first, above the last (only +Inf), zero, negative.
EDGE_VALUES = [*BUCKETS, 0.0, -1.0, 5e-5, 2e-4, 0.05, 0.5, 3.0, 1e9]


@pytest.mark.parametrize("direct", [False, True], ids=["bucketed", "replayed"])
def test_histogram_batch_equals_observe(direct: bool) -> None:
    plain_registry, plain, buffered_registry, buffered = _histogram_pair()
    target = BufferedHistogram(buffered.labels(route="/a"))
    assert target._direct is False  # the pinned prometheus_client has the attributes the batch path writes
    target._direct = direct
    values = EDGE_VALUES + [random.uniform(0, 2) for _ in range(500)]
    for value in values:
        plain.labels(route="/a").observe(value)
        target.observe(value)
    metric_buffer.flush()
    assert _samples(buffered_registry) == _samples(plain_registry)
    assert generate_latest(buffered_registry).count(b"\n") == generate_latest(plain_registry).count(b"\n")


def test_updates_wait_for_a_flush_then_show_exactly() -> None:
    registry = CollectorRegistry()
    histogram = Histogram("w_seconds", "w", buckets=BUCKETS, registry=registry)
    counter = Counter("w_bytes", "w", registry=registry)
    gauge = Gauge("w_inflight", "w", registry=registry)
    seconds, size, inflight = BufferedHistogram(histogram), BufferedCounter(counter), InFlight(gauge)
    for _ in range(7):
        seconds.observe(0.002)
        size.inc(1024)
        inflight.enter()
    for _ in range(3):
        inflight.leave()
    assert registry.get_sample_value("w_seconds_count") == 0.0  # a private registry: nothing flushed it
    assert registry.get_sample_value("w_bytes_total") == 0.0
    metric_buffer.flush()
    assert registry.get_sample_value("w_seconds_count") == 7.0
    assert registry.get_sample_value("w_seconds_bucket", {"le": "0.01"}) == 7.0
    assert registry.get_sample_value("w_seconds_bucket", {"le": "0.001"}) == 0.0
    assert registry.get_sample_value("w_seconds_sum") == pytest.approx(0.014)
    assert registry.get_sample_value("w_bytes_total") == 7 * 1024.0
    assert registry.get_sample_value("w_inflight") == 4.0


def test_reading_the_default_registry_flushes_first() -> None:
    counter = Counter("keystream_test_flush_on_collect", "t")
    try:
        buffered = BufferedCounter(counter)
        buffered.inc(5)
        # get_sample_value collects REGISTRY, whose first Keystream collector flushes every buffer.
        assert REGISTRY.get_sample_value("keystream_test_flush_on_collect_total") == 5.0
    finally:
        REGISTRY.unregister(counter)


def test_buffering_off_applies_at_once_and_flushes_what_was_pending() -> None:
    registry = CollectorRegistry()
    counter = Counter("o_total", "o", registry=registry)
    histogram = Histogram("o_seconds", "o", buckets=BUCKETS, registry=registry)
    buffered, seconds = BufferedCounter(counter), BufferedHistogram(histogram)
    buffered.inc(2)
    seconds.observe(0.002)
    metric_buffer.set_buffering(False)
    assert registry.get_sample_value("o_total") == 2.0
    assert registry.get_sample_value("o_seconds_count") == 1.0
    buffered.inc(3)
    seconds.observe(0.5)
    assert registry.get_sample_value("o_total") == 5.0
    assert registry.get_sample_value("o_seconds_count") == 2.0
    assert registry.get_sample_value("o_seconds_bucket", {"le": "0.1"}) == 1.0


def test_negative_counter_increment_is_refused() -> None:
    buffered = BufferedCounter(Counter("n_total", "n", registry=CollectorRegistry()))
    with pytest.raises(ValueError, match="non-negative"):
        buffered.inc(-1)


def test_a_full_buffer_flushes_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metric_buffer, "MAX_PENDING", 10)
    registry = CollectorRegistry()
    buffered = BufferedCounter(Counter("f_total", "f", registry=registry))
    seconds = BufferedHistogram(Histogram("f_seconds", "f", buckets=BUCKETS, registry=registry))
    for _ in range(10):
        buffered.inc()
        seconds.observe(0.002)
    assert registry.get_sample_value("f_total") == 10.0
    assert registry.get_sample_value("f_seconds_count") == 10.0
    assert len(buffered._pending) == len(seconds._pending) == 0


def test_threads_recording_while_others_flush_lose_nothing() -> None:
    registry = CollectorRegistry()
    histogram = BufferedHistogram(Histogram("r_seconds", "r", buckets=BUCKETS, registry=registry))
    counter = BufferedCounter(Counter("r_total", "r", registry=registry))
    per_thread, threads = 20_000, 4
    done = threading.Event()

    def record() -> None:
        for _ in range(per_thread):
            histogram.observe(0.003)
            counter.inc()

    def keep_flushing() -> None:
        while not done.is_set():
            metric_buffer.flush()

    flushers = [threading.Thread(target=keep_flushing) for _ in range(2)]
    recorders = [threading.Thread(target=record) for _ in range(threads)]
    for thread in flushers + recorders:
        thread.start()
    for thread in recorders:
        thread.join()
    done.set()
    for thread in flushers:
        thread.join()
    metric_buffer.flush()
    assert registry.get_sample_value("r_total") == per_thread * threads
    assert registry.get_sample_value("r_seconds_count") == per_thread * threads
    assert registry.get_sample_value("r_seconds_bucket", {"le": "0.01"}) == per_thread * threads


def test_periodic_flush_applies_within_its_interval_and_once_more_when_cancelled() -> None:
    registry = CollectorRegistry()
    counter = BufferedCounter(Counter("p_total", "p", registry=registry))

    async def scenario() -> None:
        task = asyncio.create_task(metric_buffer.run_periodic_flush(0.05))
        counter.inc()
        for _ in range(100):  # the interval is 0.05 s; give it up to 1 s on a loaded machine
            await asyncio.sleep(0.01)
            if registry.get_sample_value("p_total") == 1.0:
                break
        assert registry.get_sample_value("p_total") == 1.0
        counter.inc(2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert registry.get_sample_value("p_total") == 3.0

    asyncio.run(scenario())


def _in_flight() -> tuple[CollectorRegistry, Gauge]:
    registry = CollectorRegistry()
    return registry, Gauge("i_inflight", "i", registry=registry)


def test_in_flight_shows_its_net_count_at_a_flush_and_adds_each_change_once() -> None:
    registry, gauge = _in_flight()
    inflight = InFlight(gauge)
    for _ in range(5):
        inflight.enter()
    for _ in range(3):
        inflight.leave()
    assert registry.get_sample_value("i_inflight") == 0.0  # a private registry: nothing flushed it
    metric_buffer.flush()
    assert registry.get_sample_value("i_inflight") == 2.0
    metric_buffer.flush()  # nothing changed since: nothing more is added
    assert registry.get_sample_value("i_inflight") == 2.0
    inflight.leave()
    inflight.leave()
    inflight.enter()
    metric_buffer.flush()
    assert registry.get_sample_value("i_inflight") == 1.0


def test_in_flight_with_buffering_off_applies_at_once_across_switches() -> None:
    registry, gauge = _in_flight()
    inflight = InFlight(gauge)
    inflight.enter()  # buffered: shown by the flush that turning buffering off makes
    metric_buffer.set_buffering(False)
    assert registry.get_sample_value("i_inflight") == 1.0
    inflight.enter()
    assert registry.get_sample_value("i_inflight") == 2.0
    inflight.leave()
    assert registry.get_sample_value("i_inflight") == 1.0
    metric_buffer.set_buffering(True)
    inflight.leave()  # entered while buffering, left after it was turned off and on again
    metric_buffer.flush()
    assert registry.get_sample_value("i_inflight") == 0.0
    metric_buffer.set_buffering(False)
    assert registry.get_sample_value("i_inflight") == 0.0


_FINISHED = InFlight.__dict__["finished"]  # the slot the subclass below reads through


class _RequestDuringFlush(InFlight):
    """An :class:`InFlight` on which one whole request (enter, leave) runs just before a flush's read of
    ``finished`` returns, as the event loop may while another thread flushes."""

    interleave = False

    @property  # type: ignore[misc]
    def finished(self) -> int:
        if self.interleave:
            self.interleave = False
            self.enter()
            self.leave()
        value: int = _FINISHED.__get__(self)
        return value

    @finished.setter
    def finished(self, value: int) -> None:
        _FINISHED.__set__(self, value)


def test_a_flush_never_shows_a_request_gone_before_it_showed_it_started() -> None:
    registry, gauge = _in_flight()
    inflight = _RequestDuringFlush(gauge)
    inflight.enter()
    inflight.leave()
    metric_buffer.flush()
    assert registry.get_sample_value("i_inflight") == 0.0
    inflight.interleave = True
    metric_buffer.flush()  # reading started first would see the leave without its enter: -1
    assert registry.get_sample_value("i_inflight") == 0.0


def test_in_flight_counted_by_one_thread_while_others_flush_ends_exact_and_never_negative() -> None:
    registry, gauge = _in_flight()
    inflight = InFlight(gauge)
    done = threading.Event()
    lowest: list[float] = []

    def count() -> None:
        for _ in range(50_000):
            inflight.enter()
            inflight.leave()
        inflight.enter()

    def keep_flushing() -> None:
        low = 0.0
        while not done.is_set():
            metric_buffer.flush()
            low = min(low, registry.get_sample_value("i_inflight") or 0.0)
        lowest.append(low)

    flushers = [threading.Thread(target=keep_flushing) for _ in range(2)]
    counter = threading.Thread(target=count)
    for thread in [*flushers, counter]:
        thread.start()
    counter.join()
    done.set()
    for thread in flushers:
        thread.join()
    metric_buffer.flush()
    assert registry.get_sample_value("i_inflight") == 1.0
    assert lowest == [0.0, 0.0]
