"""Byte equality with pyaes 1.6.1: the pyperformance crypto_pyaes workload, and pyaes_compat's semantics."""

from __future__ import annotations

import functools
import os
import random
import subprocess
import sys

import pyaes
import pytest

import aescore
from aescore.compat import pyaes as pyaes_compat

#: pyperformance bm_crypto_pyaes: the key and the 23,000-byte cleartext (note the trailing space).
CRYPTO_PYAES_KEY = b"\xa1\xf6%\x8c\x87}_\xcd\x89dHE8\xbf\xc9,"
CRYPTO_PYAES_CLEARTEXT = b"This is a test. What could possibly go wrong? " * 500


CtrClass = type[pyaes_compat.PythonAESModeOfOperationCTR]


@pytest.fixture(scope="module", params=["c", "python"])
def ctr_class(request: pytest.FixtureRequest) -> CtrClass:
    """Both implementations of AESModeOfOperationCTR: the C hot path and the pure-Python class."""
    if request.param == "python":
        return pyaes_compat.PythonAESModeOfOperationCTR
    if pyaes_compat.AESModeOfOperationCTR is pyaes_compat.PythonAESModeOfOperationCTR:
        pytest.skip(
            "C class not in use: aescore.compat._pyaes_fast is not built or KEYSTREAM_PYAES_COMPAT=python"
        )
    return pyaes_compat.AESModeOfOperationCTR


@functools.cache
def pyaes_ciphertext() -> bytes:
    """pyaes 1.6.1 itself (about 0.1 s, computed once)."""
    result: bytes = pyaes.AESModeOfOperationCTR(CRYPTO_PYAES_KEY).encrypt(CRYPTO_PYAES_CLEARTEXT)
    return result


def test_workload_size() -> None:
    assert len(CRYPTO_PYAES_CLEARTEXT) == 23_000


def test_crypto_pyaes_through_the_backend_api(backend: aescore.Backend) -> None:
    counter = (1).to_bytes(16, "big")  # pyaes's Counter() starts at 1
    ciphertext = backend.ctr_xor(backend.expand_key(CRYPTO_PYAES_KEY), counter, CRYPTO_PYAES_CLEARTEXT)
    assert ciphertext == pyaes_ciphertext()
    assert (
        backend.ctr_xor(backend.expand_key(CRYPTO_PYAES_KEY), counter, ciphertext) == CRYPTO_PYAES_CLEARTEXT
    )


def test_crypto_pyaes_through_pyaes_compat(backend: aescore.Backend, ctr_class: CtrClass) -> None:
    """The benchmark's loop body, verbatim except for the module."""
    aes = ctr_class(CRYPTO_PYAES_KEY, backend=backend)
    ciphertext = aes.encrypt(CRYPTO_PYAES_CLEARTEXT)
    aes = ctr_class(CRYPTO_PYAES_KEY, backend=backend)
    plaintext = aes.decrypt(ciphertext)
    assert ciphertext == pyaes_ciphertext()
    assert plaintext == CRYPTO_PYAES_CLEARTEXT


def test_pyaes_compat_runs_on_the_default_backend() -> None:
    aes = pyaes_compat.AESModeOfOperationCTR(CRYPTO_PYAES_KEY)
    assert aes._backend is aescore.get_backend()
    assert aes.encrypt(CRYPTO_PYAES_CLEARTEXT) == pyaes_ciphertext()


def _pair(
    ctr_class: CtrClass, backend: aescore.Backend, key: bytes, initial: int | None
) -> tuple[pyaes.AESModeOfOperationCTR, pyaes_compat.PythonAESModeOfOperationCTR]:
    if initial is None:
        return pyaes.AESModeOfOperationCTR(key), ctr_class(key, backend=backend)
    return (
        pyaes.AESModeOfOperationCTR(key, pyaes.Counter(initial)),
        ctr_class(key, pyaes_compat.Counter(initial), backend=backend),
    )


@pytest.mark.parametrize("initial", [None, 0, 1, -1, (1 << 128) - 2, 2**64 - 1, 0x0123456789ABCDEF])
def test_stream_continues_across_calls_like_pyaes(
    backend: aescore.Backend, ctr_class: CtrClass, initial: int | None
) -> None:
    rng = random.Random(initial)
    key = rng.randbytes(rng.choice([16, 24, 32]))
    theirs, ours = _pair(ctr_class, backend, key, initial)
    for size in [0, 1, 15, 16, 17, 5, 11, 0, 32, 3, 100, 16, 7, 9]:
        data = rng.randbytes(size)
        call = "decrypt" if size % 2 else "encrypt"
        assert getattr(ours, call)(data) == getattr(theirs, call)(data), size


