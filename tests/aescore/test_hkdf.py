"""HKDF-SHA256 into a caller's buffer: RFC 5869's vectors, agreement with pycryptodome, refusals."""

from __future__ import annotations

import os
import random

import pytest
from Crypto.Hash import SHA256
from Crypto.Protocol.KDF import HKDF

import aescore
from aescore import kdf

# RFC 5869 Appendix A, test cases 1 to 3 (SHA-256): IKM, salt, info, L, OKM.
RFC5869 = [
    (
        "0b" * 22,
        "000102030405060708090a0b0c",
        "f0f1f2f3f4f5f6f7f8f9",
        42,
        "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865",
    ),
    (
        bytes(range(0x00, 0x50)).hex(),
        bytes(range(0x60, 0xB0)).hex(),
        bytes(range(0xB0, 0x100)).hex(),
        82,
        "b11e398dc80327a1c8e7f78c596a49344f012eda2d4efad8a050cc4c19afa97c59045a99cac7827271cb41c65e590e09"
        "da3275600c2f09b8367793a9aca3db71cc30c58179ec3e87c14c01d5c1f3434f1d87",
    ),
    (
        "0b" * 22,
        "",
        "",
        42,
        "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8",
    ),
]


@pytest.fixture(params=["native", "fallback"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run each test on the C core and on the fallback a build without the extension uses."""
    if request.param == "native":
        assert kdf.native(), "the sealing extension is not built: run make build"
    else:
        monkeypatch.setattr(kdf, "_extension", lambda: None)
    return str(request.param)


@pytest.mark.parametrize(("ikm", "salt", "info", "length", "okm"), RFC5869, ids=["case1", "case2", "case3"])
def test_rfc5869_sha256_vectors(path: str, ikm: str, salt: str, info: str, length: int, okm: str) -> None:
    out = bytearray(length)
    aescore.hkdf_sha256_into(bytes.fromhex(ikm), bytes.fromhex(salt), bytes.fromhex(info), out)
    assert out.hex() == okm


def test_agrees_with_pycryptodome_on_random_inputs(path: str) -> None:
    generator = random.Random(5869)
    lengths = [1, 16, 31, 32, 33, 63, 64, 65, 96, 255 * 32] + [generator.randrange(1, 600) for _ in range(40)]
    for length in lengths:
        ikm = os.urandom(generator.randrange(0, 200))
        salt = os.urandom(generator.choice([0, 1, 32, 64, 65, 150]))
        info = os.urandom(generator.randrange(0, 300))
        out = memoryview(bytearray(length))
        aescore.hkdf_sha256_into(memoryview(ikm), bytearray(salt), info, out)
        expected = HKDF(ikm, length, salt or bytes(32), SHA256, context=info)
        assert out.tobytes() == expected, (len(ikm), len(salt), len(info), length)


def test_writes_into_part_of_a_larger_buffer_and_nothing_else(path: str) -> None:
    buffer = bytearray(b"\xaa" * 80)
    aescore.hkdf_sha256_into(b"key material", b"salt", b"info", memoryview(buffer)[8:40])
    assert buffer[:8] == b"\xaa" * 8 and buffer[40:] == b"\xaa" * 40
    assert bytes(buffer[8:40]) == HKDF(b"key material", 32, b"salt", SHA256, context=b"info")


@pytest.mark.parametrize("length", [0, 255 * 32 + 1, 1 << 20])
def test_a_bad_output_length_is_refused_and_out_is_untouched(path: str, length: int) -> None:
    out = bytearray(b"\x55" * length)
    with pytest.raises(
        aescore.AesCoreValueError, match=r"out must hold 1 to 8160 bytes .* got " + str(length)
    ):
        aescore.hkdf_sha256_into(b"ikm", b"salt", b"info", out)
    assert out == b"\x55" * length


@pytest.mark.parametrize(
    ("ikm", "salt", "info", "out", "message"),
    [
        ("text", b"", b"", bytearray(32), "ikm must be bytes-like"),
        (b"k", 5, b"", bytearray(32), "salt must be bytes-like"),
        (b"k", b"", None, bytearray(32), "info must be bytes-like"),
        (b"k", b"", b"", bytes(32), "out must be"),
        (b"k", b"", b"", memoryview(bytearray(32)).toreadonly(), "out must be"),
    ],
)
def test_bad_arguments_are_refused_with_their_name(
    path: str, ikm: object, salt: object, info: object, out: object, message: str
) -> None:
    with pytest.raises(aescore.AesCoreTypeError, match=message):
        aescore.hkdf_sha256_into(ikm, salt, info, out)  # type: ignore[arg-type]


def test_the_native_core_refuses_bad_lengths_and_buffers_itself() -> None:
    """The Cython layer turns the C core's codes into errors when called without the public checks."""
    from aescore.sealing import _sealed

    for length in (0, _sealed.HKDF_SHA256_MAX_LENGTH + 1):
        with pytest.raises(aescore.AesCoreValueError, match="out must hold 1 to 8160 bytes"):
            _sealed.hkdf_sha256_into(b"ikm", b"", b"", bytearray(length))
    with pytest.raises(aescore.AesCoreTypeError, match="out must be a writable"):
        _sealed.hkdf_sha256_into(b"ikm", b"", b"", bytes(32))  # type: ignore[arg-type]
    with pytest.raises(aescore.AesCoreTypeError, match="info must be bytes-like, got int"):
        _sealed.hkdf_sha256_into(b"ikm", b"", 7, bytearray(32))  # type: ignore[arg-type]
    out = bytearray(255 * 32)
    _sealed.hkdf_sha256_into(b"ikm", b"", b"", out)  # the longest output
    assert bytes(out) == HKDF(b"ikm", 255 * 32, bytes(32), SHA256)
