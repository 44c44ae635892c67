"""aescore.sealing._sealed: SHA-256/HMAC on both paths, whole-message seal/open against an independent model.

The model below (hashlib/hmac + the python backend's AES-CTR) is written from the format description only, so
this file needs nothing from ``app`` and runs under ``make asan`` with the rest of tests/aescore.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import aescore
from aescore.sealing import _sealed

pytestmark = pytest.mark.skipif(
    _sealed.unavailable_reason() is not None, reason="native sealed core unavailable on this CPU"
)

TAG = 32
ISA = str(aescore.get_backend("aesni").info()["isa"]) if _sealed.unavailable_reason() is None else "aesni"


@pytest.fixture(params=_sealed.sha256_impls())
def sha_impl(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every SHA-256 path this CPU runs, set module-wide for the test."""
    previous = _sealed.get_sha256_impl()
    _sealed.set_sha256_impl(request.param)
    yield str(request.param)
    _sealed.set_sha256_impl(previous)


def model_seal(
    ikm: bytes, derived: int, segment_size: int, plaintext: bytes, ad: bytes, random_: bytes
) -> bytes:
    salt, prefix = random_[:derived], random_[derived:]
    prk = hmac.digest(salt, ikm, "sha256")
    t1 = hmac.digest(prk, ad + b"\x01", "sha256")
    okm = t1 + hmac.digest(prk, t1 + ad + b"\x02", "sha256")
    aes_key, mac_key = okm[:derived], okm[derived : derived + 32]
    backend = aescore.get_backend("python")
    expanded = backend.expand_key(aes_key)
    header = bytes([1 + derived + 7]) + salt + prefix
    out, position, index = [header], 0, 0
    while True:
        size = segment_size - TAG - (len(header) if index == 0 else 0)
        last = len(plaintext) - position <= size
        chunk = plaintext[position : position + size]
        nonce = prefix + index.to_bytes(4, "big") + bytes([last]) + bytes(4)
        ciphertext = backend.ctr_xor(expanded, nonce, chunk)
        assert ciphertext is not None
        out += [ciphertext, hmac.digest(mac_key, nonce + ciphertext, "sha256")]
        position += len(chunk)
        index += 1
        if last:
            return b"".join(out)


