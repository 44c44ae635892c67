"""seal_many / open_many: the native batch path gives the Python path's bytes and errors, item by item."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

import pytest

import aescore
from aescore.sealing import _sealed
from app.errors import PayloadTooLargeError
from app.formats.sealed import (
    KeyParameters,
    SealedDecryptionError,
    SealedDecryptor,
    SealedEncryptor,
    batch,
    header_length,
    min_segment_size,
    native_isa,
    open_many,
    seal_many,
)
from app.formats.sealed import randomness as sealed_randomness
from app.formats.sealed.format import too_many_segments_message
from tests.app.formats.conftest import TinkStreamingAead

KEY_TYPES = ("aes128", "aes192", "aes256")


@pytest.fixture
def aesni() -> aescore.Backend:
    backend = aescore.get_backend("aesni")
    assert native_isa(backend) is not None, "the aesni backend should take the native batch path here"
    return backend


@pytest.fixture(params=_sealed.sha256_impls())
def sha_impl(request: pytest.FixtureRequest) -> Iterator[str]:
    previous = _sealed.get_sha256_impl()
    _sealed.set_sha256_impl(request.param)
    yield str(request.param)
    _sealed.set_sha256_impl(previous)


class Randomness:
    """A reproducible byte stream in place of os.urandom, cut in calls' order."""

    def __init__(self, seed: int) -> None:
        self.stream = random.Random(seed).randbytes(1 << 16)
        self.position = 0

    def __call__(self, n: int) -> bytes:
        chunk = self.stream[self.position : self.position + n]
        self.position += n
        return chunk


def python_seal(ikm: bytes, key_type: str, segment_size: int, plaintext: bytes, ad: bytes) -> bytes:
    encryptor = SealedEncryptor(ikm, KeyParameters(key_type, segment_size), ad, aescore.get_backend("python"))
    return encryptor.update(plaintext) + encryptor.finalize()


def python_open(
    candidates: list[tuple[int, bytes]], key_type: str, segment_size: int, data: bytes, ad: bytes
) -> tuple[bytes, int] | SealedDecryptionError:
    decryptor = SealedDecryptor(
        candidates, KeyParameters(key_type, segment_size), ad, aescore.get_backend("python")
    )
    try:
        plaintext = decryptor.update(data) + decryptor.finalize()
    except SealedDecryptionError as exc:
        return exc
    assert decryptor.version is not None
    return plaintext, decryptor.version


def cases(key_type: str, segment_size: int, rng: random.Random) -> tuple[list[bytes], list[bytes]]:
    first = segment_size - header_length(key_type) - 32
    later = segment_size - 32
    lengths = [0, 1, first - 1, first, first + 1, first + later, first + later + 1, 2500]
    return [rng.randbytes(n) for n in lengths], [rng.randbytes(n % 3 * 17) for n in range(len(lengths))]


@pytest.mark.parametrize("key_type", KEY_TYPES)
@pytest.mark.parametrize("segment", ["min", "small", "4096"])
def test_native_seal_is_byte_for_byte_the_python_encryptor(
    monkeypatch: pytest.MonkeyPatch, aesni: aescore.Backend, sha_impl: str, key_type: str, segment: str
) -> None:
    segment_size = {"min": min_segment_size(key_type), "small": 120, "4096": 4096}[segment]
    rng = random.Random(7)
    ikm = rng.randbytes(32)
    plaintexts, ads = cases(key_type, segment_size, rng)
    monkeypatch.setattr(sealed_randomness, "random_bytes", Randomness(1))
    native = seal_many(ikm, KeyParameters(key_type, segment_size), plaintexts, ads, aesni)
    # The batch takes salt then nonce prefix per item from one call: the same bytes in the same order.
    monkeypatch.setattr(sealed_randomness, "random_bytes", Randomness(1))
    expected = [python_seal(ikm, key_type, segment_size, p, a) for p, a in zip(plaintexts, ads, strict=True)]
    assert native == expected
    # Native open of Python-sealed messages (and so of its own) returns the plaintexts and the version.
    opened = open_many(
        [(3, rng.randbytes(32)), (2, ikm)], KeyParameters(key_type, segment_size), expected, ads, aesni
    )
    assert opened == [(p, 2) for p in plaintexts]


