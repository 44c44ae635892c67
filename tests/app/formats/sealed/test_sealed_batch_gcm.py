"""gcm keys on the native batch path: the per-message path's bytes and errors, item by item.

The reference is a :class:`SealedEncryptor` / :class:`SealedDecryptor` per message on the python backend (no
native code), driven by the same salts and nonce prefixes; a model written from the format description with
``cryptography``'s AES-GCM and an HKDF from :mod:`hmac` checks both, and Tink reads the native output.
"""

from __future__ import annotations

import hashlib
import hmac
import random
from collections.abc import Callable

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

import aescore
from aescore.sealing import _sealed
from app.formats.sealed import (
    KeyParameters,
    SealedDecryptionError,
    SealedDecryptor,
    SealedEncryptor,
    header_length,
    min_segment_size,
    native_isa,
    open_many,
    seal_many,
)
from app.formats.sealed import randomness as sealed_randomness
from tests.app.formats.conftest import TinkStreamingAead
from tests.app.formats.sealed.test_sealed_batch import Randomness

KEY_TYPES = ("aes128", "aes192", "aes256")
DERIVED = {"aes128": 16, "aes192": 24, "aes256": 32}
TAG = 16


@pytest.fixture
def aesni() -> aescore.Backend:
    backend = aescore.get_backend("aesni")
    assert native_isa(backend, "gcm") is not None, "the aesni backend should take the native gcm batch path"
    return backend


def per_item_seal(ikm: bytes, key_type: str, segment_size: int, plaintext: bytes, ad: bytes) -> bytes:
    encryptor = SealedEncryptor(
        ikm, KeyParameters(key_type, segment_size, "gcm"), ad, aescore.get_backend("python")
    )
    return encryptor.update(plaintext) + encryptor.finalize()


def per_item_open(
    candidates: list[tuple[int, bytes]], key_type: str, segment_size: int, data: bytes, ad: bytes
) -> tuple[bytes, int] | SealedDecryptionError:
    decryptor = SealedDecryptor(
        candidates, KeyParameters(key_type, segment_size, "gcm"), ad, aescore.get_backend("python")
    )
    try:
        plaintext = decryptor.update(data) + decryptor.finalize()
    except SealedDecryptionError as exc:
        return exc
    assert decryptor.version is not None
    return plaintext, decryptor.version


def model_seal(
    ikm: bytes, key_type: str, segment_size: int, plaintext: bytes, ad: bytes, salt_and_prefix: bytes
) -> bytes:
    """The format as docs/formats.md states it: HKDF-SHA256 key, 12-byte segment nonces, AES-GCM a segment."""
    derived = DERIVED[key_type]
    salt, prefix = salt_and_prefix[:derived], salt_and_prefix[derived:]
    prk = hmac.digest(salt, ikm, hashlib.sha256)
    gcm = AESGCM(hmac.digest(prk, ad + b"\x01", hashlib.sha256)[:derived])
    header = bytes([1 + derived + 7]) + salt + prefix
    first = segment_size - len(header) - TAG
    out, position, index = [header], 0, 0
    while True:
        size = first if index == 0 else segment_size - TAG
        last = len(plaintext) - position <= size
        chunk = plaintext[position : position + size]
        nonce = prefix + index.to_bytes(4, "big") + (b"\x01" if last else b"\x00")
        out.append(gcm.encrypt(nonce, chunk, None))
        position += len(chunk)
        index += 1
        if last:
            return b"".join(out)


def cases(key_type: str, segment_size: int, rng: random.Random) -> tuple[list[bytes], list[bytes]]:
    first = segment_size - header_length(key_type) - TAG
    later = segment_size - TAG
    lengths = [0, 1, first - 1, first, first + 1, first + later, first + later + 1, 2500, 0]
    return [rng.randbytes(n) for n in lengths], [rng.randbytes(n % 3 * 17) for n in range(len(lengths))]


@pytest.mark.parametrize("key_type", KEY_TYPES)
@pytest.mark.parametrize("segment", ["min", "small", "4096"])
def test_native_gcm_seal_is_byte_for_byte_the_per_item_path_and_the_model(
    monkeypatch: pytest.MonkeyPatch, aesni: aescore.Backend, key_type: str, segment: str
) -> None:
    segment_size = {"min": min_segment_size(key_type, "gcm"), "small": 120, "4096": 4096}[segment]
    rng = random.Random(21)
    ikm = rng.randbytes(32)
    plaintexts, ads = cases(key_type, segment_size, rng)
    drawn: list[int] = []
    source = Randomness(4)

    def recording(n: int) -> bytes:
        drawn.append(n)
        return source(n)

    monkeypatch.setattr(sealed_randomness, "random_bytes", recording)
    native = seal_many(ikm, KeyParameters(key_type, segment_size, "gcm"), plaintexts, ads, aesni)
    assert drawn == [(DERIVED[key_type] + 7) * len(plaintexts)]  # one CSPRNG call, a fresh slice per item
    monkeypatch.setattr(sealed_randomness, "random_bytes", Randomness(4))
    expected = [
        per_item_seal(ikm, key_type, segment_size, p, a) for p, a in zip(plaintexts, ads, strict=True)
    ]
    assert native == expected
    per = DERIVED[key_type] + 7
    randomness = Randomness(4)(per * len(plaintexts))
    assert native == [
        model_seal(ikm, key_type, segment_size, p, a, randomness[i * per : (i + 1) * per])
        for i, (p, a) in enumerate(zip(plaintexts, ads, strict=True))
    ]
    opened = open_many(
        [(3, rng.randbytes(32)), (2, ikm)], KeyParameters(key_type, segment_size, "gcm"), expected, ads, aesni
    )
    assert opened == [(p, 2) for p in plaintexts]


