"""Tests specific to the aesni backend: every ISA path, thread splitting, GIL release, buffer edges, config.

The backend-independent contract (vectors, errors, CtrStream) is the shared suite's job; here each path the
CPU supports (VAES-512, VAES-256, 128-bit AES-NI) is checked against published vectors and pycryptodome,
around the places where its code changes shape: vector-batch boundaries, masked tails, carries of the low
64 bits and of the whole 128-bit counter, the non-temporal-store path for large outputs and the split across
threads. Paths the CPU lacks are skipped with that reason.
"""

from __future__ import annotations

import copy
import os
import pickle
import random
import subprocess
import sys
import threading
from collections.abc import Callable

import pytest

import aescore
from aescore.ctr import _aesni
from tests.aescore.conftest import ticks_during

#: The shared conftest's ``reference_ctr`` fixture: pycryptodome CTR (key, counter int, data, offset).
ReferenceCtr = Callable[[bytes, int, bytes, int], bytes]

if _aesni.unavailable_reason() is not None:  # a real reason (no AES-NI, bad config), never a build failure
    pytest.skip(f"aesni backend unavailable: {_aesni.unavailable_reason()}", allow_module_level=True)

MIB = 1 << 20
#: Lengths around every batch size (16, 64, 128, 256, 512 bytes) and tail shape of the three paths.
EDGE_LENGTHS = sorted(
    {n + d for n in (0, 16, 64, 128, 256, 512, 1024) for d in (-1, 0, 1) if n + d >= 0} | {15, 33, 500, 4097}
)

#: NIST SP 800-38A F.5.1/3/5 (decryption, F.5.2/4/6, is the same XOR): key -> first four ciphertext blocks.
SP800_38A = {
    "2b7e151628aed2a6abf7158809cf4f3c": "874d6191b620e3261bef6864990db6ce9806f66b7970fdff8617187bb9fffdff"
    "5ae4df3edbd5d35e5b4f09020db03eab1e031dda2fbe03d1792170a0f3009cee",
    "8e73b0f7da0e6452c810f32b809079e562f8ead2522c6b7b": "1abc932417521ca24f2b0459fe7e6e0b090339ec0aa6faef"
    "d5ccc2c6f4ce8e941e36b26bd1ebc670d1bd1d665620abf74f78a7f6d29809585a97daec58c6b050",
    "603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4": "601ec313775789a5b7a7f504bbf3d228"
    "f443e3ca4d62b59aca84e990cacaf5c52b0930daa23de94ce87017ba2d84988ddfc9c58db67aada613c2dd08457941a6",
}
SP800_38A_COUNTER = bytes.fromhex("f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff")
SP800_38A_PLAINTEXT = bytes.fromhex(
    "6bc1bee22e409f96e93d7e117393172aae2d8a571e03ac9c9eb76fac45af8e51"
    "30c81c46a35ce411e5fbc1191a0a52eff69f2445df4f9b17ad2b417be66c3710"
)


@pytest.fixture(params=_aesni.ISA_NAMES)
def isa(request: pytest.FixtureRequest) -> str:
    """Each code path in turn; the ones this CPU cannot run are skipped with the reason."""
    name: str = request.param
    if name not in _aesni.supported_isas():
        pytest.skip(f"CPU lacks {name} (supported here: {', '.join(_aesni.supported_isas())})")
    return name


@pytest.fixture
def backend(isa: str) -> _aesni.AesniBackend:
    """A one-thread backend forced onto ``isa`` (the instance setting; module state is untouched)."""
    return _aesni.AesniBackend(isa=isa, threads=1)


def _counter(value: int) -> bytes:
    return (value % (1 << 128)).to_bytes(16, "big")


# --- known answers and random agreement, per path ----------------------------------------------------------


@pytest.mark.parametrize("key_hex", list(SP800_38A))
def test_sp800_38a_vectors_on_every_path(backend: _aesni.AesniBackend, key_hex: str) -> None:
    expanded = backend.expand_key(bytes.fromhex(key_hex))
    ciphertext = bytes.fromhex(SP800_38A[key_hex])
    assert backend.ctr_xor(expanded, SP800_38A_COUNTER, SP800_38A_PLAINTEXT) == ciphertext
    assert backend.ctr_xor(expanded, SP800_38A_COUNTER, ciphertext) == SP800_38A_PLAINTEXT
    # Same vectors one block at a time through offsets, and from an unaligned offset.
    pieces = [
        backend.ctr_xor(expanded, SP800_38A_COUNTER, SP800_38A_PLAINTEXT[i : i + 16], i)
        for i in range(0, 64, 16)
    ]
    assert b"".join(pieces) == ciphertext
    assert backend.ctr_xor(expanded, SP800_38A_COUNTER, SP800_38A_PLAINTEXT[7:61], 7) == ciphertext[7:61]


