"""Property tests: every backend against pycryptodome; CtrStream's chunking, seeking and counter limits."""

from __future__ import annotations

import itertools
import random
import threading
from array import array
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aescore

PropertySettings = Callable[[int], settings]  # the conftest fixtures' types
ReferenceCtr = Callable[[bytes, int, bytes, int], bytes]

TOP = 1 << 128
MAX_LENGTH = 5000

keys = st.sampled_from([16, 24, 32]).flatmap(lambda size: st.binary(min_size=size, max_size=size))
#: Counters anywhere, and in the last blocks before 2**128 (wrap), 2**64 and 2**32 (the low-word boundaries).
counters = st.one_of(
    st.integers(0, TOP - 1),
    st.integers(TOP - 400, TOP - 1),
    st.builds(
        lambda high, back: (high << 64) | ((1 << 64) - back),
        st.integers(0, (1 << 64) - 1),
        st.integers(1, 400),
    ),
    st.builds(
        lambda high, back: (high << 32) | ((1 << 32) - back),
        st.integers(0, (1 << 96) - 1),
        st.integers(1, 400),
    ),
)
offsets = st.one_of(st.integers(0, 100_000), st.integers(0, 1 << 63))
lengths = st.one_of(st.integers(0, 64), st.integers(0, MAX_LENGTH))