@pytest.mark.parametrize("key_type", KEY_TYPES)
def test_python_opens_native_sealed_messages(aesni: aescore.Backend, key_type: str) -> None:
    rng = random.Random(8)
    ikm = rng.randbytes(32)
    plaintexts, ads = cases(key_type, 200, rng)
    native = seal_many(ikm, KeyParameters(key_type, 200), plaintexts, ads, aesni)
    assert len({bytes(c[:40]) for c in native if isinstance(c, bytes)}) == len(native)  # fresh salt per item
    for ciphertext, plaintext, ad in zip(native, plaintexts, ads, strict=True):
        assert isinstance(ciphertext, bytes)
        assert python_open([(1, ikm)], key_type, 200, ciphertext, ad) == (plaintext, 1)


def test_native_errors_are_the_decryptors_errors(aesni: aescore.Backend, sha_impl: str) -> None:
    ikm = bytes(range(32))
    good = python_seal(ikm, "aes128", 100, b"q" * 150, b"ad")
    last_tag_byte_flipped = good[:-1] + bytes([good[-1] ^ 1])
    items = [good[:3], b"\x20" + good[1:], good[:24], good[:120], last_tag_byte_flipped, good + b"!"]
    for position in range(0, len(good), 7):
        changed = bytearray(good)
        changed[position] ^= 0x80
        items.append(bytes(changed))
    items.append(good)
    candidates = [(4, bytes(32)), (1, ikm)]
    native = open_many(candidates, KeyParameters("aes128", 100), items, [b"ad"] * len(items), aesni)
    python = [python_open(candidates, "aes128", 100, item, b"ad") for item in items]
    assert native[-1] == python[-1] == (b"q" * 150, 1)
    for ours, theirs in zip(native[:-1], python[:-1], strict=True):
        assert isinstance(ours, SealedDecryptionError) and isinstance(theirs, SealedDecryptionError)
        assert (ours.message, ours.segment_index) == (theirs.message, theirs.segment_index)


@pytest.mark.parametrize("plaintext_size", [0, 5, 60, 150])
def test_every_truncation_fails_as_the_decryptor_does(aesni: aescore.Backend, plaintext_size: int) -> None:
    """Cut after each byte: a one-segment message whose segment 0 is shorter than its tag once crashed the
    native path (an unsigned underflow of the plaintext length: SystemError, a 500 on the routes)."""
    ikm = bytes(range(32))
    good = python_seal(ikm, "aes128", 100, b"t" * plaintext_size, b"")
    items = [good[:cut] for cut in range(len(good))]
    native = open_many([(1, ikm)], KeyParameters("aes128", 100), items, [b""] * len(items), aesni)
    for item, ours in zip(items, native, strict=True):
        theirs = python_open([(1, ikm)], "aes128", 100, item, b"")
        assert isinstance(ours, SealedDecryptionError) and isinstance(theirs, SealedDecryptionError)
        assert (ours.message, ours.segment_index) == (theirs.message, theirs.segment_index), len(item)


