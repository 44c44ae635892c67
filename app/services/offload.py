"""Where crypto runs so the event loop never stalls.

* A backend whose ``runs_inline`` is true (``aesni``): work up to ``inline_crypto_max_bytes`` runs on the
  event loop (raw CTR: tens of microseconds per MiB; a sealed 1 MiB segment: ~0.7 ms, mostly HMAC, still
  cheaper there than a worker thread that must win the GIL back after each GIL-free call), bigger work in
  the thread pool.
* ``python`` holds the GIL for its whole call, so a thread is not enough: :class:`ProcessOffloadBackend`
  stands in for it and runs each ``ctr_xor`` in a process pool. Formats call it from a worker thread, which
  just waits on the pool (releasing the GIL), so ``/healthz`` stays responsive. A pool whose worker died
  (killed, out of memory) is broken for good; it is replaced once per breakage, the call that lost its work
  raises :class:`~app.errors.BackendRestartingError` (503 with ``Retry-After``) and later calls use the new
  pool; ``restarts`` and ``keystream_backend_pool_restarts_total`` count the replacements. Keys reach the
  workers through shared, locked slots (:mod:`app.services.key_slots`), never in a call's pickle;
  :meth:`ProcessOffloadBackend.wipe` zeroes them and stops the workers (sealing, stopping).
* ``hwsim`` and anything else with ``runs_inline`` false run in the thread pool (``ctr_xor_async`` is
  awaited directly for raw CTR).
"""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import reduction
from typing import Any, ClassVar, TypeVar

from anyio import CapacityLimiter, to_thread

import aescore
from app.core.metrics import BACKEND_POOL_RESTARTS
from app.core.secret_memory import core_dumps_disabled, note_unlocked
from app.errors import BackendRestartingError, ServiceUnavailableError
from app.services import _offload_worker
from app.services.key_slots import KeyLease, KeySlots, StaleKeyError

T = TypeVar("T")


class _MaterialKey(aescore.ExpandedKey):
    """A key of the pool: a lease on the shared slot that holds it; the worker processes expand it there.
    Never shows the key in ``repr``."""

    __slots__ = ("lease",)

    def __init__(self, lease: KeyLease) -> None:
        self.lease = lease

    @property
    def backend_name(self) -> str:
        return "python"

    @property
    def key_size(self) -> int:
        return self.lease.key_size