def _data(length: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(length)


def test_ctr_xor_matches_pycryptodome(
    backend: aescore.Backend, property_settings: PropertySettings, reference_ctr: ReferenceCtr
) -> None:
    @property_settings(200)
    @given(key=keys, counter=counters, offset=offsets, length=lengths, seed=st.integers(0, 2**32))
    def check(key: bytes, counter: int, offset: int, length: int, seed: int) -> None:
        data = _data(length, seed)
        expanded = backend.expand_key(key)
        result = backend.ctr_xor(expanded, counter.to_bytes(16, "big"), data, offset)
        assert result == reference_ctr(key, counter, data, offset)

    check()


def test_out_buffer_gets_exactly_len_data_bytes(
    backend: aescore.Backend, property_settings: PropertySettings, reference_ctr: ReferenceCtr
) -> None:
    @property_settings(60)
    @given(key=keys, counter=counters, offset=st.integers(0, 1000), length=lengths, slack=st.integers(0, 40))
    def check(key: bytes, counter: int, offset: int, length: int, slack: int) -> None:
        data = _data(length, counter)
        expected = reference_ctr(key, counter, data, offset)
        expanded = backend.expand_key(key)
        initial = counter.to_bytes(16, "big")
        out = bytearray(b"\xa5" * (length + slack))
        assert backend.ctr_xor(expanded, initial, data, offset, out) is None
        assert out[:length] == expected
        assert out[length:] == b"\xa5" * slack  # nothing written past len(data)
        # A writable memoryview into the middle of a larger buffer.
        frame = bytearray(b"\x5a" * (length + 2 * slack))
        assert (
            backend.ctr_xor(expanded, initial, data, offset, out=memoryview(frame)[slack : slack + length])
            is None
        )
        assert frame[slack : slack + length] == expected
        assert frame[:slack] == frame[slack + length :] == b"\x5a" * slack
        # In place: out is data itself.
        in_place = bytearray(data)
        backend.ctr_xor(expanded, initial, in_place, offset, out=in_place)
        assert in_place == expected

    check()


def test_too_small_out_raises_and_writes_nothing(backend: aescore.Backend) -> None:
    expanded = backend.expand_key(bytes(16))
    out = bytearray(b"\x11" * 31)
    with pytest.raises(ValueError, match="out") as caught:
        backend.ctr_xor(expanded, bytes(16), bytes(32), 0, out)
    assert isinstance(caught.value, aescore.AesCoreError)
    assert out == b"\x11" * 31


def test_inputs_of_every_buffer_type_agree(backend: aescore.Backend) -> None:
    key = bytes(range(32))
    data = bytes(range(256)) * 3
    expanded = backend.expand_key(bytearray(key))
    counter = (TOP - 5).to_bytes(16, "big")
    expected = backend.ctr_xor(backend.expand_key(key), counter, data)
    assert backend.ctr_xor(expanded, bytearray(counter), bytearray(data)) == expected
    assert backend.ctr_xor(expanded, memoryview(counter), memoryview(data)) == expected
    words = array("I", data)  # a multi-byte format is read as its bytes
    assert backend.ctr_xor(expanded, counter, memoryview(words)) == expected
    assert backend.ctr_xor(expanded, counter, b"") == b""
    assert backend.ctr_xor(expanded, counter, b"", 0, bytearray()) is None


def test_ctr_stream_any_chunking_equals_one_shot(
    backend: aescore.Backend, property_settings: PropertySettings, reference_ctr: ReferenceCtr
) -> None:
    @property_settings(100)
    @given(
        key=keys,
        counter=counters,
        start=st.integers(0, 10_000),
        length=lengths,
        cuts=st.lists(st.integers(0, MAX_LENGTH), max_size=12),
        into=st.lists(st.booleans(), min_size=13, max_size=13),
    )
    def check(key: bytes, counter: int, start: int, length: int, cuts: list[int], into: list[bool]) -> None:
        data = _data(length, start)
        stream = aescore.CtrStream(backend, key, counter.to_bytes(16, "big"))
        stream.seek(start)
        bounds = sorted({0, length, *(cut for cut in cuts if cut <= length)})
        pieces = []
        for index, (low, high) in enumerate(itertools.pairwise(bounds)):
            if into[index]:
                out = bytearray(high - low)
                stream.update_into(data[low:high], out)
                pieces.append(bytes(out))
            else:
                pieces.append(stream.update(data[low:high]))
            assert stream.offset == start + high
        assert b"".join(pieces) == reference_ctr(key, counter, data, start)

    check()


def test_ctr_stream_accepts_an_expanded_key_and_a_backend_name(backend: aescore.Backend) -> None:
    expanded = backend.expand_key(bytes(16))
    by_key = aescore.CtrStream(backend, expanded, bytes(16)).update(bytes(40))
    by_name = aescore.CtrStream(backend.name, bytes(16), bytes(16)).update(bytes(40))
    assert by_key == by_name == backend.ctr_xor(expanded, bytes(16), bytes(40))


@pytest.mark.parametrize("bits", [32, 64])
def test_fixed_width_counter_stops_before_wrapping(
    backend: aescore.Backend, property_settings: PropertySettings, reference_ctr: ReferenceCtr, bits: int
) -> None:
    @property_settings(60)
    @given(
        key=keys,
        nonce=st.integers(0, (1 << (128 - bits)) - 1),
        blocks_left=st.integers(1, 40),
        consumed=st.integers(0, 700),
        length=st.integers(0, 700),
    )
    def check(key: bytes, nonce: int, blocks_left: int, consumed: int, length: int) -> None:
        counter = (nonce << bits) | ((1 << bits) - blocks_left)
        limit = 16 * blocks_left  # keystream bytes before the low word would wrap into the nonce
        stream = aescore.CtrStream(backend, key, counter.to_bytes(16, "big"), counter_bits=bits)
        consumed = min(consumed, limit)
        stream.update(bytes(consumed))
        data = _data(length, counter)
        out = bytearray(b"\x77" * length)
        if consumed + length <= limit:
            stream.update_into(data, out)
            assert bytes(out) == reference_ctr(key, counter, data, consumed)
            assert stream.offset == consumed + length
            return
        for call in (lambda: stream.update(data), lambda: stream.update_into(data, out)):
            with pytest.raises(aescore.CounterOverflowError):
                call()
            assert stream.offset == consumed  # state unchanged
            assert out == b"\x77" * length  # nothing written
        # What still fits is still served, and is the right keystream.
        rest = stream.update(data[: limit - consumed])
        assert rest == reference_ctr(key, counter, data[: limit - consumed], consumed)

    check()


@pytest.mark.parametrize("bits", [32, 64])
def test_fixed_width_counter_boundary_exactly(backend: aescore.Backend, bits: int) -> None:
    counter = ((1 << bits) - 1).to_bytes(16, "big")  # one block left
    stream = aescore.CtrStream(backend, bytes(16), counter, counter_bits=bits)
    assert len(stream.update(bytes(16))) == 16
    with pytest.raises(aescore.CounterOverflowError):
        stream.update(b"\x00")
    assert stream.update(b"") == b""
    stream.seek(15)
    with pytest.raises(aescore.CounterOverflowError):
        stream.update(bytes(2))
    assert len(stream.update(bytes(1))) == 1


def test_full_width_counter_wraps_like_pycryptodome(
    backend: aescore.Backend, reference_ctr: ReferenceCtr
) -> None:
    stream = aescore.CtrStream(backend, bytes(range(16)), b"\xff" * 16)
    data = bytes(range(100))
    assert stream.update(data) == reference_ctr(bytes(range(16)), TOP - 1, data, 0)


def test_seek_gives_random_access(backend: aescore.Backend) -> None:
    key = bytes(range(24))
    data = _data(3000, 7)
    whole = aescore.CtrStream(backend, key, bytes(16)).update(data)
    stream = aescore.CtrStream(backend, key, bytes(16))
    for start, stop in [(2000, 3000), (17, 1000), (0, 1), (2999, 3000)]:
        stream.seek(start)
        assert stream.update(data[start:stop]) == whole[start:stop]


def test_expanded_key_is_shared_safely_between_threads(
    backend: aescore.Backend, reference_ctr: ReferenceCtr
) -> None:
    key = bytes(range(100, 132))
    expanded = backend.expand_key(key)
    jobs = [(counter, _data(1000 + 997 * counter, counter)) for counter in range(6)]
    results: dict[int, bytes | None] = {}

    def work(counter: int, data: bytes) -> None:
        results[counter] = backend.ctr_xor(expanded, counter.to_bytes(16, "big"), data)

    threads = [threading.Thread(target=work, args=job) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for counter, data in jobs:
        assert results[counter] == reference_ctr(key, counter, data, 0)


def test_ctr_stream_update_into_in_place(backend: aescore.Backend, reference_ctr: ReferenceCtr) -> None:
    key = bytes(range(16))
    data = _data(1000, 3)
    buffer = bytearray(data)
    stream = aescore.CtrStream(backend, key, (TOP - 3).to_bytes(16, "big"))
    view = memoryview(buffer)
    for low, high in [(0, 7), (7, 7), (7, 500), (500, 1000)]:
        stream.update_into(view[low:high], view[low:high])
    assert bytes(buffer) == reference_ctr(key, TOP - 3, data, 0)
