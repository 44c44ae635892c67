"""promtool checks of deploy/prometheus: config, rules, and a unit test for every alert."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml
from deploy_paths import PROMETHEUS_DIR, tool

RULE_FILES = sorted((PROMETHEUS_DIR / "rules").glob("*.yml"))
ALERT_TESTS = PROMETHEUS_DIR / "tests" / "alerts_test.yml"


def promtool(*args: str | Path, cwd: Path = PROMETHEUS_DIR) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("promtool"), *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def test_config_is_valid_and_names_every_rule_file() -> None:
    result = promtool("check", "config", "prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    assert sorted(config["rule_files"]) == sorted(str(p.relative_to(PROMETHEUS_DIR)) for p in RULE_FILES)


def test_keystream_is_scraped_on_the_exact_metrics_path() -> None:
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    # Keystream serves /metrics itself; a mounted ASGI app would answer 307 to /metrics/ instead.
    assert jobs["keystream"]["metrics_path"] == "/metrics"
    assert jobs["locust"]["metrics_path"] == "/export/prometheus"


def test_rules_are_valid() -> None:
    result = promtool("check", "rules", *RULE_FILES)
    assert result.returncode == 0, result.stdout + result.stderr


def test_alert_unit_tests_pass() -> None:
    result = promtool("test", "rules", ALERT_TESTS.relative_to(PROMETHEUS_DIR))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def _alert_names() -> set[str]:
    names: set[str] = set()
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            names |= {rule["alert"] for rule in group["rules"] if "alert" in rule}
    return names


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    cases: list[dict[str, Any]] = [
        case
        for test in yaml.safe_load(ALERT_TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
    ]
    fires = {case["alertname"] for case in cases if case.get("exp_alerts")}
    quiet = {case["alertname"] for case in cases if not case.get("exp_alerts")}
    alerts = _alert_names()
    assert alerts, "no alerts found"
    assert alerts - fires == set(), "alerts without a test where they fire"
    assert alerts - quiet == set(), "alerts without a test where they stay quiet"


def test_every_alert_has_severity_and_summary() -> None:
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    assert rule["labels"]["severity"] in {"critical", "warning"}, rule["alert"]
                    assert rule["annotations"]["summary"], rule["alert"]
