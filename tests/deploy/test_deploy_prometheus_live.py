"""A real Prometheus scraping a real Keystream under Locust load: every recording rule and every dashboard
query must return series for each usable backend.

Prometheus (Debian's, 2.42) runs on 127.0.0.1 with a 1 s scrape/evaluation interval and temporary storage, on
a config derived from deploy/prometheus/prometheus.yml (same jobs, paths and rule files; targets rewritten to
the local ports). Locust keeps its web UI on so Prometheus scrapes its /export/prometheus too.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from deploy_paths import DASHBOARD, PROMETHEUS_DIR

from loadtests import run
from loadtests.service import Service, free_port, keystream_service, stop_process
from tests.prometheus_server import local_config, running_prometheus

# Serial: a Locust load with Prometheus scraping: alone.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.serial]

#: How long the checks may wait for data to appear (scrapes, rule evaluation).
DEADLINE_SECONDS = 60.0


@dataclass
class Stack:
    service: Service
    prometheus_url: str
    backends: list[str]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query; raises on a PromQL error (a bad dashboard or rule expression)."""
        response = httpx.get(f"{self.prometheus_url}/api/v1/query", params={"query": expr}, timeout=10)
        body = response.json()
        assert response.status_code == 200 and body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def api(self, path: str) -> Any:
        response = httpx.get(f"{self.prometheus_url}{path}", timeout=10)
        response.raise_for_status()
        return response.json()["data"]


def usable_backends(service: Service) -> list[str]:
    response = httpx.get(
        f"{service.url}/v1/backends", headers={"Authorization": f"Bearer {service.token}"}, timeout=10
    )
    response.raise_for_status()
    listing = response.json()
    return [b["name"] for b in listing["backends"] if b["enabled"] and b["available"]]


def prometheus_config(service_port: int, locust_port: int, prometheus_port: int) -> dict[str, Any]:
    return local_config(
        {
            "keystream": [f"127.0.0.1:{service_port}"],
            "locust": [f"127.0.0.1:{locust_port}"],
            "prometheus": [f"127.0.0.1:{prometheus_port}"],
        }
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    work = tmp_path_factory.mktemp("prometheus-live")
    with contextlib.ExitStack() as stack:
        service = stack.enter_context(keystream_service(log_dir=work))
        backends = usable_backends(service)
        locust_port = free_port()
        args = run.parse_args(["--duration", "90", "--web-port", str(locust_port)])
        locust = subprocess.Popen(
            run.locust_command(args, service.url, work),
            cwd=run.REPO_ROOT,
            env={**os.environ, "KEYSTREAM_TOKEN": service.token},
            stdin=subprocess.DEVNULL,
            stdout=stack.enter_context(open(work / "locust.log", "wb")),
            stderr=subprocess.STDOUT,
        )
        stack.callback(stop_process, locust)
        prometheus_port = free_port()
        config = prometheus_config(int(service.url.rsplit(":", 1)[1]), locust_port, prometheus_port)
        url = stack.enter_context(running_prometheus(config, work, prometheus_port))
        yield Stack(service, url, backends)


def eventually(check: Callable[[], list[str]], what: str) -> None:
    """Re-run ``check`` (it returns what is still missing) until nothing is missing or the deadline passes."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    missing = check()
    while missing and time.monotonic() < deadline:
        time.sleep(1.0)
        missing = check()
    assert not missing, f"{what}: still missing after {DEADLINE_SECONDS:.0f} s:\n  " + "\n  ".join(missing)


def recording_rules() -> list[tuple[str, str]]:
    """(group name, record name) of every recording rule."""
    rules = []
    for path in sorted((PROMETHEUS_DIR / "rules").glob("*.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            rules += [(group["name"], rule["record"]) for rule in group["rules"] if "record" in rule]
    return rules


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, expression) of every dashboard target."""
    dashboard = json.loads(DASHBOARD.read_text())
    return [
        (panel["title"], target["expr"])
        for panel in dashboard["panels"]
        if panel["type"] != "row"
        for target in panel["targets"]
    ]


def test_all_targets_are_up(stack: Stack) -> None:
    def check() -> list[str]:
        targets = stack.api("/api/v1/targets")["activeTargets"]
        return [
            f"{t['labels']['job']}: {t['health']} {t.get('lastError', '')}"
            for t in targets
            if t["health"] != "up"
        ]

    eventually(check, "scrape targets")


def test_load_drives_every_usable_backend(stack: Stack) -> None:
    assert "python" in stack.backends  # the pure-Python backend always runs
    eventually(
        lambda: [
            b for b in stack.backends if not stack.query(f'keystream_crypto_seconds_count{{backend="{b}"}}')
        ],
        "crypto samples per backend",
    )


def test_every_recording_rule_returns_series_for_each_backend(stack: Stack) -> None:
    rules = recording_rules()
    assert len(rules) >= 15
    hwsim = "hwsim" in stack.backends

    def check() -> list[str]:
        missing = []
        for group, record in rules:
            if group == "keystream-hwsim" and not hwsim:
                continue
            result = stack.query(record)
            if not result:
                missing.append(record)
            elif record.startswith(("backend:", "backend_operation:")):
                found = {series["metric"].get("backend") for series in result}
                missing += [f"{record}{{backend={b}}}" for b in stack.backends if b not in found]
        return missing

    eventually(check, "recording rules")


def test_every_dashboard_query_returns_series_for_each_backend(stack: Stack) -> None:
    queries = dashboard_queries()
    hwsim = "hwsim" in stack.backends

    def check() -> list[str]:
        missing = []
        for title, expr in queries:
            if "keystream_hwsim" in expr and not hwsim:
                continue
            expr = expr.replace("$__rate_interval", "1m")
            for backend in stack.backends if "$backend" in expr else [""]:
                concrete = expr.replace("$backend", re.escape(backend))
                if not stack.query(concrete):
                    missing.append(f"{title}: {concrete}")
        return missing

    eventually(check, "dashboard queries")


def test_rules_evaluate_cleanly_and_no_alert_fires(stack: Stack) -> None:
    groups = stack.api("/api/v1/rules")["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    assert len(rules) == len(recording_rules()) + sum(1 for r in rules if r["type"] == "alerting")
    bad = [f"{r['name']}: {r.get('lastError')}" for r in rules if r["health"] not in ("ok", "unknown")]
    assert not bad
    firing = [r["name"] for r in rules if r["type"] == "alerting" and r["state"] == "firing"]
    assert not firing, f"alerts firing under a healthy load: {firing}"


def test_derived_config_keeps_the_real_metrics_paths(tmp_path: Path) -> None:
    config = prometheus_config(1, 2, 3)
    paths = {job["job_name"]: job.get("metrics_path", "/metrics") for job in config["scrape_configs"]}
    assert paths == {"keystream": "/metrics", "locust": "/export/prometheus", "prometheus": "/metrics"}