def _cpu_flags() -> set[str]:
    """The CPU's feature flags as Linux reports them (empty where /proc/cpuinfo has none)."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


# The /proc/cpuinfo flags each path needs (Linux drops avx2 when the OS does not save YMM state).
PATH_FLAGS = {
    "scalar": set(),
    "bmi2": {"bmi2"},
    "avx2": {"avx2", "bmi2"},
    "shani": {"sha_ni", "ssse3", "sse4_1"},
}


def _require_path(impl: str) -> None:
    """Skip when the CPU lacks `impl`; fail when it has the flags but the path is not offered."""
    if impl in _sealed.sha256_impls():
        return
    if PATH_FLAGS[impl] <= _cpu_flags():
        pytest.fail(
            f"the CPU reports {sorted(PATH_FLAGS[impl])} but {impl} is not offered (detection is wrong)"
        )
    pytest.skip(f"CPU lacks {impl} (supported here: {', '.join(_sealed.sha256_impls())})")


def test_path_names_and_order() -> None:
    assert _sealed.SHA256_IMPL_NAMES == ("shani", "avx2", "bmi2", "scalar")
    offered = _sealed.sha256_impls()
    assert offered == tuple(name for name in _sealed.SHA256_IMPL_NAMES if name in offered)
    assert offered[-1] == "scalar"
    flags = _cpu_flags()
    if flags:  # Linux: auto takes the fastest path the flags allow
        expected = next(name for name in _sealed.SHA256_IMPL_NAMES if PATH_FLAGS[name] <= flags)
        assert offered[0] == expected


# Every length to 300 (0 to 4 whole blocks in one compression call, the 55/56/63/64/65-byte padding edges of
# each), then long ones: whole-block counts odd and even, so the AVX2 path's two-block loop and its one-block
# tail both run, at their junction too.
SHA_LENGTHS = [*range(0, 301), 447, 448, 511, 512, 513, 1000, 1024, 4095, 4096, 4160, 65536 + 7, 1 << 20]


@pytest.mark.parametrize("impl", ["scalar", "bmi2", "avx2", "shani"])
def test_sha256_and_hmac_match_hashlib(impl: str) -> None:
    _require_path(impl)
    rng = random.Random(5)
    for length in SHA_LENGTHS + [rng.randrange(300, 20000) for _ in range(40)]:
        data = rng.randbytes(length)
        assert _sealed.sha256(data, impl) == hashlib.sha256(data).digest(), length
    for key_length in (0, 1, 32, 55, 56, 63, 64, 65, 128, 200):
        key = rng.randbytes(key_length)
        for data_length in (0, 1, 55, 64, 65, 1024, key_length * 3):
            data = rng.randbytes(data_length)
            expected = hmac.digest(key, data, "sha256")
            assert _sealed.hmac_sha256(key, data, impl) == expected, (key_length, data_length)


def test_hkdf_matches_cryptography(sha_impl: str) -> None:
    from cryptography.hazmat.primitives.hashes import SHA256
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    rng = random.Random(11)
    for ikm_length, salt_length, info_length, length in [
        (16, 0, 0, 32),
        (32, 16, 5, 64),
        (64, 32, 100, 33),
        (65, 64, 0, 1),
        (200, 65, 63, 1000),
        (22, 13, 10, 8160),
    ]:
        ikm, salt, info = rng.randbytes(ikm_length), rng.randbytes(salt_length), rng.randbytes(info_length)
        out = bytearray(length)
        _sealed.hkdf_sha256_into(ikm, salt, info, out)
        expected = HKDF(algorithm=SHA256(), length=length, salt=salt or None, info=info).derive(ikm)
        assert bytes(out) == expected, (sha_impl, ikm_length, salt_length, info_length, length)


@pytest.mark.parametrize("scheme", _sealed.SCHEMES)
def test_sealed_output_is_identical_on_every_path(scheme: str) -> None:
    """The same inputs and randomness seal to the same bytes on every SHA-256 path; each path opens them."""
    rng = random.Random(17)
    ikm = rng.randbytes(32)
    plaintexts = [rng.randbytes(n) for n in (0, 1, 63, 64, 1024, 5000, 70000)]
    ads = [rng.randbytes(i * 30) for i in range(len(plaintexts))]
    randomness = rng.randbytes((32 + 7) * len(plaintexts))
    previous = _sealed.get_sha256_impl()
    sealed: dict[str, list[bytes | None]] = {}
    try:
        for impl in _sealed.sha256_impls():
            _sealed.set_sha256_impl(impl)
            sealed[impl] = _sealed.seal_many(ikm, 32, 4096, plaintexts, ads, randomness, ISA, scheme)
        reference = sealed["scalar"]
        assert all(c is not None for c in reference)
        for impl, outputs in sealed.items():
            assert outputs == reference, impl
        for impl in _sealed.sha256_impls():
            _sealed.set_sha256_impl(impl)
            ciphertexts = [bytes(c or b"") for c in reference]
            opened = _sealed.open_many([ikm], 32, 4096, ciphertexts, ads, ISA, scheme)
            assert [item[:2] for item in opened] == [(p, _sealed.ITEM_OK) for p in plaintexts], impl
    finally:
        _sealed.set_sha256_impl(previous)


def test_sha256_path_is_forced_by_the_environment() -> None:
    code = (
        "from aescore.sealing import _sealed; print(_sealed.get_sha256_impl(), _sealed.unavailable_reason())"
    )
    for setting, expected in (("scalar", "scalar None"), ("auto", f"{_sealed.sha256_impls()[0]} None")):
        env = {**os.environ, "KEYSTREAM_SHA256_IMPL": setting}
        output = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        assert output.stdout.strip() == expected
    env = {**os.environ, "KEYSTREAM_SHA256_IMPL": "md5"}
    output = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    expected = "none KEYSTREAM_SHA256_IMPL: impl must be one of auto, shani, avx2, bmi2, scalar"
    assert output.stdout.startswith(expected)


@pytest.mark.parametrize("impl", _sealed.SHA256_IMPL_NAMES)
def test_each_path_forced_by_the_environment(impl: str) -> None:
    """A forced path runs when the CPU has it; one it lacks leaves the native core unavailable, saying why."""
    code = (
        "from aescore.sealing import _sealed; print(_sealed.get_sha256_impl(), _sealed.unavailable_reason())"
    )
    env = {**os.environ, "KEYSTREAM_SHA256_IMPL": impl}
    output = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    if impl in _sealed.sha256_impls():
        assert output.stdout.strip() == f"{impl} None"
    else:
        expected = f"none KEYSTREAM_SHA256_IMPL: SHA-256 path {impl!r} is not supported by this CPU"
        assert output.stdout.strip() == expected
        with pytest.raises(aescore.AesCoreValueError, match="not supported by this CPU"):
            _sealed.set_sha256_impl(impl)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(aescore.AesCoreValueError, match="must be one of"):
        _sealed.set_sha256_impl("sha1")
    with pytest.raises(aescore.AesCoreTypeError):
        _sealed.set_sha256_impl(3)  # type: ignore[arg-type]


@pytest.mark.parametrize("derived", [16, 24, 32])
@pytest.mark.parametrize("segment_size", ["min", 100, 4096])
def test_seal_matches_the_model_and_opens(sha_impl: str, derived: int, segment_size: int | str) -> None:
    size = 1 + derived + 7 + TAG + 1 if segment_size == "min" else int(segment_size)
    first = size - (1 + derived + 7) - TAG
    rng = random.Random(derived * size)
    ikm = rng.randbytes(32)
    lengths = [0, 1, first - 1, first, first + 1, first + size - TAG, first + size - TAG + 1, 3000]
    plaintexts = [rng.randbytes(n) for n in lengths]
    ads = [rng.randbytes(i % 3 * 40) for i in range(len(lengths))]
    randomness = rng.randbytes((derived + 7) * len(lengths))
    sealed = [
        c for c in _sealed.seal_many(ikm, derived, size, plaintexts, ads, randomness, ISA) if c is not None
    ]
    per = derived + 7
    for i, ciphertext in enumerate(sealed):
        expected = model_seal(ikm, derived, size, plaintexts[i], ads[i], randomness[i * per : (i + 1) * per])
        assert ciphertext == expected, lengths[i]
    opened = _sealed.open_many([rng.randbytes(32), ikm], derived, size, sealed, ads, ISA)
    assert opened == [(p, _sealed.ITEM_OK, opened[i][2], 1) for i, p in enumerate(plaintexts)]


def test_every_tampered_byte_fails_only_its_item(sha_impl: str) -> None:
    ikm = bytes(range(32))
    good = _sealed.seal_many(ikm, 16, 64, [b"x" * 70], [b"ad"], bytes(23), ISA)[0]
    assert good is not None
    tampered = []
    for position in range(len(good)):
        changed = bytearray(good)
        changed[position] ^= 0x01
        tampered.append(bytes(changed))
    items = [good, *tampered, good]
    results = _sealed.open_many([ikm], 16, 64, items, [b"ad"] * len(items), ISA)
    assert results[0][0] == results[-1][0] == b"x" * 70
    for plaintext, status, _, _ in results[1:-1]:
        assert plaintext is None and status != _sealed.ITEM_OK


def test_each_failure_has_its_status_and_segment() -> None:
    ikm = bytes(range(32))
    good = _sealed.seal_many(ikm, 16, 100, [b"y" * 100], [b""], bytes(23), ISA)[0]
    assert good is not None and len(good) == 100 + 88  # segments of 24 + 44 + 32 and 56 + 32 bytes
    later = bytearray(good)
    later[150] ^= 1
    cases = {
        good[:10]: (_sealed.ITEM_SHORT_HEADER, 0),
        b"\x19" + good[1:]: (_sealed.ITEM_BAD_HEADER, 0),
        good[:24]: (_sealed.ITEM_MISSING_SEGMENT, 0),
        good[: 100 + 20]: (_sealed.ITEM_SHORT_SEGMENT, 1),
        good[:-1] + bytes([good[-1] ^ 1]): (_sealed.ITEM_BAD_TAG, 1),
        bytes(later): (_sealed.ITEM_BAD_TAG, 1),
        good[:30] + bytes([good[30] ^ 1]) + good[31:]: (_sealed.ITEM_NO_KEY, 0),
        good + b"z": (_sealed.ITEM_BAD_TAG, 1),
    }
    results = _sealed.open_many([ikm], 16, 100, list(cases), [b""] * len(cases), ISA)
    assert [(status, segment) for _, status, segment, _ in results] == list(cases.values())
    assert all(plaintext is None for plaintext, _, _, _ in results)
    assert _sealed.open_many([bytes(32)], 16, 100, [good], [b""], ISA)[0][1] == _sealed.ITEM_NO_KEY


def test_argument_errors() -> None:
    ikm = bytes(32)
    with pytest.raises(aescore.AesCoreValueError, match="randomness must be 23 bytes"):
        _sealed.seal_many(ikm, 16, 64, [b""], [b""], bytes(22), ISA)
    with pytest.raises(aescore.AesCoreTypeError, match="plaintexts must hold bytes"):
        _sealed.seal_many(ikm, 16, 64, [bytearray(1)], [b""], bytes(23), ISA)  # type: ignore[list-item,unused-ignore]
    with pytest.raises(aescore.AesCoreValueError, match="one entry per item"):
        _sealed.seal_many(ikm, 16, 64, [b""], [], bytes(23), ISA)
    with pytest.raises(aescore.AesCoreValueError, match="key material"):
        _sealed.seal_many(bytes(8), 16, 64, [b""], [b""], bytes(23), ISA)
    with pytest.raises(aescore.AesCoreValueError, match="segment_size"):
        _sealed.seal_many(ikm, 16, 56, [b""], [b""], bytes(23), ISA)
    with pytest.raises(aescore.AesCoreValueError, match="derived_size"):
        _sealed.open_many([ikm], 20, 64, [b""], [b""], ISA)
    with pytest.raises(aescore.AesCoreValueError, match="isa must be"):
        _sealed.open_many([ikm], 16, 64, [b""], [b""], "sse2")
    assert _sealed.seal_many(ikm, 16, 64, [], [], b"", ISA) == []
    assert _sealed.open_many([ikm], 16, 64, [], [], ISA) == []


@pytest.mark.serial  # a helper thread must get a CPU during the call: alone
def test_large_items_release_the_gil_and_still_match(sha_impl: str) -> None:
    rng = random.Random(9)
    plaintexts = [rng.randbytes(300_000), rng.randbytes(5)]
    randomness = rng.randbytes(39 * 2)
    sealed = [
        c for c in _sealed.seal_many(bytes(32), 32, 4096, plaintexts, [b"", b"a"], randomness, ISA) if c
    ]
    assert sealed[0] == model_seal(bytes(32), 32, 4096, plaintexts[0], b"", randomness[:39])
    opened = _sealed.open_many([bytes(32)], 32, 4096, sealed, [b"", b"a"], ISA)
    assert [result[0] for result in opened] == plaintexts


# -- the gcm scheme: HKDF key, one AES-GCM per segment with a 12-byte nonce, 16-byte tags --

GCM_TAG = 16


def model_seal_gcm(
    ikm: bytes, derived: int, segment_size: int, plaintext: bytes, ad: bytes, random_: bytes
) -> bytes:
    """The gcm scheme from its description, on the python backend's AES-GCM (no native code)."""
    salt, prefix = random_[:derived], random_[derived:]
    prk = hmac.digest(salt, ikm, "sha256")
    gcm = aescore.AesGcm("python", hmac.digest(prk, ad + b"\x01", "sha256")[:derived])
    header = bytes([1 + derived + 7]) + salt + prefix
    out, position, index = [header], 0, 0
    while True:
        size = segment_size - GCM_TAG - (len(header) if index == 0 else 0)
        last = len(plaintext) - position <= size
        chunk = plaintext[position : position + size]
        out.append(gcm.encrypt(prefix + index.to_bytes(4, "big") + bytes([last]), chunk, None))
        position += len(chunk)
        index += 1
        if last:
            return b"".join(out)


