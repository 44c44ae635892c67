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
  pool; ``restarts`` and ``keystream_backend_pool_restarts_total`` count the replacements.
* ``hwsim`` and anything else with ``runs_inline`` false run in the thread pool (``ctr_xor_async`` is
  awaited directly for raw CTR).
"""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, ClassVar, TypeVar

from anyio import CapacityLimiter, to_thread

import aescore
from app.core.metrics import BACKEND_POOL_RESTARTS
from app.errors import BackendRestartingError
from app.services import _offload_worker

T = TypeVar("T")


class _MaterialKey(aescore.ExpandedKey):
    """The raw key, carried to the worker process, which expands it there. Never shown in ``repr``."""

    __slots__ = ("_material",)

    def __init__(self, material: bytes) -> None:
        self._material = material

    @property
    def backend_name(self) -> str:
        return "python"

    @property
    def key_size(self) -> int:
        return len(self._material)

    @property
    def material(self) -> bytes:
        return self._material


class ProcessOffloadBackend(aescore.Backend):
    """The ``python`` backend, executed in a pool of worker processes.

    Same results as ``aescore.get_backend("python")``; each call ships the key material and the data to a
    worker process and waits for the result.
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
        #: Pools replaced because a worker process died (also ``keystream_backend_pool_restarts_total``).
        self.restarts = 0
        # The series exists at 0 from the start, so the first restart is an increase an alert can see.
        BACKEND_POOL_RESTARTS.labels(backend=self.name)

    def _get_pool(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    max_workers=self._processes, mp_context=multiprocessing.get_context("spawn")
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
        """
        pool = self._get_pool()
        try:
            return pool, pool.submit(function, *args)
        except BrokenProcessPool:
            self._replace(pool)
        pool = self._get_pool()
        try:
            return pool, pool.submit(function, *args)
        except BrokenProcessPool as exc:
            self._replace(pool)
            raise _restarting() from exc

    def run(self, function: Callable[..., bytes], *args: Any) -> bytes:
        """``function(*args)`` in a worker process; blocks the calling thread only.

        Raises:
            BackendRestartingError: a worker process died before the call completed (retry).
            Exception: whatever ``function`` raises in the worker.
        """
        pool, future = self._submit(function, *args)
        try:
            return future.result()
        except BrokenProcessPool as exc:
            self._replace(pool)
            raise _restarting() from exc

    def start(self) -> None:
        """Start the worker processes now rather than on the first request."""
        pool = self._get_pool()
        for future in [pool.submit(_offload_worker.ping) for _ in range(self._processes)]:
            future.result()

    def shutdown(self) -> None:
        """Stop the worker processes (waits for running calls)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def expand_key(self, key: aescore.BytesLike) -> aescore.ExpandedKey:
        """Validate ``key`` and keep it for the worker processes.

        Raises:
            TypeError: ``key`` is not bytes-like.
            ValueError: ``key`` is not 16, 24 or 32 bytes.
        """
        self._inner.expand_key(key)  # validation only, same errors as the real backend
        return _MaterialKey(bytes(key))

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
        """
        if not isinstance(expanded_key, _MaterialKey):
            raise aescore.AesCoreTypeError("expanded_key was not made by this backend")
        result = self.run(
            _offload_worker.ctr_xor, expanded_key.material, bytes(initial_counter), bytes(data), offset
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
        self._inner.gcm_key(key)  # validation only, same errors as the real backend
        return _PooledGcmKey(self, bytes(key))

    def info(self) -> dict[str, str | int | bool | None]:
        info = dict(self._inner.info())
        info.update({"execution": "process_pool", "processes": self._processes})
        return info


def _restarting() -> BackendRestartingError:
    return BackendRestartingError(
        "the python backend's worker process died during this request; its pool is being restarted: retry"
    )


class _PooledGcmKey(aescore.GcmKey):
    """An AES-GCM key of :class:`ProcessOffloadBackend`: the material goes with each call to a worker process,
    which runs the python backend's AES-GCM (errors such as ``InvalidTag`` come back as raised there)."""

    __slots__ = ("_backend", "_material")

    def __init__(self, backend: ProcessOffloadBackend, material: bytes) -> None:
        self._backend = backend
        self._material = material

    @property
    def backend_name(self) -> str:
        return "python"

    @property
    def key_size(self) -> int:
        return len(self._material)

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
        return self._backend.run(_offload_worker.gcm, encrypt, self._material, nonce_bytes, data_bytes, ad)

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
    if backend.runs_inline and nbytes <= inline_max:
        return work()
    return await to_thread.run_sync(work, limiter=limiter)