class ProcessOffloadBackend(aescore.Backend):
    """The ``python`` backend, executed in a pool of worker processes.

    Same results as ``aescore.get_backend("python")``; each call sends the data, and the number and
    generation of the shared slot holding the key (:mod:`app.services.key_slots`: the key itself never
    travels), to a worker process and waits for the result.
    """

    name: ClassVar[str] = "python"
    constant_time: ClassVar[bool] = False
    #: Each call waits on a worker process: never on the event loop.
    runs_inline: ClassVar[bool] = False

    def __init__(self, processes: int = 1) -> None:
        self._processes = processes
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self._inner = aescore.get_backend("python")
        self._slots: KeySlots | None = None
        #: Pools replaced because a worker process died (also ``keystream_backend_pool_restarts_total``).
        self.restarts = 0
        # The series exists at 0 from the start, so the first restart is an increase an alert can see.
        BACKEND_POOL_RESTARTS.labels(backend=self.name)

    def _region(self) -> KeySlots:
        """The key slots region, made on first use (lock held): it exists before any worker is spawned."""
        if self._slots is None or self._slots.closed:
            self._slots = KeySlots(note_unlocked)
        return self._slots

    def _get_pool(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                # Typed as what the worker receives: it unpickles as the descriptor's number.
                descriptor: Any = _DescriptorForChild(self._region().fd)
                self._pool = ProcessPoolExecutor(
                    max_workers=self._processes,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=_offload_worker.attach,
                    initargs=(descriptor, core_dumps_disabled()),
                )
            return self._pool

    def _replace(self, broken: ProcessPoolExecutor) -> None:
        """Drop ``broken``: the next call starts a new pool. Counted once however many calls saw it break."""
        with self._lock:
            if self._pool is not broken:
                return  # another thread replaced it already
            self._pool = None
            self.restarts += 1
        BACKEND_POOL_RESTARTS.labels(backend=self.name).inc()
        broken.shutdown(wait=False, cancel_futures=True)

    def _submit(
        self, function: Callable[..., bytes], *args: Any
    ) -> tuple[ProcessPoolExecutor, Future[bytes]]:
        """Submit ``function(*args)`` (a ``_offload_worker`` call); a pool found broken before the call
        reached it is replaced and the call goes to the new one (nothing was lost: the worker died while
        idle).

        Raises:
            BackendRestartingError: the new pool is broken as well.
            ServiceUnavailableError: the pool was stopped by :meth:`wipe` or :meth:`shutdown` meanwhile.
        """
        pool = self._get_pool()
        try:
            return pool, pool.submit(function, *args)
        except BrokenProcessPool:
            self._replace(pool)
        except RuntimeError as exc:  # "cannot schedule new futures after shutdown"
            raise _wiped() from exc
        pool = self._get_pool()
        try:
            return pool, pool.submit(function, *args)
        except BrokenProcessPool as exc:
            self._replace(pool)
            raise _restarting() from exc
        except RuntimeError as exc:
            raise _wiped() from exc

    def run(self, function: Callable[..., bytes], *args: Any) -> bytes:
        """``function(*args)`` in a worker process; blocks the calling thread only.

        Raises:
            BackendRestartingError: a worker process died before the call completed (retry).
            ServiceUnavailableError: the call's key was wiped (the server is sealing or stopping).
            Exception: whatever ``function`` raises in the worker.
        """
        pool, future = self._submit(function, *args)
        try:
            return future.result()
        except BrokenProcessPool as exc:
            self._replace(pool)
            raise _restarting() from exc
        except (StaleKeyError, CancelledError) as exc:  # cancelled: queued when a wipe stopped the pool
            raise _wiped() from exc

    def start(self) -> None:
        """Start the worker processes now rather than on the first request."""
        pool = self._get_pool()
        for future in [pool.submit(_offload_worker.ping) for _ in range(self._processes)]:
            future.result()

    def shutdown(self) -> None:
        """Stop the worker processes (waits for running calls), then zero and close the key slots: keys made
        before are no longer usable (a later call starts a new pool and region for new keys)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            if self._slots is not None:
                self._slots.close()

    def wipe(self) -> None:
        """Zero every key slot now, and stop the worker processes without waiting: the expanded schedules
        they cache (Python ints, which cannot be zeroed) go with them. For sealing and stopping: calls still
        running finish; calls whose key was wiped before they ran raise ``ServiceUnavailableError``. The next
        call starts a new pool."""
        with self._lock:
            pool, self._pool = self._pool, None
            if self._slots is not None:
                self._slots.wipe()
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def _lease(self, key: aescore.BytesLike) -> KeyLease:
        """Check ``key`` as the python backend does and copy it into a slot of the region.

        Raises:
            TypeError, ValueError: as the python backend's ``expand_key``.
        """
        view = aescore.key_view(key)
        with self._lock:
            slots = self._region()
        return slots.take(view)

    def _current(self, lease: KeyLease) -> KeyLease:
        """``lease``, if its region is this backend's current one.

        Raises:
            ServiceUnavailableError: the backend was shut down since (its slots were zeroed).
        """
        if lease.slots is not self._slots or lease.slots.closed:
            raise _wiped()
        return lease

    def expand_key(self, key: aescore.BytesLike) -> aescore.ExpandedKey:
        """Validate ``key`` and copy it into a shared slot for the worker processes (zeroed when the result
        is freed).

        Raises:
            TypeError: ``key`` is not bytes-like.
            ValueError: ``key`` is not 16, 24 or 32 bytes.
        """
        return _MaterialKey(self._lease(key))

    def ctr_xor(
        self,
        expanded_key: aescore.ExpandedKey,
        initial_counter: aescore.BytesLike,
        data: aescore.BytesLike,
        offset: int = 0,
        out: bytearray | memoryview | None = None,
    ) -> bytes | None:
        """Run :meth:`aescore.Backend.ctr_xor` in a worker process; blocks the calling thread only.

        Raises:
            TypeError: ``expanded_key`` does not come from this backend.
            aescore.AesCoreError: as the python backend raises.
            BackendRestartingError: a worker process died before the call completed (the pool is being
                replaced: retry).
            ServiceUnavailableError: the key was wiped (the server is sealing or stopping).
        """
        if not isinstance(expanded_key, _MaterialKey):
            raise aescore.AesCoreTypeError("expanded_key was not made by this backend")
        lease = self._current(expanded_key.lease)
        result = self.run(
            _offload_worker.ctr_xor,
            lease.index,
            lease.generation,
            bytes(initial_counter),
            bytes(data),
            offset,
        )
        if out is None:
            return result
        memoryview(out)[: len(result)] = result
        return None

    def gcm_key(self, key: aescore.BytesLike) -> aescore.GcmKey:
        """An AES-GCM key whose every call runs whole (CTR and GHASH) in a worker process.

        The default composition would run the pure-Python GHASH in the calling thread, holding the GIL for
        about 0.16 s per MiB; in the pool the caller only waits.

        Raises:
            TypeError, ValueError: as the python backend's ``gcm_key``.
        """
        return _PooledGcmKey(self, self._lease(key))

    def info(self) -> dict[str, str | int | bool | None]:
        info = dict(self._inner.info())
        info.update({"execution": "process_pool", "processes": self._processes})
        return info


class _DescriptorForChild:
    """A file descriptor in a worker's ``initargs``: pickled while the worker is spawned, it is passed to that
    process (``multiprocessing``'s ``DupFd`` registers it with the spawning ``Popen``, so the child gets it
    under the same number) and unpickles there as that number."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def __reduce__(self) -> Any:
        return _received_descriptor, (reduction.DupFd(self._fd),)


def _received_descriptor(duplicate: Any) -> int:
    return int(duplicate.detach())


def _wiped() -> ServiceUnavailableError:
    return ServiceUnavailableError(
        "the key material of this request was wiped (the server is sealing or stopping): retry later"
    )


def _restarting() -> BackendRestartingError:
    return BackendRestartingError(
        "the python backend's worker process died during this request; its pool is being restarted: retry"
    )


class _PooledGcmKey(aescore.GcmKey):
    """An AES-GCM key of :class:`ProcessOffloadBackend`: each call names the key's shared slot to a worker
    process, which runs the python backend's AES-GCM (errors such as ``InvalidTag`` come back as raised
    there)."""

    __slots__ = ("_backend", "_lease")

    def __init__(self, backend: ProcessOffloadBackend, lease: KeyLease) -> None:
        self._backend = backend
        self._lease = lease

    @property
    def backend_name(self) -> str:
        return "python"

    @property
    def key_size(self) -> int:
        return self._lease.key_size

    def _call(
        self,
        encrypt: bool,
        nonce: aescore.BytesLike,
        data: aescore.BytesLike,
        associated_data: aescore.BytesLike | None,
    ) -> bytes:
        # memoryview() refuses what is not a buffer (TypeError) before anything is shipped; bytes() pickles.
        ad = None if associated_data is None else bytes(memoryview(associated_data))
        nonce_bytes, data_bytes = bytes(memoryview(nonce)), bytes(memoryview(data))
        lease = self._backend._current(self._lease)
        return self._backend.run(
            _offload_worker.gcm, encrypt, lease.index, lease.generation, nonce_bytes, data_bytes, ad
        )

    def encrypt(
        self, nonce: aescore.BytesLike, data: aescore.BytesLike, associated_data: aescore.BytesLike | None
    ) -> bytes:
        return self._call(True, nonce, data, associated_data)

    def encrypt_into(
        self,
        nonce: aescore.BytesLike,
        data: aescore.BytesLike,
        associated_data: aescore.BytesLike | None,
        out: bytearray | memoryview,
    ) -> int:
        result = self.encrypt(nonce, data, associated_data)
        memoryview(out)[: len(result)] = result
        return len(result)

    def decrypt(
        self,
        nonce: aescore.BytesLike,
        ciphertext_and_tag: aescore.BytesLike,
        associated_data: aescore.BytesLike | None,
    ) -> bytes:
        return self._call(False, nonce, ciphertext_and_tag, associated_data)

    def decrypt_into(
        self,
        nonce: aescore.BytesLike,
        ciphertext_and_tag: aescore.BytesLike,
        associated_data: aescore.BytesLike | None,
        out: bytearray | memoryview,
    ) -> int:
        result = self.decrypt(nonce, ciphertext_and_tag, associated_data)
        memoryview(out)[: len(result)] = result
        return len(result)


async def run_crypto(
    backend: aescore.Backend,
    nbytes: int,
    inline_max: int,
    work: Callable[[], T],
    limiter: CapacityLimiter | None = None,
) -> T:
    """Run ``work`` (a synchronous crypto call over ``nbytes``) without stalling the event loop.

    Calls of at most ``inline_max`` bytes on a backend that ``runs_inline`` run on the loop; everything else
    goes to the thread pool (for the python backend that thread waits on the process pool), holding a token
    of ``limiter`` when one is given (else of anyio's default thread limiter).
    """
    if runs_on_loop(backend, nbytes, inline_max):
        return work()
    return await to_thread.run_sync(work, limiter=limiter)


def runs_on_loop(backend: aescore.Backend, nbytes: int, inline_max: int) -> bool:
    """Whether :func:`run_crypto` runs a call over ``nbytes`` on the event loop: only on a backend that
    ``runs_inline``, and only up to ``inline_max`` bytes."""
    return backend.runs_inline and nbytes <= inline_max
