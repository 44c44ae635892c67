"""ConnectionWatch decisions with fake connections and a fake clock (the e2e tests run the real thing)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, cast

import pytest

from app.serving.limits import ConnectionLimits, ConnectionWatch, Phase

LIMITS = ConnectionLimits(
    max_connections=3, idle_timeout=5.0, header_timeout=10.0, body_timeout=30.0, handshake_timeout=2.0
)


class FakeLoop:
    def __init__(self) -> None:
        self.now = 100.0
        self.scheduled: list[Callable[[], None]] = []

    def time(self) -> float:
        return self.now

    def call_later(self, delay: float, callback: Callable[[], None]) -> Any:
        self.scheduled.append(callback)
        return object()

    def run_sweep(self) -> None:
        callbacks, self.scheduled = self.scheduled, []
        for callback in callbacks:
            callback()


class FakeConnection:
    def __init__(self, phase: Phase, since: float, requests_begun: int = 0, excused: bool = False) -> None:
        self.phase = phase
        self.since = since
        self.requests_begun = requests_begun
        self.excused = excused
        self.dropped: str | None = None

    def body_wait_excused(self) -> bool:
        return self.excused

    def drop(self, reason: str) -> None:
        self.dropped = reason


def _watch() -> tuple[ConnectionWatch, FakeLoop]:
    loop = FakeLoop()
    return ConnectionWatch(cast(asyncio.AbstractEventLoop, loop), LIMITS), loop


def test_at_the_cap_the_longest_idle_connection_is_evicted() -> None:
    watch, _ = _watch()
    busy = FakeConnection(Phase.BUSY, 10.0)
    old_idle = FakeConnection(Phase.IDLE, 50.0)
    young_head = FakeConnection(Phase.HEAD, 90.0)
    for connection in (busy, old_idle, young_head):
        assert watch.admit(connection)
    assert watch.admit(FakeConnection(Phase.IDLE, 100.0))
    assert (busy.dropped, old_idle.dropped, young_head.dropped) == (None, "evicted", None)


def test_at_the_cap_with_every_connection_busy_the_new_one_is_refused() -> None:
    watch, _ = _watch()
    busy = [FakeConnection(Phase.BUSY, 0.0), FakeConnection(Phase.BODY, 0.0), FakeConnection(Phase.BUSY, 0.0)]
    for connection in busy:
        assert watch.admit(connection)
    assert not watch.admit(FakeConnection(Phase.IDLE, 100.0))
    assert all(connection.dropped is None for connection in busy)


def test_sweep_applies_each_deadline_to_its_phase() -> None:
    watch, loop = _watch()
    idle = FakeConnection(Phase.IDLE, 100.0)
    head = FakeConnection(Phase.HEAD, 100.0)
    stalled = FakeConnection(Phase.BODY, 100.0)
    for connection in (idle, head, stalled):
        watch.admit(connection)
    loop.now = 104.0
    loop.run_sweep()
    assert (idle.dropped, head.dropped, stalled.dropped) == (None, None, None)
    loop.now = 106.0
    loop.run_sweep()
    assert (idle.dropped, head.dropped, stalled.dropped) == ("idle", None, None)
    loop.now = 111.0
    loop.run_sweep()
    assert (head.dropped, stalled.dropped) == ("header timeout", None)
    loop.now = 131.0
    loop.run_sweep()
    assert stalled.dropped == "body stalled"
    assert loop.scheduled == []  # nothing left to watch: the timer stops


def test_a_body_wait_the_server_caused_does_not_count() -> None:
    watch, loop = _watch()
    paused = FakeConnection(Phase.BODY, 100.0, excused=True)
    watch.admit(paused)
    loop.now = 200.0
    loop.run_sweep()
    assert paused.dropped is None and paused.since == 200.0
    paused.excused = False
    loop.now = 229.0
    loop.run_sweep()
    assert paused.dropped is None
    loop.now = 231.0
    loop.run_sweep()
    assert paused.dropped == "body stalled"


def test_limits_are_logged_at_most_every_ten_seconds(caplog: pytest.LogCaptureFixture) -> None:
    watch, loop = _watch()
    with caplog.at_level(logging.WARNING, logger="keystream.http"):
        for _ in range(5):
            watch.bite("idle evicted at max_connections")
        loop.now += 11
        watch.bite("request heads too slow (408)")
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("connection limits: 1 idle evicted at max_connections (max_connections=3")
    assert lines[1].startswith(
        "connection limits: 4 idle evicted at max_connections, 1 request heads too slow"
    )


def test_a_tls_handshake_counts_from_the_accept_and_has_its_own_deadline() -> None:
    """Connections still in their TLS handshake were invisible to the watch (uvloop's 60 s applied)."""
    watch, loop = _watch()
    handshaking = FakeConnection(Phase.HANDSHAKE, 100.0)
    idle = FakeConnection(Phase.IDLE, 100.0)
    for connection in (handshaking, idle):
        watch.admit(connection)
    loop.now = 101.0
    loop.run_sweep()
    assert (handshaking.dropped, idle.dropped) == (None, None)
    loop.now = 102.5
    loop.run_sweep()
    assert (handshaking.dropped, idle.dropped) == ("handshake timeout", None)


def test_at_the_cap_a_handshaking_connection_is_evicted_like_an_idle_one() -> None:
    watch, _ = _watch()
    silent = FakeConnection(Phase.HANDSHAKE, 10.0)
    busy = [FakeConnection(Phase.BUSY, 0.0), FakeConnection(Phase.BODY, 0.0)]
    for connection in (silent, *busy):
        assert watch.admit(connection)
    assert watch.admit(FakeConnection(Phase.HANDSHAKE, 100.0))
    assert silent.dropped == "evicted" and all(connection.dropped is None for connection in busy)
