"""Smoke load test: ``python -m loadtests.run`` for about 20 s against a service it starts itself must pass,
write its reports, and have exercised every request kind on every usable backend."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import aescore
from loadtests.run import REPO_ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.serial]  # a Locust load: alone

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


def csv_counts(report: Path) -> dict[str, int]:
    """Requests per name (and "Aggregated") in Locust's stats CSV."""
    with open(report / "locust_stats.csv", newline="") as handle:
        return {row["Name"]: int(row["Request Count"]) for row in csv.DictReader(handle)}


def html_counts(report: Path) -> dict[str, int]:
    """Requests per name (and "Aggregated") in the HTML report's embedded statistics."""
    match = re.search(r"window\.templateArgs = (\{.*\})\s*$", (report / "report.html").read_text(), re.M)
    assert match, "no templateArgs in report.html"
    rows = json.loads(match.group(1))["requests_statistics"]
    return {row["name"]: row["num_requests"] for row in rows}


def log_total(report: Path) -> int:
    """The request count of the summary table Locust logs at exit."""
    # "Aggregated  <requests>  <failures>(<percent>%) | ..." (the percentile table's row has no failures).
    totals = re.findall(r"^\s*Aggregated\s+(\d+)\s+\d+\(", (report / "locust.log").read_text(), re.M)
    assert totals, "no summary table in locust.log"
    return int(totals[-1])


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
    # Every report counts the same requests, including those made while users stop (their on_stop).
    summary_counts = {row["name"]: row["requests"] for row in summary["requests"]}
    csv_by_name = csv_counts(report)
    total = csv_by_name.pop("Aggregated")
    html_by_name = html_counts(report)
    assert html_by_name.pop("Aggregated") == total == log_total(report) == sum(summary_counts.values())
    assert csv_by_name == html_by_name == summary_counts
    assert summary_counts["delete key"] >= 1
