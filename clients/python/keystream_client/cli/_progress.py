"""A small progress bar for ``keystream encrypt/decrypt``: bytes, rate and ETA on one stderr line.

It draws only when its stream is a terminal (and the caller did not ask for ``--quiet``), redraws at most
every :data:`MIN_INTERVAL` seconds, and ends with a newline so following messages start on a fresh line.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TextIO

MIN_INTERVAL = 0.1
DEFAULT_COLUMNS = 100
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def format_bytes(count: float) -> str:
    """``count`` bytes in binary units, e.g. ``12.3 MiB``."""
    value = float(count)
    for unit in _UNITS:
        if abs(value) < 1024 or unit == _UNITS[-1]:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def format_duration(seconds: float) -> str:
    """``seconds`` as ``M:SS`` or ``H:MM:SS``."""
    whole = max(0, int(seconds + 0.5))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class ProgressBar:
    """Progress of one transfer on ``stream``; call :meth:`update` with byte deltas, then :meth:`close`.

    Args:
        label: what is happening, e.g. ``encrypt``.
        total: bytes expected, or None when unknown (no percentage or ETA then).
        stream: where to draw (stderr).
        enabled: draw at all; :meth:`for_stream` decides from the stream and ``--quiet``.
        clock: monotonic time source (tests).
    """

    def __init__(
        self,
        label: str,
        total: int | None,
        stream: TextIO,
        *,
        enabled: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self.total = total
        self.done = 0
        self.enabled = enabled
        self._stream = stream
        self._clock = clock
        self._start = clock()
        self._last_draw = -MIN_INTERVAL
        self._width = 0
        self._closed = False

    @classmethod
    def for_stream(cls, label: str, total: int | None, stream: TextIO, quiet: bool) -> ProgressBar:
        """A bar that draws only when ``stream`` is a terminal and ``quiet`` is false."""
        try:
            tty = stream.isatty()
        except (AttributeError, ValueError):
            tty = False
        return cls(label, total, stream, enabled=tty and not quiet)

    def update(self, count: int) -> None:
        """Add ``count`` bytes; redraw when the last draw is old enough."""
        self.done += count
        if self.enabled and self._clock() - self._last_draw >= MIN_INTERVAL:
            self._draw()

    def close(self, success: bool = True) -> None:
        """Draw the final state and end the line (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self.enabled:
            self._draw(final=True, success=success)
            self._stream.write("\n")
            self._stream.flush()

    def render(self, final: bool = False, success: bool = True) -> str:
        """The bar's text for the current state (without carriage return)."""
        elapsed = max(self._clock() - self._start, 1e-9)
        rate = self.done / elapsed
        parts = [self.label]
        if self.total:
            fraction = min(self.done / self.total, 1.0)
            filled = int(fraction * 24)
            parts.append(f"{fraction * 100:3.0f}% [{'#' * filled}{'-' * (24 - filled)}]")
            parts.append(f"{format_bytes(self.done)} / {format_bytes(self.total)}")
        else:
            parts.append(format_bytes(self.done))
        parts.append(f"{format_bytes(rate)}/s")
        if final:
            parts.append(f"in {format_duration(elapsed)}" if success else "FAILED")
        elif self.total and rate > 0:
            parts.append(f"ETA {format_duration(max(self.total - self.done, 0) / rate)}")
        else:
            parts.append("ETA --:--")
        return "  ".join(parts)

    def _draw(self, final: bool = False, success: bool = True) -> None:
        self._last_draw = self._clock()
        text = self.render(final, success)
        try:
            columns = os.get_terminal_size(self._stream.fileno()).columns
        except (AttributeError, OSError, ValueError):
            columns = 0
        if columns <= 0:  # not a terminal, or one that reports no size (a fresh pty says 0x0)
            columns = DEFAULT_COLUMNS
        text = text[: max(columns - 1, 20)]
        padding = " " * max(self._width - len(text), 0)
        self._width = len(text)
        self._stream.write(f"\r{text}{padding}")
        self._stream.flush()
