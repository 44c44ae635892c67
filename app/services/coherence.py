"""Coherent caches across workers and replicas: follow the keystore's change log, invalidate what changed.

Each process remembers :attr:`ChangeFollower.applied`, the last change-log number it has applied. A daemon
thread (off the event loop) reads :meth:`~app.keystore.KeyStore.changes_since` that number, one indexed
query, and for each change invalidates exactly the key (:meth:`app.keycache.KeyCache.invalidate`) or token
(:meth:`app.services.security.TokenVerifier.forget`) it names, and on a rotation of the master key has the
keystore's keyring reload its generations at once (:meth:`app.seal.keyring.Keyring.refresh`: new ones
opened, retired ones' keys zeroed); if the log was trimmed past the number, every cache is dropped. It
reads every ``interval`` seconds (the backstop) and at once on a hint from the keystore
(:meth:`~app.keystore.KeyStore.listen_for_changes`: PostgreSQL ``LISTEN``/``NOTIFY``, re-listened after a
reconnect, or SQLite's ``data_version`` checked when the database file is written, see
:mod:`app.keystore.sqlite.watch`). Hints can be lost; the log cannot, so nothing is missed.

After each successful read, the caches are trusted for ``trust_seconds`` from the read's start
(:meth:`~app.keycache.KeyCache.trust_until`): a process that cannot read the log (database unreachable from
here) stops answering from its caches within that bound, which is below the tombstone of a deleted name
(:mod:`app.keystore.tombstones`), so it never encrypts under a key deleted and re-created elsewhere.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from app.keycache import KeyCache
from app.keystore import KeyStore
from app.keystore.changes import MASTER_KEY_ROTATED, MAX_CHANGES_PER_CALL, Change

from .security import TokenVerifier

__all__ = ["ChangeFollower"]

logger = logging.getLogger(__name__)

#: A number beyond any change: ``changes_since`` answers it with ``trimmed`` and the newest number.
_BEYOND_ANY_CHANGE = 1 << 62


class ChangeFollower:
    """Applies the keystore's change log to this process's key cache and token cache.

    Args:
        keystore: the shared keystore.
        keycache: the key cache to invalidate.
        tokens: the token verifier to invalidate.
        interval: seconds between two reads when no hint comes.
        trust_seconds: how long caches are used after the start of the last successful read.
        clock: monotonic seconds (the caches' clock).
        on_read: called with the Unix time after each successful read of the log (a metric's setter: how far
            this process's caches may lag is what the dashboards draw); it must be quick and thread-safe.
    """

    def __init__(
        self,
        keystore: KeyStore,
        keycache: KeyCache,
        tokens: TokenVerifier,
        *,
        interval: float,
        trust_seconds: float,
        clock: Callable[[], float] = time.monotonic,
        on_read: Callable[[float], None] | None = None,
    ) -> None:
        self._keystore = keystore
        self._keycache = keycache
        self._tokens = tokens
        self.interval = interval
        self.trust_seconds = trust_seconds
        self._clock = clock
        self._on_read = on_read
        self._lock = threading.Lock()  # one read of the log at a time
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stop_listener: Callable[[], None] | None = None
        self.applied = 0
        self.last_success: float | None = None
        self.polls = 0
        self.trims = 0
        self.hint_applied = 0

    def __repr__(self) -> str:
        return f"<ChangeFollower applied={self.applied} polls={self.polls} trims={self.trims}>"

    def start(self) -> None:
        """Start at the newest change (the caches are empty), listen for hints and poll in a daemon thread.

        Raises:
            ServiceUnavailableError: the keystore cannot be read.
        """
        started = self._clock()
        self.applied = self._keystore.changes_since(_BEYOND_ANY_CHANGE).latest
        self._trusted(started)
        self._stop_listener = self._keystore.listen_for_changes(self.hint)
        self._thread = threading.Thread(target=self._run, name="change-follower", daemon=True)
        self._thread.start()

    def hint(self, change: Change | None = None) -> None:
        """Apply ``change`` if it is the very next number, else read the log now (thread-safe, never blocks).

        Called by the keystore's listener thread. Applying the next change from the notification saves a
        database round trip and a thread hop; anything else (a gap, no change attached, a poll under way)
        wakes the poll thread, which reads the log.
        """
        # A master key rotation is applied by the poll thread: reloading the keyring reads the keystore.
        if change is not None and change.kind != MASTER_KEY_ROTATED and self._lock.acquire(blocking=False):
            try:
                if change.seq == self.applied + 1:
                    self._apply(change)
                    self.applied = change.seq
                    self.hint_applied += 1
                    return
            finally:
                self._lock.release()
        self._wake.set()

    def poll(self) -> int:
        """Read the log after :attr:`applied` and apply it; return how many changes were applied.

        Raises:
            ServiceUnavailableError: the keystore cannot be read (nothing is applied; retried next time).
        """
        with self._lock:
            started = self._clock()
            count = 0
            while True:
                changes, latest, trimmed = self._keystore.changes_since(self.applied)
                if trimmed:
                    logger.warning("change log trimmed past %d: dropping every cache", self.applied)
                    self._keycache.clear()
                    self._tokens.clear()
                    self._keystore.keyring.invalidate()
                    self.trims += 1
                for change in changes:
                    self._apply(change)
                rotated = trimmed or any(change.kind == MASTER_KEY_ROTATED for change in changes)
                count += len(changes)
                self.applied = latest
                if rotated:
                    self._refresh_keyring()
                if len(changes) < MAX_CHANGES_PER_CALL:
                    break
            self.polls += 1
            self._trusted(started)
            return count

    def lag(self) -> tuple[int, float | None]:
        """``(changes behind the keystore's newest, seconds since the last successful read or None)``.

        Raises:
            ServiceUnavailableError: the keystore cannot be read.
        """
        newest = self._keystore.changes_since(_BEYOND_ANY_CHANGE).latest
        age = None if self.last_success is None else self._clock() - self.last_success
        return max(newest - self.applied, 0), age

    def _apply(self, change: Change) -> None:
        if change.kind == MASTER_KEY_ROTATED:
            # A new master key generation, or older ones retired: the keyring reloads at its next use.
            self._keystore.keyring.invalidate()
        if change.key_name is not None:
            self._keycache.invalidate(change.key_name)
        if change.token_id is not None:
            self._tokens.forget(change.token_id)

    def _refresh_keyring(self) -> None:
        """Reload the master key generations now (new ones opened, retired ones zeroed); on failure the
        keyring stays invalidated and reloads at its next use."""
        try:
            self._keystore.keyring.refresh()
        except Exception as exc:
            logger.warning("cannot reload the master key generations: %s: %s", type(exc).__name__, exc)

    def _trusted(self, started: float) -> None:
        self.last_success = started
        deadline = started + self.trust_seconds
        self._keycache.trust_until(deadline)
        self._tokens.trust_until(deadline)
        if self._on_read is not None:
            self._on_read(time.time())

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.poll()
            except Exception as exc:
                logger.warning("cannot read the change log: %s: %s", type(exc).__name__, exc)

    def stop(self) -> None:
        """Stop the listener and the poll thread. Idempotent."""
        self._stop.set()
        self._wake.set()
        if self._stop_listener is not None:
            self._stop_listener()
            self._stop_listener = None
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None