def test_native_gcm_salts_and_nonces_are_fresh_per_item(aesni: aescore.Backend) -> None:
    sealed = seal_many(bytes(32), KeyParameters("aes256", 4096, "gcm"), [b"same"] * 50, [b""] * 50, aesni)
    headers = {bytes(item[: header_length("aes256")]) for item in sealed if isinstance(item, bytes)}
    assert len(headers) == 50


def test_native_gcm_errors_are_the_decryptors_errors(aesni: aescore.Backend) -> None:
    """Every tampered byte (header, body, tag), a wrong length byte, cuts and appended bytes: the same error
    and segment as the per-item decryptor, and never a plaintext."""
    ikm = bytes(range(32))
    good = per_item_seal(ikm, "aes128", 100, b"q" * 150, b"ad")
    items = [good[:3], b"\x20" + good[1:], good[:24], good[:40], good[:-1], good + b"!"]
    for position in range(len(good)):
        changed = bytearray(good)
        changed[position] ^= 0x80
        items.append(bytes(changed))
    items += [good[:cut] for cut in range(len(good))]
    items.append(good)
    candidates = [(4, bytes(32)), (1, ikm)]
    native = open_many(candidates, KeyParameters("aes128", 100, "gcm"), items, [b"ad"] * len(items), aesni)
    reference = [per_item_open(candidates, "aes128", 100, item, b"ad") for item in items]
    assert native[-1] == reference[-1] == (b"q" * 150, 1)
    for item, ours, theirs in zip(items[:-1], native[:-1], reference[:-1], strict=True):
        assert isinstance(ours, SealedDecryptionError) and isinstance(theirs, SealedDecryptionError), item
        assert (ours.message, ours.segment_index) == (theirs.message, theirs.segment_index), item


def test_native_gcm_binds_the_associated_data(aesni: aescore.Backend) -> None:
    ikm = bytes(range(32))
    sealed = seal_many(
        ikm, KeyParameters("aes256", 4096, "gcm"), [b"x", b"", b"y" * 5000], [b"ctx", b"ctx", b"ctx"], aesni
    )
    items = [item for item in sealed if isinstance(item, bytes)]
    wrong = open_many([(1, ikm)], KeyParameters("aes256", 4096, "gcm"), items, [b"ctY", b"", b"ctx "], aesni)
    assert all(isinstance(result, SealedDecryptionError) and result.segment_index == 0 for result in wrong)
    assert open_many([(1, ikm)], KeyParameters("aes256", 4096, "gcm"), items, [b"ctx"] * 3, aesni) == [
        (b"x", 1),
        (b"", 1),
        (b"y" * 5000, 1),
    ]


def test_native_gcm_status_codes_for_a_tag_failure_past_segment_zero(aesni: aescore.Backend) -> None:
    """A later segment's bad tag is BAD_TAG at that segment, with no plaintext of the message returned."""
    ikm = bytes(range(16, 48))
    good = per_item_seal(ikm, "aes128", 100, bytes(300), b"")
    changed = bytearray(good)
    changed[150] ^= 1  # inside segment 1
    [(plaintext, status, segment, _)] = _sealed.open_many(
        [ikm], 16, 100, [bytes(changed)], [b""], "aesni", "gcm"
    )
    assert plaintext is None
    assert (status, segment) == (aescore.SealedItemStatus.BAD_TAG, 1)


def test_tink_reads_native_gcm_batches_and_native_reads_tinks(
    aesni: aescore.Backend, tink_factory: Callable[..., TinkStreamingAead]
) -> None:
    ikm = random.Random(5).randbytes(32)
    plaintexts = [b"", b"x" * 5000, bytes(range(256))]
    ads = [b"a", b"", b"context"]
    for key_type in ("aes128", "aes256"):
        tink = tink_factory([(7, ikm)], DERIVED[key_type], 4096, "gcm")
        native = seal_many(ikm, KeyParameters(key_type, 4096, "gcm"), plaintexts, ads, aesni)
        assert [tink.decrypt(c, a) for c, a in zip(native, ads, strict=True)] == plaintexts  # type: ignore[arg-type]
        from_tink = [tink.encrypt(p, a) for p, a in zip(plaintexts, ads, strict=True)]
        assert open_many([(7, ikm)], KeyParameters(key_type, 4096, "gcm"), from_tink, ads, aesni) == [
            (p, 7) for p in plaintexts
        ]
