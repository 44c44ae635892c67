"""Closed-form views of the model: zero-load latency, linear fits, crossover sizes, Amdahl speed-ups.

These run the device model (they never time the host); the report and the driver's ``auto`` offload
threshold use them.
"""

from __future__ import annotations

import math

from .device import Device, Job, JobSpec
from .params import DeviceParams
from .resources import KeyRef

__all__ = [
    "amdahl",
    "crossover_formula",
    "crossover_size",
    "fit_linear",
    "offload_region",
    "throughput_bound",
    "zero_load_job",
]


def zero_load_job(params: DeviceParams, nbytes: int, key_size: int = 16, key_cached: bool = True) -> Job:
    """Run one job on an idle device and return its record.

    Args:
        params: device parameters.
        nbytes: job size.
        key_size: 16, 24 or 32.
        key_cached: when true a first job loads the key and the measured job hits its slot.

    Raises:
        ValueError: a negative size or an unsupported key size.
    """
    device = Device(params)
    key = KeyRef(handle=1, key_size=key_size)
    if key_cached:
        device.submit([JobSpec(0, key)])
        device.sim.run()
    (job,) = device.submit([JobSpec(nbytes, key)])
    device.sim.run()
    return job


def fit_linear(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares ``time = overhead + size / bandwidth`` through ``(size, time)`` points.

    Returns:
        ``(overhead, bandwidth)`` in the units of the points (e.g. ns and bytes/ns).

    Raises:
        ValueError: fewer than two distinct sizes, or a fit with non-positive slope.
    """
    if len({size for size, _ in points}) < 2:
        raise ValueError("need at least two distinct sizes to fit a line")
    count = len(points)
    mean_x = sum(size for size, _ in points) / count
    mean_y = sum(time for _, time in points) / count
    sxx = sum((size - mean_x) ** 2 for size, _ in points)
    sxy = sum((size - mean_x) * (time - mean_y) for size, time in points)
    slope = sxy / sxx
    if slope <= 0:
        raise ValueError("time does not grow with size: no bandwidth to fit")
    return mean_y - slope * mean_x, 1.0 / slope


def crossover_formula(
    overhead_off: float, bandwidth_off: float, overhead_sw: float, bandwidth_sw: float
) -> float:
    """Where offload and software take equally long, from ``T = O + n/B`` for both sides.

    ``n* = (O_off - O_sw) / (1/B_sw - 1/B_off)``. For ``B_off > B_sw`` offload is faster above ``n*``
    (``0.0``: at every size); for ``B_off < B_sw`` it is faster only *below* ``n*`` (``0.0``: never). Returns
    ``inf`` for equal bandwidths when the device's overhead is no lower; a negative ``n*`` becomes ``0.0``.
    """
    numerator = overhead_off - overhead_sw
    denominator = 1.0 / bandwidth_sw - 1.0 / bandwidth_off
    if denominator == 0:
        return 0.0 if numerator < 0 else math.inf
    return max(numerator / denominator, 0.0)


def offload_region(bandwidth_off: float, bandwidth_sw: float) -> str:
    """``"above"`` if offload wins above the crossover (its streaming rate is higher), else ``"below"``."""
    return "above" if bandwidth_off > bandwidth_sw else "below"


def crossover_size(
    params: DeviceParams, overhead_sw_ns: float, bandwidth_sw: float, key_size: int = 16, limit: int = 1 << 26
) -> int | None:
    """The smallest size at which the modeled zero-load latency beats ``O_sw + n / B_sw`` (bytes/ns).

    Found on the model itself (doubling, then bisection), assuming one crossing (software is faster below
    it). A device whose throughput bound is no higher than the software's never gets a threshold (``None``).

    Returns:
        The size in bytes, ``0`` when the device is faster even for a 1-byte job, ``None`` when the device
        is still slower at ``limit`` bytes.
    """

    def offload_wins(size: int) -> bool:
        return zero_load_job(params, size, key_size).latency_ns < overhead_sw_ns + size / bandwidth_sw

    # A device that streams no faster than software loses on large jobs whatever it does on small ones, and
    # the threshold offloads every job at or above it: no size makes offloading pay. (Checked first: with
    # software overhead measured on a busy machine, the device could win at 1 byte and the answer flip to 0.)
    if throughput_bound(params, key_size) / 1e9 <= bandwidth_sw:
        return None
    if offload_wins(1):
        return 0
    high = 2
    while not offload_wins(high):  # exponential search keeps the simulated jobs near the answer
        if high >= limit:
            return None
        high = min(high * 2, limit)
    low = high // 2
    while high - low > 1:
        middle = (low + high) // 2
        if offload_wins(middle):
            high = middle
        else:
            low = middle
    return high


def throughput_bound(params: DeviceParams, key_size: int = 16) -> float:
    """Upper bound on one large job's rate (bytes/s): min(core, DMA bandwidth x efficiency / 2, outstanding).

    The third term is the latency bound ``D * burst / (2 * (wire + latency))``: every byte needs a read and a
    write transfer, each holding one of ``D`` outstanding slots for its wire time plus latency.
    """
    burst = params.dma_burst_bytes
    wire_ns = (burst + params.dma_header_bytes) * 1e9 / params.dma_bandwidth
    outstanding = params.dma_max_outstanding * burst / (2 * (wire_ns + params.dma_latency_ns)) * 1e9
    return min(params.core_rate(key_size), params.dma_bandwidth * params.dma_efficiency() / 2, outstanding)


def amdahl(p: float, s: float, o: float = 0.0) -> float:
    """Amdahl speed-up ``1 / ((1 - p) + p / s + o)``.

    Args:
        p: fraction of the time spent in the part being accelerated (0..1).
        s: speed-up of that part.
        o: offload overhead as a fraction of the original time (0: the design documents' form).

    Raises:
        ValueError: ``p`` outside [0, 1], ``s`` <= 0 or ``o`` < 0.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be within [0, 1], got {p}")
    if s <= 0:
        raise ValueError(f"s must be > 0, got {s}")
    if o < 0:
        raise ValueError(f"o must be >= 0, got {o}")
    return 1.0 / ((1.0 - p) + p / s + o)
