"""docker-compose.yml: valid for Debian's docker-compose (no daemon needed), ports on 127.0.0.1, volumes,
healthchecks, and the Prometheus/Grafana wiring to deploy/."""

from __future__ import annotations

import os
import subprocess
from typing import Any

import yaml
from deploy_paths import REPO, compose_config, mounts, run_compose

TOKEN = "ks_0123456789abcdef_" + "x" * 32


def compose(*args: str, token: str | None = TOKEN) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KEYSTREAM_ROOT_TOKEN"}
    if token is not None:
        env["KEYSTREAM_ROOT_TOKEN"] = token
    return run_compose((), "--profile", "load", *args, env=env)


def resolved() -> dict[str, Any]:
    return compose_config(compose("config"))


def test_config_is_valid() -> None:
    result = compose("config", "-q")
    assert result.returncode == 0, result.stderr


def test_root_token_is_required() -> None:
    result = compose("config", "-q", token=None)
    assert result.returncode != 0
    assert "KEYSTREAM_ROOT_TOKEN" in result.stderr


def test_services_ports_and_volumes() -> None:
    config = resolved()
    services = config["services"]
    assert set(services) == {"keystream", "prometheus", "grafana", "locust-master", "locust-worker"}
    for name, service in services.items():
        for port in service.get("ports", []):
            host_ip = port["host_ip"] if isinstance(port, dict) else str(port).split(":")[0]
            assert host_ip == "127.0.0.1", f"{name} publishes {port} beyond 127.0.0.1"
    assert set(config["volumes"]) == {"keystream-data", "prometheus-data", "grafana-data"}
    assert mounts(services["keystream"])["/var/lib/keystream"] == "keystream-data"
    assert mounts(services["prometheus"])["/prometheus"] == "prometheus-data"
    assert mounts(services["grafana"])["/var/lib/grafana"] == "grafana-data"


def test_healthchecks_and_startup_order() -> None:
    services = resolved()["services"]
    for name in ("keystream", "prometheus", "grafana", "locust-master"):
        assert services[name]["healthcheck"]["test"], name
    assert "/healthz" in " ".join(services["keystream"]["healthcheck"]["test"])
    assert services["prometheus"]["depends_on"]["keystream"]["condition"] == "service_healthy"
    assert services["grafana"]["depends_on"]["prometheus"]["condition"] == "service_healthy"


def test_monitoring_mounts_point_at_deploy() -> None:
    services = resolved()["services"]
    prometheus = mounts(services["prometheus"])
    assert prometheus["/etc/prometheus"] == str(REPO / "deploy" / "prometheus")
    grafana = mounts(services["grafana"])
    assert grafana["/etc/grafana/provisioning"] == str(REPO / "deploy" / "grafana" / "provisioning")
    assert grafana["/var/lib/grafana/dashboards"] == str(REPO / "deploy" / "grafana" / "dashboards")
    provider = yaml.safe_load((REPO / "deploy/grafana/provisioning/dashboards/keystream.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    # Prometheus scrapes the compose service names.
    scrape = yaml.safe_load((REPO / "deploy/prometheus/prometheus.yml").read_text())["scrape_configs"]
    targets = {job["job_name"]: job["static_configs"][0]["targets"] for job in scrape}
    assert targets["keystream"] == ["keystream:8000"]
    assert targets["locust"] == ["locust-master:8089"]
    locust = services["locust-master"]
    assert "--host=http://keystream:8000" in locust["command"]
    assert locust["build"]["args"]["EXTRAS"] == "load"


def offline(*args: str) -> subprocess.CompletedProcess[str]:
    """docker-compose with the registry-free overlay deploy/compose.sh uses."""
    return compose("-f", "docker-compose.yml", "-f", "deploy/compose/offline.yml", *args)


def test_offline_overlay_swaps_in_the_locally_built_prometheus() -> None:
    result = offline("config")
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    assert services["prometheus"]["image"] == "keystream-prometheus:local"
    # Everything else is the documented stack: same command, mounts, ports and healthcheck.
    documented = resolved()["services"]
    for key in ("command", "volumes", "ports", "healthcheck", "depends_on"):
        assert services["prometheus"][key] == documented["prometheus"][key], key
    assert services["keystream"] == documented["keystream"]
    dockerfile = (REPO / "deploy" / "compose" / "prometheus.Dockerfile").read_text()
    assert 'ENTRYPOINT ["/usr/bin/prometheus"]' in dockerfile  # the command's flags go to prometheus
    assert "wget" in dockerfile  # the compose healthcheck runs wget


def test_compose_script_usage() -> None:
    result = subprocess.run(
        [str(REPO / "deploy" / "compose.sh")], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 2
    assert "usage: deploy/compose.sh up|down|test" in result.stderr
