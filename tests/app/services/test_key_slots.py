"""The python backend's keys live in shared, locked slots and never travel in a pickle.

Before, each pool call pickled the key (``bytes``) with its arguments: the pickle and its unpickled copy lay
in the parent's and the worker's heap, never zeroed.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from multiprocessing import reduction
from pathlib import Path

import pytest

import aescore
from app.errors import ServiceUnavailableError
from app.services import _offload_worker
from app.services.key_slots import SEGMENT_SIZE, SLOTS_PER_SEGMENT, KeySlots, SlotReader, StaleKeyError
from app.services.offload import ProcessOffloadBackend

ROOT = Path(__file__).resolve().parents[3]
COUNTER = bytes(16)
PYTHON = aescore.get_backend("python")


def _expected(key: bytes, data: bytes) -> bytes:
    result = PYTHON.ctr_xor(PYTHON.expand_key(key), COUNTER, data)
    assert result is not None
    return result


@pytest.fixture
def slots() -> Iterator[KeySlots]:
    unlocked: list[int] = []
    region = KeySlots(unlocked.append)
    try:
        yield region
    finally:
        region.close()


@pytest.fixture
def offload() -> Iterator[ProcessOffloadBackend]:
    backend = ProcessOffloadBackend(1)
    backend.start()
    try:
        yield backend
    finally:
        backend.shutdown()


def _reader(slots: KeySlots) -> SlotReader:
    return SlotReader(os.dup(slots._fd))


def _region_bytes(slots: KeySlots) -> bytes:
    return os.pread(slots._fd, os.fstat(slots._fd).st_size, 0)


def test_a_reused_slot_is_never_read_with_the_earlier_keys_generation(slots: KeySlots) -> None:
    reader = _reader(slots)
    first_key = os.urandom(32)
    first = slots.take(memoryview(first_key))
    assert bytes(reader.key(first.index, first.generation)) == first_key
    index, generation = first.index, first.generation
    del first  # released: zeroed and free
    assert first_key not in _region_bytes(slots)
    second_key = os.urandom(16)
    second = slots.take(memoryview(second_key))
    assert second.index == index and second.generation != generation  # the same slot, a new generation
    with pytest.raises(StaleKeyError):
        reader.key(index, generation)
    assert bytes(reader.key(second.index, second.generation)) == second_key


def test_wipe_zeroes_every_slot_and_keeps_held_slots_reserved(slots: KeySlots) -> None:
    reader = _reader(slots)
    keys = [os.urandom(32) for _ in range(3)]
    leases = [slots.take(memoryview(key)) for key in keys]
    slots.wipe()
    assert _region_bytes(slots) == bytes(SEGMENT_SIZE)
    for lease in leases:
        with pytest.raises(StaleKeyError):
            reader.check(lease.index, lease.generation)
    fresh = slots.take(memoryview(os.urandom(16)))
    assert fresh.index not in {lease.index for lease in leases}  # not reused while a holder has it
    assert "generation" in repr(fresh) and keys[0].hex() not in repr(fresh)


def test_the_region_grows_by_segments_and_a_reader_maps_them_as_named(slots: KeySlots) -> None:
    reader = _reader(slots)
    keys = [os.urandom(16) for _ in range(SLOTS_PER_SEGMENT + 3)]
    leases = [slots.take(memoryview(key)) for key in keys]
    assert os.fstat(slots._fd).st_size == 2 * SEGMENT_SIZE
    assert max(lease.index for lease in leases) >= SLOTS_PER_SEGMENT
    for key, lease in zip(keys, leases, strict=True):
        assert bytes(reader.key(lease.index, lease.generation)) == key
    with pytest.raises(StaleKeyError):
        reader.key(5 * SLOTS_PER_SEGMENT, leases[0].generation)  # past the region: refused, not a crash


def test_a_closed_region_is_zeroed_and_refuses_new_keys() -> None:
    region = KeySlots(lambda nbytes: None)
    lease = region.take(memoryview(os.urandom(32)))
    region.close()
    region.close()
    with pytest.raises(ValueError, match="closed"):
        region.take(memoryview(os.urandom(32)))
    del lease  # releasing into a closed region does nothing


def test_a_lease_cannot_be_pickled(slots: KeySlots) -> None:
    lease = slots.take(memoryview(os.urandom(16)))
    with pytest.raises(TypeError, match="cannot be pickled"):
        reduction.ForkingPickler.dumps(lease)


def test_no_call_to_the_pool_pickles_the_key(
    offload: ProcessOffloadBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every call item the pool sends goes through ``ForkingPickler.dumps``; none may hold the key."""
    sent: list[bytes] = []
    dumps = reduction.ForkingPickler.dumps

    def recording(obj: object, protocol: int | None = None) -> memoryview:
        pickled = dumps(obj, protocol)
        sent.append(bytes(pickled))
        return pickled

    monkeypatch.setattr(reduction.ForkingPickler, "dumps", recording)
    key = os.urandom(32)
    data = b"a message to encrypt, long enough to be recognised in a pickle"
    expanded = offload.expand_key(bytearray(key))
    assert offload.ctr_xor(expanded, COUNTER, data) == _expected(key, data)
    gcm = offload.gcm_key(memoryview(key))
    sealed = gcm.encrypt(bytes(12), data, b"ad")
    assert sealed == PYTHON.gcm_key(key).encrypt(bytes(12), data, b"ad")
    assert any(data in pickled for pickled in sent)  # the recorder saw the calls
    assert not [pickled for pickled in sent if key[:16] in pickled or key[16:] in pickled]


