"""aesni-specific AES-GCM behaviour: path selection, the GIL, one key from many threads, the C status codes.

The backend-independent contract (vectors, errors, hypothesis) runs on every path in the shared GCM suite.
"""

from __future__ import annotations

import random
import threading

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

import aescore
from aescore.ctr import _aesni
from tests.aescore.conftest import ticks_during

if _aesni.unavailable_reason() is not None:
    pytest.skip(f"aesni backend unavailable: {_aesni.unavailable_reason()}", allow_module_level=True)

MIB = 1 << 20


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
