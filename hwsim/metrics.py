"""Metrics: per-job stage split, device aggregates, and a frozen snapshot for Prometheus export.

Device times here are *modeled* (virtual ns). Host times (``host_cpu_ns_*``, ``software_*``) are measured on
this machine and kept apart: the software core's wall time is never reported as device time.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from .device import STAGES, Device, Job

__all__ = ["HwsimSnapshot", "JobRecorder", "percentile", "prometheus_samples", "snapshot"]

#: Completed-job latencies kept for the percentiles (a sliding window of the most recent jobs).
LATENCY_WINDOW = 8192


def percentile(values: list[int], fraction: float) -> float:
    """Nearest-rank percentile of ``values`` (0.0 for an empty list).

    Raises:
        ValueError: ``fraction`` outside [0, 1].
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be within [0, 1], got {fraction}")
    if not values:
        return 0.0
    ordered = sorted(values)  # linear when already sorted (Timsort), as snapshot() passes them
    rank = max(1, -(-int(fraction * len(ordered) * 1_000_000) // 1_000_000))
    return float(ordered[min(rank, len(ordered)) - 1])


class JobRecorder:
    """Accumulates what the device alone does not know: per-job stages, routing, host CPU time.

    Not thread-safe on its own; the driver calls it under its lock.
    """

    def __init__(self) -> None:
        self.stage_totals_ns = dict.fromkeys(STAGES, 0)
        self.device_jobs = 0
        self.device_bytes = 0
        self.software_jobs = 0
        self.software_bytes = 0
        self.software_ns = 0
        self.host_cpu_ns = 0
        self.host_jobs = 0
        self.host_ghash_calls = 0
        self.host_ghash_bytes = 0
        self.host_ghash_ns = 0
        self.latency_total_ns = 0
        self.latencies: deque[int] = deque(maxlen=LATENCY_WINDOW)

    def device_job(self, job: Job) -> None:
        """Record a completed device job."""
        for name, value in job.stages().items():
            self.stage_totals_ns[name] += value
        latency = job.latency_ns
        self.latencies.append(latency)
        self.latency_total_ns += latency
        self.device_jobs += 1
        self.device_bytes += job.spec.nbytes

    def software_job(self, nbytes: int, wall_ns: int) -> None:
        """Record a job the offload policy kept on the software core (``wall_ns`` measured on the host)."""
        self.software_jobs += 1
        self.software_bytes += nbytes
        self.software_ns += wall_ns

    def host_ghash(self, nbytes: int, wall_ns: int) -> None:
        """Record one AES-GCM GHASH on the host CPU over ``nbytes`` (associated data + ciphertext)."""
        self.host_ghash_calls += 1
        self.host_ghash_bytes += nbytes
        self.host_ghash_ns += wall_ns

    def host_cpu(self, cpu_ns: int, jobs: int = 1) -> None:
        """Add measured host CPU time the driver spent on ``jobs`` device jobs (excluding the AES math)."""
        self.host_cpu_ns += cpu_ns
        self.host_jobs += jobs


@dataclass(frozen=True)
class HwsimSnapshot:
    """A point-in-time copy of the simulator's metrics. Device times are modeled ns; host times measured.

    Attributes are plain numbers (and one mapping) so the service can export them; :meth:`to_dict` gives a
    JSON-ready dict.
    """

    preset: str
    virtual_time_ns: int
    jobs_submitted: int
    jobs_completed: int
    device_jobs: int
    device_bytes: int
    software_jobs: int
    software_bytes: int
    software_ns_per_job: float
    rejects: int
    doorbells: int
    jobs_per_doorbell: float
    ring_depth: int
    ring_occupancy: int
    ring_occupancy_mean: float
    ring_occupancy_max: int
    core_utilisation: float
    dma_transfers: int
    dma_payload_bytes: int
    dma_overhead_bytes: int
    dma_wire_utilisation: float
    key_hits: int
    key_misses: int
    key_evictions: int
    interrupts: int
    polls: int
    completions_per_interrupt: float
    latency_mean_ns: float
    latency_p50_ns: float
    latency_p95_ns: float
    latency_p99_ns: float
    stage_mean_ns: Mapping[str, float]
    host_cpu_ns_per_job: float
    #: AES-GCM: the device makes the CTR keystream, the host CPU computes GHASH (measured, not modeled).
    host_ghash_calls: int
    host_ghash_bytes: int
    host_ghash_ns_per_call: float

    def to_dict(self) -> dict[str, object]:
        """A JSON-serialisable dict of every field."""
        data = dataclasses.asdict(self)
        data["stage_mean_ns"] = dict(self.stage_mean_ns)
        return data


def snapshot(device: Device, recorder: JobRecorder, preset: str | None = None) -> HwsimSnapshot:
    """Build a :class:`HwsimSnapshot` from a device and the driver's recorder."""
    counters = device.counters
    elapsed = max(device.sim.now - device.started_at, 0)
    latencies = sorted(recorder.latencies)
    jobs = recorder.device_jobs
    notifications = counters.interrupts if device.params.notify_mode == "interrupt" else counters.polls
    return HwsimSnapshot(
        preset=preset or device.params.name,
        virtual_time_ns=device.sim.now,
        jobs_submitted=counters.jobs_submitted,
        jobs_completed=counters.notified,
        device_jobs=jobs,
        device_bytes=recorder.device_bytes,
        software_jobs=recorder.software_jobs,
        software_bytes=recorder.software_bytes,
        software_ns_per_job=recorder.software_ns / recorder.software_jobs if recorder.software_jobs else 0.0,
        rejects=counters.rejects,
        doorbells=counters.doorbells,
        jobs_per_doorbell=counters.jobs_submitted / counters.doorbells if counters.doorbells else 0.0,
        ring_depth=device.params.ring_depth,
        ring_occupancy=device.occupancy,
        ring_occupancy_mean=device.occupancy_area() / elapsed if elapsed else 0.0,
        ring_occupancy_max=counters.occupancy_max,
        core_utilisation=counters.core_busy_ns / (elapsed * device.params.cores) if elapsed else 0.0,
        dma_transfers=counters.dma_transfers,
        dma_payload_bytes=counters.dma_payload_bytes,
        dma_overhead_bytes=counters.dma_overhead_bytes,
        dma_wire_utilisation=counters.dma_wire_busy_ps / 1000 / elapsed if elapsed else 0.0,
        key_hits=counters.key_hits,
        key_misses=counters.key_misses,
        key_evictions=counters.key_evictions,
        interrupts=counters.interrupts,
        polls=counters.polls,
        completions_per_interrupt=counters.notified / notifications if notifications else 0.0,
        latency_mean_ns=recorder.latency_total_ns / jobs if jobs else 0.0,
        latency_p50_ns=percentile(latencies, 0.50),
        latency_p95_ns=percentile(latencies, 0.95),
        latency_p99_ns=percentile(latencies, 0.99),
        stage_mean_ns={
            name: (total / jobs if jobs else 0.0) for name, total in recorder.stage_totals_ns.items()
        },
        host_cpu_ns_per_job=recorder.host_cpu_ns / recorder.host_jobs if recorder.host_jobs else 0.0,
        host_ghash_calls=recorder.host_ghash_calls,
        host_ghash_bytes=recorder.host_ghash_bytes,
        host_ghash_ns_per_call=(
            recorder.host_ghash_ns / recorder.host_ghash_calls if recorder.host_ghash_calls else 0.0
        ),
    )


_COUNTERS = {
    "jobs_submitted": "keystream_hwsim_jobs_submitted_total",
    "jobs_completed": "keystream_hwsim_jobs_completed_total",
    "rejects": "keystream_hwsim_rejects_total",
    "doorbells": "keystream_hwsim_doorbells_total",
    "dma_transfers": "keystream_hwsim_dma_transfers_total",
    "key_hits": "keystream_hwsim_key_slot_hits_total",
    "key_misses": "keystream_hwsim_key_slot_misses_total",
    "key_evictions": "keystream_hwsim_key_slot_evictions_total",
    "interrupts": "keystream_hwsim_interrupts_total",
    "polls": "keystream_hwsim_polls_total",
    "host_ghash_calls": "keystream_hwsim_host_ghash_calls_total",
    "host_ghash_bytes": "keystream_hwsim_host_ghash_bytes_total",
}

_GAUGES = {
    "virtual_time_ns": ("keystream_hwsim_virtual_time_seconds", 1e-9),
    "ring_depth": ("keystream_hwsim_ring_depth", 1.0),
    "ring_occupancy": ("keystream_hwsim_ring_occupancy", 1.0),
    "ring_occupancy_mean": ("keystream_hwsim_ring_occupancy_mean", 1.0),
    "ring_occupancy_max": ("keystream_hwsim_ring_occupancy_max", 1.0),
    "core_utilisation": ("keystream_hwsim_core_utilisation_ratio", 1.0),
    "dma_wire_utilisation": ("keystream_hwsim_dma_wire_utilisation_ratio", 1.0),
    "completions_per_interrupt": ("keystream_hwsim_completions_per_interrupt", 1.0),
    "jobs_per_doorbell": ("keystream_hwsim_jobs_per_doorbell", 1.0),
    "latency_mean_ns": ("keystream_hwsim_modeled_latency_mean_seconds", 1e-9),
    "host_cpu_ns_per_job": ("keystream_hwsim_host_cpu_seconds_per_job", 1e-9),
    "software_ns_per_job": ("keystream_hwsim_software_seconds_per_job", 1e-9),
    "host_ghash_ns_per_call": ("keystream_hwsim_host_ghash_seconds_per_call", 1e-9),
}


def prometheus_samples(snap: HwsimSnapshot) -> list[tuple[str, str, dict[str, str], float]]:
    """Flatten a snapshot into Prometheus samples ``(name, type, labels, value)``.

    ``type`` is ``"counter"`` or ``"gauge"``; names carry base units (``_seconds``, ``_bytes_total``) and
    every sample has the label ``preset``. Labelled families:
    ``keystream_hwsim_jobs_total{route=device|software}``,
    ``keystream_hwsim_bytes_total{route=...}``, ``keystream_hwsim_dma_bytes_total{kind=payload|overhead}``,
    ``keystream_hwsim_modeled_latency_seconds{percentile=0.5|0.95|0.99}`` (not ``quantile``: Prometheus
    reserves that label for summaries) and
    ``keystream_hwsim_stage_mean_seconds{stage=...}``.
    """
    base = {"preset": snap.preset}
    samples: list[tuple[str, str, dict[str, str], float]] = []
    for field_name, metric in _COUNTERS.items():
        samples.append((metric, "counter", dict(base), float(getattr(snap, field_name))))
    for field_name, (metric, scale) in _GAUGES.items():
        samples.append((metric, "gauge", dict(base), float(getattr(snap, field_name)) * scale))
    for route, jobs, nbytes in (
        ("device", snap.device_jobs, snap.device_bytes),
        ("software", snap.software_jobs, snap.software_bytes),
    ):
        samples.append(("keystream_hwsim_jobs_total", "counter", {**base, "route": route}, float(jobs)))
        samples.append(("keystream_hwsim_bytes_total", "counter", {**base, "route": route}, float(nbytes)))
    for kind, count in (("payload", snap.dma_payload_bytes), ("overhead", snap.dma_overhead_bytes)):
        samples.append(("keystream_hwsim_dma_bytes_total", "counter", {**base, "kind": kind}, float(count)))
    quantiles = (("0.5", snap.latency_p50_ns), ("0.95", snap.latency_p95_ns), ("0.99", snap.latency_p99_ns))
    for quantile, latency in quantiles:
        labels = {**base, "percentile": quantile}
        samples.append(("keystream_hwsim_modeled_latency_seconds", "gauge", labels, latency * 1e-9))
    for stage, mean in snap.stage_mean_ns.items():
        labels = {**base, "stage": stage}
        samples.append(("keystream_hwsim_stage_mean_seconds", "gauge", labels, mean * 1e-9))
    return samples
