"""bench/bench_routes.py measures every route it lists in a process of each checkout (every answer checked to
be a 200 first) and reports per route each checkout's CPU per request and the ratio to the first."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench import bench_routes

REPO = Path(__file__).resolve().parents[2]


def test_two_checkouts_are_measured_route_by_route(tmp_path: Path) -> None:
    out = tmp_path / "routes.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.bench_routes",
            "--rounds",
            "1",
            "--requests",
            "20",
            "--checkout",
            f"first={REPO}",
            "--checkout",
            f"second={REPO}",
            "--json",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    labels = [label for label, *_ in bench_routes._routes()]
    assert len(labels) == 10
    for label in labels:
        assert any(line.startswith(f"| {label} |") for line in done.stdout.splitlines()), label
    figures = json.loads(out.read_text())["medians"]
    assert set(figures) == {"first", "second"}
    for name in figures:
        assert set(figures[name]) == set(labels)
        assert all(0 < value < 100_000 for value in figures[name].values())
