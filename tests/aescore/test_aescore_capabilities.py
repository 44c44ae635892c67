"""What a backend declares it offers: asynchronous CTR and a native batch sealer of sealed messages.

Callers pick code paths from these declarations, never from a backend's name, so each backend's answers
are pinned here.
"""

from __future__ import annotations

import asyncio

import pytest

import aescore
from aescore import SealedBatch, SealedItemStatus

try:
    from aescore.sealing import _sealed
except ImportError:  # built without the extension
    _sealed = None  # type: ignore[assignment]


def test_the_interface_defaults_offer_nothing_native() -> None:
    python = aescore.get_backend("python")
    assert python.sealed_batch() is None
    assert python.supports_async is False


def test_default_ctr_xor_async_gives_ctr_xors_bytes() -> None:
    python = aescore.get_backend("python")
    key = python.expand_key(bytes(range(16)))
    data = bytes(range(100))
    result = asyncio.run(python.ctr_xor_async(key, bytes(16), data, 5))
    assert result == python.ctr_xor(key, bytes(16), data, 5)


def test_aesni_offers_its_native_sealer_on_its_own_isa() -> None:
    reason = aescore.available_backends().get("aesni")
    if reason is not None:
        pytest.skip(f"aesni unavailable: {reason}")
    if _sealed is None or _sealed.unavailable_reason() is not None:
        pytest.skip("the native sealed core is not available here")
    backend = aescore.get_backend("aesni")
    assert backend.supports_async is False
    sealer = backend.sealed_batch()
    assert isinstance(sealer, SealedBatch)
    assert sealer.isa == backend.info()["isa"]
    assert asyncio.run(backend.ctr_xor_async(backend.expand_key(bytes(16)), bytes(16), b"abc")) == (
        backend.ctr_xor(backend.expand_key(bytes(16)), bytes(16), b"abc")
    )


def test_aesni_has_no_native_sealer_when_the_sha256_path_cannot_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """A forced SHA-256 path the CPU lacks makes the core unavailable: the sealer is None, not a crash."""
    if aescore.available_backends().get("aesni") is not None or _sealed is None:
        pytest.skip("aesni or the native sealed core is not built here")
    monkeypatch.setattr(_sealed, "unavailable_reason", lambda: "forced shani on a CPU without SHA-NI")
    assert aescore.get_backend("aesni").sealed_batch() is None


def test_item_status_values_are_the_native_codes() -> None:
    if _sealed is None:
        pytest.skip("the native sealed core is not built here")
    for status in SealedItemStatus:
        assert getattr(_sealed, f"ITEM_{status.name}") == status.value


def test_ghash_is_each_backends_own_and_agrees_with_the_python_tables() -> None:
    """``Backend.ghash`` names the GHASH a composed AES-GCM uses: the tables by default (not constant-time),
    the carry-less multiply on aesni; both give the same digests."""
    from aescore.gcm._ghash import PythonGhash

    hash_key = bytes(range(16, 32))
    ad, ciphertext = b"header bytes", bytes(range(200))
    default = aescore.get_backend("python").ghash(hash_key)
    assert isinstance(default, PythonGhash)
    expected = default.digest(ad, ciphertext)
    reason = aescore.available_backends().get("aesni")
    if reason is not None:
        pytest.skip(f"aesni unavailable: {reason}")
    native = aescore.get_backend("aesni").ghash(hash_key)
    assert not isinstance(native, PythonGhash)
    assert native.digest(ad, ciphertext) == expected
