"""The host side: a thread-safe driver over the device model, and the ``hwsim`` aescore backend.

Bytes are computed by a software core (``aesni`` when this machine has it, else ``python``), so the output is
byte-identical to those backends; the device model supplies the time. Timing rules:

* Wall time maps to virtual time as ``(perf_counter_ns() - start) / realtime_scale``. A submission is stamped
  at ``max(that, model clock)`` and the model runs until the host has consumed its completion. Jobs that
  arrive in the same batch (the async path batches every job submitted in one event-loop turn under one
  doorbell) share the device; calls that overlap in wall time but arrive separately are served in arrival
  order, the later one counting the wait as queue time.
* ``realtime=False`` (default): the call returns as soon as the bytes are ready and the modeled latency is
  only reported. ``realtime=True``: the call returns ``latency x realtime_scale`` after it was made (the async
  path sleeps with ``asyncio.sleep``, the sync path with ``time.sleep``).
* The software core's wall time is never reported as device time; jobs the offload policy keeps in software
  are counted apart (``software_jobs``, ``software_bytes``, ``software_ns_per_job``).
* AES-GCM (:meth:`HwsimBackend.gcm_key`): one device job per message makes the CTR keystream (the tag mask
  ``AES_K(J0)`` and the data's blocks); GHASH runs on the host CPU (the software core's carry-less multiply on
  ``aesni``, else pure Python) and is counted apart, measured (``host_ghash_*``).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import weakref
from collections.abc import Sequence
from typing import ClassVar, Literal

from aescore import BackendUnavailableError, get_backend
from aescore._interface import Backend, BytesLike, ExpandedKey, GcmKey
from aescore._validate import as_readable, as_writable, check_counter, check_key, check_length, check_offset
from aescore.errors import AesCoreTypeError
from aescore.gcm._composed import ComposedGcmKey, Ghash

from .analysis import crossover_size, fit_linear
from .device import Device, DeviceBusyError, Job, JobSpec
from .engine import Simulator
from .metrics import HwsimSnapshot, JobRecorder, snapshot
from .params import DeviceParams, get_preset
from .resources import KeyRef

__all__ = ["DeviceDriver", "HwsimBackend", "HwsimExpandedKey", "OnBusy"]

OnBusy = Literal["wait", "error"]
#: Data of at least this many bytes is encrypted in a worker thread on the async path (keeps the loop free).
ASYNC_THREAD_THRESHOLD = 64 * 1024
_handles = itertools.count(1)


class DeviceDriver:
    """Runs the device model for a host that submits jobs from any thread. Thread-safe.

    Args:
        params: device parameters.
        realtime_scale: wall ns per virtual ns when mapping arrival times (and realtime delays).
        on_busy: ``"wait"``: a job that finds the ring full waits (in virtual time) for an entry, the wait
            counting as queue time; ``"error"``: it fails with :class:`~hwsim.device.DeviceBusyError`.
        seed: seeds the simulator.
    """

    def __init__(
        self, params: DeviceParams, realtime_scale: float = 1.0, on_busy: OnBusy = "wait", seed: int = 0
    ) -> None:
        if not realtime_scale > 0:
            raise ValueError(f"realtime_scale must be > 0, got {realtime_scale}")
        if on_busy not in ("wait", "error"):
            raise ValueError(f"on_busy must be 'wait' or 'error', got {on_busy!r}")
        self.params = params
        self.realtime_scale = realtime_scale
        self.on_busy: OnBusy = on_busy
        self.device = Device(params, Simulator(seed))
        self.recorder = JobRecorder()
        self._lock = threading.Lock()
        self._start_wall = time.perf_counter_ns()

    def _virtual_now(self) -> int:
        return int((time.perf_counter_ns() - self._start_wall) / self.realtime_scale)

    def run(self, specs: Sequence[JobSpec]) -> list[Job | DeviceBusyError]:
        """Submit ``specs`` under one doorbell (as room allows) and run the model until all are consumed.

        Returns:
            One entry per spec: its completed :class:`~hwsim.device.Job`, or the
            :class:`~hwsim.device.DeviceBusyError` it got (``on_busy="error"`` and a full ring).
        """
        cpu_start = time.thread_time_ns()
        model_ns = 0
        results: list[Job | DeviceBusyError] = []
        with self._lock:
            device, sim = self.device, self.device.sim
            requested = max(sim.now, self._virtual_now())
            sim.run_until(requested)
            if len(specs) == 1 and device.free_slots >= 1:
                model_start = time.thread_time_ns()
                results.append(device.submit_lone(specs[0], requested_at=requested))
                model_ns += time.thread_time_ns() - model_start
            else:
                jobs: list[Job] = []
                outstanding = [0]

                def consumed(_: Job) -> None:
                    outstanding[0] -= 1

                position = 0
                while position < len(specs):
                    room = device.free_slots
                    if room == 0:
                        if self.on_busy == "error":
                            rejected = len(specs) - position
                            device.counters.rejects += rejected
                            error = DeviceBusyError(
                                f"submission ring full ({self.params.ring_depth} entries in flight)"
                            )
                            results.extend([error] * rejected)
                            break
                        model_start = time.thread_time_ns()
                        sim.run_while(lambda: device.free_slots == 0)
                        model_ns += time.thread_time_ns() - model_start
                        continue
                    batch = specs[position : position + room]
                    jobs.extend(device.submit(batch, consumed, requested_at=requested))
                    outstanding[0] += len(batch)
                    position += len(batch)
                model_start = time.thread_time_ns()
                sim.run_while(lambda: outstanding[0] > 0)
                model_ns += time.thread_time_ns() - model_start
                results = [*jobs, *results]
            completed = [job for job in results if isinstance(job, Job)]
            for job in completed:
                self.recorder.device_job(job)
            # the driver's own host CPU (bookkeeping), not the simulator's work standing in for the device
            self.recorder.host_cpu(
                max(time.thread_time_ns() - cpu_start - model_ns, 0), max(len(completed), 1)
            )
        return results

    def record_software(self, nbytes: int, wall_ns: int) -> None:
        """Count a job the offload policy kept on the software core."""
        with self._lock:
            self.recorder.software_job(nbytes, wall_ns)

    def record_ghash(self, nbytes: int, wall_ns: int) -> None:
        """Count a GHASH the host CPU computed for an AES-GCM message."""
        with self._lock:
            self.recorder.host_ghash(nbytes, wall_ns)

    def snapshot(self, preset: str | None = None) -> HwsimSnapshot:
        """The current metrics."""
        with self._lock:
            return snapshot(self.device, self.recorder, preset)

    def wall_deadline_ns(self, job: Job, submitted_wall_ns: int) -> int:
        """The ``perf_counter_ns`` at which a realtime caller should get ``job``'s result."""
        return submitted_wall_ns + int(job.latency_ns * self.realtime_scale)