def test_more_candidates_is_read_once_for_the_items_no_version_opens(aesni: aescore.Backend) -> None:
    old, new = bytes(range(32)), bytes(range(1, 33))
    by_new = seal_many(new, KeyParameters("aes256", 300), [b"fresh", b"also"], [b"", b""], aesni)
    by_old = seal_many(old, KeyParameters("aes256", 300), [b"cached"], [b""], aesni)
    items = [c for c in [*by_new, *by_old] if isinstance(c, bytes)]
    calls: list[int] = []

    def more() -> list[tuple[int, bytes]]:
        calls.append(1)
        return [(1, old), (2, new)]

    opened = open_many(
        [(1, old)],
        KeyParameters("aes256", 300),
        [*items, b"\x28" + bytes(100)],
        [b""] * 4,
        aesni,
        more_candidates=more,
    )
    assert opened[:3] == [(b"fresh", 2), (b"also", 2), (b"cached", 1)]
    assert isinstance(opened[3], SealedDecryptionError)
    assert "tried 2, 1" in opened[3].message
    assert calls == [1]
    untouched: list[int] = []

    def never() -> list[tuple[int, bytes]]:
        untouched.append(1)
        return []

    cached = [c for c in by_old if isinstance(c, bytes)]
    assert open_many(
        [(1, old)], KeyParameters("aes256", 300), cached, [b""], aesni, more_candidates=never
    ) == [(b"cached", 1)]
    assert untouched == []


