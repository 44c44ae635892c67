"""The keystore database's circuit breaker, without a database: it fails calls at once while open and closes
itself when its probe succeeds."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from app.core import metrics
from app.keystore import KeystoreUnavailableError
from app.keystore.postgres.breaker import CircuitBreaker


class Probe:
    def __init__(self) -> None:
        self.works = False
        self.calls = 0
        self.threads: set[str] = set()

    def __call__(self) -> None:
        self.calls += 1
        self.threads.add(threading.current_thread().name)
        if not self.works:
            raise ConnectionRefusedError("down")


@pytest.fixture
def probe() -> Probe:
    return Probe()


@pytest.fixture
def breaker(probe: Probe) -> Iterator[CircuitBreaker]:
    value = CircuitBreaker(probe, "test database", probe_interval=0.02)
    yield value
    value.stop()


def wait_for(condition: object, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_closed_lets_calls_through(breaker: CircuitBreaker, probe: Probe) -> None:
    breaker.check()
    assert not breaker.is_open and probe.calls == 0


def test_open_fails_at_once_until_a_probe_succeeds(breaker: CircuitBreaker, probe: Probe) -> None:
    breaker.open("cannot connect")
    started = time.monotonic()
    for _ in range(100):
        with pytest.raises(
            KeystoreUnavailableError, match=r"unavailable \(cannot connect\); retry later"
        ) as caught:
            breaker.check()
    assert time.monotonic() - started < 0.5  # no waiting: 100 answers
    assert caught.value.retry_after_seconds == 1 and caught.value.__suppress_context__
    assert metrics.KEYSTORE_BREAKER_OPEN._value.get() == 1
    wait_for(lambda: probe.calls >= 3)
    assert breaker.is_open  # failed probes keep it open
    assert probe.threads == {"keystore-probe"}
    probe.works = True
    wait_for(lambda: not breaker.is_open)
    breaker.check()
    assert breaker.openings == 1
    assert metrics.KEYSTORE_BREAKER_OPEN._value.get() == 0


def test_it_opens_again_after_closing(breaker: CircuitBreaker, probe: Probe) -> None:
    probe.works = True
    breaker.open("connection lost")
    wait_for(lambda: not breaker.is_open)
    probe.works = False
    breaker.open("connection lost")
    with pytest.raises(KeystoreUnavailableError):
        breaker.check()
    probe.works = True
    wait_for(lambda: not breaker.is_open)
    assert breaker.openings == 2


def test_stop_ends_probing(breaker: CircuitBreaker, probe: Probe) -> None:
    breaker.open("cannot connect")
    wait_for(lambda: probe.calls >= 1)
    breaker.stop()
    calls = probe.calls
    time.sleep(0.1)
    assert probe.calls == calls
    breaker.open("cannot connect")  # a closed database opens nothing any more
    assert probe.calls == calls
