"""Connection limits of one worker: a cap on open connections and deadlines for idle, slow and stalled ones.

uvicorn has no idle timeout before the first request, no deadline for the request head or body, and no cap
on connections below the file-descriptor limit: 1,100 idle connections from an anonymous client took the
service down under a 1024-fd limit. Here, per worker:

* **max_connections** (default: the open-file limit minus :data:`FD_RESERVE`): a connection beyond the cap
  evicts the connection that has waited longest without a request in progress (in its TLS handshake, idle,
  or still sending its head); only when every connection is busy with a request is the new one refused
  (closed at once). So idle connections can never lock out a new client such as a ``/healthz`` probe, and
  ``accept`` never fails for want of a file descriptor. Under TLS a connection counts from its TCP accept,
  not from the end of its handshake.
* **handshake_timeout**: a TLS handshake must be complete this long after the TCP accept.
* **idle_timeout**: a connection without a request in progress (before the first request, or keep-alive
  between requests) is closed after this long. A request answered before its body arrived (a 401 or 413
  sent without reading the upload) leaves the connection idle from the answer on: the rest of its body is
  discarded and does not count as activity, so a body that trickles on cannot hold the connection open.
* **header_timeout**: a request head must be complete this long after its first byte (408 otherwise).
* **body_timeout**: a request body that sends nothing for this long while the server waits for it is
  dropped (time the server itself pauses reading, or waits to send ``100 Continue``, does not count).

When a limit bites, a WARNING says how often, at most once per :data:`LOG_INTERVAL_SECONDS`.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import weakref
from collections import Counter
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from app.core.config import Settings

#: File descriptors kept free for the keystore, worker threads, pipes and the listening socket.
FD_RESERVE = 64
LOG_INTERVAL_SECONDS = 10.0
logger = logging.getLogger("keystream.http")


class Phase(Enum):
    """Where a connection is in its current request."""

    HANDSHAKE = "handshake"  # TLS: the handshake is not complete yet
    IDLE = "idle"  # no request in progress
    HEAD = "head"  # a request head is arriving
    BODY = "body"  # the head is complete, the body is still arriving
    BUSY = "busy"  # the request was read; the app is answering


#: Phases without a request in progress: a connection in one of them may be evicted at the cap.
_WAITING = frozenset({Phase.HANDSHAKE, Phase.IDLE, Phase.HEAD})


def raise_open_file_limit() -> int:
    """Raise this process's soft ``RLIMIT_NOFILE`` to its hard limit (inherited by workers it starts).

    Returns:
        The soft limit now in force.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass  # e.g. an infinite hard limit the kernel caps lower: keep the soft one
    return int(soft)


