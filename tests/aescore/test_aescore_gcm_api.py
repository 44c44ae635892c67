"""AesGcm's contract on every backend and aesni path: buffers, in place, zeroing on failure, bad inputs."""

from __future__ import annotations

import mmap
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

import aescore

KEY = bytes.fromhex("c0ffee00deadbeef0123456789abcdef55aa55aa55aa55aa")  # 24 bytes, recognisable
NONCE = bytes(range(12))
MESSAGE = bytes(range(256)) * 3 + b"tail"


def _raises(error: type[Exception], field: str, call: Callable[[], Any]) -> None:
    with pytest.raises(error) as caught:
        call()
    assert isinstance(caught.value, aescore.AesCoreError)
    assert field in str(caught.value), f"{caught.value!r} does not name {field!r}"
    assert KEY.hex() not in str(caught.value) and KEY[:8].hex() not in repr(caught.value)


def test_interop_both_ways_and_forms(gcm_backend: aescore.Backend) -> None:
    gcm, reference = aescore.AesGcm(gcm_backend, KEY), AESGCM(KEY)
    sealed = reference.encrypt(NONCE, MESSAGE, b"header")
    for form in (bytes, bytearray, memoryview):
        assert gcm.encrypt(form(NONCE), form(MESSAGE), form(b"header")) == sealed
        assert gcm.decrypt(form(NONCE), form(sealed), form(b"header")) == MESSAGE
    assert reference.decrypt(NONCE, gcm.encrypt(NONCE, b"", None), None) == b""
    assert gcm.encrypt(NONCE, MESSAGE, None) == gcm.encrypt(NONCE, MESSAGE, b"")


def test_into_buffers_in_place_and_overlapping(gcm_backend: aescore.Backend) -> None:
    gcm = aescore.AesGcm(gcm_backend, KEY)
    sealed = gcm.encrypt(NONCE, MESSAGE, b"ad")
    out = bytearray(b"\xee" * (len(sealed) + 5))
    assert gcm.encrypt_into(NONCE, MESSAGE, b"ad", out) == len(sealed)
    assert out[: len(sealed)] == sealed and out[len(sealed) :] == b"\xee" * 5
    buffer = bytearray(MESSAGE + bytes(16))  # in place: data at the start, room for the tag after it
    assert gcm.encrypt_into(NONCE, memoryview(buffer)[: len(MESSAGE)], b"ad", buffer) == len(sealed)
    assert buffer == sealed
    assert gcm.decrypt_into(NONCE, buffer, b"ad", buffer) == len(MESSAGE)
    assert buffer[: len(MESSAGE)] == MESSAGE
    for shift in (1, 3, 17):  # out overlapping the input at an offset: same result as a separate buffer
        shifted = bytearray(shift) + bytearray(sealed)
        assert gcm.decrypt_into(NONCE, memoryview(shifted)[shift:], b"ad", shifted) == len(MESSAGE)
        assert shifted[: len(MESSAGE)] == MESSAGE
        shifted = bytearray(MESSAGE) + bytearray(16 + shift)
        assert gcm.encrypt_into(
            NONCE, memoryview(shifted)[: len(MESSAGE)], b"ad", memoryview(shifted)[shift:]
        )
        assert shifted[shift:] == sealed


@pytest.mark.parametrize("where", ["tag", "ciphertext", "associated_data", "nonce", "truncated"])
def test_failed_tag_leaves_no_plaintext(gcm_backend: aescore.Backend, where: str) -> None:
    gcm = aescore.AesGcm(gcm_backend, KEY)
    sealed, nonce, associated = (
        bytearray(gcm.encrypt(NONCE, MESSAGE, b"ad")),
        bytearray(NONCE),
        bytearray(b"ad"),
    )
    target = {"tag": sealed, "ciphertext": sealed, "associated_data": associated, "nonce": nonce}
    if where == "truncated":
        del sealed[-1]
    else:
        target[where][-1 if where == "tag" else 0] ^= 0x01
    with pytest.raises(aescore.InvalidTag):
        gcm.decrypt(nonce, sealed, associated)
    out = bytearray(b"\xaa" * (len(sealed) + 3))
    with pytest.raises(aescore.InvalidTag):
        gcm.decrypt_into(nonce, sealed, associated, out)
    length = len(sealed) - 16
    assert out[:length] == bytes(length) and out[length:] == b"\xaa" * 19
    with pytest.raises(aescore.InvalidTag):  # in place: the ciphertext's buffer is zeroed too
        gcm.decrypt_into(nonce, sealed, associated, sealed)
    assert sealed[:length] == bytes(length)


