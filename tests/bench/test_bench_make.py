"""``make bench`` and ``make report`` (they replaced ``keystream bench``) run bench/report.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VENV = Path(sys.executable).parent.parent


def _make(*args: str) -> subprocess.CompletedProcess[str]:
    """``make ARGS`` with this interpreter's venv, never reinstalling it (the stamps count as done)."""
    stamps = [f"--old-file={VENV}/.installed-stamp", f"--old-file={VENV}/.run-stamp"]
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))}
    return subprocess.run(
        ["make", "--no-print-directory", f"VENV={VENV}", *stamps, *args],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_make_report_writes_a_report_from_existing_json(tmp_path: Path) -> None:
    result = _make("report", f"BENCH_ARGS=--results {tmp_path}")
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "report.md").read_text()
    assert "`aescore.json` not found" in text and "python -m bench.bench_service" in text


def test_make_bench_runs_every_benchmark_through_the_report(tmp_path: Path) -> None:
    planned = _make("-n", "bench", f"BENCH_ARGS=--quick --results {tmp_path}")
    assert planned.returncode == 0, planned.stderr
    assert f"-m bench.report --quick --results {tmp_path}" in planned.stdout
