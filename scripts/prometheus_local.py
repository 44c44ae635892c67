"""Start Debian's Prometheus against a Keystream running on this machine (``make prometheus``).

Writes ``<data dir>/prometheus.yml``, derived from ``deploy/prometheus/prometheus.yml`` (the same jobs,
metrics paths and rule files; the compose service names replaced by local addresses), checks it with
``promtool check config``, then runs ``prometheus`` in the foreground on ``127.0.0.1:9090`` with its
storage in ``<data dir>/tsdb``. Ctrl-C stops it; the data directory stays, so a restart keeps the history.

    make run                      # Keystream on 127.0.0.1:8000 (another terminal)
    make prometheus               # Prometheus on http://127.0.0.1:9090, scraping it every 5 s
    make prometheus PROMETHEUS_ARGS="--target 127.0.0.1:8001 --listen 127.0.0.1:9091"

The Locust job scrapes ``127.0.0.1:8089`` (``make load LOAD_ARGS="--web-port 8089"``); it is down while no
load test runs, which is expected. The rule files are referenced in place: after editing
``deploy/prometheus/rules/``, reload with ``curl -X POST http://127.0.0.1:9090/-/reload``.

Exit codes: 2 when prometheus/promtool are missing or the configuration does not pass ``promtool``;
otherwise Prometheus's own.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from loadtests.service import ServiceError, free_port, stop_process, wait_for_http

REPO = Path(__file__).resolve().parents[1]
PROMETHEUS_DIR = REPO / "deploy" / "prometheus"
DEFAULT_DATA_DIR = REPO / "build" / "prometheus"


def local_config(
    target: str, locust: str, listen: str, scrape_interval: str, rules_dir: Path = PROMETHEUS_DIR
) -> dict[str, Any]:
    """The compose stack's Prometheus configuration, pointed at local addresses.

    Raises:
        ValueError: deploy/prometheus/prometheus.yml has a job this function does not know how to place.
    """
    config: dict[str, Any] = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    timeout = scrape_interval if _seconds(scrape_interval) < 10 else "10s"
    config["global"].update(
        scrape_interval=scrape_interval, scrape_timeout=timeout, evaluation_interval=scrape_interval
    )
    config["global"].setdefault("external_labels", {})["stack"] = "keystream-local"
    config["rule_files"] = [str(rules_dir / path) for path in config["rule_files"]]
    targets = {"keystream": target, "locust": locust, "prometheus": listen}
    for job in config["scrape_configs"]:
        if job["job_name"] not in targets:
            raise ValueError(f"no local target for the job {job['job_name']!r} of prometheus.yml")
        job["static_configs"] = [{"targets": [targets[job["job_name"]]]}]
    return config


@contextlib.contextmanager
def running(target: str, locust: str, data_dir: Path, scrape_interval: str = "1s") -> Iterator[str]:
    """This script in a subprocess, as ``make prometheus`` runs it, on a free 127.0.0.1 port; yields its URL
    once Prometheus is ready and stops it afterwards. Its output goes to ``data_dir/prometheus.log``.

    Raises:
        loadtests.service.ServiceError: Prometheus exited or was not ready within 30 s.
    """
    port = free_port()
    command = [
        sys.executable,
        __file__,
        "--target",
        target,
        "--locust",
        locust,
        "--listen",
        f"127.0.0.1:{port}",
    ]
    command += ["--scrape-interval", scrape_interval, "--data-dir", str(data_dir)]
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / "prometheus.log", "wb") as log:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        try:
            wait_for_http(f"{url}/-/ready", 30, process)
        except ServiceError as exc:
            log_tail = (data_dir / "prometheus.log").read_text(errors="replace")[-2000:]
            raise ServiceError(f"Prometheus did not start ({exc}); its log ends:\n{log_tail}") from exc
        yield url
    finally:
        stop_process(process)


def _seconds(duration: str) -> float:
    """Seconds of a Prometheus duration with one unit (``500ms``, ``5s``, ``1m``).

    Raises:
        ValueError: not such a duration.
    """
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    for unit in ("ms", "s", "m", "h"):
        number = duration.removesuffix(unit)
        if number != duration and number.isascii() and number.isdigit():
            return int(number) * units[unit]
    raise ValueError(f"not a Prometheus duration such as 5s or 1m: {duration!r}")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python scripts/prometheus_local.py",
        description="Run Debian's Prometheus against a local Keystream, with the project's rules.",
    )
    parser.add_argument("--target", default="127.0.0.1:8000", help="Keystream's HOST:PORT (%(default)s)")
    parser.add_argument("--locust", default="127.0.0.1:8089", help="Locust web UI's HOST:PORT")
    parser.add_argument("--listen", default="127.0.0.1:9090", help="Prometheus's HOST:PORT (%(default)s)")
    parser.add_argument("--scrape-interval", default="5s", help="scrape and rule interval (%(default)s)")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help="config and storage")
    parser.add_argument("--check-only", action="store_true", help="write and check the config, then exit")
    args = parser.parse_args(argv)
    try:
        _seconds(args.scrape_interval)
    except ValueError as exc:
        parser.error(str(exc))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if prometheus is None or promtool is None:
        print("prometheus: Debian's prometheus is missing: run `make tools` as root", file=sys.stderr)
        return 2
    args.data_dir.mkdir(parents=True, exist_ok=True)
    config_path = args.data_dir / "prometheus.yml"
    config = local_config(args.target, args.locust, args.listen, args.scrape_interval)
    config_path.write_text(
        "# Written by scripts/prometheus_local.py from deploy/prometheus/prometheus.yml at each start.\n"
        + yaml.safe_dump(config, sort_keys=False)
    )
    check = subprocess.run(
        [promtool, "check", "config", str(config_path)], capture_output=True, text=True, check=False
    )
    if check.returncode != 0:
        print(f"prometheus: {config_path} fails promtool:\n{check.stdout}{check.stderr}", file=sys.stderr)
        return 2
    print(f"prometheus: config {config_path} (checked), scraping {args.target} every {args.scrape_interval}")
    if args.check_only:
        return 0
    print(
        f"prometheus: http://{args.listen}/ (Ctrl-C stops it; data in {args.data_dir / 'tsdb'})", flush=True
    )
    command = [
        prometheus,
        f"--config.file={config_path}",
        f"--storage.tsdb.path={args.data_dir / 'tsdb'}",
        f"--web.listen-address={args.listen}",
        "--web.enable-lifecycle",
        "--log.level=warn",
    ]
    os.execv(prometheus, command)  # noqa: S606 -- replaces this process: signals reach Prometheus directly


if __name__ == "__main__":
    sys.exit(main())