@pytest.mark.parametrize("key_size", [16, 24, 32])
def test_lengths_and_offsets_match_pycryptodome(
    backend: _aesni.AesniBackend, key_size: int, reference_ctr: ReferenceCtr
) -> None:
    rng = random.Random(f"lengths-{key_size}")
    key = rng.randbytes(key_size)
    expanded = backend.expand_key(key)
    counter = rng.getrandbits(128)
    for length in EDGE_LENGTHS:
        for offset in (0, 1, 15, 16, 17, 63, 64, 511, 512, 513, rng.randrange(1 << 40)):
            data = rng.randbytes(length)
            expected = reference_ctr(key, counter, data, offset)
            assert backend.ctr_xor(expanded, _counter(counter), data, offset) == expected, (length, offset)


@pytest.mark.parametrize(
    "start",
    [
        (1 << 64) - 1,  # low 64 bits carry into the high half on the second block
        (5 << 64) - 33,  # carry lands inside a 32-block VAES-512 batch
        (1 << 128) - 1,  # the whole counter wraps to zero
        (1 << 128) - 40,  # wrap inside a batch
        (1 << 128) - 600,  # wrap after a few full batches
    ],
)
def test_counter_carries_and_wraps(
    backend: _aesni.AesniBackend, start: int, reference_ctr: ReferenceCtr
) -> None:
    key = bytes(range(32))
    expanded = backend.expand_key(key)
    data = random.Random(start).randbytes(16 * 1100 + 5)
    assert backend.ctr_xor(expanded, _counter(start), data) == reference_ctr(key, start, data, 0)
    # Every carry position relative to the batch start, at every tail shape.
    for back in range(1, 34):
        first = (1 << 64) * 7 - back
        chunk = data[: 16 * back + 40]
        assert backend.ctr_xor(expanded, _counter(first), chunk, 0) == reference_ctr(key, first, chunk, 0), (
            back
        )


def test_keystream_offset_at_end_of_range(backend: _aesni.AesniBackend, reference_ctr: ReferenceCtr) -> None:
    key = bytes(16)
    expanded = backend.expand_key(key)
    data = bytes(range(100))
    offset = (1 << 64) - len(data)  # the very last bytes a 64-bit byte offset can address
    assert backend.ctr_xor(expanded, _counter(3), data, offset) == reference_ctr(key, 3, data, offset)
    with pytest.raises(aescore.AesCoreValueError, match="2\\*\\*64"):
        backend.ctr_xor(expanded, _counter(3), data + b"x", offset)


# --- buffers: out, in place, overlap, memory outside the buffers -------------------------------------------


def test_out_writes_exactly_len_data_at_odd_alignments(
    backend: _aesni.AesniBackend, reference_ctr: ReferenceCtr
) -> None:
    rng = random.Random("out")
    key = rng.randbytes(24)
    expanded = backend.expand_key(key)
    for length in (1, 17, 63, 65, 511, 513, 1000):
        data = rng.randbytes(length)
        for start in (0, 1, 7, 16, 33, 63):
            guard = bytearray(b"\xa5" * (start + length + 80))
            view = memoryview(guard)[
                start : start + length + 9
            ]  # out longer than data: only the prefix is written
            offset = rng.randrange(1000)
            assert backend.ctr_xor(expanded, _counter(5), data, offset, view) is None
            assert guard[start : start + length] == reference_ctr(key, 5, data, offset)
            assert guard[:start] == b"\xa5" * start
            assert guard[start + length :] == b"\xa5" * (len(guard) - start - length)


def test_in_place_and_partial_overlap(backend: _aesni.AesniBackend, reference_ctr: ReferenceCtr) -> None:
    key = bytes(range(16))
    expanded = backend.expand_key(key)
    original = random.Random("overlap").randbytes(3000)
    buffer = bytearray(original)
    backend.ctr_xor(expanded, _counter(9), buffer, 3, out=buffer)
    assert buffer == reference_ctr(key, 9, original, 3)
    for shift in (-17, -1, 1, 5, 64, 700):  # out starts before / after data inside the same buffer
        buffer = bytearray(5000)
        buffer[1000:4000] = original
        data = memoryview(buffer)[1000:3800]
        out = memoryview(buffer)[1000 + shift : 1000 + shift + 2800]
        expected = reference_ctr(key, 9, original[:2800], 0)
        backend.ctr_xor(expanded, _counter(9), data, 0, out)
        assert bytes(buffer[1000 + shift : 1000 + shift + 2800]) == expected, shift


