"""Running a rotation of the master key in the background of one worker, and resuming one whose process died.

:class:`MasterRotationRunner` begins the rotation in the caller's thread (``POST /v1/sys/rotate-master``: so
the answer can say the new generation, or refuse while another rotation holds the lease) and runs its batches
in a daemon thread while the worker keeps serving (:mod:`app.keystore.generations`). Sealing the server or
shutting it down stops the thread between two batches.

A rotation whose process died (killed, a replica lost) holds its lease for
:data:`~app.keystore.generations.LEASE_SECONDS` after its last batch. :meth:`MasterRotationRunner.watch`
checks at start and then every lease period whether such a rotation waits, and takes it over: every worker
of every replica watches, the keystore's lease lets exactly one resume it (the others find the lease taken),
and only an unfinished rotation is ever resumed (:meth:`~app.keystore.KeyStore.resume_master_rotation` never
starts a new one). So a crash in the middle of a rotation ends with the rotation finished, without an
operator; ``rotate-master`` still resumes it at once when called.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from app.keystore import KeyStore
from app.keystore.generations import (
    LEASE_SECONDS,
    MasterRotation,
    MasterRotationRunningError,
    MasterRotationStatus,
)

__all__ = ["MasterRotationRunner"]

logger = logging.getLogger(__name__)

#: What a rotation's thread calls with the final status once every blob is under the new generation.
OnFinish = Callable[[MasterRotationStatus], None]


class MasterRotationRunner:
    """At most one rotation of the master key running in this process, in a daemon thread; and the watch
    that resumes a rotation whose process died."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._closed = threading.Event()
        self._watcher: threading.Thread | None = None

    @property
    def running(self) -> bool:
        """True while this process's rotation thread runs."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def start(self, keystore: KeyStore, batch_size: int, on_finish: OnFinish) -> MasterRotationStatus:
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
            self._launch(rotation, on_finish)
            return status

    def resume_abandoned(
        self, keystore: KeyStore, batch_size: int, on_finish: OnFinish
    ) -> MasterRotationStatus | None:
        """Take over and run an unfinished rotation whose lease ran out; ``None`` when there is none, when
        this process runs one already, or when another process holds the lease.

        Blocking: call from a worker thread.

        Raises:
            SealError: the seal is sealed.
            ServiceUnavailableError: the keystore cannot serve now.
        """
        with self._lock:
            if self.running:
                return None
            rotation = MasterRotation(keystore, batch_size=batch_size)
            try:
                status = rotation.resume()
            except MasterRotationRunningError:
                return None  # alive elsewhere, or another watcher was first
            if status is None:
                return None
            self._launch(rotation, on_finish)
            return status

    def _launch(self, rotation: MasterRotation, on_finish: OnFinish) -> None:
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, args=(rotation, on_finish), name="master-rotation", daemon=True
        )
        self._thread.start()

    def _run(self, rotation: MasterRotation, on_finish: OnFinish) -> None:
        try:
            status = rotation.run(stop=self._stop.is_set)
        except Exception as exc:
            logger.error(
                "the rotation of the master key stopped unfinished (every secret stays readable; it is "
                "resumed once its lease runs out, or by rotate-master): %s: %s",
                type(exc).__name__,
                exc,
            )
            return
        if status is None:
            logger.warning("the rotation of the master key was stopped; it resumes once its lease runs out")
            return
        on_finish(status)

    def watch(
        self,
        keystore: KeyStore,
        *,
        batch_size: int,
        sealed: Callable[[], bool],
        on_resume: Callable[[MasterRotationStatus], None],
        on_finish: OnFinish,
        interval: float = LEASE_SECONDS,
    ) -> None:
        """Check now and every ``interval`` seconds, in a daemon thread, for a rotation to take over
        (:meth:`resume_abandoned`), while ``sealed()`` is false; ``on_resume`` gets the status of one this
        process took over. Idempotent; :meth:`close` ends it."""
        with self._lock:
            if self._watcher is not None or self._closed.is_set():
                return
            self._watcher = threading.Thread(
                target=self._watch,
                args=(keystore, batch_size, sealed, on_resume, on_finish, interval),
                name="master-rotation-watch",
                daemon=True,
            )
            self._watcher.start()

    def _watch(
        self,
        keystore: KeyStore,
        batch_size: int,
        sealed: Callable[[], bool],
        on_resume: Callable[[MasterRotationStatus], None],
        on_finish: OnFinish,
        interval: float,
    ) -> None:
        while True:
            if not sealed():
                try:
                    resumed = self.resume_abandoned(keystore, batch_size, on_finish)
                except Exception as exc:  # the keystore or the seal cannot serve now: the next check retries
                    logger.debug("master key rotation watch: %s", type(exc).__name__)
                    resumed = None
                if resumed is not None:
                    logger.warning(
                        "resuming the rotation of the master key to generation %d, which a process that "
                        "died left unfinished",
                        resumed.generation,
                    )
                    on_resume(resumed)
            if self._closed.wait(interval):
                return

    def stop(self) -> None:
        """Stop the running rotation between two batches and wait for its thread (idempotent)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10.0)

    def close(self) -> None:
        """Stop the watch and the running rotation (at shutdown; idempotent)."""
        self._closed.set()
        watcher = self._watcher
        if watcher is not None and watcher is not threading.current_thread():
            watcher.join(timeout=10.0)
        self.stop()
