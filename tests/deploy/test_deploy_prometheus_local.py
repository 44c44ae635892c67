"""`make prometheus` (scripts/prometheus_local.py): the config it writes passes `promtool check config` and
keeps deploy/prometheus's jobs, paths and rules; started for real, it scrapes a running Keystream."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from deploy_paths import PROMETHEUS_DIR, REPO, tool

from loadtests.service import keystream_service
from scripts import prometheus_local

SCRIPT = REPO / "scripts" / "prometheus_local.py"
DEADLINE_SECONDS = 30.0


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_written_config_passes_promtool_and_points_at_local_addresses(tmp_path: Path) -> None:
    result = run_script(
        "--check-only",
        "--data-dir",
        str(tmp_path),
        "--target",
        "127.0.0.1:8123",
        "--listen",
        "127.0.0.1:9123",
    )
    assert result.returncode == 0, result.stderr
    config_path = tmp_path / "prometheus.yml"
    check = subprocess.run(
        [tool("promtool"), "check", "config", str(config_path)], capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr
    config: dict[str, Any] = yaml.safe_load(config_path.read_text())
    targets = {job["job_name"]: job["static_configs"][0]["targets"] for job in config["scrape_configs"]}
    assert targets == {
        "keystream": ["127.0.0.1:8123"],
        "locust": ["127.0.0.1:8089"],
        "prometheus": ["127.0.0.1:9123"],
    }
    # The deployed jobs' metrics paths and every rule file, in place.
    deployed = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    paths = {job["job_name"]: job.get("metrics_path") for job in config["scrape_configs"]}
    assert paths == {job["job_name"]: job.get("metrics_path") for job in deployed["scrape_configs"]}
    assert config["rule_files"] == [str(PROMETHEUS_DIR / path) for path in deployed["rule_files"]]
    assert "SUCCESS: 2 rule files found" in check.stdout + check.stderr


def test_a_bad_scrape_interval_is_refused(tmp_path: Path) -> None:
    result = run_script("--check-only", "--data-dir", str(tmp_path), "--scrape-interval", "soon")
    assert result.returncode == 2
    assert "not a Prometheus duration" in result.stderr
    assert not (tmp_path / "prometheus.yml").exists()


@pytest.mark.e2e
@pytest.mark.slow
def test_it_scrapes_a_running_service(tmp_path: Path) -> None:
    with keystream_service(log_dir=tmp_path) as service:
        # The configured path answers 200 itself: a redirect (/metrics -> /metrics/) would be followed by
        # Prometheus but is a different URL than the one documented.
        response = httpx.get(f"{service.url}/metrics", timeout=10)
        assert response.status_code == 200 and "keystream_" in response.text
        target = service.url.removeprefix("http://")
        with prometheus_local.running(target, "127.0.0.1:1", tmp_path / "prometheus") as url:
            deadline = time.monotonic() + DEADLINE_SECONDS
            health: dict[str, str] = {}
            series: list[Any] = []
            while time.monotonic() < deadline:
                targets = httpx.get(f"{url}/api/v1/targets", timeout=10).json()["data"]["activeTargets"]
                health = {t["labels"]["job"]: t["health"] for t in targets}
                query = {"query": '{__name__=~"keystream_.+", job="keystream"}'}
                series = httpx.get(f"{url}/api/v1/query", params=query, timeout=10).json()["data"]["result"]
                if health.get("keystream") == health.get("prometheus") == "up" and series:
                    break
                time.sleep(0.5)
            assert health.get("keystream") == "up", health
            assert health.get("prometheus") == "up", health
            assert series, "no keystream_* series scraped"
            groups = httpx.get(f"{url}/api/v1/rules", timeout=10).json()["data"]["groups"]
            assert {path.name for path in (PROMETHEUS_DIR / "rules").glob("*.yml")} == {
                Path(group["file"]).name for group in groups
            }