@pytest.mark.parametrize("derived", [16, 24, 32])
@pytest.mark.parametrize("segment", ["min", "small", "4096"])
def test_gcm_seal_and_open_match_the_model(derived: int, segment: str) -> None:
    header = 1 + derived + 7
    segment_size = {"min": header + GCM_TAG + 1, "small": 100, "4096": 4096}[segment]
    rng = random.Random(derived * 7 + segment_size)
    ikm = rng.randbytes(32)
    first, later = segment_size - header - GCM_TAG, segment_size - GCM_TAG
    lengths = [0, 1, first, first + 1, first + later + 1, 700, 0]
    plaintexts = [rng.randbytes(n) for n in lengths]
    ads = [rng.randbytes(n % 4 * 9) for n in range(len(lengths))]
    per_item = derived + 7
    randomness = rng.randbytes(per_item * len(lengths))
    sealed = _sealed.seal_many(ikm, derived, segment_size, plaintexts, ads, randomness, ISA, "gcm")
    assert sealed == [
        model_seal_gcm(ikm, derived, segment_size, p, a, randomness[i * per_item : (i + 1) * per_item])
        for i, (p, a) in enumerate(zip(plaintexts, ads, strict=True))
    ]
    opened = _sealed.open_many([bytes(32), ikm], derived, segment_size, sealed, ads, ISA, "gcm")
    # An opened message reports its last segment's index and the candidate that verified (the second).
    last_segments = [0 if n <= first else -(-(n - first) // later) for n in lengths]
    assert opened == [(p, _sealed.ITEM_OK, s, 1) for p, s in zip(plaintexts, last_segments, strict=True)]


def test_gcm_open_refuses_every_tampered_byte_and_cut() -> None:
    """No plaintext for any flipped bit or truncation; the statuses name the first failing segment."""
    ikm = bytes(range(32))
    good = model_seal_gcm(ikm, 16, 100, bytes(range(200)), b"ad", bytes(range(23)))
    items = []
    for position in range(len(good)):
        changed = bytearray(good)
        changed[position] ^= 0x01
        items.append(bytes(changed))
    items += [good[:cut] for cut in range(len(good))]
    results = _sealed.open_many([ikm], 16, 100, items, [b"ad"] * len(items), ISA, "gcm")
    for item, (plaintext, status, _, _) in zip(items, results, strict=True):
        assert plaintext is None and status != _sealed.ITEM_OK, item
    [(plaintext, status, _, _)] = _sealed.open_many([ikm], 16, 100, [good], [b"ad"], ISA, "gcm")
    assert (plaintext, status) == (bytes(range(200)), _sealed.ITEM_OK)
    [(plaintext, status, segment, _)] = _sealed.open_many([ikm], 16, 100, [good], [b"ae"], ISA, "gcm")
    assert (plaintext, status, segment) == (None, _sealed.ITEM_NO_KEY, 0)


def test_unknown_scheme_is_refused() -> None:
    with pytest.raises(ValueError, match="scheme must be one of ctr-hmac, gcm"):
        _sealed.seal_many(bytes(32), 16, 4096, [], [], b"", ISA, "gcm-siv")
