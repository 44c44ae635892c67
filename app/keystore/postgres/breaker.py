"""A circuit breaker for the keystore database: once it is known to be unreachable, calls fail at once.

Closed (the normal state), every call goes to the database. :meth:`CircuitBreaker.open` is called when the
database is known to be unreachable (a connection refused, a pool wait that ran out while the pool could not
connect, a dropped connection whose retry found none); from then on :meth:`CircuitBreaker.check` raises
:class:`~app.keystore.errors.KeystoreUnavailableError` at once (503 ``keystore_unavailable``, ``Retry-After:
1``) instead of letting each call wait for a connection, and a daemon thread probes the database every
:data:`PROBE_INTERVAL_SECONDS`. The first probe that succeeds closes the breaker: the service recovers by
itself, within about one interval of the database's return, with or without traffic.

``keystream_keystore_breaker_open`` (1 while open) and ``keystream_keystore_breaker_openings_total`` show
it in the metrics. The breaker only makes failures fast; it never answers anything itself. In particular it
does not extend how long the caches are trusted: that bound (:mod:`app.services.coherence`) runs out as
before, because the change-log reads fail too.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from app.core.metrics import KEYSTORE_BREAKER_OPEN, KEYSTORE_BREAKER_OPENINGS

from ..errors import KeystoreUnavailableError

__all__ = ["PROBE_INTERVAL_SECONDS", "CircuitBreaker"]

logger = logging.getLogger(__name__)

#: Seconds between two probes of an unreachable database (and so the most a recovery waits for one).
PROBE_INTERVAL_SECONDS = 0.5


class CircuitBreaker:
    """Fails calls at once while the database is known to be down; probes it until it answers again.

    Args:
        probe: one check that the database serves (raises when it does not); runs in the probe thread only.
        description: how the database is named in the log (no URL, no password).
        probe_interval: seconds between two probes.

    Thread-safe, and safe across ``fork()``: a child whose breaker is open starts its own probe thread.
    """

    def __init__(
        self, probe: Callable[[], object], description: str, *, probe_interval: float = PROBE_INTERVAL_SECONDS
    ) -> None:
        self._probe = probe
        self._description = description
        self.probe_interval = probe_interval
        self._lock = threading.Lock()
        self._open = False  # read without the lock on every call: a stale read only delays one call's 503
        self._opened_at = 0.0
        self._reason = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._thread_pid = 0
        #: How many times the breaker opened (for tests and diagnostics).
        self.openings = 0

    def __repr__(self) -> str:
        return f"<CircuitBreaker {'open' if self._open else 'closed'} openings={self.openings}>"

    @property
    def is_open(self) -> bool:
        """True while calls fail at once."""
        return self._open

    def open(self, reason: str) -> None:
        """Fail calls at once from now until a probe succeeds; ``reason`` (no secret) goes to the log."""
        with self._lock:
            if self._stop.is_set():
                return
            if not self._open:
                self._open = True
                self._opened_at = time.monotonic()
                self._reason = reason
                self.openings += 1
                KEYSTORE_BREAKER_OPEN.set(1)
                KEYSTORE_BREAKER_OPENINGS.inc()
                logger.warning(
                    "keystore %s unreachable (%s): answering 503 at once, probing every %.1f s",
                    self._description,
                    reason,
                    self.probe_interval,
                )
            self._ensure_prober()

    def check(self) -> None:
        """Return when calls may go to the database.

        Raises:
            KeystoreUnavailableError: the breaker is open.
        """
        if not self._open:
            return
        with self._lock:
            if not self._open:
                return
            self._ensure_prober()
            reason = self._reason
        raise KeystoreUnavailableError(
            f"the keystore database is unavailable ({reason}); retry later"
        ) from None

    def _ensure_prober(self) -> None:
        """Start the probe thread unless this process runs one (lock held)."""
        pid = os.getpid()
        if self._thread is not None and self._thread_pid == pid and self._thread.is_alive():
            return
        self._thread_pid = pid
        self._thread = threading.Thread(target=self._run, name="keystore-probe", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.probe_interval):
            try:
                self._probe()
            except Exception as exc:  # the database still cannot serve: keep failing fast
                logger.debug("keystore %s probe failed: %s", self._description, type(exc).__name__)
                continue
            with self._lock:
                down = time.monotonic() - self._opened_at
                self._open = False
                self._thread = None
                KEYSTORE_BREAKER_OPEN.set(0)
            logger.warning("keystore %s reachable again after %.1f s", self._description, down)
            return

    def stop(self) -> None:
        """Stop probing (the database is being closed); later :meth:`open` calls do nothing. Idempotent."""
        with self._lock:
            self._stop.set()
            thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread() and thread.is_alive():
            thread.join(timeout=5.0)
