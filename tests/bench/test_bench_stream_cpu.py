"""bench/bench_stream_cpu.py streams every case it lists through the ASGI app (every answer checked to be a
200, decrypt fed the ciphertext encrypt made) and reports each case's CPU per MiB and its ratio to echo."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench import bench_stream_cpu

REPO = Path(__file__).resolve().parents[2]


def test_every_stream_is_measured_against_echo() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.bench_stream_cpu", "--mib", "2", "--rounds", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {line.split(" | ")[0][2:]: line for line in done.stdout.splitlines() if line.startswith("| ")}
    for name in bench_stream_cpu.CASES:
        assert name in rows, name
        value = float(rows[name].split(" | ")[1])
        assert 0 < value < 1000
    assert rows["echo"].endswith("| 1.00 |")