def default_max_connections() -> int:
    """The open-file soft limit minus :data:`FD_RESERVE` (at least 16)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(16, int(soft) - FD_RESERVE)


@dataclass(frozen=True)
class ConnectionLimits:
    """The limits of one worker (see the module docstring)."""

    max_connections: int
    idle_timeout: float
    header_timeout: float
    body_timeout: float
    handshake_timeout: float = 5.0

    @classmethod
    def from_settings(cls, settings: Settings) -> ConnectionLimits:
        """The limits from the settings; an unset ``max_connections`` follows the open-file limit."""
        return cls(
            max_connections=settings.max_connections or default_max_connections(),
            idle_timeout=settings.idle_timeout,
            header_timeout=settings.header_timeout,
            body_timeout=settings.body_timeout,
            handshake_timeout=settings.handshake_timeout,
        )


class Guarded(Protocol):
    """What the watch needs from a connection (implemented by the HTTP protocol)."""

    phase: Phase
    since: float  # loop time the phase began, or of the last body bytes
    requests_begun: int

    def body_wait_excused(self) -> bool:
        """Whether the server, not the client, is why no body arrives (reading paused, 100 Continue due)."""

    def drop(self, reason: str) -> None:
        """Close the connection for ``reason`` (one of the watch's reasons)."""


class ConnectionWatch:
    """The open connections of one server, checked a few times per second against the limits."""

    def __init__(self, loop: asyncio.AbstractEventLoop, limits: ConnectionLimits) -> None:
        self.loop = loop
        self.limits = limits
        self._connections: dict[Guarded, None] = {}
        shortest = min(
            limits.handshake_timeout, limits.idle_timeout, limits.header_timeout, limits.body_timeout
        )
        self._interval = min(1.0, max(0.05, shortest / 4))
        self._timer: asyncio.TimerHandle | None = None
        self._counts: Counter[str] = Counter()
        self._last_log = float("-inf")

    @classmethod
    def for_server(
        cls, server_state: object, loop: asyncio.AbstractEventLoop, limits: ConnectionLimits
    ) -> ConnectionWatch:
        """The watch of ``server_state`` (uvicorn's per-server state), created on first use."""
        watch = _WATCHES.get(server_state)
        if watch is None or watch.loop is not loop:
            watch = _WATCHES[server_state] = cls(loop, limits)
        return watch

    def admit(self, connection: Guarded) -> bool:
        """Track a new connection, evicting an idle one at the cap; ``False``: refuse it (all are busy)."""
        if len(self._connections) >= self.limits.max_connections:
            waiting = [c for c in self._connections if c.phase in _WAITING]
            if not waiting:
                self.bite("refused at max_connections (all busy)")
                return False
            victim = min(waiting, key=lambda c: c.since)
            self.forget(victim)
            victim.drop("evicted")
            self.bite("idle evicted at max_connections")
        self._connections[connection] = None
        if self._timer is None:
            self._timer = self.loop.call_later(self._interval, self._sweep)
        return True

    def forget(self, connection: Guarded) -> None:
        """Stop tracking a closed connection."""
        self._connections.pop(connection, None)

    def bite(self, reason: str) -> None:
        """Count a limit that bit; log the counts at most once per :data:`LOG_INTERVAL_SECONDS`."""
        self._counts[reason] += 1
        self._log(self.loop.time())

    def _log(self, now: float) -> None:
        if not self._counts or now - self._last_log < LOG_INTERVAL_SECONDS:
            return
        summary = ", ".join(f"{count} {reason}" for reason, count in sorted(self._counts.items()))
        logger.warning(
            "connection limits: %s (max_connections=%d, handshake %gs, idle %gs, header %gs, body %gs; "
            "%d open)",
            summary,
            self.limits.max_connections,
            self.limits.handshake_timeout,
            self.limits.idle_timeout,
            self.limits.header_timeout,
            self.limits.body_timeout,
            len(self._connections),
        )
        self._counts.clear()
        self._last_log = now

    def _sweep(self) -> None:
        now = self.loop.time()
        limits = self.limits
        for connection in list(self._connections):
            phase, age = connection.phase, now - connection.since
            if phase is Phase.HANDSHAKE and age > limits.handshake_timeout:
                self.forget(connection)
                connection.drop("handshake timeout")
                self.bite("TLS handshakes too slow")
            elif phase is Phase.IDLE and age > limits.idle_timeout:
                self.forget(connection)
                connection.drop("idle")
                if connection.requests_begun == 0:
                    self.bite("idle before a request closed")
            elif phase is Phase.HEAD and age > limits.header_timeout:
                self.forget(connection)
                connection.drop("header timeout")
                self.bite("request heads too slow (408)")
            elif phase is Phase.BODY and connection.body_wait_excused():
                connection.since = now  # the deadline counts from when the server wants the body again
            elif phase is Phase.BODY and age > limits.body_timeout:
                self.forget(connection)
                connection.drop("body stalled")
                self.bite("stalled bodies dropped")
        self._log(now)
        self._timer = self.loop.call_later(self._interval, self._sweep) if self._connections else None


#: One watch per uvicorn server (its ``ServerState``), dropped with it.
_WATCHES: weakref.WeakKeyDictionary[object, ConnectionWatch] = weakref.WeakKeyDictionary()
