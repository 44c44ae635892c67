"""Remake the load-test figures of the operations docs from one real step-load run (``make load-figures``).

    python -m scripts.load_figures [--steps 4] [--step-users 6] [--step-seconds 60] [--out docs/img]

1. starts Keystream on a free 127.0.0.1 port (``loadtests.service``), and Prometheus against it with the
   project's rules and 1 s scrapes (``scripts/prometheus_local.py``, as ``make prometheus`` runs it);
2. runs the step load of ``python -m loadtests.run --step`` (every usable backend at once) with Locust's
   web UI on, so Prometheus also scrapes Locust's user count;
3. writes ``prometheus-crypto-p99-by-backend.png``: the recording rule
   ``backend:keystream_crypto_seconds:p99_rate1m`` over the run, queried from Prometheus, in milliseconds,
   with each load step shaded and labelled with its user count (taken from ``locust_users``);
4. writes ``locust-report.png``: headless Chromium's rendering of the run's Locust HTML report, showing its
   header and its charts (requests/s, response times, users) -- the per-request tables are long and are in
   the report itself.

Needs Debian's ``prometheus`` (``make tools``) and ``chromium``. Takes the load's length plus ~30 s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after use("Agg")
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from loadtests.service import free_port, keystream_service
from scripts import prometheus_local

SCRIPTS = Path(__file__).resolve().parent
REPO = SCRIPTS.parent
P99_RULE = "backend:keystream_crypto_seconds:p99_rate1m"
BACKEND_COLORS = {"aesni": "#1f77b4", "hwsim": "#2ca02c", "python": "#d62728"}
#: Shown instead of the Locust report's tables: its header and its charts section.
REPORT_ONLY_CHARTS_SCRIPT = """
<script>
window.addEventListener("load", () => setTimeout(() => {
  for (const heading of document.querySelectorAll("h2")) {
    if (heading.textContent.trim() !== "Charts") heading.parentElement.style.display = "none";
  }
}, 500));
</script>
"""


def query_range(prometheus: str, expr: str, start: float, end: float) -> list[dict[str, Any]]:
    """Prometheus ``query_range`` at 1 s resolution.

    Raises:
        RuntimeError: Prometheus answered with an error.
    """
    params: dict[str, str | float] = {"query": expr, "start": start, "end": end, "step": 1}
    body = httpx.get(f"{prometheus}/api/v1/query_range", params=params, timeout=30).json()
    if body.get("status") != "success":
        raise RuntimeError(f"query {expr!r}: {body}")
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def load_steps(users: list[tuple[float, float]]) -> list[tuple[float, float, int]]:
    """(start, end, users) of each constant stretch of a user-count series with more than zero users."""
    steps: list[tuple[float, float, int]] = []
    for moment, count in users:
        if steps and steps[-1][2] == int(count):
            steps[-1] = (steps[-1][0], moment, int(count))
        elif count > 0:
            steps.append((moment, moment, int(count)))
    return steps


def _milliseconds(value: float) -> str:
    return f"{value:g}"


def p99_figure(
    series: dict[str, list[tuple[float, float]]], steps: list[tuple[float, float, int]], start: float
) -> Any:
    """The p99 of each backend (seconds) against minutes since ``start``, on a log axis in milliseconds,
    with each load step shaded and labelled."""
    figure, axis = plt.subplots(figsize=(11, 5.2), layout="constrained")
    for index, (step_start, step_end, count) in enumerate(steps):
        left, right = (step_start - start) / 60, (step_end - start) / 60
        axis.axvspan(left, right, color="0.92" if index % 2 else "0.85", zorder=0)
        axis.text(
            (left + right) / 2, 1.01, f"{count} users", transform=axis.get_xaxis_transform(),
            ha="center", va="bottom", fontsize=9,
        )  # fmt: skip
    for backend in sorted(series, key=lambda name: (name not in BACKEND_COLORS, name)):
        points = [(t, v) for t, v in series[backend] if v == v and v > 0]  # drop NaN (no calls yet)
        axis.plot(
            [(t - start) / 60 for t, _ in points],
            [v * 1e3 for _, v in points],
            label=backend,
            color=BACKEND_COLORS.get(backend),
            linewidth=1.6,
        )
    axis.set_yscale("log")
    axis.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.yaxis.set_major_formatter(FuncFormatter(lambda value, _: _milliseconds(value)))
    axis.yaxis.set_minor_formatter(NullFormatter())
    axis.set_ylabel("p99 latency of a call into the crypto core (ms, log scale)")
    axis.set_xlabel("minutes since the load started")
    axis.grid(True, which="major", alpha=0.3)
    axis.legend(title="backend", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axis.set_title(f"Prometheus: {P99_RULE} under a step load (shaded: one step each)", pad=18)
    return figure


def charts_page(report_html: str) -> str:
    """The Locust report with a script that hides every section but its charts.

    Raises:
        RuntimeError: the page has no ``</body>``.
    """
    # Before the last </body>: the report's inlined JavaScript bundle contains the string too.
    head, body_end, tail = report_html.rpartition("</body>")
    if not body_end:
        raise RuntimeError("the Locust report has no </body>")
    return head + REPORT_ONLY_CHARTS_SCRIPT + body_end + tail


def screenshot_report(report_html: Path, png: Path, work: Path) -> None:
    """Render the Locust report's header and charts with headless Chromium.

    Raises:
        RuntimeError: chromium is missing or wrote no screenshot.
    """
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise RuntimeError("chromium is not installed (apt-get install chromium)")
    page = work / "report-charts.html"
    page.write_text(charts_page(report_html.read_text()))
    png.unlink(missing_ok=True)
    command = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    command += ["--window-size=1280,1120", "--virtual-time-budget=8000", f"--screenshot={png}", page.as_uri()]
    subprocess.run(
        command,
        capture_output=True,
        timeout=120,
        check=False,
    )
    if not png.exists():
        raise RuntimeError(f"chromium wrote no screenshot of {page}")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.load_figures", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--step-users", type=int, default=6, help="users added per step")
    parser.add_argument("--step-seconds", type=float, default=60.0)
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "img")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="keystream-load-figures-") as tmp:
        work = Path(tmp)
        with keystream_service(log_dir=work) as service:
            locust_port = free_port()
            target = service.url.removeprefix("http://")
            locust = f"127.0.0.1:{locust_port}"
            with prometheus_local.running(target, locust, work / "prometheus") as prometheus:
                command = [sys.executable, "-m", "loadtests.run", "--host", service.url, "--step"]
                command += ["--steps", str(args.steps), "--step-users", str(args.step_users)]
                command += ["--step-seconds", str(args.step_seconds), "--web-port", str(locust_port)]
                command += ["--reports-dir", str(work / "reports")]
                command += ["--max-p99-ms", "1e9", "--max-stream-p99-ms", "1e9"]  # figures, not a verdict
                env = {k: v for k, v in os.environ.items() if k != "LOCUST_SKIP_MONKEY_PATCH"}
                env["KEYSTREAM_TOKEN"] = service.token
                start = time.time()
                load = subprocess.run(command, cwd=REPO, env=env, check=False)
                time.sleep(3)  # the last scrapes and rule evaluations
                end = time.time()
                users = query_range(prometheus, "sum(locust_users)", start, end)
                p99 = query_range(prometheus, P99_RULE, start, end)
        (report_dir,) = (work / "reports").iterdir()
        steps = load_steps([(float(t), float(v)) for t, v in users[0]["values"]] if users else [])
        series = {s["metric"]["backend"]: [(float(t), float(v)) for t, v in s["values"]] for s in p99}
        if not series or not steps:
            print(f"load_figures: no data (p99 series {len(series)}, steps {len(steps)})", file=sys.stderr)
            return 1
        args.out.mkdir(parents=True, exist_ok=True)
        figure = p99_figure(series, steps, start)
        figure.savefig(args.out / "prometheus-crypto-p99-by-backend.png", dpi=110)
        plt.close(figure)
        screenshot_report(report_dir / "report.html", args.out / "locust-report.png", work)
        summary = json.loads((report_dir / "summary.json").read_text())
        total = sum(row["requests"] for row in summary["requests"])
        print(f"load_figures: {total} requests, steps {[s[2] for s in steps]}, load exit {load.returncode}")
        print(
            f"load_figures: wrote {args.out / 'prometheus-crypto-p99-by-backend.png'} and locust-report.png"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
