"""The raw format: AES-CTR with a 128-bit wrapping counter, checked against pycryptodome at random offsets."""

from __future__ import annotations

import random

import pytest
from Crypto.Cipher import AES

import aescore
from aescore import MAX_STREAM_LENGTH
from app.api.errors import http_status
from app.errors import BadRequestError
from app.formats.raw import AsyncRawCipher, RawCipher, check_range, format_iv, new_iv, parse_iv


def reference(key: bytes, iv: bytes, offset: int, data: bytes) -> bytes:
    """pycryptodome's CTR (whole 16-byte block as the counter), started at the block holding ``offset``."""
    block, skip = divmod(offset, 16)
    counter = ((int.from_bytes(iv, "big") + block) % 2**128).to_bytes(16, "big")
    cipher = AES.new(key, AES.MODE_CTR, nonce=b"", initial_value=counter)
    return cipher.encrypt(bytes(skip) + data)[skip:]


def test_parse_iv_accepts_32_hex_digits_in_any_case() -> None:
    assert parse_iv("000102030405060708090a0b0c0d0e0f") == bytes(range(16))
    assert parse_iv("FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF") == b"\xff" * 16
    assert format_iv(bytes(range(16))) == "000102030405060708090a0b0c0d0e0f"


@pytest.mark.parametrize(
    "value",
    [
        "",
        "00",
        "0" * 31,
        "0" * 33,
        "g" * 32,
        "0x" + "0" * 30,
        " " + "0" * 31,
        "00 01 02 03 04 05 06 07 08 09 0a 0b",
    ],
)
def test_parse_iv_rejects_anything_else_naming_the_field(value: str) -> None:
    with pytest.raises(BadRequestError, match=r"^iv must be 32 hexadecimal digits \(16 bytes\)") as caught:
        parse_iv(value)
    assert http_status(caught.value) == 400


def test_new_iv_is_random_16_bytes() -> None:
    ivs = {new_iv() for _ in range(100)}
    assert len(ivs) == 100 and all(len(iv) == 16 for iv in ivs)


@pytest.mark.parametrize("key_size", [16, 24, 32])
def test_matches_pycryptodome_at_random_offsets(backend: aescore.Backend, key_size: int) -> None:
    rng = random.Random(key_size)
    for trial in range(40):
        key, iv = rng.randbytes(key_size), rng.randbytes(16)
        if trial % 4 == 0:
            iv = b"\xff" * 15 + bytes([rng.randrange(240, 256)])  # the 128-bit counter wraps inside the data
        length = rng.randint(0, 300)
        offset = rng.choice(
            [0, rng.randint(0, 100), rng.randint(0, 2**40), rng.randint(0, MAX_STREAM_LENGTH - 301)]
        )
        data = rng.randbytes(length)
        cipher = RawCipher(backend.expand_key(key), backend, iv, offset)
        assert cipher.update(data) == reference(key, iv, offset, data), (trial, offset, length)
        assert cipher.offset == offset + length


def test_any_chunking_and_update_into_give_the_same_stream(backend: aescore.Backend) -> None:
    rng = random.Random(3)
    key, iv = rng.randbytes(32), rng.randbytes(16)
    expanded = backend.expand_key(key)
    data = rng.randbytes(5000)
    expected = reference(key, iv, 77, data)
    cipher = RawCipher(expanded, backend, iv, offset=77)
    out = bytearray(len(data))
    position = 0
    while position < len(data):
        step = rng.randint(0, 700)
        piece = data[position : position + step]
        if step % 2:
            out[position : position + len(piece)] = cipher.update(piece)
        else:
            cipher.update_into(piece, memoryview(out)[position:])
        position += len(piece)
    assert bytes(out) == expected
    # In place, and a slice decrypted on its own (random access).
    buffer = bytearray(expected)
    RawCipher(expanded, backend, iv, offset=77).update_into(buffer, buffer)
    assert buffer == data
    assert RawCipher(expanded, backend, iv, offset=77 + 1234).update(expected[1234:2000]) == data[1234:2000]


def test_offset_limits_are_bad_requests(backend: aescore.Backend) -> None:
    expanded = backend.expand_key(bytes(16))
    for offset in (-1, MAX_STREAM_LENGTH):
        with pytest.raises(BadRequestError, match=r"^offset must be between 0 and 2\*\*64-1"):
            RawCipher(expanded, backend, bytes(16), offset)
    cipher = RawCipher(expanded, backend, bytes(16), MAX_STREAM_LENGTH - 3)
    assert len(cipher.update(b"abc")) == 3  # the very last bytes of the keystream are usable
    with pytest.raises(BadRequestError, match=r"2\*\*64 bytes"):
        cipher.update(b"d")
    with pytest.raises(BadRequestError, match=r"2\*\*64 bytes"):
        RawCipher(expanded, backend, bytes(16), MAX_STREAM_LENGTH - 3).update_into(b"abcd", bytearray(4))


def test_wrong_iv_or_foreign_key_is_a_programming_error(backend: aescore.Backend) -> None:
    with pytest.raises(ValueError, match="initial_counter must be 16 bytes"):
        RawCipher(backend.expand_key(bytes(16)), backend, bytes(8))
    other = "python" if backend.name != "python" else None
    if other is not None:
        with pytest.raises(TypeError, match="expanded key comes from backend"):
            RawCipher(aescore.get_backend(other).expand_key(bytes(16)), backend, bytes(16))
    assert "offset=5" in repr(RawCipher(backend.expand_key(bytes(16)), backend, bytes(16), 5))


class AsyncPython:
    """The python backend declaring ``supports_async`` (as hwsim does), recording the offsets it was given."""

    name = "python"
    supports_async = True

    def __init__(self) -> None:
        self.inner = aescore.get_backend("python")
        self.offsets: list[int] = []

    async def ctr_xor_async(
        self, expanded: aescore.ExpandedKey, iv: bytes, data: bytes, offset: int
    ) -> bytes:
        self.offsets.append(offset)
        result = self.inner.ctr_xor(expanded, iv, data, offset)
        assert result is not None
        return result


async def test_async_raw_cipher_matches_raw_cipher_and_shares_its_range_rule() -> None:
    fake = AsyncPython()
    expanded = fake.inner.expand_key(bytes(range(16)))
    iv = bytes(range(16, 32))
    data = random.Random(5).randbytes(1000)
    cipher = AsyncRawCipher(expanded, fake, iv, 7)  # type: ignore[arg-type]
    out = await cipher.update(data[:300]) + await cipher.update(data[300:])
    assert out == RawCipher(expanded, fake.inner, iv, 7).update(data)
    assert fake.offsets == [7, 307] and cipher.offset == 1007
    last = AsyncRawCipher(expanded, fake, iv, MAX_STREAM_LENGTH - 3)  # type: ignore[arg-type]
    assert len(await last.update(b"abc")) == 3
    with pytest.raises(BadRequestError, match=r"2\*\*64 bytes"):
        await last.update(b"d")
    with pytest.raises(BadRequestError, match=r"^offset must be between 0 and 2\*\*64-1"):
        AsyncRawCipher(expanded, fake, iv, MAX_STREAM_LENGTH)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ctr_xor_async"):
        AsyncRawCipher(expanded, fake.inner, iv)


def test_check_range_is_the_one_2_64_rule() -> None:
    check_range(MAX_STREAM_LENGTH - 10, 10)
    check_range(0, MAX_STREAM_LENGTH)
    with pytest.raises(BadRequestError, match=r"offset \d+ \+ 11 bytes"):
        check_range(MAX_STREAM_LENGTH - 10, 11)
    assert MAX_STREAM_LENGTH == 2**64
