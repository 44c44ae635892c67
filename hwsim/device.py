"""The accelerator: submission ring, cores with a chunked data pipeline, completion path and notification.

A job's life (all in virtual ns)::

    requested -> submitted (descriptor written, doorbell) -> visible after doorbell_ns -> a free core
    starts the DESCRIPTOR FETCH (one DMA operation) -> KEY LOAD (slot hit: 0; miss: evict+zeroise, key DMA,
    expansion)
    -> DATA: bursts are read (DMA in), encrypted by the core (first block after L cycles, then one every II)
    and written back (DMA out), pipelined through the core's buffer -> COMPLETION WRITE (one DMA operation)
    -> NOTIFY: coalesced interrupt (count or timer) or the next poll -> the host consumes the completion.

A job holds one submission-ring entry from submission until the host consumes its completion, so a full ring
answers busy (:class:`DeviceBusyError`) and the completion ring (same depth) can never overflow. Each core
serves one job at a time, from descriptor fetch to completion write.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .engine import Simulator
from .params import DeviceParams
from .resources import Counters, DmaEngine, KeyRef, KeySlotStore

__all__ = ["STAGES", "Device", "DeviceBusyError", "Job", "JobSpec"]

#: Lone-job replays remembered per device (size, key size, hit or miss).
REPLAY_MEMO_SIZE = 256
#: Counters a lone job changes by the same amount wherever it runs (the rest are updated live).
_REPLAYED_COUNTERS = (
    "dma_transfers",
    "dma_payload_bytes",
    "dma_overhead_bytes",
    "dma_wire_busy_ps",
    "core_busy_ns",
    "interrupts",
)
_MILESTONES = ("t_fetch_start", "t_fetch_done", "t_key_done", "t_first_in", "t_compute_done", "t_out_done")


@dataclass(frozen=True)
class _Replay:
    """A lone job's timeline relative to its submission, and what it added to the counters."""

    offsets: tuple[int, ...]  # _MILESTONES, then t_cq_done, then t_notified (interrupt mode)
    wire_end_ps: int
    counters: tuple[int, ...]


#: The per-job stages, in order; their durations add up to the job's latency exactly.
STAGES = ("queue_wait", "descriptor_fetch", "key_load", "dma_in", "compute", "dma_out", "notify")


class DeviceBusyError(Exception):
    """The submission ring has no room for the batch (nothing of it was queued)."""


@dataclass(frozen=True)
class JobSpec:
    """What the host asks the device to do: transform ``nbytes`` under ``key``."""

    nbytes: int
    key: KeyRef