def test_python_backend_keeps_the_python_path(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = aescore.get_backend("python")
    assert native_isa(backend) is None
    calls: list[int] = []
    real = backend.ctr_xor

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(backend, "ctr_xor", counting)
    sealed_items = seal_many(bytes(32), KeyParameters("aes128", 4096), [b"a", b"b"], [b"", b""], backend)
    assert len(calls) == 2
    opened = open_many([(1, bytes(32))], KeyParameters("aes128", 4096), sealed_items, [b"", b""], backend)  # type: ignore[arg-type]
    assert opened == [(b"a", 1), (b"b", 1)]


def test_tink_decrypts_native_batches(
    aesni: aescore.Backend, tink_factory: Callable[[list[tuple[int, bytes]], int, int], TinkStreamingAead]
) -> None:
    ikm = random.Random(3).randbytes(32)
    plaintexts = [b"", b"x" * 5000, bytes(range(256))]
    ads = [b"a", b"", b"context"]
    for key_type, derived in (("aes128", 16), ("aes256", 32)):
        tink = tink_factory([(7, ikm)], derived, 4096)
        native = seal_many(ikm, KeyParameters(key_type, 4096), plaintexts, ads, aesni)
        for ciphertext, plaintext, ad in zip(native, plaintexts, ads, strict=True):
            assert isinstance(ciphertext, bytes)
            assert tink.decrypt(ciphertext, ad) == plaintext
        from_tink = [tink.encrypt(p, a) for p, a in zip(plaintexts, ads, strict=True)]
        assert open_many([(7, ikm)], KeyParameters(key_type, 4096), from_tink, ads, aesni) == [
            (p, 7) for p in plaintexts
        ]


def test_format_errors_are_checked_up_front(aesni: aescore.Backend) -> None:
    with pytest.raises(ValueError, match="key_type"):
        seal_many(bytes(32), KeyParameters("aes512", 4096), [], [], aesni)
    with pytest.raises(ValueError, match="segment_size"):
        seal_many(bytes(32), KeyParameters("aes128", 10), [], [], aesni)
    with pytest.raises(ValueError, match="key material"):
        open_many([(1, bytes(8))], KeyParameters("aes128", 4096), [], [], aesni)
    with pytest.raises(ValueError, match="candidates"):
        open_many([], KeyParameters("aes128", 4096), [], [], aesni)


# -- gcm keys: one-segment messages sealed without an encryptor --


def gcm_seal(
    ikm: bytes, key_type: str, segment_size: int, plaintext: bytes, ad: bytes, backend: aescore.Backend
) -> bytes:
    encryptor = SealedEncryptor(ikm, KeyParameters(key_type, segment_size, "gcm"), ad, backend)
    return encryptor.update(plaintext) + encryptor.finalize()


@pytest.mark.parametrize("key_type", KEY_TYPES)
@pytest.mark.parametrize("backend_name", ["aesni", "python"])
def test_gcm_one_segment_seal_is_byte_for_byte_the_encryptor(
    monkeypatch: pytest.MonkeyPatch, key_type: str, backend_name: str
) -> None:
    backend = aescore.get_backend(backend_name)
    segment_size = 4096
    capacity = segment_size - header_length(key_type) - 16
    rng = random.Random(11)
    ikm = rng.randbytes(32)
    plaintexts = [rng.randbytes(n) for n in (0, 1, 100, capacity - 1, capacity)]
    ads = [rng.randbytes(n % 3 * 17) for n in range(len(plaintexts))]
    monkeypatch.setattr(sealed_randomness, "random_bytes", Randomness(5))
    batch = seal_many(ikm, KeyParameters(key_type, segment_size, "gcm"), plaintexts, ads, backend)
    monkeypatch.setattr(sealed_randomness, "random_bytes", Randomness(5))
    expected = [
        gcm_seal(ikm, key_type, segment_size, p, a, backend) for p, a in zip(plaintexts, ads, strict=True)
    ]
    assert batch == expected


def test_gcm_batch_mixes_one_segment_and_longer_messages(aesni: aescore.Backend) -> None:
    key_type, segment_size = "aes128", 4096
    capacity = segment_size - header_length(key_type) - 16
    rng = random.Random(12)
    ikm = rng.randbytes(16)
    sizes = [capacity + 1, 5, 3 * segment_size, capacity, 0, capacity + 2]
    plaintexts = [rng.randbytes(n) for n in sizes]
    ads = [b"a" * (n % 5) for n in sizes]
    sealed = seal_many(ikm, KeyParameters(key_type, segment_size, "gcm"), plaintexts, ads, aesni)
    assert all(isinstance(item, bytes) for item in sealed)
    opened = open_many([(1, ikm)], KeyParameters(key_type, segment_size, "gcm"), sealed, ads, aesni)  # type: ignore[arg-type]
    assert opened == [(p, 1) for p in plaintexts]
    tink = TinkStreamingAead([(1, ikm)], 16, segment_size, "gcm")
    assert [tink.decrypt(item, ad) for item, ad in zip(sealed, ads, strict=True)] == plaintexts  # type: ignore[arg-type]


def test_a_native_answer_of_the_wrong_length_is_refused(
    monkeypatch: pytest.MonkeyPatch, aesni: aescore.Backend
) -> None:
    """Results are matched to messages by position: a native core that answered for fewer messages than it
    was given is an error, never a shorter list or results paired with the wrong messages."""
    from app.formats.sealed import batch

    sealer = batch._native_sealer(aesni, "ctr-hmac")
    assert sealer is not None
    sealed = seal_many(bytes(32), KeyParameters("aes256", 4096), [b"a", b"b"], [b"", b""], aesni)
    real = sealer.open_ctr_hmac

    class Short:
        isa = sealer.isa

        def open_ctr_hmac(self, *args: object) -> list[object]:
            return real(*args)[:1]  # type: ignore[arg-type]

    monkeypatch.setitem(batch._SEALERS, (aesni, "ctr-hmac"), Short())
    with pytest.raises(ValueError, match="2 ciphertexts"):
        open_many([(1, bytes(32))], KeyParameters("aes256", 4096), sealed, [b"", b""], aesni)  # type: ignore[arg-type]


class _TooLongSecond:
    """A native sealer whose core seals the first message and finds the second too long (``None``)."""

    def seal_ctr_hmac(self, *args: object) -> list[bytes | None]:
        return [b"sealed", None]


def test_a_message_the_native_core_finds_too_long_becomes_its_error(
    aesni: aescore.Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    parameters = KeyParameters("aes256", min_segment_size("aes256"))
    monkeypatch.setattr(batch, "_native_sealer", lambda backend, scheme: _TooLongSecond())
    sealed = seal_many(bytes(32), parameters, (b"a", b"b"), (b"", b""), aesni)
    assert sealed[0] == b"sealed"
    assert isinstance(sealed[1], PayloadTooLargeError)
    assert str(sealed[1]) == str(PayloadTooLargeError(too_many_segments_message(parameters.segment_size)))
