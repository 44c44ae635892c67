"""The model's proof (issue 6, section 5): each test checks the simulator against an independent formula."""

from __future__ import annotations

import math

import pytest

from hwsim.analysis import (
    crossover_formula,
    crossover_size,
    fit_linear,
    offload_region,
    throughput_bound,
    zero_load_job,
)
from hwsim.device import Device, DeviceBusyError, Job, JobSpec
from hwsim.engine import Simulator
from hwsim.metrics import JobRecorder, snapshot
from hwsim.params import PRESETS, DeviceParams, get_preset
from hwsim.resources import KeyRef


def wire_ps(params: DeviceParams, payload: int) -> int:
    return math.ceil((payload + params.dma_header_bytes) * 1e12 / params.dma_bandwidth)


def operation(params: DeviceParams, nbytes: int) -> int:
    """One DMA operation on an idle engine whose bursts all fit the outstanding limit."""
    bursts = [min(params.dma_burst_bytes, nbytes - i) for i in range(0, nbytes, params.dma_burst_bytes)] or [
        0
    ]
    assert len(bursts) <= params.dma_max_outstanding
    return params.dma_setup_ns + -(-sum(wire_ps(params, b) for b in bursts) // 1000) + params.dma_latency_ns


def cycles(params: DeviceParams, count: int) -> int:
    return math.ceil(count * 1e9 / params.clock_hz)


def expected_zero_load(params: DeviceParams, nbytes: int, key_size: int, key_cached: bool) -> int:
    """Sum of the stage costs of a single-burst job on an idle device, written out from the parameters."""
    k = (16, 24, 32).index(key_size)
    blocks = -(-nbytes // 16)
    total = params.doorbell_ns + operation(params, params.descriptor_bytes)
    if not key_cached:
        total += operation(params, params.key_load_bytes) + cycles(params, params.key_expansion_cycles[k])
    if nbytes:
        transfer = operation(params, nbytes)
        compute = cycles(
            params, params.core_latency_cycles[k] + (blocks - 1) * params.issue_interval_cycles[k]
        )
        total += transfer + compute + transfer
    total += operation(params, params.completion_bytes)
    if params.notify_mode == "poll":
        return -(-total // params.poll_interval_ns) * params.poll_interval_ns + params.poll_cost_ns
    if params.irq_coalesce_count > 1 and params.irq_coalesce_timer_ns > 0:
        total += params.irq_coalesce_timer_ns
    return total + params.irq_latency_ns


ZERO_LOAD_CASES = [
    PRESETS["proposal"],
    PRESETS["pcie-offload"],
    PRESETS["proposal"].replace(notify_mode="poll", poll_interval_ns=700, poll_cost_ns=55),
    PRESETS["proposal"].replace(irq_coalesce_count=8, irq_coalesce_timer_ns=5000, clock_hz=300_000_000),
]


@pytest.mark.parametrize("params", ZERO_LOAD_CASES, ids=lambda p: f"{p.name}-{p.notify_mode}-{p.clock_hz}")
@pytest.mark.parametrize("key_size", [16, 24, 32])
@pytest.mark.parametrize("key_cached", [True, False])
def test_zero_load_latency_is_the_sum_of_stage_costs(
    params: DeviceParams, key_size: int, key_cached: bool
) -> None:
    for nbytes in (0, 1, 16, 17, params.dma_burst_bytes):
        job = zero_load_job(params, nbytes, key_size, key_cached)
        assert sum(job.stages().values()) == job.latency_ns
        expected = expected_zero_load(params, nbytes, key_size, key_cached)
        if key_cached and params.notify_mode == "poll":
            # the warm-up job shifts the start off a poll boundary; compare the device-side part instead
            assert job.t_cq_done is not None and job.t_notified is not None
            assert job.latency_ns - (job.t_notified - job.t_cq_done) == expected_zero_load(
                params.replace(notify_mode="interrupt", irq_coalesce_count=1, irq_latency_ns=0),
                nbytes,
                key_size,
                key_cached,
            )
        else:
            assert job.latency_ns == expected, (nbytes, job.stages())
        assert job.stages()["key_load"] == (0 if key_cached else job.stages()["key_load"])


@pytest.mark.parametrize(
    ("changes", "bound"),
    [
        # DMA-bound: 16 GB/s wire, 8-byte header per 64-byte burst -> 16e9 * 64/72 / 2
        ({"dma_header_bytes": 8, "dma_max_outstanding": 64}, 16e9 * 64 / 72 / 2),
        # core-bound: II = 4 at 1 GHz -> 4 GB/s, below the DMA's 8 GB/s
        ({"issue_interval_cycles": (4, 4, 4), "dma_max_outstanding": 64}, 4e9),
        # slow clock: 250 MHz pipelined core -> 4 GB/s
        ({"clock_hz": 250_000_000, "dma_max_outstanding": 64, "dma_burst_bytes": 256}, 4e9),
    ],
)
def test_one_large_job_runs_at_min_of_core_and_dma(changes: dict[str, object], bound: float) -> None:
    params = PRESETS["proposal"].replace(**changes)
    nbytes = 4 << 20
    job = zero_load_job(params, nbytes)
    rate = nbytes / job.latency_ns * 1e9
    expected = min(params.core_rate(), params.dma_bandwidth * params.dma_efficiency() / 2)
    assert expected == pytest.approx(bound)
    assert rate == pytest.approx(expected, rel=0.02)


def poisson_run(
    params: DeviceParams, rate_per_ns: float, count: int, nbytes: int, seed: int
) -> tuple[Device, list[Job]]:
    """Submit ``count`` jobs with exponential inter-arrival times; run to the end."""
    sim = Simulator(seed)
    device = Device(params, sim)
    done: list[Job] = []
    key = KeyRef(1)
    arrival = 0.0
    for _ in range(count):
        arrival += sim.random.expovariate(rate_per_ns)
        sim.run_until(int(arrival))
        device.submit([JobSpec(nbytes, key)], done.append)
    sim.run()
    return device, done


def test_littles_law_on_a_poisson_workload() -> None:
    params = PRESETS["pcie-offload"]
    rate = 0.4 * throughput_bound(params) / 1e9 / 4096  # jobs per ns: 40% of the DMA-bound capacity
    device, jobs = poisson_run(params, rate, 4000, 4096, seed=7)
    last_arrival = max(job.t_submitted for job in jobs)
    horizon = device.sim.now
    mean_occupancy = device.occupancy_area() / horizon
    mean_sojourn = sum(job.latency_ns for job in jobs) / len(jobs)
    offered = len(jobs) / horizon
    assert mean_occupancy > 1.0
    assert mean_occupancy == pytest.approx(offered * mean_sojourn, rel=0.05)
    # with the nominal arrival rate over the arrival window, too
    assert mean_occupancy * horizon / last_arrival == pytest.approx(rate * mean_sojourn, rel=0.05)


def test_md1_mean_sojourn_at_utilisation_half() -> None:
    params = PRESETS["proposal"].replace(irq_coalesce_count=1, irq_coalesce_timer_ns=0)
    warm = zero_load_job(params, 1024)
    assert warm.t_cq_done is not None and warm.t_fetch_start is not None
    service = warm.t_cq_done - warm.t_fetch_start  # the core is the single server
    rho = 0.5
    device, jobs = poisson_run(params, rho / service, 20000, 1024, seed=3)
    sojourns = []
    for job in jobs[100:]:
        assert job.t_cq_done is not None
        sojourns.append(job.t_cq_done - job.t_submitted - params.doorbell_ns)
    measured = sum(sojourns) / len(sojourns)
    expected = service + rho * service / (2 * (1 - rho))
    assert measured == pytest.approx(expected, rel=0.10)
    assert min(sojourns) == service  # deterministic service: a job that finds the core idle takes exactly S
    snap = snapshot(device, JobRecorder())
    assert snap.core_utilisation == pytest.approx(rho, rel=0.05)


def test_full_ring_rejects_and_recovers() -> None:
    params = PRESETS["pcie-offload"].replace(ring_depth=4)
    device = Device(params)
    key = KeyRef(1)
    device.submit([JobSpec(64, key)] * 3)
    with pytest.raises(DeviceBusyError, match="ring full"):
        device.submit([JobSpec(64, key)] * 2)
    assert device.counters.rejects == 2
    device.submit([JobSpec(64, key)])
    with pytest.raises(DeviceBusyError):
        device.submit([JobSpec(64, key)])
    assert device.occupancy == 4 and device.counters.occupancy_max == 4
    device.sim.run()
    assert device.occupancy == 0 and device.free_slots == 4
    device.submit([JobSpec(64, key)] * 4)
    assert device.counters.rejects == 3


def test_key_slot_eviction_zeroises() -> None:
    params = PRESETS["proposal"].replace(key_slots=2)
    device = Device(params)
    materials = {1: bytes(range(1, 17)), 2: bytes(range(101, 125)), 3: bytes(range(200, 232))}
    keys = {handle: KeyRef(handle, len(m), m) for handle, m in materials.items()}
    for handle in (1, 2):
        device.submit([JobSpec(32, keys[handle])])
        device.sim.run()
    slot_of_1 = device.keys.slot_of(1)
    assert slot_of_1 is not None
    assert bytes(device.keys.slots[slot_of_1][:16]) == materials[1]
    (job,) = device.submit([JobSpec(32, keys[3])])
    device.sim.run_while(lambda: job.t_fetch_done is None)
    assert device.keys.slot_of(1) is None  # key 1 was least recently used
    assert device.keys.slots[slot_of_1] == bytearray(32)  # zeroised before the new key arrives
    assert all(materials[1] not in bytes(slot) for slot in device.keys.slots)
    device.sim.run()
    assert bytes(device.keys.slots[slot_of_1]) == materials[3]
    assert (device.counters.key_misses, device.counters.key_evictions, device.counters.key_hits) == (3, 1, 0)
    device.submit([JobSpec(32, keys[3])])
    device.sim.run()
    assert device.counters.key_hits == 1
    device.keys.zeroise_all()
    assert all(slot == bytearray(32) for slot in device.keys.slots)


def test_interrupt_coalescing_bounds_latency_by_the_timer() -> None:
    params = PRESETS["pcie-offload"]
    timer = params.irq_coalesce_timer_ns
    # low load: each completion waits for the timer, never longer
    _, sparse = poisson_run(params, 1 / 200_000, 300, 512, seed=11)
    for job in sparse:
        assert job.t_notified is not None and job.t_cq_done is not None
        assert job.t_notified - job.t_cq_done <= timer + params.irq_latency_ns
    waits = [job.t_notified - job.t_cq_done for job in sparse if job.t_notified and job.t_cq_done]
    assert max(waits) == timer + params.irq_latency_ns
    # a burst fills the count threshold: 64 completions need far fewer than 64 interrupts
    device = Device(params)
    jobs = device.submit([JobSpec(512, KeyRef(1))] * 64)
    device.sim.run()
    for job in jobs:
        assert job.t_notified is not None and job.t_cq_done is not None
        assert job.t_notified - job.t_cq_done <= timer + params.irq_latency_ns
    assert device.counters.interrupts <= 64 // params.irq_coalesce_count + 1
    assert snapshot(device, JobRecorder()).completions_per_interrupt >= params.irq_coalesce_count - 1


@pytest.mark.parametrize(
    ("preset", "expected"), [("opentitan", (12, 14, 16)), ("opentitan-masked", (56, 66, 72))]
)
def test_opentitan_reproduces_cycles_per_block(preset: str, expected: tuple[int, int, int]) -> None:
    params = get_preset(preset)
    period_ns = 1e9 / params.clock_hz
    for key_size, cycles_per_block in zip((16, 24, 32), expected, strict=True):
        one = zero_load_job(params, 16, key_size)
        assert one.stages()["compute"] == cycles_per_block * period_ns
        many = zero_load_job(params, 16 * 1025, key_size)
        marginal = (many.latency_ns - one.latency_ns) / 1024 / period_ns
        assert marginal == pytest.approx(cycles_per_block, abs=0.05)


def test_opentitan_streams_133_megabytes_per_second() -> None:
    nbytes = 256 << 10
    job = zero_load_job(get_preset("opentitan"), nbytes)
    assert nbytes / job.latency_ns * 1e3 == pytest.approx(133.3, rel=0.01)  # MB/s: 16 B per 120 ns


@pytest.mark.parametrize("preset", ["proposal", "pcie-offload"])
@pytest.mark.parametrize(("overhead_sw", "bandwidth_sw"), [(1000.0, 1.0), (8000.0, 0.5), (300.0, 2.0)])
def test_crossover_matches_formula(preset: str, overhead_sw: float, bandwidth_sw: float) -> None:
    params = get_preset(preset)
    sizes = [1 << 16, 1 << 18, 1 << 20]
    overhead_off, bandwidth_off = fit_linear([(n, float(zero_load_job(params, n).latency_ns)) for n in sizes])
    formula = crossover_formula(overhead_off, bandwidth_off, overhead_sw, bandwidth_sw)
    simulated = crossover_size(params, overhead_sw, bandwidth_sw)
    assert simulated is not None and math.isfinite(formula)
    assert simulated == pytest.approx(formula, rel=0.10)


def test_crossover_formula_edge_cases() -> None:
    assert crossover_formula(100.0, 2.0, 200.0, 1.0) == 0.0  # device better everywhere
    assert crossover_formula(200.0, 1.0, 100.0, 2.0) == 0.0  # device worse everywhere: no crossing at n > 0
    assert offload_region(1.0, 2.0) == "below"
    assert crossover_formula(300.0, 2.0, 100.0, 1.0) == pytest.approx(400.0)  # faster above 400 B
    assert crossover_formula(100.0, 1.0, 300.0, 2.0) == pytest.approx(400.0)  # faster below 400 B
    assert crossover_formula(300.0, 1.0, 100.0, 1.0) == math.inf


@pytest.mark.parametrize("preset", ["proposal", "pcie-offload", "opentitan"])
def test_lone_job_replay_equals_full_simulation(preset: str) -> None:
    params = get_preset(preset)
    if preset == "proposal":
        params = params.replace(key_slots=2, notify_mode="poll", poll_interval_ns=333)
    runs = []
    for replay in (False, True):
        sim = Simulator(5)
        device = Device(params, sim)
        device.replay_enabled = replay
        timeline = []
        for step in range(40):
            size = sim.random.choice([0, 1, 16, 100, 4096, 5000, 70_000])
            key = KeyRef(sim.random.randrange(3) + 1, sim.random.choice([16, 24, 32]))
            sim.run_until(sim.now + sim.random.randrange(0, 20_000))
            job = device.submit_lone(JobSpec(size, key), requested_at=sim.now - step)
            timeline.append((job.t_requested, job.t_submitted, job.key_hit, tuple(job.stages().values())))
        runs.append((timeline, device.counters, device.occupancy_area(), sim.now))
    assert runs[0] == runs[1]


def test_jobs_wait_for_a_pinned_slot_and_share_a_key_being_loaded() -> None:
    params = PRESETS["pcie-offload"].replace(key_slots=1, irq_coalesce_count=1)
    device = Device(params)
    jobs = device.submit([JobSpec(1024, KeyRef(handle)) for handle in range(1, 5)])
    device.sim.run()
    assert all(job.t_notified is not None for job in jobs)
    assert (device.counters.key_misses, device.counters.key_evictions) == (4, 3)
    # one slot: each job's key load waits for the previous job to release it
    key_done = sorted(int(job.t_key_done or 0) for job in jobs)
    cq_done = sorted(int(job.t_cq_done or 0) for job in jobs)
    assert all(key_done[i + 1] > cq_done[i] for i in range(3))
    device = Device(PRESETS["pcie-offload"])
    first, second = device.submit([JobSpec(1024, KeyRef(9)), JobSpec(1024, KeyRef(9))])
    device.sim.run()
    assert (device.counters.key_misses, device.counters.key_hits) == (1, 1)
    assert second.key_hit and not first.key_hit
    assert second.t_key_done == first.t_key_done  # the hit waited for the load in flight