class HwsimExpandedKey(ExpandedKey):
    """A key expanded by the software core plus the handle the device's key slots know it by."""

    __slots__ = ("_inner", "_ref")

    def __init__(self, inner: ExpandedKey, ref: KeyRef) -> None:
        self._inner = inner
        self._ref = ref

    @property
    def backend_name(self) -> str:
        return "hwsim"

    @property
    def key_size(self) -> int:
        return self._ref.key_size


def _software_core(name: str) -> Backend:
    if name != "auto":
        return get_backend(name)
    try:
        return get_backend("aesni")
    except BackendUnavailableError:
        return get_backend("python")


def _measure_software(core: Backend) -> tuple[float, float]:
    """Fit ``O_sw`` (ns) and ``B_sw`` (bytes/ns) of ``core`` on this machine (best of a few runs)."""
    key = core.expand_key(bytes(16))
    counter = bytes(16)
    points: list[tuple[int, float]] = []
    for size in (64, 4096, 65536):
        data = bytes(size)
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter_ns()
            core.ctr_xor(key, counter, data)
            best = min(best, time.perf_counter_ns() - start)
        points.append((size, best))
    overhead, bandwidth = fit_linear(points)
    return max(overhead, 0.0), bandwidth


class _HostGhash:
    """GHASH on the host CPU, each call timed and counted by the driver."""

    __slots__ = ("_driver", "_inner")

    def __init__(self, inner: Ghash, driver: DeviceDriver) -> None:
        self._inner = inner
        self._driver = driver

    def digest(self, associated_data: memoryview, ciphertext: memoryview) -> bytes:
        start = time.perf_counter_ns()
        result = self._inner.digest(associated_data, ciphertext)
        self._driver.record_ghash(len(associated_data) + len(ciphertext), time.perf_counter_ns() - start)
        return result


