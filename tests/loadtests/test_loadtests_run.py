"""loadtests.run: the verdict from Locust's CSV, the Locust command line, and main()'s exit codes."""

from __future__ import annotations

import argparse
import csv
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from loadtests import run

COLUMNS = [
    "Type", "Name", "Request Count", "Failure Count", "Median Response Time", "Average Response Time",
    "Min Response Time", "Max Response Time", "Average Content Size", "Requests/s", "Failures/s",
    "50%", "66%", "75%", "80%", "90%", "95%", "98%", "99%", "99.9%", "99.99%", "100%",
]  # fmt: skip


def write_stats(path: Path, rows: list[tuple[str, str, int, int, str]]) -> Path:
    """rows: (type, name, requests, failures, p99 ms); the other columns get plausible values."""
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, COLUMNS)
        writer.writeheader()
        for kind, name, requests, failures, p99 in [*rows, ("", "Aggregated", 1, 0, "99999")]:
            record = dict.fromkeys(COLUMNS, "1")
            record.update(
                {"Type": kind, "Name": name, "Request Count": str(requests), "Failure Count": str(failures)}
            )
            record["99%"] = p99
            writer.writerow(record)
    return path


def test_clean_run_passes(tmp_path: Path) -> None:
    stats = write_stats(
        tmp_path / "s.csv",
        [("POST", "encrypt sealed [aesni]", 100, 0, "40"), ("POST", "encrypt stream [aesni]", 5, 0, "9000")],
    )
    verdict = run.evaluate(stats, max_p99_ms=1000, max_stream_p99_ms=20000)
    assert verdict.passed, verdict.problems
    assert [row.bound_ms for row in verdict.rows] == [1000, 20000]


def test_failures_and_slow_p99_fail(tmp_path: Path) -> None:
    stats = write_stats(
        tmp_path / "s.csv",
        [
            ("POST", "decrypt sealed [python]", 100, 2, "40"),
            ("POST", "encrypt batch [aesni]", 100, 0, "1500"),
            ("POST", "decrypt stream [python]", 4, 0, "25000"),
            ("CHECK", "decrypt churn [aesni]", 1, 1, "0"),
        ],
    )
    verdict = run.evaluate(stats, max_p99_ms=1000, max_stream_p99_ms=20000)
    assert not verdict.passed
    text = "\n".join(verdict.problems)
    assert "decrypt sealed [python]: 2 of 100 requests failed" in text
    assert "encrypt batch [aesni]: p99 1500 ms exceeds the bound 1000 ms" in text
    assert "decrypt stream [python]: p99 25000 ms exceeds the bound 20000 ms" in text
    assert "decrypt churn [aesni]: 1 of 1 requests failed" in text
    assert len(verdict.problems) == 4


def test_no_requests_fails_and_na_percentiles_are_tolerated(tmp_path: Path) -> None:
    stats = write_stats(tmp_path / "s.csv", [("GET", "setup backends", 0, 0, "N/A")])
    verdict = run.evaluate(stats, max_p99_ms=1000, max_stream_p99_ms=20000)
    assert verdict.problems == ["no request was made"]


def test_locust_command_carries_no_token_and_bounds_the_run(tmp_path: Path) -> None:
    args = run.parse_args(["--users", "5", "--duration", "12.5", "--backends", "aesni"])
    command = run.locust_command(args, "http://127.0.0.1:1", tmp_path)
    assert "--headless" in command and "--backends" in command
    assert command[command.index("-t") + 1] == "13s"
    assert command[command.index("-u") + 1] == "5"
    assert not any(part.startswith("ks_") for part in command)
    assert command[command.index("-f") + 1].endswith("locustfile.py")


def test_step_mode_adds_the_shape_and_drops_the_fixed_user_count(tmp_path: Path) -> None:
    args = run.parse_args(["--step", "--step-users", "3", "--steps", "2", "--step-seconds", "5"])
    command = run.locust_command(args, "http://127.0.0.1:1", tmp_path)
    assert command[command.index("-f") + 1].endswith("locustfile.py," + str(run.LOADTESTS_DIR / "shapes.py"))
    assert "-u" not in command and "-t" not in command
    assert command[command.index("--steps") + 1] == "2"
    assert run.planned_seconds(args) == 10


def test_web_port_keeps_the_ui_on_loopback(tmp_path: Path) -> None:
    command = run.locust_command(run.parse_args(["--web-port", "8123"]), "http://127.0.0.1:1", tmp_path)
    assert "--headless" not in command and "--autostart" in command
    assert command[command.index("--web-host") + 1] == "127.0.0.1"


@pytest.mark.parametrize(
    ("log", "locust_code", "expected"),
    [
        ("", 0, 0),
        ("Not all users finished their tasks & terminated in 30 seconds. Stopping them...", 0, 1),
        ("", 3, 1),
    ],
    ids=["clean", "hung-users", "locust-crashed"],
)
def test_main_exit_codes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log: str, locust_code: int, expected: int
) -> None:
    class FakeService:
        url = "http://127.0.0.1:1"
        token = "ks_00000000_" + "0" * 32

    @contextmanager
    def fake_service(**_kwargs: Any) -> Iterator[FakeService]:
        yield FakeService()

    def fake_locust(_args: argparse.Namespace, _host: str, _token: str, report_dir: Path) -> int:
        write_stats(report_dir / "locust_stats.csv", [("POST", "encrypt sealed [aesni]", 10, 0, "5")])
        (report_dir / "locust.log").write_text(log)
        return locust_code

    monkeypatch.setattr(run, "keystream_service", fake_service)
    monkeypatch.setattr(run, "run_locust", fake_locust)
    assert run.main(["--reports-dir", str(tmp_path), "--duration", "1"]) == expected
    (report,) = tmp_path.iterdir()
    summary = json.loads((report / "summary.json").read_text())
    assert summary["passed"] is (expected == 0)
    assert summary["requests"][0]["name"] == "encrypt sealed [aesni]"


def test_locust_is_not_told_to_skip_gevent_patching(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    captured: dict[str, Any] = {}

    class FakePopen:
        def __init__(self, command: list[str], **kwargs: Any) -> None:
            captured.update(kwargs)

        def wait(self, timeout: float) -> int:
            return 0

    monkeypatch.setenv("LOCUST_SKIP_MONKEY_PATCH", "1")
    monkeypatch.setattr(run.subprocess, "Popen", FakePopen)
    assert run.run_locust(run.parse_args([]), "http://127.0.0.1:1", "ks_x", tmp_path) == 0
    assert "LOCUST_SKIP_MONKEY_PATCH" not in captured["env"]
    assert captured["env"]["KEYSTREAM_TOKEN"] == "ks_x"
