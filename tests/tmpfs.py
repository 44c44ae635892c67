"""A small tmpfs for the tests that need a file system that fills up (a real ``ENOSPC``, short writes).

Mounting needs root (the tests run as root on CI). When the mount fails, :func:`small_tmpfs` fails the test
with the reason: such a test never skips.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

#: tmpfs allocates whole pages: a file's last page holds room up to the next multiple of this.
PAGE = 4096


@contextlib.contextmanager
def small_tmpfs(directory: Path, size: str = "256k") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``directory`` (created), unmounted afterwards."""
    directory.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(directory)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs at {directory} (the test needs root): {mounted.stderr.strip()}")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=False)


def fill(directory: Path) -> Path:
    """Take every free page of ``directory``'s file system with one file; unlink it to free them again."""
    filler = directory / "filler"
    with filler.open("wb", buffering=0) as handle, contextlib.suppress(OSError):
        while True:
            handle.write(b"\0" * PAGE)
    return filler