class HwsimBackend(Backend):
    """AES-CTR through the simulated accelerator; bytes identical to ``aesni``/``python``. Thread-safe.

    Args:
        preset: a preset name (``proposal``, ``pcie-offload``, ``opentitan``, ``opentitan-masked``) or a
            :class:`~hwsim.params.DeviceParams`.
        realtime: deliver each result after its modeled latency x ``realtime_scale`` (default: at once).
        realtime_scale: wall ns per modeled ns.
        offload_threshold: jobs shorter than this many bytes go to the software core; ``"auto"`` picks the
            model's crossover size against the software core measured on this machine; ``None`` or 0:
            everything goes to the device.
        on_busy: ``"wait"`` or ``"error"`` when the ring is full (see :class:`DeviceDriver`).
        software: ``"auto"`` (aesni if available, else python), ``"aesni"`` or ``"python"``.
        seed: seeds the simulator.

    Raises:
        ValueError: an unknown preset, a non-positive scale, a negative threshold, a bad ``on_busy``.
        aescore.BackendUnavailableError: the requested software core cannot run here.
    """

    name: ClassVar[str] = "hwsim"
    supports_async: ClassVar[bool] = True  # ctr_xor_async: jobs of one loop turn share a doorbell

    def __init__(
        self,
        preset: str | DeviceParams = "proposal",
        *,
        realtime: bool = False,
        realtime_scale: float = 1.0,
        offload_threshold: int | Literal["auto"] | None = None,
        on_busy: OnBusy = "wait",
        software: str = "auto",
        seed: int = 0,
    ) -> None:
        self.params = get_preset(preset) if isinstance(preset, str) else preset
        self.realtime = bool(realtime)
        self.driver = DeviceDriver(self.params, realtime_scale, on_busy, seed)
        self._core = _software_core(software)
        self.constant_time = self._core.constant_time  # type: ignore[misc]
        self.crossover_bytes: int | None = None
        if offload_threshold == "auto":
            overhead_sw, bandwidth_sw = _measure_software(self._core)
            self.crossover_bytes = crossover_size(self.params, overhead_sw, bandwidth_sw)
            self.offload_threshold = 2**64 if self.crossover_bytes is None else self.crossover_bytes
            self.threshold_mode = "auto"
        elif offload_threshold is None:
            self.offload_threshold = 0
            self.threshold_mode = "fixed"
        elif isinstance(offload_threshold, bool) or not isinstance(offload_threshold, int):
            raise ValueError(f"offload_threshold must be an int, 'auto' or None, got {offload_threshold!r}")
        elif offload_threshold < 0:
            raise ValueError(f"offload_threshold must be >= 0 bytes, got {offload_threshold}")
        else:
            self.offload_threshold = offload_threshold
            self.threshold_mode = "fixed"
        self._batchers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Batcher] = (
            weakref.WeakKeyDictionary()
        )
        self._batchers_lock = threading.Lock()

    # ---- aescore interface ---------------------------------------------------------------------------------
    def expand_key(self, key: BytesLike) -> ExpandedKey:
        """Expand a 16, 24 or 32-byte AES key (with the software core) and give it a key-slot handle.

        Raises:
            TypeError: ``key`` is not bytes-like (:class:`aescore.AesCoreTypeError`).
            ValueError: ``key`` has another length (:class:`aescore.AesCoreValueError`).
        """
        material = check_key(key)
        inner = self._core.expand_key(material)
        return HwsimExpandedKey(inner, KeyRef(next(_handles), len(material), material))

    def gcm_key(self, key: BytesLike) -> GcmKey:
        """Prepare ``key`` for AES-GCM: CTR keystream on the device, GHASH on the host CPU.

        Each message is one device job (``AES_K(J0)`` and the data's keystream together, as :meth:`ctr_xor`
        with the same offload and realtime rules); GHASH uses the software core's carry-less multiply on
        ``aesni`` (constant-time) or the pure-Python tables otherwise, and is reported as ``host_ghash_*``.

        Raises:
            TypeError: ``key`` is not bytes-like (:class:`aescore.AesCoreTypeError`).
            ValueError: ``key`` has another length (:class:`aescore.AesCoreValueError`).
        """
        return ComposedGcmKey(self, key, self._host_ghash)

    def _host_ghash(self, hash_key: bytes) -> Ghash:
        return _HostGhash(self._core.ghash(hash_key), self.driver)

    def _prepare(
        self, expanded_key: ExpandedKey, initial_counter: BytesLike, data: BytesLike, offset: int
    ) -> tuple[HwsimExpandedKey, bytes, memoryview, int]:
        if not isinstance(expanded_key, HwsimExpandedKey):
            raise AesCoreTypeError(
                "expanded_key must come from the 'hwsim' backend's expand_key, "
                f"got {type(expanded_key).__name__}"
            )
        counter = check_counter(initial_counter)
        view = as_readable("data", data)
        offset = check_offset(offset)
        check_length(offset, len(view))
        return expanded_key, counter, view, offset

    def ctr_xor(
        self,
        expanded_key: ExpandedKey,
        initial_counter: BytesLike,
        data: BytesLike,
        offset: int = 0,
        out: bytearray | memoryview | None = None,
    ) -> bytes | None:
        """XOR ``data`` with the keystream from byte ``offset``; see :meth:`aescore.Backend.ctr_xor`.

        With ``realtime`` the call blocks for the modeled latency x scale.

        Raises:
            TypeError: wrong argument types, a read-only ``out``, or a key from another backend.
            ValueError: a counter that is not 16 bytes, a negative or too large offset, or a too-small
                ``out``.
            hwsim.device.DeviceBusyError: the ring is full and ``on_busy="error"``.
        """
        key, counter, view, offset = self._prepare(expanded_key, initial_counter, data, offset)
        target = as_writable("out", out, len(view)) if out is not None else None
        submitted = time.perf_counter_ns()
        if len(view) < self.offload_threshold:
            result = self._core.ctr_xor(key._inner, counter, view, offset, target)
            self.driver.record_software(len(view), time.perf_counter_ns() - submitted)
            return result
        (outcome,) = self.driver.run([JobSpec(len(view), key._ref)])
        if isinstance(outcome, DeviceBusyError):
            raise outcome
        result = self._core.ctr_xor(key._inner, counter, view, offset, target)
        if self.realtime:
            delay = self.driver.wall_deadline_ns(outcome, submitted) - time.perf_counter_ns()
            if delay > 0:
                time.sleep(delay / 1e9)
        return result

    async def ctr_xor_async(
        self, expanded_key: ExpandedKey, initial_counter: BytesLike, data: BytesLike, offset: int = 0
    ) -> bytes:
        """:meth:`ctr_xor` for an event loop: jobs submitted in one loop turn share one doorbell.

        With ``realtime`` the coroutine sleeps (without blocking the loop) until the modeled completion.
        Data of :data:`ASYNC_THREAD_THRESHOLD` bytes or more is encrypted in a worker thread.

        Raises:
            The same errors as :meth:`ctr_xor`.
        """
        key, counter, view, offset = self._prepare(expanded_key, initial_counter, data, offset)
        submitted = time.perf_counter_ns()
        if len(view) < self.offload_threshold:
            result = await self._software_async(key, counter, view, offset)
            self.driver.record_software(len(view), time.perf_counter_ns() - submitted)
            return result
        job = await self._batcher().submit(JobSpec(len(view), key._ref))
        result = await self._software_async(key, counter, view, offset)
        if self.realtime:
            delay = self.driver.wall_deadline_ns(job, submitted) - time.perf_counter_ns()
            if delay > 0:
                await asyncio.sleep(delay / 1e9)
        return result

    async def _software_async(
        self, key: HwsimExpandedKey, counter: bytes, view: memoryview, offset: int
    ) -> bytes:
        if len(view) >= ASYNC_THREAD_THRESHOLD:
            result = await asyncio.to_thread(self._core.ctr_xor, key._inner, counter, view, offset)
        else:
            result = self._core.ctr_xor(key._inner, counter, view, offset)
        assert isinstance(result, bytes)
        return result

    def _batcher(self) -> _Batcher:
        loop = asyncio.get_running_loop()
        with self._batchers_lock:
            batcher = self._batchers.get(loop)
            if batcher is None:
                batcher = self._batchers[loop] = _Batcher(self.driver, loop)
            return batcher

    # ---- observability -------------------------------------------------------------------------------------
    def snapshot(self) -> HwsimSnapshot:
        """The metrics snapshot (modeled device times, measured host times)."""
        return self.driver.snapshot(self.params.name)

    def info(self) -> dict[str, str | int | bool | None]:
        """Name, preset, software core, realtime settings and the offload threshold."""
        return {
            "name": self.name,
            "constant_time": self.constant_time,
            "preset": self.params.name,
            "description": self.params.description,
            "software_core": self._core.name,
            "gcm": f"CTR keystream on the simulated device, GHASH on the host CPU ({self._core.name})",
            "realtime": self.realtime,
            "realtime_scale": str(self.driver.realtime_scale),
            "offload_threshold": self.offload_threshold,
            "offload_threshold_mode": self.threshold_mode,
            "crossover_bytes": self.crossover_bytes,
            "on_busy": self.driver.on_busy,
            "ring_depth": self.params.ring_depth,
            "cores": self.params.cores,
        }

    def __repr__(self) -> str:
        return f"<aescore backend 'hwsim' preset={self.params.name!r} realtime={self.realtime}>"


class _Batcher:
    """Collects the jobs submitted in one event-loop turn and runs them under one doorbell."""

    def __init__(self, driver: DeviceDriver, loop: asyncio.AbstractEventLoop) -> None:
        self._driver = driver
        self._loop = loop
        self._pending: list[tuple[JobSpec, asyncio.Future[Job]]] = []

    def submit(self, spec: JobSpec) -> asyncio.Future[Job]:
        future: asyncio.Future[Job] = self._loop.create_future()
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append((spec, future))
        return future

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        outcomes = self._driver.run([spec for spec, _ in pending])
        for (_, future), outcome in zip(pending, outcomes, strict=True):
            if future.cancelled():
                continue
            if isinstance(outcome, DeviceBusyError):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)
