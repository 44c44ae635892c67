"""Bounded headless load test with a verdict: ``python -m loadtests.run`` (``make load``).

Starts Keystream on 127.0.0.1 (free port, temporary data directory, random root token) unless ``--host`` names
a running one, runs Locust headless for ``--duration`` seconds (or a step shape with ``--step``), writes
Locust's CSV and HTML reports and a ``summary.json`` into ``loadtests/reports/<timestamp>/``, prints a
per-request table, and exits

* 0 when every request succeeded and every request name's p99 is within its bound,
* 1 when a request failed, a p99 bound was exceeded or no request ran,
* 2 when the service or Locust could not be run.

Bounds: ``--max-p99-ms`` for every request name, ``--max-stream-p99-ms`` for the 1-16 MiB streaming ones.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from loadtests.service import REPO_ROOT, ServiceError, keystream_service, stop_process

LOADTESTS_DIR = Path(__file__).resolve().parent
DEFAULT_REPORTS = LOADTESTS_DIR / "reports"
#: Request types that are checks or setup steps, not HTTP requests: failures count, latency does not.
NON_HTTP_TYPES = {"SETUP", "CHECK"}
#: What Locust logs when users had to be killed at the stop timeout.
STUCK_USERS_MESSAGE = "Not all users finished their tasks"


@dataclass(frozen=True)
class RequestStats:
    """One row of Locust's ``*_stats.csv``."""

    method: str
    name: str
    requests: int
    failures: int
    median_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    rps: float
    bound_ms: float | None


@dataclass(frozen=True)
class Verdict:
    """The outcome of a run: the rows and every reason it failed (empty when it passed)."""

    rows: list[RequestStats]
    problems: list[str]

    @property
    def passed(self) -> bool:
        return not self.problems


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan  # Locust writes "N/A" for percentiles of names that got no response


def is_stream(name: str) -> bool:
    """Request names of the 1-16 MiB streaming round trips (``encrypt stream [aesni]``)."""
    return " stream " in f" {name} "


def evaluate(stats_csv: Path, max_p99_ms: float, max_stream_p99_ms: float) -> Verdict:
    """Judge a finished run from Locust's stats CSV.

    Raises:
        FileNotFoundError: Locust wrote no stats file (it did not run).
    """
    rows: list[RequestStats] = []
    problems: list[str] = []
    with open(stats_csv, newline="") as handle:
        for record in csv.DictReader(handle):
            if record["Name"] == "Aggregated":
                continue
            method = record["Type"]
            http = method not in NON_HTTP_TYPES
            bound = (max_stream_p99_ms if is_stream(record["Name"]) else max_p99_ms) if http else None
            row = RequestStats(
                method=method,
                name=record["Name"],
                requests=int(record["Request Count"]),
                failures=int(record["Failure Count"]),
                median_ms=_number(record["Median Response Time"]),
                p95_ms=_number(record["95%"]),
                p99_ms=_number(record["99%"]),
                max_ms=_number(record["Max Response Time"]),
                rps=_number(record["Requests/s"]),
                bound_ms=bound,
            )
            rows.append(row)
            if row.failures:
                problems.append(f"{row.name}: {row.failures} of {row.requests} requests failed")
            if bound is not None and row.p99_ms > bound:
                problems.append(f"{row.name}: p99 {row.p99_ms:.0f} ms exceeds the bound {bound:.0f} ms")
    if not any(row.requests for row in rows if row.method not in NON_HTTP_TYPES):
        problems.append("no request was made")
    return Verdict(rows, problems)


def format_table(rows: Sequence[RequestStats]) -> str:
    """A fixed-width table of the rows, sorted by name."""
    header = (
        f"{'request':<34} {'count':>7} {'fail':>5} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'req/s':>8}"
    )
    lines = [header, "-" * len(header)]
    for row in sorted(rows, key=lambda r: r.name):
        lines.append(
            f"{row.name:<34} {row.requests:>7} {row.failures:>5} {row.median_ms:>8.0f} {row.p95_ms:>8.0f} "
            f"{row.p99_ms:>8.0f} {row.rps:>8.1f}"
        )
    return "\n".join(lines)


