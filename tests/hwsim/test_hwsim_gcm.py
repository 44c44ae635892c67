"""AES-GCM through hwsim: the device makes the CTR keystream, the host CPU computes GHASH, and it says so."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

import aescore
from hwsim import HwsimBackend, prometheus_samples

KEY = bytes(range(32))
NONCE = bytes(12)


def test_one_device_job_per_message_and_ghash_on_the_host() -> None:
    backend = HwsimBackend("pcie-offload")
    gcm = aescore.AesGcm(backend, KEY)  # H = AES_K(0) is one device job
    before = backend.snapshot()
    assert (before.device_jobs, before.device_bytes, before.host_ghash_calls) == (1, 16, 0)
    sealed = gcm.encrypt(NONCE, b"x" * 1000, b"header")
    assert sealed == AESGCM(KEY).encrypt(NONCE, b"x" * 1000, b"header")
    assert gcm.decrypt(NONCE, sealed, b"header") == b"x" * 1000
    snap = backend.snapshot()
    # each message: one job over AES_K(J0) and the data's blocks; GHASH over header + ciphertext on the host
    assert (snap.device_jobs, snap.device_bytes) == (3, 16 + 2 * (16 + 1000))
    assert (snap.host_ghash_calls, snap.host_ghash_bytes) == (2, 2 * (6 + 1000))
    assert snap.host_ghash_ns_per_call > 0
    info = backend.info()
    assert (
        info["gcm"]
        == f"CTR keystream on the simulated device, GHASH on the host CPU ({info['software_core']})"
    )
    names = {name for name, _, _, _ in prometheus_samples(snap)}
    assert {"keystream_hwsim_host_ghash_bytes_total", "keystream_hwsim_host_ghash_seconds_per_call"} <= names


def test_python_core_uses_the_pure_python_ghash() -> None:
    backend = HwsimBackend("proposal", software="python")
    gcm = aescore.AesGcm(backend, KEY[:16])
    assert gcm.encrypt(NONCE, b"abc", None) == AESGCM(KEY[:16]).encrypt(NONCE, b"abc", None)
    assert backend.snapshot().host_ghash_calls == 1
    assert str(backend.info()["gcm"]).endswith("(python)")


def test_the_host_ghash_is_the_software_cores_own() -> None:
    """hwsim asks its software core for GHASH (``Backend.ghash``) instead of testing the core's name."""
    from aescore.gcm._ghash import PythonGhash

    reason = aescore.available_backends().get("aesni")
    if reason is not None:
        pytest.skip(f"aesni unavailable: {reason}")
    backend = HwsimBackend("pcie-offload", software="aesni")
    host = backend._host_ghash(bytes(16))
    assert type(host._inner) is type(aescore.get_backend("aesni").ghash(bytes(16)))
    assert not isinstance(host._inner, PythonGhash)
