"""seal_one / open_one: one message gives what seal_many / open_many give for a batch of that one message,
bytes and errors, on the native path and the per-message path alike."""

from __future__ import annotations

import random

import pytest

import aescore
from app.errors import PayloadTooLargeError
from app.formats.sealed import (
    KeyParameters,
    SealedDecryptionError,
    batch,
    min_segment_size,
    open_many,
    open_one,
    seal_many,
    seal_one,
)
from app.formats.sealed import randomness as sealed_randomness
from app.formats.sealed.format import too_many_segments_message
from tests.app.formats.sealed.test_sealed_batch import Randomness, cases

SCHEMES = ("ctr-hmac", "gcm")
BACKENDS = ("aesni", "python")


def _same(ours: object, theirs: object) -> bool:
    """Equal answers: the same (plaintext, version), or errors with the same message and segment."""
    if isinstance(ours, SealedDecryptionError) and isinstance(theirs, SealedDecryptionError):
        return (ours.message, ours.segment_index, ours.plaintext_released) == (
            theirs.message,
            theirs.segment_index,
            theirs.plaintext_released,
        )
    return ours == theirs


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("backend_name", BACKENDS)
@pytest.mark.parametrize("key_type", ["aes128", "aes256"])
def test_seal_one_is_seal_many_of_one(
    monkeypatch: pytest.MonkeyPatch, scheme: str, backend_name: str, key_type: str
) -> None:
    backend = aescore.get_backend(backend_name)
    parameters = KeyParameters(key_type, 200, scheme)
    rng = random.Random(11)
    ikm = rng.randbytes(32)
    plaintexts, ads = cases(key_type, 200, rng)
    for plaintext, ad in zip(plaintexts, ads, strict=True):
        monkeypatch.setattr(sealed_randomness, "random_bytes", Randomness(5))
        one = seal_one(ikm, parameters, plaintext, ad, backend)
        monkeypatch.setattr(sealed_randomness, "random_bytes", Randomness(5))
        assert [one] == seal_many(ikm, parameters, [plaintext], [ad], backend)
        assert open_one([(1, ikm)], parameters, one, ad, backend) == (plaintext, 1)


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("backend_name", BACKENDS)
def test_open_one_fails_as_open_many_does(scheme: str, backend_name: str) -> None:
    """Every cut, every flipped bit, a wrong header byte, a wrong key and a wrong associated data: the same
    error (message, segment, no plaintext released) as a batch of that one message."""
    backend = aescore.get_backend(backend_name)
    parameters = KeyParameters("aes128", 100, scheme)
    ikm = bytes(range(32))
    good = seal_one(ikm, parameters, b"q" * 150, b"ad", backend)
    items = [good[:cut] for cut in range(0, len(good), 5)]
    items += [b"\x20" + good[1:], good + b"!"]
    for position in range(0, len(good), 9):
        changed = bytearray(good)
        changed[position] ^= 0x80
        items.append(bytes(changed))
    for candidates, ad in [([(1, ikm)], b"ad"), ([(2, bytes(32))], b"ad"), ([(1, ikm)], b"other")]:
        for item in items:
            ours = open_one(candidates, parameters, item, ad, backend)
            (theirs,) = open_many(candidates, parameters, [item], [ad], backend)
            assert isinstance(ours, SealedDecryptionError), len(item)
            assert _same(ours, theirs), len(item)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_open_one_reads_more_candidates_once_and_only_when_none_opens(scheme: str) -> None:
    backend = aescore.get_backend("aesni")
    parameters = KeyParameters("aes256", 300, scheme)
    old, new = bytes(range(32)), bytes(range(1, 33))
    by_new = seal_one(new, parameters, b"fresh", b"", backend)
    by_old = seal_one(old, parameters, b"cached", b"", backend)
    calls: list[int] = []

    def more() -> list[tuple[int, bytes]]:
        calls.append(1)
        return [(1, old), (2, new)]

    assert open_one([(1, old)], parameters, by_old, b"", backend, more) == (b"cached", 1)
    assert calls == []
    assert open_one([(1, old)], parameters, by_new, b"", backend, more) == (b"fresh", 2)
    assert calls == [1]
    stranger = seal_one(bytes(32), parameters, b"x", b"", backend)
    ours = open_one([(1, old)], parameters, stranger, b"", backend, more)
    (theirs,) = open_many([(1, old)], parameters, [stranger], [b""], backend, more)
    assert isinstance(ours, SealedDecryptionError) and "tried 2, 1" in ours.message
    assert _same(ours, theirs)
    # Without more candidates the error names the one version tried.
    alone = open_one([(1, old)], parameters, by_new, b"", backend)
    assert isinstance(alone, SealedDecryptionError) and _same(
        alone, open_many([(1, old)], parameters, [by_new], [b""], backend)[0]
    )


def test_open_one_tries_several_candidates_newest_first() -> None:
    backend = aescore.get_backend("aesni")
    parameters = KeyParameters("aes256", 4096)
    old, new = bytes(range(32)), bytes(range(1, 33))
    sealed = seal_one(old, parameters, b"by the old one", b"", backend)
    assert open_one([(2, new), (1, old)], parameters, sealed, b"", backend) == (b"by the old one", 1)


class _TooLong:
    """A native sealer whose core finds its message too long (``None``)."""

    def seal_ctr_hmac(self, *args: object) -> list[bytes | None]:
        return [None]


def test_a_message_too_long_to_seal_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    parameters = KeyParameters("aes256", min_segment_size("aes256"))
    monkeypatch.setattr(batch, "_native_sealer", lambda backend, scheme: _TooLong())
    with pytest.raises(PayloadTooLargeError) as raised:
        seal_one(bytes(32), parameters, b"a", b"", aescore.get_backend("aesni"))
    assert str(raised.value) == str(PayloadTooLargeError(too_many_segments_message(parameters.segment_size)))


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_bad_arguments_are_refused_as_the_batch_refuses_them(backend_name: str) -> None:
    backend = aescore.get_backend(backend_name)
    parameters = KeyParameters("aes256", 4096)
    with pytest.raises(TypeError, match="KeyParameters"):
        seal_one(bytes(32), ("aes256", 4096), b"", b"", backend)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="KeyParameters"):
        open_one([(1, bytes(32))], ("aes256", 4096), b"", b"", backend)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least"):
        seal_one(bytes(8), parameters, b"", b"", backend)
    with pytest.raises(ValueError, match="at least"):
        open_one([(1, bytes(8))], parameters, b"\x28" + bytes(100), b"", backend)
    with pytest.raises(ValueError, match="at least one"):
        open_one([], parameters, b"\x28" + bytes(100), b"", backend)