def _smaps_flags(pid: int) -> list[str]:
    """The ``VmFlags`` of every mapping of the key slots region in process ``pid``."""
    text = Path(f"/proc/{pid}/smaps").read_text()
    flags = []
    for block in re.split(r"\n(?=[0-9a-f]+-[0-9a-f]+ )", text):
        if "keystream-key-slots" in block.splitlines()[0]:
            match = re.search(r"^VmFlags:(.*)$", block, re.M)
            assert match is not None
            flags.append(match.group(1))
    return flags


def test_the_region_is_left_out_of_dumps_in_the_parent_and_every_worker(
    offload: ProcessOffloadBackend,
) -> None:
    key = os.urandom(16)
    expanded = offload.expand_key(key)
    assert offload.ctr_xor(expanded, COUNTER, b"x") == _expected(key, b"x")
    pool = offload._pool
    assert pool is not None
    (worker,) = pool._processes
    for pid in (os.getpid(), worker):
        flags = _smaps_flags(pid)
        assert flags, f"process {pid} does not map the key slots"
        assert all(" dd" in entry for entry in flags), flags  # MADV_DONTDUMP
        assert all(" sh" in entry for entry in flags), flags  # shared, not a private copy
        if _memlock_allows():
            assert all(" lo" in entry for entry in flags), flags  # mlock


