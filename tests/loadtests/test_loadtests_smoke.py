"""Smoke load test: ``python -m loadtests.run`` for about 20 s against a service it starts itself must pass,
write its reports, and have exercised every request kind on every usable backend."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import aescore
from loadtests.run import REPO_ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

KINDS = (
    "encrypt sealed",
    "decrypt sealed",
    "encrypt stream",
    "decrypt stream",
    "encrypt batch",
    "decrypt batch",
    "decrypt raw slice",
    "encrypt raw slice",
)


def test_smoke_run_passes_and_covers_every_backend(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "LOCUST_SKIP_MONKEY_PATCH"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "loadtests.run",
            "--users",
            "12",
            "--duration",
            "20",
            "--reports-dir",
            str(tmp_path),
            # Generous bounds: the run checks correctness (bounds are unit-tested), on a shared machine.
            "--max-p99-ms",
            "5000",
            "--max-stream-p99-ms",
            "30000",
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (report,) = tmp_path.iterdir()
    for name in ("report.html", "locust_stats.csv", "locust_stats_history.csv", "summary.json"):
        assert (report / name).stat().st_size > 0, name
    assert "<html" in (report / "report.html").read_text()[:2000].lower()
    summary = json.loads((report / "summary.json").read_text())
    assert summary["passed"] is True and summary["problems"] == []
    names = {row["name"]: row for row in summary["requests"]}
    assert sum(row["failures"] for row in names.values()) == 0
    usable = [name for name, reason in aescore.available_backends().items() if reason is None]
    assert "python" in usable
    missing = [
        f"{kind} [{backend}]" for backend in usable for kind in KINDS if f"{kind} [{backend}]" not in names
    ]
    assert not missing, f"request kinds never exercised: {missing}"
    # The churn user is light (a turn every 1-3 s) but rotates on its first turn.
    assert names["rotate key"]["requests"] >= 1
    assert any(name.startswith("decrypt churn [") for name in names)
