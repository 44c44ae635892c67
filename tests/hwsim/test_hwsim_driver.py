"""The hwsim backend and driver: bytes, async batching, busy handling, realtime, offload policy, metrics."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

import aescore
import hwsim
from hwsim import DeviceBusyError, HwsimBackend, JobSpec, KeyRef, get_preset, prometheus_samples
from hwsim.analysis import zero_load_job
from hwsim.driver import DeviceDriver

KEY = bytes(range(32))
COUNTER = bytes.fromhex("f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff")


def software_names() -> list[str]:
    return [name for name in ("aesni", "python") if aescore.available_backends().get(name) is None]


@pytest.mark.parametrize("software", software_names())
@pytest.mark.parametrize("preset", ["proposal", "pcie-offload", "opentitan"])
def test_bytes_equal_the_software_backends(software: str, preset: str) -> None:
    backend = HwsimBackend(preset, software=software)
    assert backend.info()["software_core"] == software
    for reference_name in software_names():
        reference = aescore.get_backend(reference_name)
        for key_size in (16, 24, 32):
            ours = backend.expand_key(KEY[:key_size])
            theirs = reference.expand_key(KEY[:key_size])
            for size, offset in ((0, 0), (1, 0), (17, 5), (4096, 31), (70_001, 2**40 + 3)):
                data = bytes((i * 7) & 0xFF for i in range(size))
                expected = reference.ctr_xor(theirs, COUNTER, data, offset)
                assert backend.ctr_xor(ours, COUNTER, data, offset) == expected
                out = bytearray(size)
                assert backend.ctr_xor(ours, COUNTER, data, offset, out) is None
                assert bytes(out) == expected
                assert asyncio.run(backend.ctr_xor_async(ours, COUNTER, data, offset)) == expected


def test_registered_backend_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEYSTREAM_HWSIM_PRESET", "pcie-offload")
    monkeypatch.setenv("KEYSTREAM_HWSIM_REALTIME", "1")
    monkeypatch.setenv("KEYSTREAM_HWSIM_REALTIME_SCALE", "0.5")
    monkeypatch.setenv("KEYSTREAM_HWSIM_OFFLOAD_THRESHOLD", "2048")
    backend = hwsim.from_env()
    info = backend.info()
    assert (info["preset"], info["realtime"], info["offload_threshold"]) == ("pcie-offload", True, 2048)
    assert backend.driver.realtime_scale == 0.5
    monkeypatch.delenv("KEYSTREAM_HWSIM_PRESET")
    monkeypatch.setenv("KEYSTREAM_HWSIM_REALTIME", "0")
    monkeypatch.delenv("KEYSTREAM_HWSIM_OFFLOAD_THRESHOLD")
    assert hwsim.from_env().info()["preset"] == "proposal"
    assert hwsim.from_env().info()["offload_threshold"] == 0
    for name, bad in (
        ("KEYSTREAM_HWSIM_PRESET", "nvidia"),
        ("KEYSTREAM_HWSIM_REALTIME", "maybe"),
        ("KEYSTREAM_HWSIM_REALTIME_SCALE", "-1"),
        ("KEYSTREAM_HWSIM_OFFLOAD_THRESHOLD", "big"),
        ("KEYSTREAM_HWSIM_OFFLOAD_THRESHOLD", "-5"),
    ):
        with monkeypatch.context() as patch:
            patch.setenv(name, bad)
            with pytest.raises(ValueError):
                hwsim.from_env()
    assert aescore.available_backends()["hwsim"] is None
    assert aescore.get_backend("hwsim").info()["preset"] in hwsim.preset_names()


async def test_many_in_flight_share_doorbells_and_wait_for_ring_room() -> None:
    backend = HwsimBackend(get_preset("pcie-offload").replace(ring_depth=32))
    reference = aescore.get_backend("python")
    key, reference_key = backend.expand_key(KEY[:16]), reference.expand_key(KEY[:16])
    payloads = [bytes([i % 251]) * (64 + i) for i in range(300)]
    results = await asyncio.gather(*(backend.ctr_xor_async(key, COUNTER, p) for p in payloads))
    assert results == [reference.ctr_xor(reference_key, COUNTER, p) for p in payloads]
    snap = backend.snapshot()
    assert snap.device_jobs == 300 and snap.rejects == 0
    assert snap.doorbells < 300 and snap.jobs_per_doorbell > 8  # one doorbell per batch that fit
    assert snap.ring_occupancy_max == 32  # full, and never beyond
    assert snap.stage_mean_ns["queue_wait"] > zero_load_job(backend.params, 64).stages()["queue_wait"]
    assert snap.completions_per_interrupt > 1  # coalescing under load


async def test_busy_ring_can_fail_fast() -> None:
    backend = HwsimBackend(get_preset("proposal").replace(ring_depth=4), on_busy="error")
    key = backend.expand_key(KEY[:16])
    outcomes = await asyncio.gather(
        *(backend.ctr_xor_async(key, COUNTER, bytes(256)) for _ in range(10)), return_exceptions=True
    )
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(errors) == 6 and all(isinstance(e, DeviceBusyError) for e in errors)
    assert "ring full" in str(errors[0])
    assert backend.snapshot().rejects == 6 and backend.snapshot().device_jobs == 4
    # after the batch the ring is empty again
    assert backend.ctr_xor(key, COUNTER, bytes(16)) is not None


def test_driver_waits_for_room_in_virtual_time() -> None:
    params = get_preset("proposal").replace(ring_depth=2)
    driver = DeviceDriver(params)
    jobs = driver.run([JobSpec(1024, KeyRef(1))] * 6)
    assert all(not isinstance(job, DeviceBusyError) for job in jobs)
    waits = [job.stages()["queue_wait"] for job in jobs if not isinstance(job, DeviceBusyError)]
    assert waits[-1] > waits[0]  # the later ones waited for an entry
    assert driver.snapshot().ring_occupancy_max == 2


@pytest.mark.serial  # wall-clock bounds on the modeled latency: alone
def test_sync_realtime_blocks_for_scaled_latency() -> None:
    backend = HwsimBackend("opentitan", realtime=True, realtime_scale=20.0)
    key = backend.expand_key(KEY[:16])
    modeled = zero_load_job(backend.params, 16384).latency_ns  # ~123 us -> ~2.5 ms of wall time
    backend.ctr_xor(key, COUNTER, bytes(16384))  # warm the key slot
    start = time.perf_counter_ns()
    backend.ctr_xor(key, COUNTER, bytes(16384))
    elapsed = time.perf_counter_ns() - start
    assert elapsed >= modeled * 20
    assert elapsed < modeled * 20 + 200_000_000
    immediate = HwsimBackend("opentitan")
    key = immediate.expand_key(KEY[:16])
    for _ in range(2):  # the first call of a size (key miss, then hit) simulates it in full
        immediate.ctr_xor(key, COUNTER, bytes(16384))
    start = time.perf_counter_ns()
    immediate.ctr_xor(key, COUNTER, bytes(16384))
    assert time.perf_counter_ns() - start < modeled * 20


@pytest.mark.serial  # wall-clock bounds on the modeled latency: alone
async def test_async_realtime_does_not_block_the_loop() -> None:
    backend = HwsimBackend("opentitan-masked", realtime=True, realtime_scale=20.0)
    key = backend.expand_key(KEY[:16])
    modeled = zero_load_job(backend.params, 8192).latency_ns * 20  # ~5.8 ms of wall time
    for _ in range(2):  # key miss, then hit: each simulated in full once, replayed afterwards
        await backend.ctr_xor_async(key, COUNTER, bytes(8192))
    ticks = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    start = time.perf_counter_ns()
    await backend.ctr_xor_async(key, COUNTER, bytes(8192))
    elapsed = time.perf_counter_ns() - start
    stop.set()
    await task
    assert elapsed >= modeled
    assert ticks > 10  # the loop kept running while the job was "on the device"


def test_offload_policy_routes_small_jobs_to_software() -> None:
    backend = HwsimBackend("proposal", offload_threshold=1024)
    key = backend.expand_key(KEY[:16])
    for size in (10, 1023, 1024, 5000):
        backend.ctr_xor(key, COUNTER, bytes(size))
    asyncio.run(backend.ctr_xor_async(key, COUNTER, bytes(100)))
    snap = backend.snapshot()
    assert (snap.software_jobs, snap.software_bytes) == (3, 10 + 1023 + 100)
    assert (snap.device_jobs, snap.device_bytes) == (2, 1024 + 5000)
    assert snap.software_ns_per_job > 0
    # software time never shows up as device time: the device saw exactly two jobs
    assert snap.jobs_submitted == 2 and len(backend.driver.recorder.latencies) == 2
    with pytest.raises(ValueError, match="offload_threshold"):
        HwsimBackend(offload_threshold=-1)


def test_auto_threshold_is_the_models_crossover_against_the_software_core() -> None:
    python_core = HwsimBackend("proposal", offload_threshold="auto", software="python")
    crossover = python_core.crossover_bytes
    assert crossover is not None and 0 <= crossover < 4096  # pure Python is slow: offload pays early
    assert python_core.offload_threshold == crossover
    assert python_core.info()["offload_threshold_mode"] == "auto"
    if "aesni" in software_names():
        aesni_core = HwsimBackend("opentitan", offload_threshold="auto", software="aesni")
        assert aesni_core.crossover_bytes is None  # a 133 MB/s core never beats AES-NI
        key = aesni_core.expand_key(KEY[:16])
        aesni_core.ctr_xor(key, COUNTER, bytes(1 << 20))
        assert aesni_core.snapshot().software_jobs == 1


def test_threads_share_one_backend() -> None:
    backend = HwsimBackend("pcie-offload")
    reference = aescore.get_backend("python")
    failures: list[str] = []

    def worker(index: int) -> None:
        key = backend.expand_key(KEY[: 16 + 8 * (index % 3)])
        reference_key = reference.expand_key(KEY[: 16 + 8 * (index % 3)])
        for size in range(1, 400, 13):
            data = bytes([index]) * size
            if backend.ctr_xor(key, COUNTER, data) != reference.ctr_xor(reference_key, COUNTER, data):
                failures.append(f"thread {index} size {size}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert failures == []
    assert backend.snapshot().device_jobs == 4 * len(range(1, 400, 13))


def test_snapshot_exports_and_hides_key_material() -> None:
    backend = HwsimBackend(get_preset("proposal").replace(key_slots=2))
    keys = [backend.expand_key(bytes([k]) * 16) for k in range(3)]
    for key in keys * 2:
        backend.ctr_xor(key, COUNTER, bytes(300))
    snap = backend.snapshot()
    data = snap.to_dict()
    assert json.loads(json.dumps(data)) == data
    assert (snap.key_misses, snap.key_evictions, snap.key_hits) == (6, 4, 0)
    assert snap.dma_payload_bytes == 2 * 6 * 300  # in and out
    assert snap.dma_overhead_bytes > 0
    assert snap.latency_p50_ns <= snap.latency_p95_ns <= snap.latency_p99_ns
    assert snap.host_cpu_ns_per_job > 0
    assert sum(snap.stage_mean_ns.values()) == pytest.approx(snap.latency_mean_ns)
    samples = prometheus_samples(snap)
    identities = [(name, tuple(sorted(labels.items()))) for name, _, labels, _ in samples]
    assert len(identities) == len(set(identities))
    assert all(
        name.startswith("keystream_hwsim_") and kind in ("gauge", "counter") for name, kind, _, _ in samples
    )
    lookup = {(name, labels.get("route")): value for name, _, labels, value in samples}
    assert lookup[("keystream_hwsim_jobs_total", "device")] == 6
    for key in keys:
        assert "0101" not in repr(key) and "hwsim" in repr(key)
    assert "material" not in repr(KeyRef(1, 16, bytes(16)))
    assert "01010101" not in json.dumps(data)


def test_keys_from_other_backends_are_refused() -> None:
    backend = HwsimBackend()
    foreign = aescore.get_backend("python").expand_key(KEY[:16])
    with pytest.raises(TypeError, match="'hwsim' backend"):
        backend.ctr_xor(foreign, COUNTER, b"x")
    with pytest.raises(TypeError, match="'hwsim' backend"):
        asyncio.run(backend.ctr_xor_async(foreign, COUNTER, b"x"))