def test_shared_counter_is_advanced_like_pyaes(backend: aescore.Backend, ctr_class: CtrClass) -> None:
    """Two cipher objects on one Counter: each generated block increments it, as in pyaes."""
    rng = random.Random(5)
    key = rng.randbytes(16)
    their_counter, our_counter = pyaes.Counter(7), pyaes_compat.Counter(7)
    theirs = [pyaes.AESModeOfOperationCTR(key, their_counter) for _ in range(2)]
    ours = [ctr_class(key, our_counter, backend=backend) for _ in range(2)]
    for step in range(40):
        which = rng.randrange(2)
        data = rng.randbytes(rng.choice([0, 1, 9, 16, 23, 40]))
        assert ours[which].encrypt(data) == theirs[which].encrypt(data), step
        assert our_counter.value == their_counter.value, step


def test_custom_counter_objects_are_honoured(backend: aescore.Backend, ctr_class: CtrClass) -> None:
    """pyaes documents subclassing Counter and overriding increment; any value/increment object works."""

    class TheirsByTwo(pyaes.Counter):  # type: ignore[misc]
        def increment(self) -> None:
            super().increment()
            super().increment()

    class OursByTwo(pyaes_compat.Counter):
        def increment(self) -> None:
            super().increment()
            super().increment()

    key = bytes(range(16))
    theirs = pyaes.AESModeOfOperationCTR(key, TheirsByTwo(3))
    ours = ctr_class(key, OursByTwo(3), backend=backend)
    compat_with_pyaes_counter = ctr_class(key, TheirsByTwo(3), backend=backend)
    for size in [5, 30, 16, 1, 40]:
        data = bytes(range(size))
        expected = theirs.encrypt(data)
        assert ours.encrypt(data) == expected
        assert compat_with_pyaes_counter.encrypt(data) == expected


def test_counter_values_match_pyaes() -> None:
    for initial in [0, 1, 255, 256, -1, 1 << 127, (1 << 130) + 5]:
        theirs, ours = pyaes.Counter(initial), pyaes_compat.Counter(initial)
        for _ in range(3):
            assert ours.value == theirs.value
            theirs.increment()
            ours.increment()
    assert pyaes_compat.Counter().value == pyaes.Counter().value == [0] * 15 + [1]
    with pytest.raises(TypeError, match="initial_value"):
        pyaes_compat.Counter(1.5)  # type: ignore[arg-type]


def test_str_input_is_latin1_like_pyaes(backend: aescore.Backend, ctr_class: CtrClass) -> None:
    theirs, ours = _pair(ctr_class, backend, bytes(16), None)
    assert ours.encrypt("h\xe9llo w\xf6rld") == theirs.encrypt("h\xe9llo w\xf6rld")
    with pytest.raises(ValueError):
        ours.encrypt("\u0100")


def test_bad_keys_raise_like_pyaes(backend: aescore.Backend, ctr_class: CtrClass) -> None:
    for key in (b"", bytes(15), bytes(17), bytes(33)):
        with pytest.raises(ValueError):
            pyaes.AESModeOfOperationCTR(key)
        with pytest.raises(ValueError, match="key"):
            ctr_class(key, backend=backend)
    with pytest.raises(TypeError, match="key"):
        ctr_class("k" * 16, backend=backend)  # type: ignore[arg-type]


def test_a_failed_call_leaves_the_stream_where_it_was(backend: aescore.Backend, ctr_class: CtrClass) -> None:
    theirs, ours = _pair(ctr_class, backend, bytes(24), None)
    with pytest.raises(TypeError):
        ours.encrypt(12345)  # type: ignore[arg-type]
    assert ours.encrypt(b"after the error") == theirs.encrypt(b"after the error")


def test_the_c_class_is_the_default_when_built() -> None:
    try:
        from aescore.compat import _pyaes_fast
    except ImportError as exc:
        pytest.skip(f"aescore.compat._pyaes_fast is not built: {exc}")
    if os.environ.get("KEYSTREAM_PYAES_COMPAT", "").strip().lower() == "python":
        pytest.skip("KEYSTREAM_PYAES_COMPAT=python forces the pure-Python class in this run")
    assert pyaes_compat.AESModeOfOperationCTR is _pyaes_fast.AESModeOfOperationCTR
    assert pyaes_compat.AESModeOfOperationCTR.name == pyaes.AESModeOfOperationCTR.name == "Counter (CTR)"


def test_environment_forces_the_pure_python_class() -> None:
    code = "from aescore.compat import pyaes as p\nprint(p.AESModeOfOperationCTR.__module__)"
    environment = {**os.environ, "KEYSTREAM_PYAES_COMPAT": "python"}
    result = subprocess.run(
        [sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "aescore.compat.pyaes"  # not aescore.compat._pyaes_fast
