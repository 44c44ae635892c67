"""aesni-specific AES-GCM behaviour: path selection, the GIL, one key from many threads, the C status codes.

The backend-independent contract (vectors, errors, hypothesis) runs on every path in the shared GCM suite.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

import aescore
from aescore.ctr import _aesni
from tests.aescore.conftest import ticks_during

if _aesni.unavailable_reason() is not None:
    pytest.skip(f"aesni backend unavailable: {_aesni.unavailable_reason()}", allow_module_level=True)

MIB = 1 << 20
ROOT = Path(__file__).resolve().parents[2]
# Every path stitches AES of batch i with GHASH of batch i-1 when encrypting, of batch i when decrypting.
# The aesni path's batch is 8 blocks, vaes256's 16, vaes512's 32 (then one 16-block batch unstitched, then
# a masked tail): lengths at, around and between their edges, with one batch, two, and more.
EDGE_LENGTHS = sorted(
    {0, 1, 15, 16, 17, 127, 128, 129}
    | {128 * k + d for k in (1, 2, 3, 4, 8) for d in (-1, 0, 1)}
    | {256 * k + d for k in (1, 2, 3) for d in (-1, 0, 1)}
    | {512 * k + d for k in (1, 2, 3, 4) for d in (-1, 0, 1)}
    | {512 * k + 256 + d for k in (1, 2) for d in (-1, 0, 1)}
)
EDGE_AAD_LENGTHS = (0, 20, 129)


def check_batch_edges(isa: str) -> int:
    """Seal and open EDGE_LENGTHS x EDGE_AAD_LENGTHS x key sizes on ``isa`` against cryptography, tamper with
    each sealed message, and return how many messages were checked (also run in a subprocess, below)."""
    rng = random.Random(f"gcm batch edges {isa}")
    backend = _aesni.AesniBackend(isa=isa, threads=1)
    checked = 0
    for key_size in (16, 24, 32):
        key = rng.randbytes(key_size)
        ours, theirs = backend.gcm_key(key), AESGCM(key)
        for length in EDGE_LENGTHS:
            for aad_length in EDGE_AAD_LENGTHS:
                nonce, data = rng.randbytes(12), rng.randbytes(length)
                aad = rng.randbytes(aad_length) if aad_length else None
                sealed = ours.encrypt(nonce, data, aad)
                assert sealed == theirs.encrypt(nonce, data, aad), (isa, key_size, length, aad_length)
                assert ours.decrypt(nonce, sealed, aad) == data
                out = bytearray(length)
                ours.decrypt_into(nonce, sealed, aad, out)
                assert out == data
                buffer = bytearray(data) + bytearray(16)  # in place, both ways
                assert ours.encrypt_into(nonce, memoryview(buffer)[:length], aad, buffer) == length + 16
                assert buffer == sealed
                assert ours.decrypt_into(nonce, buffer, aad, buffer) == length
                assert buffer[:length] == data
                # Tamper with the first and last ciphertext bytes, the tag and the associated data.
                for position in {0, length - 1, length} if length else {0}:
                    forged = bytearray(sealed)
                    forged[position] ^= 0x80
                    out = bytearray(b"\xaa" * length)
                    with pytest.raises(aescore.InvalidTag):
                        ours.decrypt_into(nonce, forged, aad, out)
                    assert out == bytes(length)  # no unauthenticated plaintext left behind
                    with pytest.raises(aescore.InvalidTag):  # in place: the ciphertext is zeroed too
                        ours.decrypt_into(nonce, forged, aad, forged)
                    assert forged[:length] == bytes(length)
                with pytest.raises(aescore.InvalidTag):
                    ours.decrypt(nonce, sealed, (aad or b"") + b"\x00")
                checked += 1
    return checked


@pytest.mark.parametrize("isa", ["aesni", "vaes256", "vaes512"])
def test_batch_edges_against_cryptography(isa: str) -> None:
    if isa not in _aesni.supported_isas() or _aesni.gcm_isa(isa) != isa:
        pytest.skip(f"no {isa} GCM path on this CPU")
    assert check_batch_edges(isa) == 3 * len(EDGE_LENGTHS) * len(EDGE_AAD_LENGTHS)


def test_aesni_path_legacy_sse_build_is_forced_by_the_environment() -> None:
    """The aesni path runs VEX-encoded where AVX is enabled; KEYSTREAM_GCM_XMM=sse forces the SSE build."""
    assert _aesni.gcm_xmm_encoding() in ("vex", "sse")
    code = (
        "from aescore.ctr import _aesni; from tests.aescore.test_aesni_gcm import check_batch_edges; "
        "print(_aesni.gcm_xmm_encoding(), check_batch_edges('aesni'))"
    )
    env = {**os.environ, "KEYSTREAM_GCM_XMM": "sse"}
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["sse", str(3 * len(EDGE_LENGTHS) * len(EDGE_AAD_LENGTHS))]


def test_gcm_follows_the_isa_setting_down_to_a_path_with_carry_less_multiply() -> None:
    for isa in _aesni.supported_isas():
        assert _aesni.gcm_isa(isa) == isa  # every VAES CPU so far also has VPCLMULQDQ
    assert _aesni.gcm_isa() == _aesni.gcm_isa(_aesni.get_isa())
    with pytest.raises(aescore.AesCoreValueError, match="isa must be one of"):
        _aesni.gcm_isa("sse2")


def test_module_isa_switch_applies_to_existing_keys() -> None:
    saved = _aesni.get_isa()
    gcm = aescore.AesGcm("aesni", bytes(32))
    data = random.Random(1).randbytes(3000)
    expected = AESGCM(bytes(32)).encrypt(bytes(12), data, b"ad")
    try:
        for isa in _aesni.supported_isas():
            _aesni.set_isa(isa)
            assert gcm.encrypt(bytes(12), data, b"ad") == expected
    finally:
        _aesni.set_isa(saved)


@pytest.mark.serial  # a helper thread must get a CPU during the call: alone
def test_large_messages_release_the_gil_small_ones_keep_it() -> None:
    key = _aesni.AesniBackend(isa=_aesni.supported_isas()[-1], threads=1).gcm_key(bytes(16))
    data = bytes(16 * MIB)
    sealed = key.encrypt(bytes(12), data, None)
    small = bytes(_aesni.GIL_RELEASE_BYTES - 1)
    assert ticks_during(lambda: key.encrypt(bytes(12), small, None)) == 0
    for call in (lambda: key.encrypt(bytes(12), data, None), lambda: key.decrypt(bytes(12), sealed, None)):
        attempts = [ticks_during(call) for _ in range(5)]  # shared machine: a few attempts
        assert max(attempts) > 0, "no Python thread ran during five large GCM calls: the GIL was held"


def test_one_key_from_many_threads() -> None:
    gcm = aescore.AesGcm("aesni", bytes(range(16)))
    rng = random.Random("gcm threads")
    jobs = [
        (rng.randbytes(12), rng.randbytes(rng.choice([0, 64, 5000, 70000])), rng.randbytes(20))
        for _ in range(36)
    ]
    expected = [AESGCM(bytes(range(16))).encrypt(*job) for job in jobs]
    results: list[bytes | None] = [None] * len(jobs)

    def work(indices: range) -> None:
        for _ in range(4):
            for index in indices:
                sealed = gcm.encrypt(*jobs[index])
                assert gcm.decrypt(jobs[index][0], sealed, jobs[index][2]) == jobs[index][1]
                results[index] = sealed

    workers = [threading.Thread(target=work, args=(range(i, len(jobs), 6),)) for i in range(6)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert results == expected


def test_ghash_object_and_probe_arguments() -> None:
    with pytest.raises(aescore.AesCoreValueError, match="hash_key must be 16 bytes long, got 15 bytes"):
        _aesni.AesniGhash(bytes(15))
    with pytest.raises(aescore.AesCoreTypeError, match="hash_key"):
        _aesni.AesniGhash("h" * 16)  # type: ignore[arg-type]
    with pytest.raises(aescore.AesCoreValueError, match="kind must be 'aes128' or 'clmul'"):
        _aesni.probe("sha", _aesni.supported_isas()[0], 1)
    assert _aesni.probe("aes128", "aesni", 10) == 10 * 12  # 12 chains, one block per xmm
    assert _aesni.probe("clmul", "aesni", 30) == 30 * 12 // 3
    with pytest.raises(TypeError):
        _aesni.AesniGcmKey()
