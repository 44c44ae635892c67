"""``make ui-screenshots`` (scripts/console_screenshots.py) against a real server and Chromium: both PNGs are
written at 1280x800, and the dashboard one only once both backends' throughput series are drawn."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from scripts.console_screenshots import take_screenshots

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk (which the signature must precede)."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", f"{path} is not a PNG"
    width, height = struct.unpack(">II", head[16:24])
    return int(width), int(height)


def test_the_screenshots_are_written_at_1280_by_800(tmp_path: Path) -> None:
    written = take_screenshots(tmp_path, load_seconds=4)
    assert [path.name for path in written] == ["console-dashboard.png", "console-keys.png"]
    for path in written:
        assert png_size(path) == (1280, 800)
        assert path.stat().st_size > 20_000, f"{path} is nearly empty"  # a blank page compresses to a few KB
