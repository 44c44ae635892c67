"""``bench.core_image.find_needles``, the search of core images for key bytes: every needle found wherever it
lies, none invented, and a needle that starts like the zero pages that fill core images looked for by a
window of its own that does not."""

from __future__ import annotations

import random

import numpy as np

from bench.core_image import _anchor, find_needles


def test_needles_are_found_at_any_offset_and_absent_ones_are_not() -> None:
    rng = random.Random(5)
    data = bytearray(1 << 20)  # zero pages, as in a core image
    placed = [rng.randbytes(32), b"\x00\x00" + rng.randbytes(30), b"\x00\x00\x00\x00\x00" + rng.randbytes(27)]
    absent = [rng.randbytes(32), b"\x00\x00" + rng.randbytes(30)]
    for needle, offset in zip(placed, (0, 70_001, len(data) - 32), strict=True):  # start, odd, end
        data[offset : offset + len(needle)] = needle
    assert find_needles(data, [*placed, *absent]) == {0, 1, 2}


def test_the_anchor_avoids_the_datas_common_leading_bytes() -> None:
    """In zero-filled data a needle starting ``00 00`` is anchored where its bytes are not zero: anchored at
    its start, every other offset of the data was a candidate (minutes and gigabytes for a core image)."""
    data = bytes(1 << 16)
    counts = np.bincount(np.frombuffer(data, dtype="<u2"), minlength=65536)
    needle = b"\x00\x00\x00" + bytes(range(1, 30))
    at = _anchor(needle, counts)
    assert needle[at : at + 2] != b"\x00\x00"
    assert find_needles(data[:100] + needle + data[:100], [needle]) == {0}
