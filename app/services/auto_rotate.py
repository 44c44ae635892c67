"""Automatic key rotation: each worker checks every ``interval`` seconds for keys whose period has elapsed.

Every worker of every replica runs one :class:`AutoRotator` (a daemon thread, off the event loop). A check
asks the keystore which keys are due (:meth:`~app.keystore.KeyStore.due_for_rotation`, one read) and calls
:meth:`~app.keystore.KeyStore.rotate_if_due` for each: the keystore re-checks inside the write transaction
that holds the key, so when several workers find one key due at once, exactly one rotates it and the others
get ``None``. The rotation is the manual one (new random version, ``key_rotated`` in the change log), so every
worker and replica picks up the new version through the change log (:mod:`.coherence`), and this worker
counts it in ``keystream_key_auto_rotations_total``.
"""

from __future__ import annotations

import logging
import threading

from app.core.metrics import KEY_AUTO_ROTATIONS
from app.keycache import KeyCache
from app.keystore import KeyInfo, KeyStore

__all__ = ["AutoRotator"]

logger = logging.getLogger(__name__)


class AutoRotator:
    """Rotates this service's due keys, checking every ``interval`` seconds in a daemon thread.

    Args:
        keystore: the shared keystore (it decides who rotates).
        keycache: this worker's key cache (the rotated key's entry is dropped at once).
        interval: seconds between two checks (``KEYSTREAM_AUTO_ROTATE_CHECK_INTERVAL``).
    """

    def __init__(self, keystore: KeyStore, keycache: KeyCache, *, interval: float) -> None:
        self._keystore = keystore
        self._keycache = keycache
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.checks = 0
        self.rotations = 0

    def __repr__(self) -> str:
        return f"<AutoRotator interval={self.interval:g} checks={self.checks} rotations={self.rotations}>"

    def check(self) -> list[KeyInfo]:
        """Rotate every key that is due now and that no other worker rotated first; return what this did.

        Raises:
            ServiceUnavailableError: the keystore cannot serve (keys rotated before the error stay rotated).
        """
        rotated: list[KeyInfo] = []
        for name in self._keystore.due_for_rotation():
            info = self._keystore.rotate_if_due(name)
            if info is None:
                continue  # another worker or replica was first, or the key changed meanwhile
            self._keycache.invalidate(name)
            KEY_AUTO_ROTATIONS.inc()
            self.rotations += 1
            rotated.append(info)
            logger.info("key %s rotated automatically to version %d", name, info.latest_version)
        self.checks += 1
        return rotated

    def start(self) -> None:
        """Check in a daemon thread every ``interval`` seconds until :meth:`stop` (may start again after)."""
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="auto-rotator", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.check()
            except Exception as exc:
                logger.warning("automatic rotation check failed: %s: %s", type(exc).__name__, exc)

    def stop(self) -> None:
        """Stop the thread. Idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None
