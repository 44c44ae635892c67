"""bench/callgrind_routes.py counts the instructions per request of the 1 KiB sealed encrypt and decrypt under
callgrind and reports them per checkout."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_both_routes_are_counted(tmp_path: Path) -> None:
    # valgrind and its header come from scripts/install-tools.sh (make test): missing, this fails, not skips.
    assert shutil.which("valgrind") and shutil.which("cc"), "valgrind and a C compiler are needed: make tools"
    assert Path("/usr/include/valgrind/callgrind.h").exists(), "valgrind's callgrind.h is needed: make tools"
    done = subprocess.run(
        [sys.executable, "-m", "bench.callgrind_routes", "--requests", "20", "--keep", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    row = done.stdout.strip().splitlines()[-1]
    figures = [float(value) for value in re.findall(r"([0-9.]+)k", row)]
    assert row.startswith("| this |") and len(figures) == 2
    assert all(50 < figure < 5000 for figure in figures)  # thousands of instructions per request
    assert (tmp_path / "this.encrypt.out.1").exists() and (tmp_path / "this.decrypt.out.1").exists()
