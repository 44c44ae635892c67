"""Running a rotation of the master key in the background of one worker (``POST /v1/sys/rotate-master``).

:class:`MasterRotationRunner` begins the rotation in the caller's thread (so the answer can say the new
generation, or refuse while another rotation holds the lease) and runs its batches in a daemon thread while
the worker keeps serving (:mod:`app.keystore.generations`). Sealing the server or shutting it down stops the
thread between two batches; the rotation then resumes at the next ``rotate-master`` once its lease ran out.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from app.keystore import KeyStore
from app.keystore.generations import MasterRotation, MasterRotationRunningError, MasterRotationStatus

__all__ = ["MasterRotationRunner"]

logger = logging.getLogger(__name__)


class MasterRotationRunner:
    """At most one rotation of the master key running in this process, in a daemon thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    @property
    def running(self) -> bool:
        """True while this process's rotation thread runs."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def start(
        self,
        keystore: KeyStore,
        batch_size: int,
        on_finish: Callable[[MasterRotationStatus], None],
    ) -> MasterRotationStatus:
        """Begin (or resume) a rotation and run the rest of it in a thread; ``on_finish`` gets the final
        status there (not called when the run stops or fails: the failure is logged).

        Blocking: call from a worker thread.

        Raises:
            MasterRotationRunningError: a rotation runs already (here, or elsewhere holding the lease).
            SealError: the seal is sealed or cannot make a key.
            ServiceUnavailableError: the keystore cannot serve now.
        """
        with self._lock:
            if self.running:
                raise MasterRotationRunningError("a rotation of the master key is running in this server")
            rotation = MasterRotation(keystore, batch_size=batch_size)
            status = rotation.begin()
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, args=(rotation, on_finish), name="master-rotation", daemon=True
            )
            self._thread.start()
            return status

    def _run(self, rotation: MasterRotation, on_finish: Callable[[MasterRotationStatus], None]) -> None:
        try:
            status = rotation.run(stop=self._stop.is_set)
        except Exception as exc:
            logger.error(
                "the rotation of the master key stopped unfinished (every secret stays readable; run "
                "rotate-master again to resume it): %s: %s",
                type(exc).__name__,
                exc,
            )
            return
        if status is None:
            logger.warning("the rotation of the master key was stopped; rotate-master resumes it")
            return
        on_finish(status)

    def stop(self) -> None:
        """Stop the running rotation between two batches and wait for its thread (idempotent)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10.0)