def test_accepts_every_bytes_like_form(backend: _aesni.AesniBackend, reference_ctr: ReferenceCtr) -> None:
    key = bytes(range(32))
    data = bytes(range(256)) * 3
    expected = reference_ctr(key, 1, data, 0)
    for key_form in (key, bytearray(key), memoryview(key)):
        expanded = backend.expand_key(key_form)
        for counter_form in (_counter(1), bytearray(_counter(1)), memoryview(_counter(1))):
            for data_form in (data, bytearray(data), memoryview(data), memoryview(bytearray(data)).cast("I")):
                assert backend.ctr_xor(expanded, counter_form, data_form) == expected
    out = memoryview(bytearray(len(data))).cast("H")  # non-byte formats count in bytes
    backend.ctr_xor(backend.expand_key(key), _counter(1), data, 0, out)
    assert out.tobytes() == expected


def test_non_contiguous_and_read_only_buffers_are_rejected(backend: _aesni.AesniBackend) -> None:
    expanded = backend.expand_key(bytes(16))
    strided = memoryview(bytearray(64))[::2]
    with pytest.raises(aescore.AesCoreValueError, match="data must be a C-contiguous buffer"):
        backend.ctr_xor(expanded, bytes(16), strided)
    with pytest.raises(aescore.AesCoreValueError, match="out must be a C-contiguous buffer"):
        backend.ctr_xor(expanded, bytes(16), bytes(32), 0, strided)
    with pytest.raises(aescore.AesCoreTypeError, match="out must be writable"):
        backend.ctr_xor(expanded, bytes(16), bytes(4), 0, memoryview(bytes(4)))
    with pytest.raises(aescore.AesCoreTypeError, match="out must be a writable bytes-like"):
        backend.ctr_xor(expanded, bytes(16), bytes(4), 0, bytes(4))  # type: ignore[call-overload]


@pytest.mark.slow
def test_large_outputs_non_temporal_path(isa: str, reference_ctr: ReferenceCtr) -> None:
    """Outputs >= 4 MiB take the streaming-store path on VAES-512 (aligned head, then stream, then tail)."""
    backend = _aesni.AesniBackend(isa=isa, threads=1)
    key = bytes(range(16))
    expanded = backend.expand_key(key)
    length = _aesni.STREAM_MIN_BYTES + 1000 + 7
    data = random.Random("large").randbytes(length)
    for start, offset in ((0, 0), (16, 0), (48, 32), (1, 0), (5, 21), (32, 3)):
        guard = bytearray(start + length + 64)
        backend.ctr_xor(expanded, _counter(77), data, offset, memoryview(guard)[start : start + length])
        assert guard[start : start + length] == reference_ctr(key, 77, data, offset), (start, offset)
        assert not any(guard[:start]) and not any(guard[start + length :])


# --- threads -----------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("threads", [2, 3, 4])
def test_thread_split_matches_reference(threads: int, reference_ctr: ReferenceCtr) -> None:
    backend = _aesni.AesniBackend(threads=threads)
    key = bytes(range(32))
    expanded = backend.expand_key(key)
    length = threads * _aesni.MIN_BYTES_PER_THREAD + 4093  # large enough for every thread to be used
    data = random.Random(threads).randbytes(length)
    for counter, offset in ((0, 0), ((1 << 64) - 70000, 13), ((1 << 128) - 100000, (1 << 63) + 7)):
        expected = reference_ctr(key, counter, data, offset)
        assert backend.ctr_xor(expanded, _counter(counter), data, offset) == expected
        buffer = bytearray(data)
        backend.ctr_xor(expanded, _counter(counter), buffer, offset, buffer)
        assert buffer == expected