def _memlock_allows() -> bool:
    """Whether this process may lock the region (root, or a locked-memory limit of at least 1 MiB)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return os.geteuid() == 0 or soft == resource.RLIM_INFINITY or soft >= 1 << 20


def test_a_key_wiped_before_its_call_gives_a_clean_503_and_the_pool_comes_back(
    offload: ProcessOffloadBackend,
) -> None:
    key = os.urandom(32)
    expanded = offload.expand_key(key)
    assert offload.ctr_xor(expanded, COUNTER, b"before") == _expected(key, b"before")
    offload.wipe()
    assert offload._pool is None  # the workers, with their expanded schedules, are stopped
    with pytest.raises(ServiceUnavailableError, match="wiped"):
        offload.ctr_xor(expanded, COUNTER, b"after")
    gcm = offload.gcm_key(key)
    offload.wipe()
    with pytest.raises(ServiceUnavailableError, match="wiped"):
        gcm.encrypt(bytes(12), b"after", None)
    fresh = offload.expand_key(key)  # a new pool serves new keys
    assert offload.ctr_xor(fresh, COUNTER, b"again") == _expected(key, b"again")
    assert offload.restarts == 0  # a wipe is not a breakage


def test_keys_made_before_a_shutdown_are_refused_after_it(offload: ProcessOffloadBackend) -> None:
    key = os.urandom(16)
    expanded = offload.expand_key(key)
    offload.shutdown()
    with pytest.raises(ServiceUnavailableError, match="wiped"):
        offload.ctr_xor(expanded, COUNTER, b"x")
    fresh = offload.expand_key(key)
    assert offload.ctr_xor(fresh, COUNTER, b"x") == _expected(key, b"x")


def test_bad_keys_are_refused_before_anything_reaches_a_slot(offload: ProcessOffloadBackend) -> None:
    with pytest.raises(aescore.AesCoreValueError, match="16, 24 or 32"):
        offload.expand_key(bytes(15))
    with pytest.raises(aescore.AesCoreTypeError):
        offload.gcm_key("a text key of 16")  # type: ignore[arg-type]
    assert offload._slots is None or not offload._slots._held


def test_the_worker_forgets_the_schedules_of_released_keys_at_its_next_call(
    slots: KeySlots, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run the worker's functions in this process, over a reader of the same region."""
    monkeypatch.setattr(_offload_worker, "_reader", _reader(slots))
    monkeypatch.setattr(_offload_worker, "_expanded", type(_offload_worker._expanded)())
    first_key, second_key = os.urandom(16), os.urandom(24)
    first = slots.take(memoryview(first_key))
    assert _offload_worker.ctr_xor(first.index, first.generation, COUNTER, b"one", 0) == _expected(
        first_key, b"one"
    )
    assert list(_offload_worker._expanded) == [(first.index, first.generation)]
    first_index, first_generation = first.index, first.generation
    del first
    second = slots.take(memoryview(second_key))
    assert _offload_worker.ctr_xor(second.index, second.generation, COUNTER, b"two", 0) == _expected(
        second_key, b"two"
    )
    assert list(_offload_worker._expanded) == [(second.index, second.generation)]
    with pytest.raises(StaleKeyError):
        _offload_worker.ctr_xor(first_index, first_generation, COUNTER, b"one", 0)
    with pytest.raises(StaleKeyError):
        _offload_worker.gcm(True, first_index, first_generation, bytes(12), b"one", None)


def test_calls_running_or_queued_when_a_wipe_stops_the_pool_end_in_a_result_or_a_503(
    offload: ProcessOffloadBackend,
) -> None:
    """A wipe stops the pool without waiting: the running call finishes, queued ones were cancelled (that
    surfaced as ``CancelledError``, a 500) or find their key wiped; none may fail another way."""
    key = os.urandom(16)
    expanded = offload.expand_key(key)
    big = bytes(1 << 20)
    outcomes: list[object] = []

    def call() -> None:
        try:
            outcomes.append(offload.ctr_xor(expanded, COUNTER, big))
        except Exception as exc:
            outcomes.append(exc)

    callers = [threading.Thread(target=call) for _ in range(4)]
    for thread in callers:
        thread.start()
    pool = offload._pool
    assert pool is not None
    deadline = time.monotonic() + 10
    while len(pool._pending_work_items) < 4:
        assert time.monotonic() < deadline, "the calls never reached the pool"
        time.sleep(0.005)
    offload.wipe()
    for thread in callers:
        thread.join(timeout=60)
    expected = _expected(key, big)
    failures = [outcome for outcome in outcomes if not isinstance(outcome, bytes)]
    assert len(outcomes) == 4
    assert all(outcome == expected for outcome in outcomes if isinstance(outcome, bytes))
    assert failures and all(isinstance(failure, ServiceUnavailableError) for failure in failures), failures


def test_pool_workers_turn_core_dumps_off_when_their_parent_did(tmp_path: Path) -> None:
    """A spawned process is dumpable again after ``exec``: a worker must turn dumps off itself, or ptrace and
    ``/proc/<pid>/mem`` (which ignore ``MADV_DONTDUMP``) stay open to its user. Run in a child process: the
    test process keeps its own core limit."""
    script = (
        "from app.core.memory_protection import core_dumps_disabled, disable_core_dumps\n"
        "from app.services.offload import ProcessOffloadBackend\n"
        "for undumpable in (False, True):\n"
        "    if undumpable:\n"
        "        disable_core_dumps()\n"
        "    backend = ProcessOffloadBackend(1)\n"
        "    print(backend.run(core_dumps_disabled))\n"
        "    backend.shutdown()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]
