"""A real Prometheus for the tests: Debian's (2.42, from ``make tools``) on 127.0.0.1 with temporary storage.

:func:`local_config` derives its configuration from the shipped ``deploy/prometheus/prometheus.yml`` (the same
jobs, metrics paths and rule files) with a 1 s scrape and evaluation interval and the targets the test
gives, so what the tests scrape and evaluate is what deployments do. :func:`running_prometheus` starts it
and waits until it is ready; when Prometheus is missing or does not start, the test fails (never skips).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from loadtests.service import free_port, stop_process, wait_for_http

#: The shipped Prometheus configuration and rules.
PROMETHEUS_DIR = Path(__file__).resolve().parents[1] / "deploy" / "prometheus"


def local_config(targets: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """The shipped configuration with 1 s intervals, absolute rule paths, and each job named in ``targets``
    scraping those ``host:port`` addresses; jobs not named are left out."""
    config: dict[str, Any] = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    config["global"].update(scrape_interval="1s", scrape_timeout="1s", evaluation_interval="1s")
    config["rule_files"] = [str(PROMETHEUS_DIR / path) for path in config["rule_files"]]
    config["scrape_configs"] = [
        {**job, "static_configs": [{"targets": list(targets[job["job_name"]])}]}
        for job in config["scrape_configs"]
        if job["job_name"] in targets
    ]
    return config


@contextlib.contextmanager
def running_prometheus(config: dict[str, Any], work: Path, port: int | None = None) -> Iterator[str]:
    """Run Prometheus on ``config`` (written into ``work``, its storage there too) on 127.0.0.1:``port`` (a
    free one if not given); yields its URL once ``/-/ready`` answers and stops it on exit.

    Fails the test when ``prometheus`` is not installed or does not become ready within 30 s.
    """
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is not installed: run scripts/install-tools.sh (make tools) as root")
    port = free_port() if port is None else port
    config_path = work / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(config))
    with open(work / "prometheus.log", "wb") as log:
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={config_path}",
                f"--storage.tsdb.path={work / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            wait_for_http(f"{url}/-/ready", 30, process)
            yield url
        finally:
            stop_process(process)