@pytest.mark.slow
def test_concurrent_threaded_calls(reference_ctr: ReferenceCtr) -> None:
    """Several Python threads each running calls that are themselves split across helper threads."""
    backend = _aesni.AesniBackend(threads=2)
    key = bytes(range(24))
    expanded = backend.expand_key(key)
    rng = random.Random("concurrent")
    length = 2 * _aesni.MIN_BYTES_PER_THREAD + 999
    jobs = [(rng.getrandbits(128), rng.randrange(1 << 40), rng.randbytes(length)) for _ in range(3)]
    expected = [reference_ctr(key, counter, data, offset) for counter, offset, data in jobs]
    mismatches: list[int] = []

    def work(index: int) -> None:
        counter, offset, data = jobs[index]
        out = bytearray(length)
        for _ in range(3):
            backend.ctr_xor(expanded, _counter(counter), data, offset, out)
            if out != expected[index]:
                mismatches.append(index)

    workers = [threading.Thread(target=work, args=(index,)) for index in range(len(jobs))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert mismatches == []


def test_shared_key_from_many_python_threads(reference_ctr: ReferenceCtr) -> None:
    backend = aescore.get_backend("aesni")
    key = bytes(range(16))
    expanded = backend.expand_key(key)
    rng = random.Random("threads")
    jobs = [
        (rng.getrandbits(128), rng.randrange(1 << 30), rng.randbytes(rng.choice([64, 5000, 70000])))
        for _ in range(48)
    ]
    expected = [reference_ctr(key, counter, data, offset) for counter, offset, data in jobs]
    results: list[bytes | None] = [None] * len(jobs)

    def work(indices: range) -> None:
        for _ in range(5):
            for index in indices:
                counter, offset, data = jobs[index]
                results[index] = backend.ctr_xor(expanded, _counter(counter), data, offset)

    workers = [threading.Thread(target=work, args=(range(i, len(jobs), 6),)) for i in range(6)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert results == expected


@pytest.mark.serial  # a helper thread must get a CPU during the call: alone
def test_large_calls_release_the_gil_small_calls_keep_it() -> None:
    backend = _aesni.AesniBackend(isa=_aesni.supported_isas()[-1], threads=1)  # slowest path: longest call
    expanded = backend.expand_key(bytes(16))
    data = bytes(32 * MIB)
    out = bytearray(len(data))
    small = bytes(_aesni.GIL_RELEASE_BYTES - 1)
    assert ticks_during(lambda: backend.ctr_xor(expanded, bytes(16), small)) == 0
    # The machine is shared: the helper may find no free core during one call, so allow a few attempts.
    attempts = [ticks_during(lambda: backend.ctr_xor(expanded, bytes(16), data, 0, out)) for _ in range(5)]
    assert max(attempts) > 0, "no Python thread ran during five large ctr_xor calls: the GIL was held"


# --- objects, configuration, unavailability ----------------------------------------------------------------


def test_backend_and_key_objects() -> None:
    backend = aescore.get_backend("aesni")
    assert isinstance(backend, aescore.Backend) and backend.name == "aesni" and backend.constant_time
    info = backend.info()
    assert info["name"] == "aesni" and info["constant_time"] is True
    assert info["isa"] == _aesni.get_isa() and info["threads"] == _aesni.get_threads()
    assert _aesni.AesniBackend(isa="aesni", threads=3).info()["isa"] == "aesni"
    assert _aesni.AesniBackend(isa="aesni", threads=3).info()["threads"] == 3
    for size in (16, 24, 32):
        key = bytes([0xC3]) * size
        expanded = backend.expand_key(key)
        assert isinstance(expanded, aescore.ExpandedKey)
        assert expanded.backend_name == "aesni" and expanded.key_size == size
        assert repr(expanded) == f"<AesniExpandedKey backend='aesni' key_size={size * 8} bits>"
        assert "c3" not in repr(expanded).lower() and "\\xc3" not in repr(expanded)
        with pytest.raises(TypeError):
            pickle.dumps(expanded)
        with pytest.raises(TypeError):
            copy.copy(expanded)
    with pytest.raises(aescore.AesCoreTypeError, match="expand_key"):
        _aesni.AesniExpandedKey()


def test_keys_from_other_backends_are_rejected() -> None:
    backend = aescore.get_backend("aesni")
    foreign = aescore.get_backend("python").expand_key(bytes(16))
    with pytest.raises(aescore.AesCoreTypeError, match="'aesni' backend's expand_key, got PythonExpandedKey"):
        backend.ctr_xor(foreign, bytes(16), b"data")
    with pytest.raises(aescore.AesCoreTypeError):
        backend.ctr_xor(bytes(16), bytes(16), b"data")  # type: ignore[call-overload]


def test_set_isa_and_threads_switch_in_process(reference_ctr: ReferenceCtr) -> None:
    saved_isa, saved_threads = _aesni.get_isa(), _aesni.get_threads()
    backend = _aesni.AesniBackend()  # follows the module setting
    expanded = backend.expand_key(bytes(16))
    data = bytes(1000)
    try:
        for name in _aesni.supported_isas():
            _aesni.set_isa(name)
            assert _aesni.get_isa() == name == backend.info()["isa"]
            assert backend.ctr_xor(expanded, bytes(16), data, 5) == reference_ctr(bytes(16), 0, data, 5)
        _aesni.set_isa("auto")
        assert _aesni.get_isa() == _aesni.supported_isas()[0]
        _aesni.set_threads(1)
        assert _aesni.get_threads() == 1 == backend.info()["threads"]
        with pytest.raises(
            aescore.AesCoreValueError, match="isa must be one of auto, vaes512, vaes256, aesni"
        ):
            _aesni.set_isa("sse2")
        with pytest.raises(aescore.AesCoreTypeError):
            _aesni.set_isa(3)  # type: ignore[arg-type]
        for bad in (0, _aesni.MAX_THREADS + 1, -2):
            with pytest.raises(aescore.AesCoreValueError, match="threads must be between 1 and"):
                _aesni.set_threads(bad)
        with pytest.raises(aescore.AesCoreTypeError):
            _aesni.set_threads(True)
        with pytest.raises(aescore.AesCoreValueError):
            _aesni.AesniBackend(threads=0)
    finally:
        _aesni.set_isa(saved_isa)
        _aesni.set_threads(saved_threads)


@pytest.mark.parametrize(
    ("cpu", "isa_setting", "threads_setting", "expected"),
    [
        (0, "auto", "", ("CPU lacks AES-NI", None, None)),
        (0, "aesni", "4", ("CPU lacks AES-NI", None, None)),
        (1, "", "3", (None, "aesni", 3)),
        (1 | 2, "auto", "2", (None, "vaes256", 2)),
        (1 | 2 | 4, " auto ", "1", (None, "vaes512", 1)),
        (1 | 2 | 4, "aesni", "64", (None, "aesni", 64)),
    ],
)
def test_availability_decisions(
    cpu: int, isa_setting: str, threads_setting: str, expected: tuple[str | None, str | None, int | None]
) -> None:
    assert _aesni._availability(cpu, isa_setting, threads_setting) == expected


@pytest.mark.parametrize(
    ("cpu", "isa_setting", "threads_setting", "reason_part"),
    [
        (
            1,
            "vaes512",
            "",
            "KEYSTREAM_AESNI_ISA: isa 'vaes512' is not supported by this CPU (supported: aesni)",
        ),
        (1 | 2 | 4, "fastest", "", "KEYSTREAM_AESNI_ISA: isa must be one of auto"),
        (
            1 | 2 | 4,
            "auto",
            "zero",
            "KEYSTREAM_AESNI_THREADS must be an integer between 1 and 64, got 'zero'",
        ),
        (1 | 2 | 4, "auto", "0", "KEYSTREAM_AESNI_THREADS"),
        (1 | 2 | 4, "auto", "65", "KEYSTREAM_AESNI_THREADS"),
    ],
)
def test_bad_configuration_is_reported_not_guessed(
    cpu: int, isa_setting: str, threads_setting: str, reason_part: str
) -> None:
    reason, isa_name, threads = _aesni._availability(cpu, isa_setting, threads_setting)
    assert reason is not None and reason_part in reason and isa_name is None and threads is None


def test_default_threads_follow_cpu_affinity() -> None:
    reason, _, threads = _aesni._availability(1, "auto", "")
    assert reason is None and threads == min(len(os.sched_getaffinity(0)), _aesni.MAX_THREADS)


def _run_python(code: str, **environment: str) -> str:
    env = {**os.environ, **environment}
    env.pop("KEYSTREAM_BACKEND", None)
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.strip()


def test_environment_forces_a_path_at_import() -> None:
    slowest = _aesni.supported_isas()[-1]
    code = "import aescore; b = aescore.get_backend('aesni'); print(b.info()['isa'], b.info()['threads'])"
    assert _run_python(code, KEYSTREAM_AESNI_ISA=slowest, KEYSTREAM_AESNI_THREADS="3") == f"{slowest} 3"


def test_environment_misconfiguration_makes_backend_unavailable() -> None:
    code = (
        "import aescore\n"
        "print(aescore.available_backends()['aesni'])\n"
        "print(aescore.default_backend_name())\n"
        "try:\n"
        "    aescore.get_backend('aesni')\n"
        "except aescore.BackendUnavailableError as exc:\n"
        "    print(type(exc).__name__)\n"
    )
    lines = _run_python(code, KEYSTREAM_AESNI_ISA="avx9000").splitlines()
    assert lines[0].startswith("KEYSTREAM_AESNI_ISA: isa must be one of auto")
    assert lines[1:] == ["python", "BackendUnavailableError"]
