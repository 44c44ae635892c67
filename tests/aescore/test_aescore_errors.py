"""Every documented bad input raises the documented exception, naming the field; no key bytes leak."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import aescore
from aescore.compat import pyaes as pyaes_compat

KEY = bytes.fromhex("c0ffee00deadbeef0123456789abcdef55aa55aa55aa55aa")  # 24 bytes, recognisable
KEY_TRACES = (KEY.hex(), KEY[:8].hex(), repr(KEY)[2:20], KEY[:6].decode("latin-1"))
COUNTER = bytes(16)


def _assert_no_key_material(text: str) -> None:
    for trace in KEY_TRACES:
        assert trace not in text, f"key material in {text!r}"


def _raises(
    error: type[Exception],
    field: str,
    call: Callable[[], Any],
    *,
    also: type[Exception] = aescore.AesCoreError,
) -> None:
    with pytest.raises(error) as caught:
        call()
    assert isinstance(caught.value, also), (
        f"{type(caught.value).__name__} does not derive from {also.__name__}"
    )
    message = str(caught.value)
    assert field in message, f"{message!r} does not name {field!r}"
    _assert_no_key_material(message)
    _assert_no_key_material(repr(caught.value))


@pytest.mark.parametrize("bad_key", ["k" * 16, 16, None, [0] * 16], ids=["str", "int", "None", "list"])
def test_expand_key_wrong_type(backend: aescore.Backend, bad_key: object) -> None:
    _raises(TypeError, "key", lambda: backend.expand_key(bad_key))  # type: ignore[arg-type]


@pytest.mark.parametrize("size", [0, 1, 15, 17, 20, 31, 33, 64])
def test_expand_key_wrong_size(backend: aescore.Backend, size: int) -> None:
    key = (KEY * 3)[:size]
    _raises(ValueError, "key", lambda: backend.expand_key(key))
    with pytest.raises(ValueError, match="16, 24 or 32"):
        backend.expand_key(key)


def test_ctr_xor_bad_arguments(backend: aescore.Backend) -> None:
    expanded = backend.expand_key(KEY)
    xor = backend.ctr_xor
    _raises(TypeError, "expanded_key", lambda: xor(KEY, COUNTER, b"x"))  # type: ignore[arg-type]
    _raises(TypeError, "expanded_key", lambda: xor(None, COUNTER, b"x"))  # type: ignore[arg-type]
    _raises(TypeError, "initial_counter", lambda: xor(expanded, "0" * 16, b"x"))  # type: ignore[arg-type]
    _raises(TypeError, "initial_counter", lambda: xor(expanded, 1, b"x"))  # type: ignore[arg-type]
    for size in (0, 8, 15, 17, 32):
        _raises(ValueError, "initial_counter", lambda size=size: xor(expanded, bytes(size), b"x"))
    _raises(TypeError, "data", lambda: xor(expanded, COUNTER, "plaintext"))  # type: ignore[arg-type]
    _raises(TypeError, "data", lambda: xor(expanded, COUNTER, 5))  # type: ignore[arg-type]
    _raises(TypeError, "data", lambda: xor(expanded, COUNTER, None))  # type: ignore[arg-type]
    _raises(ValueError, "data", lambda: xor(expanded, COUNTER, memoryview(b"abcdef")[::2]))
    _raises(TypeError, "offset", lambda: xor(expanded, COUNTER, b"x", 1.0))  # type: ignore[arg-type]
    _raises(TypeError, "offset", lambda: xor(expanded, COUNTER, b"x", "1"))  # type: ignore[arg-type]
    _raises(TypeError, "offset", lambda: xor(expanded, COUNTER, b"x", True))
    _raises(ValueError, "offset", lambda: xor(expanded, COUNTER, b"x", -1))
    _raises(ValueError, "offset", lambda: xor(expanded, COUNTER, b"x", 2**64))
    _raises(ValueError, "offset", lambda: xor(expanded, COUNTER, b"xy", 2**64 - 1))  # runs past 2**64 bytes
    assert xor(expanded, COUNTER, b"x", 2**64 - 1) is not None  # the very last keystream byte is allowed
    _raises(TypeError, "out", lambda: xor(expanded, COUNTER, b"x", 0, b"y"))  # type: ignore[arg-type]
    _raises(TypeError, "out", lambda: xor(expanded, COUNTER, b"x", 0, memoryview(b"y")))
    _raises(ValueError, "out", lambda: xor(expanded, COUNTER, b"xyz", 0, bytearray(2)))
    _raises(ValueError, "out", lambda: xor(expanded, COUNTER, b"x", 0, memoryview(bytearray(4))[::2]))


def test_key_from_another_backend_is_refused(backend: aescore.Backend) -> None:
    others = [
        name
        for name, reason in aescore.available_backends().items()
        if reason is None and name != backend.name
    ]
    if not others:
        pytest.skip("only one backend available here")
    foreign = aescore.get_backend(others[0]).expand_key(KEY)
    _raises(TypeError, "expanded_key", lambda: backend.ctr_xor(foreign, COUNTER, b"x"))
    _raises(TypeError, "expanded key", lambda: aescore.CtrStream(backend, foreign, COUNTER))


def test_ctr_stream_bad_arguments(backend: aescore.Backend) -> None:
    _raises(TypeError, "backend", lambda: aescore.CtrStream(object(), KEY, COUNTER))  # type: ignore[arg-type]
    _raises(TypeError, "counter_bits", lambda: aescore.CtrStream(backend, KEY, COUNTER, "128"))  # type: ignore[arg-type]
    _raises(TypeError, "counter_bits", lambda: aescore.CtrStream(backend, KEY, COUNTER, True))
    for bits in (0, 16, 48, 96, 127, 256):
        _raises(ValueError, "counter_bits", lambda bits=bits: aescore.CtrStream(backend, KEY, COUNTER, bits))
    _raises(ValueError, "key", lambda: aescore.CtrStream(backend, KEY[:20], COUNTER))
    _raises(ValueError, "initial_counter", lambda: aescore.CtrStream(backend, KEY, COUNTER[:12]))
    stream = aescore.CtrStream(backend, KEY, COUNTER)
    _raises(TypeError, "data", lambda: stream.update("text"))  # type: ignore[arg-type]
    _raises(TypeError, "data", lambda: stream.update_into("text", bytearray(4)))  # type: ignore[arg-type]
    _raises(TypeError, "out", lambda: stream.update_into(b"abcd", b"1234"))  # type: ignore[arg-type]
    _raises(ValueError, "out", lambda: stream.update_into(b"abcd", bytearray(3)))
    _raises(ValueError, "offset", lambda: stream.seek(-1))
    _raises(TypeError, "offset", lambda: stream.seek(1.5))  # type: ignore[arg-type]
    assert stream.offset == 0  # nothing above moved the stream


def test_overflow_error_is_an_aescore_error(backend: aescore.Backend) -> None:
    stream = aescore.CtrStream(backend, KEY, b"\xff" * 16, counter_bits=32)
    with pytest.raises(aescore.CounterOverflowError) as caught:
        stream.update(bytes(17))
    assert isinstance(caught.value, aescore.AesCoreError)
    assert isinstance(caught.value, OverflowError)
    _assert_no_key_material(str(caught.value))


def test_reprs_show_no_key_material(backend: aescore.Backend) -> None:
    expanded = backend.expand_key(KEY)
    texts = [repr(expanded), str(expanded), repr(backend), repr(aescore.CtrStream(backend, KEY, COUNTER))]
    texts.append(repr(pyaes_compat.AESModeOfOperationCTR(KEY, backend=backend)))
    texts.append(repr(pyaes_compat.PythonAESModeOfOperationCTR(KEY, backend=backend)))
    for text in texts:
        _assert_no_key_material(text)
    assert "192" in repr(expanded)  # it does say the key size


def test_expanded_keys_cannot_be_pickled(backend: aescore.Backend) -> None:
    import pickle

    with pytest.raises(TypeError):
        pickle.dumps(backend.expand_key(KEY))