class Job:
    """One job's record: its milestones in virtual ns (``None`` until reached)."""

    __slots__ = (
        "arrived",
        "blocks",
        "buffer_used",
        "compute_cycles",
        "computed",
        "computing",
        "core_issue_free",
        "id",
        "key_hit",
        "nchunks",
        "next_compute",
        "next_read",
        "on_complete",
        "out_ready",
        "slot",
        "spec",
        "t_compute_done",
        "t_cq_done",
        "t_fetch_done",
        "t_fetch_start",
        "t_first_in",
        "t_key_done",
        "t_notified",
        "t_out_done",
        "t_requested",
        "t_submitted",
        "write_backlog",
        "written",
    )

    def __init__(self, job_id: int, spec: JobSpec, requested: int, submitted: int, burst: int) -> None:
        self.id = job_id
        self.spec = spec
        self.t_requested = requested
        self.t_submitted = submitted
        self.t_fetch_start: int | None = None
        self.t_fetch_done: int | None = None
        self.t_key_done: int | None = None
        self.t_first_in: int | None = None
        self.t_compute_done: int | None = None
        self.t_out_done: int | None = None
        self.t_cq_done: int | None = None
        self.t_notified: int | None = None
        self.key_hit = False
        self.slot = -1
        self.blocks = -(-spec.nbytes // 16)
        self.nchunks = -(-spec.nbytes // burst)
        self.next_read = self.arrived = self.next_compute = self.computed = self.written = 0
        self.buffer_used = 0
        self.computing = False
        self.core_issue_free = 0
        self.compute_cycles = 0
        self.out_ready = False
        self.write_backlog: list[int] = []
        self.on_complete: Callable[[Job], None] | None = None

    @property
    def latency_ns(self) -> int:
        """From request to the host consuming the completion.

        Raises:
            RuntimeError: the job has not completed.
        """
        if self.t_notified is None:
            raise RuntimeError("job has not completed")
        return self.t_notified - self.t_requested

    def stages(self) -> dict[str, int]:
        """The latency split into :data:`STAGES` (ns); the values add up to :attr:`latency_ns`.

        The data phase of a multi-burst job is pipelined, so it is split at milestones: ``dma_in`` runs to the
        arrival of the first burst (pipeline fill), ``compute`` from there to the last block's keystream
        (streaming, whichever of core or DMA limits it), ``dma_out`` to the last write (drain).

        Raises:
            RuntimeError: the job has not completed.
        """
        marks = (
            self.t_requested,
            self.t_fetch_start,
            self.t_fetch_done,
            self.t_key_done,
            self.t_first_in,
            self.t_compute_done,
            self.t_out_done,
            self.t_notified,
        )
        if any(mark is None for mark in marks):
            raise RuntimeError("job has not completed")
        values = [int(mark) for mark in marks if mark is not None]
        return {name: values[i + 1] - values[i] for i, name in enumerate(STAGES)}


class Device:
    """The simulated accelerator.

    Args:
        params: the device parameters (see :mod:`hwsim.params`).
        sim: the event engine to run on (a fresh one, seed 0, when omitted).
    """

    def __init__(self, params: DeviceParams, sim: Simulator | None = None) -> None:
        self.params = params
        self.sim = sim if sim is not None else Simulator()
        self.counters = Counters()
        self.dma = DmaEngine(self.sim, params, self.counters)
        self.keys = KeySlotStore(params, self.counters)
        self.occupancy = 0
        self._occupancy_since = self.sim.now
        self._next_id = 0
        self._visible: deque[Job] = deque()
        self._idle_cores = params.cores
        self._key_waiters: deque[Job] = deque()
        self._loading: dict[int, list[Job]] = {}
        self._pending_notify: list[Job] = []
        self._timer_token = 0
        self._poll_batches: dict[int, list[Job]] = {}
        self._buffer_chunks = params.engine_buffer_bytes // params.dma_burst_bytes
        self._key_index = {16: 0, 24: 1, 32: 2}
        self.started_at = self.sim.now
        self._replays: OrderedDict[tuple[int, int, bool], _Replay] = OrderedDict()
        #: Replay lone jobs on an idle device from a memo instead of simulating every burst (same result).
        self.replay_enabled = True

    # ---- submission ---------------------------------------------------------------------------------------
    @property
    def free_slots(self) -> int:
        """Submission-ring entries free right now."""
        return self.params.ring_depth - self.occupancy

    def submit(
        self,
        specs: Sequence[JobSpec],
        on_complete: Callable[[Job], None] | None = None,
        requested_at: int | None = None,
    ) -> list[Job]:
        """Write ``specs`` into the ring at the current virtual time and ring one doorbell for all of them.

        Args:
            specs: the batch (all or nothing).
            on_complete: called with each job when the host consumes its completion.
            requested_at: when the host first asked (earlier than now if it had to wait for room); counts as
                queue wait. Defaults to now.

        Raises:
            DeviceBusyError: the ring has fewer free entries than ``len(specs)``; nothing was queued and the
                rejects counter grew by ``len(specs)``.
            ValueError: a negative size or an unsupported key size.
        """
        if len(specs) > self.free_slots:
            self.counters.rejects += len(specs)
            raise DeviceBusyError(
                f"submission ring full: {self.free_slots} of {self.params.ring_depth} entries free, "
                f"batch of {len(specs)}"
            )
        for spec in specs:
            if spec.nbytes < 0:
                raise ValueError(f"job size must be >= 0 bytes, got {spec.nbytes}")
            self.params.key_index(spec.key.key_size)
        now = self.sim.now
        requested = now if requested_at is None else min(requested_at, now)
        jobs = []
        for spec in specs:
            job = Job(self._next_id, spec, requested, now, self.params.dma_burst_bytes)
            job.on_complete = on_complete
            self._next_id += 1
            jobs.append(job)
        if jobs:
            self._set_occupancy(self.occupancy + len(jobs))
            self.counters.jobs_submitted += len(jobs)
            self.counters.doorbells += 1
            self.sim.after(self.params.doorbell_ns, self._doorbell, jobs)
        return jobs

    # ---- lone-job replay -----------------------------------------------------------------------------------
    def is_idle(self) -> bool:
        """True when nothing is pending: no event, no job in the ring, no completion waiting for a notify."""
        return self.sim.peek() is None and self.occupancy == 0 and not self._visible

    def submit_lone(
        self, spec: JobSpec, on_complete: Callable[[Job], None] | None = None, requested_at: int | None = None
    ) -> Job:
        """Submit one job and run the model until the host has consumed its completion.

        On an idle device the job shares nothing with any other, so its timeline depends only on its size,
        key size and key-slot hit; it is then replayed from a memo of the same job run on a scratch device
        (exactly what the full simulation gives, as ``tests/hwsim`` checks) instead of simulating every burst.

        Raises:
            DeviceBusyError: the ring is full.
            ValueError: a negative size or an unsupported key size.
        """
        if not (self.replay_enabled and self.is_idle()):
            (job,) = self.submit([spec], on_complete, requested_at)
            self.sim.run_while(lambda: job.t_notified is None)
            return job
        self.params.key_index(spec.key.key_size)
        if spec.nbytes < 0:
            raise ValueError(f"job size must be >= 0 bytes, got {spec.nbytes}")
        got = self.keys.acquire(spec.key)
        assert got is not None  # nothing is pinned on an idle device
        slot, hit = got
        replay = self._replay_for(spec.nbytes, spec.key.key_size, hit)
        now = self.sim.now
        requested = now if requested_at is None else min(requested_at, now)
        job = Job(self._next_id, spec, requested, now, self.params.dma_burst_bytes)
        self._next_id += 1
        job.on_complete = on_complete
        job.slot, job.key_hit = slot, hit
        for name, offset in zip(_MILESTONES, replay.offsets, strict=False):
            setattr(job, name, now + offset)
        job.t_cq_done = now + replay.offsets[len(_MILESTONES)]
        if not hit:
            self.keys.fill(slot, spec.key)
        self.keys.release(slot)
        counters = self.counters
        for name, delta in zip(_REPLAYED_COUNTERS, replay.counters, strict=True):
            setattr(counters, name, getattr(counters, name) + delta)
        if self.params.notify_mode == "poll":
            period = self.params.poll_interval_ns
            notified = -(-job.t_cq_done // period) * period + self.params.poll_cost_ns
            counters.polls += 1
        else:
            notified = now + replay.offsets[len(_MILESTONES) + 1]
        self.dma.wire_free_ps = max(self.dma.wire_free_ps, now * 1000 + replay.wire_end_ps)
        counters.jobs_submitted += 1
        counters.doorbells += 1
        counters.jobs_completed += 1
        counters.bytes_completed += spec.nbytes
        self._set_occupancy(1)
        self.sim.run_until(notified)
        self._deliver([job])
        return job

    def _replay_for(self, nbytes: int, key_size: int, hit: bool) -> _Replay:
        memo_key = (nbytes, key_size, hit)
        replay = self._replays.get(memo_key)
        if replay is not None:
            self._replays.move_to_end(memo_key)
            return replay
        scratch = Device(self.params)
        scratch.replay_enabled = False
        key = KeyRef(handle=1, key_size=key_size)
        if hit:
            scratch.submit_lone(JobSpec(0, key))
        start = scratch.sim.now
        before = [getattr(scratch.counters, name) for name in _REPLAYED_COUNTERS]
        job = scratch.submit_lone(JobSpec(nbytes, key))
        marks = [getattr(job, name) for name in (*_MILESTONES, "t_cq_done", "t_notified")]
        replay = _Replay(
            offsets=tuple(int(mark) - start for mark in marks),
            wire_end_ps=max(scratch.dma.wire_free_ps - start * 1000, 0),
            counters=tuple(
                getattr(scratch.counters, name) - old
                for name, old in zip(_REPLAYED_COUNTERS, before, strict=True)
            ),
        )
        self._replays[memo_key] = replay
        if len(self._replays) > REPLAY_MEMO_SIZE:
            self._replays.popitem(last=False)
        return replay

    def _set_occupancy(self, value: int) -> None:
        now = self.sim.now
        self.counters.occupancy_area_ns += self.occupancy * (now - self._occupancy_since)
        self._occupancy_since = now
        self.occupancy = value
        if value > self.counters.occupancy_max:
            self.counters.occupancy_max = value

    def occupancy_area(self) -> int:
        """Integral of ring occupancy over virtual time up to now (entry-ns)."""
        return self.counters.occupancy_area_ns + self.occupancy * (self.sim.now - self._occupancy_since)

    def _doorbell(self, jobs: list[Job]) -> None:
        self._visible.extend(jobs)
        self._dispatch()

    def _dispatch(self) -> None:
        while self._idle_cores and self._visible:
            job = self._visible.popleft()
            self._idle_cores -= 1
            job.t_fetch_start = self.sim.now
            self.dma.operation(self.params.descriptor_bytes, self._fetched, job)

    # ---- key slots ----------------------------------------------------------------------------------------
    def _fetched(self, job: Job) -> None:
        job.t_fetch_done = self.sim.now
        self._acquire_key(job)

    def _acquire_key(self, job: Job) -> None:
        got = self.keys.acquire(job.spec.key)
        if got is None:
            self._key_waiters.append(job)
            return
        job.slot, job.key_hit = got
        if job.key_hit:
            waiters = self._loading.get(job.slot)
            if waiters is not None:
                waiters.append(job)
            else:
                self._key_ready(job)
            return
        self._loading[job.slot] = []
        self.dma.operation(self.params.key_load_bytes, self._key_dma_done, job)

    def _key_dma_done(self, job: Job) -> None:
        index = self._key_index[job.spec.key.key_size]
        self.sim.after(
            self.params.cycles_to_ns(self.params.key_expansion_cycles[index]), self._key_loaded, job
        )

    def _key_loaded(self, job: Job) -> None:
        self.keys.fill(job.slot, job.spec.key)
        waiters = self._loading.pop(job.slot, [])
        self._key_ready(job)
        for waiter in waiters:
            self._key_ready(waiter)

    # ---- data pipeline ------------------------------------------------------------------------------------
    def _key_ready(self, job: Job) -> None:
        job.t_key_done = self.sim.now
        if job.nchunks == 0:
            job.t_first_in = job.t_compute_done = job.t_out_done = self.sim.now
            self.dma.operation(self.params.completion_bytes, self._cq_written, job)
            return
        self.sim.after(self.params.dma_setup_ns, self._issue_reads, job)

    def _chunk_size(self, job: Job, index: int) -> int:
        burst = self.params.dma_burst_bytes
        return min(burst, job.spec.nbytes - index * burst)

    def _issue_reads(self, job: Job) -> None:
        while job.next_read < job.nchunks and job.buffer_used < self._buffer_chunks:
            job.buffer_used += 1
            self.dma.transfer(self._chunk_size(job, job.next_read), True, self._read_done, job)
            job.next_read += 1

    def _read_done(self, job: Job) -> None:
        job.arrived += 1
        if job.arrived == 1:
            job.t_first_in = self.sim.now
        self._try_compute(job)

    def _try_compute(self, job: Job) -> None:
        if job.computing or job.next_compute >= job.arrived:
            return
        index = self._key_index[job.spec.key.key_size]
        latency = self.params.core_latency_cycles[index]
        interval = self.params.issue_interval_cycles[index]
        blocks = -(-self._chunk_size(job, job.next_compute) // 16)
        start = max(self.sim.now, job.core_issue_free)
        cycles_to_ns = self.params.cycles_to_ns
        job.core_issue_free = start + cycles_to_ns(blocks * interval)
        job.compute_cycles += blocks * interval
        job.computing = True
        self.sim.at(job.core_issue_free, self._issue_free, job)
        self.sim.at(start + cycles_to_ns((blocks - 1) * interval + latency), self._computed, job)
        job.next_compute += 1

    def _issue_free(self, job: Job) -> None:
        job.computing = False
        self._try_compute(job)

    def _computed(self, job: Job) -> None:
        chunk = job.computed
        job.computed += 1
        if job.computed == job.nchunks:
            job.t_compute_done = self.sim.now
        if job.out_ready:
            self.dma.transfer(self._chunk_size(job, chunk), True, self._written, job)
            return
        job.write_backlog.append(chunk)
        if len(job.write_backlog) == 1 and chunk == 0:
            self.sim.after(self.params.dma_setup_ns, self._out_ready, job)

    def _out_ready(self, job: Job) -> None:
        job.out_ready = True
        for chunk in job.write_backlog:
            self.dma.transfer(self._chunk_size(job, chunk), True, self._written, job)
        job.write_backlog.clear()

    def _written(self, job: Job) -> None:
        job.written += 1
        job.buffer_used -= 1
        if job.written == job.nchunks:
            job.t_out_done = self.sim.now
            self.dma.operation(self.params.completion_bytes, self._cq_written, job)
        else:
            self._issue_reads(job)

    # ---- completion and notification ----------------------------------------------------------------------
    def _cq_written(self, job: Job) -> None:
        job.t_cq_done = self.sim.now
        assert job.t_fetch_start is not None
        self.counters.core_busy_ns += job.t_cq_done - job.t_fetch_start
        self.counters.jobs_completed += 1
        self.counters.bytes_completed += job.spec.nbytes
        self.keys.release(job.slot)
        self._idle_cores += 1
        if self._key_waiters:
            self._acquire_key(self._key_waiters.popleft())
        self._dispatch()
        params = self.params
        if params.notify_mode == "poll":
            period = params.poll_interval_ns
            tick = -(-self.sim.now // period) * period
            batch = self._poll_batches.get(tick)
            if batch is None:
                self._poll_batches[tick] = [job]
                self.sim.at(tick, self._poll, tick)
            else:
                batch.append(job)
            return
        self._pending_notify.append(job)
        if len(self._pending_notify) >= params.irq_coalesce_count or params.irq_coalesce_timer_ns == 0:
            self._interrupt()
        elif len(self._pending_notify) == 1:
            self.sim.after(params.irq_coalesce_timer_ns, self._timer_expired, self._timer_token)

    def _timer_expired(self, token: int) -> None:
        if token == self._timer_token and self._pending_notify:
            self._interrupt()

    def _interrupt(self) -> None:
        self.counters.interrupts += 1
        self._timer_token += 1
        batch, self._pending_notify = self._pending_notify, []
        self.sim.after(self.params.irq_latency_ns, self._deliver, batch)

    def _poll(self, tick: int) -> None:
        self.counters.polls += 1
        self.sim.after(self.params.poll_cost_ns, self._deliver, self._poll_batches.pop(tick))

    def _deliver(self, jobs: list[Job]) -> None:
        now = self.sim.now
        for job in jobs:
            job.t_notified = now
        self.counters.notified += len(jobs)
        self._set_occupancy(self.occupancy - len(jobs))
        for job in jobs:
            if job.on_complete is not None:
                job.on_complete(job)