def test_short_input_is_an_invalid_tag(gcm_backend: aescore.Backend) -> None:
    gcm = aescore.AesGcm(gcm_backend, KEY)
    for size in (0, 1, 15):
        with pytest.raises(aescore.InvalidTag):
            gcm.decrypt(NONCE, bytes(size), None)
        with pytest.raises(aescore.InvalidTag):
            gcm.decrypt_into(NONCE, bytes(size), None, bytearray(4))
    assert issubclass(aescore.InvalidTag, aescore.AesCoreError)


def test_bad_arguments(gcm_backend: aescore.Backend) -> None:
    gcm = aescore.AesGcm(gcm_backend, KEY)
    sealed = gcm.encrypt(NONCE, b"abc", None)
    _raises(TypeError, "nonce", lambda: gcm.encrypt("x" * 12, b"", None))  # type: ignore[arg-type]
    _raises(
        ValueError, "nonce must be 12 bytes long, got 11 bytes", lambda: gcm.encrypt(NONCE[:11], b"", None)
    )
    _raises(ValueError, "got 16 bytes", lambda: gcm.decrypt(bytes(16), sealed, None))
    _raises(TypeError, "data", lambda: gcm.encrypt(NONCE, "text", None))  # type: ignore[arg-type]
    _raises(TypeError, "ciphertext_and_tag", lambda: gcm.decrypt(NONCE, 7, None))  # type: ignore[arg-type]
    _raises(TypeError, "associated_data must be bytes-like", lambda: gcm.encrypt(NONCE, b"", 1))  # type: ignore[arg-type]
    _raises(TypeError, "or None", lambda: gcm.decrypt(NONCE, sealed, "ad"))  # type: ignore[arg-type]
    _raises(TypeError, "out", lambda: gcm.encrypt_into(NONCE, b"abc", None, bytes(19)))  # type: ignore[arg-type]
    _raises(
        TypeError,
        "out must be writable",
        lambda: gcm.encrypt_into(NONCE, b"abc", None, memoryview(bytes(19))),
    )
    _raises(ValueError, "out must hold at least 19 bytes (len(data) + 16), got 18",
            lambda: gcm.encrypt_into(NONCE, b"abc", None, bytearray(18)))  # fmt: skip
    _raises(ValueError, "out must hold at least 3 bytes (len(ciphertext_and_tag) - 16), got 2",
            lambda: gcm.decrypt_into(NONCE, sealed, None, bytearray(2)))  # fmt: skip
    _raises(
        ValueError,
        "key must be 16, 24 or 32 bytes long, got 20 bytes",
        lambda: aescore.AesGcm(gcm_backend, bytes(20)),
    )
    _raises(TypeError, "key", lambda: aescore.AesGcm(gcm_backend, "k" * 16))  # type: ignore[arg-type]
    _raises(TypeError, "backend must be an aescore Backend or name", lambda: aescore.AesGcm(3, KEY))  # type: ignore[arg-type]


def test_too_long_messages_fail_before_any_output(gcm_backend: aescore.Backend, tmp_path: Path) -> None:
    """2**36 - 32 bytes is GCM's limit; a sparse file mapped read-only stands in for the oversized input."""
    gcm = aescore.AesGcm(gcm_backend, KEY)
    path = tmp_path / "sparse"
    with path.open("wb") as handle:
        handle.truncate(aescore.AesGcm.max_data_bytes + 17)
    with path.open("rb") as handle:
        # Not closed explicitly: the exception tracebacks keep views of it alive until the test ends.
        view = memoryview(mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ))
    out = bytearray(b"\x55" * 64)
    for data in (view, view[:-16]):
        _raises(
            OverflowError,
            "data must be at most 2**36 - 32 bytes",
            lambda data=data: gcm.encrypt(NONCE, data, None),  # type: ignore[misc]
        )
        _raises(
            aescore.CounterOverflowError,
            "GCM's 32-bit block counter",
            lambda data=data: gcm.encrypt_into(NONCE, data, None, out),  # type: ignore[misc]
        )
    _raises(OverflowError, "ciphertext_and_tag must be at most 2**36 - 16 bytes",
            lambda: gcm.decrypt_into(NONCE, view, None, out))  # fmt: skip
    assert out == b"\x55" * 64


def test_names_no_key_and_refuses_pickling(gcm_backend: aescore.Backend) -> None:
    gcm = aescore.AesGcm(gcm_backend, KEY)
    assert gcm.key_size == 24 and gcm.backend_name == gcm_backend.name
    assert repr(gcm) == f"<AesGcm backend={gcm_backend.name!r} key_size=192 bits>"
    assert KEY.hex() not in repr(gcm._key) and "192" in repr(gcm._key)
    with pytest.raises(TypeError):
        pickle.dumps(gcm)
    with pytest.raises(TypeError):
        pickle.dumps(gcm._key)
    assert isinstance(gcm._key, aescore.GcmKey)
    assert (gcm.nonce_size, gcm.tag_size, gcm.key_sizes) == (12, 16, (16, 24, 32))