def _json_row(row: RequestStats) -> dict[str, object]:
    """A row as JSON-safe values (NaN, Locust's "N/A", becomes null)."""
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in asdict(row).items()}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m loadtests.run",
        description="Run a bounded Locust load test against Keystream and judge it (exit 0 = pass).",
        epilog="Arguments after `--` go to Locust unchanged.",
    )
    parser.add_argument("--users", type=int, default=12, help="concurrent users (default 12: one per weight)")
    parser.add_argument("--spawn-rate", type=float, default=12.0, help="users started per second")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load (ignored with --step)")
    parser.add_argument("--backends", default="", help="backends to drive; default every usable one")
    parser.add_argument("--max-p99-ms", type=float, default=1000.0, help="p99 bound of every request name")
    parser.add_argument(
        "--max-stream-p99-ms", type=float, default=20000.0, help="p99 bound of streaming names"
    )
    parser.add_argument(
        "--step", action="store_true", help="step load (loadtests/shapes.py) instead of --users"
    )
    parser.add_argument("--step-users", type=int, default=12)
    parser.add_argument("--step-seconds", type=float, default=30.0)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--processes", type=int, default=1, help="Locust worker processes (-1: one per core)")
    parser.add_argument("--user-classes", nargs="*", default=[], help="only these user classes")
    parser.add_argument("--host", default="", help="use this running service (token in KEYSTREAM_TOKEN)")
    parser.add_argument("--enabled-backends", default=None, help="KEYSTREAM_ENABLED_BACKENDS of the service")
    parser.add_argument(
        "--service-workers", type=int, default=1, help="uvicorn workers of the started service"
    )
    parser.add_argument(
        "--web-port",
        type=int,
        default=0,
        help="keep Locust's web UI (and /export/prometheus) on 127.0.0.1:PORT",
    )
    parser.add_argument("--reports-dir", type=Path, default=DEFAULT_REPORTS)
    parser.add_argument("locust_args", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.users < 1 or args.duration <= 0:
        parser.error("--users must be >= 1 and --duration > 0")
    return args


def locust_command(args: argparse.Namespace, host: str, report_dir: Path) -> list[str]:
    """The Locust command line for this run (no secrets: the token travels in the environment)."""
    files = [str(LOADTESTS_DIR / "locustfile.py")]
    if args.step:
        files.append(str(LOADTESTS_DIR / "shapes.py"))
    command = [
        sys.executable, "-m", "locust",
        "-f", ",".join(files),
        "--host", host,
        "--csv", str(report_dir / "locust"),
        "--html", str(report_dir / "report.html"),
        "--stop-timeout", "30",
        "--only-summary",
        "--loglevel", "WARNING",
    ]  # fmt: skip
    if args.step:
        command += [
            "--step-users", str(args.step_users),
            "--step-seconds", str(args.step_seconds),
            "--steps", str(args.steps),
            "--step-spawn-rate", str(max(args.spawn_rate, args.step_users)),
        ]  # fmt: skip
    else:
        command += ["-u", str(args.users), "-r", str(args.spawn_rate), "-t", f"{math.ceil(args.duration)}s"]
    if args.web_port:
        command += [
            "--web-host",
            "127.0.0.1",
            "--web-port",
            str(args.web_port),
            "--autostart",
            "--autoquit",
            "2",
        ]
    else:
        command.append("--headless")
    if args.backends:
        command += ["--backends", args.backends]
    if args.processes != 1:
        command += ["--processes", str(args.processes)]
    return command + list(args.locust_args) + list(args.user_classes)


def planned_seconds(args: argparse.Namespace) -> float:
    """Seconds of load the arguments ask for."""
    return float(args.steps * args.step_seconds if args.step else args.duration)


def run_locust(args: argparse.Namespace, host: str, token: str, report_dir: Path) -> int:
    """Run Locust to completion (killed if it overruns the plan by two minutes); returns its exit code."""
    env = {**os.environ, "KEYSTREAM_TOKEN": token}
    env.pop(
        "LOCUST_SKIP_MONKEY_PATCH", None
    )  # a load run needs gevent's patching (tests set it for themselves)
    command = locust_command(args, host, report_dir)
    print(f"loadtests: {' '.join(command[2:])}", flush=True)
    with open(report_dir / "locust.log", "wb") as log:
        process = subprocess.Popen(
            command, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )
        try:
            return process.wait(timeout=planned_seconds(args) + 30 + 120)
        except subprocess.TimeoutExpired:
            print("loadtests: Locust overran its plan; stopping it", file=sys.stderr)
            return stop_process(process, timeout=10) or 2


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    report_dir = args.reports_dir / time.strftime("%Y%m%d-%H%M%S")
    suffix = 1
    while report_dir.exists():
        report_dir = args.reports_dir / f"{time.strftime('%Y%m%d-%H%M%S')}-{suffix}"
        suffix += 1
    report_dir.mkdir(parents=True)
    started = time.monotonic()
    try:
        if args.host:
            token = os.environ.get("KEYSTREAM_TOKEN", "")
            if not token:
                print("loadtests: --host needs the token in KEYSTREAM_TOKEN", file=sys.stderr)
                return 2
            code = run_locust(args, args.host, token, report_dir)
        else:
            with keystream_service(
                enabled_backends=args.enabled_backends, workers=args.service_workers, log_dir=report_dir
            ) as service:
                print(f"loadtests: service on {service.url}, reports in {report_dir}", flush=True)
                code = run_locust(args, service.url, service.token, report_dir)
    except ServiceError as exc:
        print(f"loadtests: the service did not start: {exc}", file=sys.stderr)
        return 2
    try:
        verdict = evaluate(report_dir / "locust_stats.csv", args.max_p99_ms, args.max_stream_p99_ms)
    except FileNotFoundError:
        print(
            f"loadtests: Locust wrote no statistics (exit {code}); see {report_dir / 'locust.log'}",
            file=sys.stderr,
        )
        return 2
    problems = list(verdict.problems)
    log_text = (report_dir / "locust.log").read_text(errors="replace")
    if STUCK_USERS_MESSAGE in log_text:
        # A request that never completed is not in the statistics: Locust killed its user at the stop timeout.
        problems.append("some users were still inside a request at the stop timeout (hung requests)")
    if code not in (0, 1):  # 1 is Locust's "some requests failed", already in the verdict
        problems.append(f"Locust exited with code {code} (see {report_dir / 'locust.log'})")
    summary = {
        "passed": not problems,
        "problems": problems,
        "seconds": round(time.monotonic() - started, 1),
        "arguments": {k: str(v) for k, v in vars(args).items()},
        "requests": [_json_row(row) for row in verdict.rows],
    }
    (report_dir / "summary.json").write_text(
        json.dumps(summary, indent=2, allow_nan=False, default=str) + "\n"
    )
    print(format_table(verdict.rows))
    print(f"loadtests: report {report_dir / 'report.html'}")
    for problem in problems:
        print(f"loadtests: FAIL {problem}", file=sys.stderr)
    if problems:
        return 1
    print("loadtests: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
