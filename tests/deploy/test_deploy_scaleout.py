"""deploy/compose/scaleout.yml (issue 10, deployment): valid for Debian's docker-compose without a daemon, the
secrets from files, three replicas on PostgreSQL behind the HAProxy configuration bench/haproxy_process.py
generates (checked by ``haproxy -c``), Prometheus scraping every replica (checked by ``promtool``).

``deploy/compose.sh scaleout-test`` (part of ``make docker-test``) runs the stack for real."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_paths import DEPLOY, PROMETHEUS_DIR, REPO, tool

from bench.haproxy_process import find_haproxy, haproxy_config

SCALEOUT = DEPLOY / "compose" / "scaleout.yml"
SCALEOUT_DIR = DEPLOY / "compose" / "scaleout"
REPLICAS = ("keystream-1", "keystream-2", "keystream-3")
DATABASE_URL = "postgresql://keystream:pw@postgres:5432/keystream"


@pytest.fixture
def secrets_dir(tmp_path: Path) -> Path:
    """The files deploy/compose.sh makes in build/scaleout (contents that only need to parse)."""
    (tmp_path / "keystream.env").write_text(
        f"KEYSTREAM_DATABASE_URL={DATABASE_URL}\nKEYSTREAM_ROOT_TOKEN=ks_0123456789abcdef_{'x' * 32}\n"
    )
    (tmp_path / "postgres.env").write_text("POSTGRES_PASSWORD=pw\n")
    (tmp_path / "master-key").write_text("AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=\n")
    return tmp_path


def compose(*args: str, secrets: Path | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEYSTREAM_")}
    if secrets is not None:
        env["KEYSTREAM_SCALEOUT_SECRETS"] = str(secrets)
    return subprocess.run(
        [tool("docker-compose"), "-f", str(SCALEOUT), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def resolved(secrets: Path) -> dict[str, Any]:
    result = compose("config", secrets=secrets)
    assert result.returncode == 0, result.stderr
    config: dict[str, Any] = yaml.safe_load(result.stdout)
    return config


def mounts(service: dict[str, Any]) -> dict[str, str]:
    """Container path -> source, from the short (``src:target:ro``) or long volume syntax."""
    result: dict[str, str] = {}
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):
            result[volume["target"]] = volume["source"]
        else:
            source, target = str(volume).split(":")[:2]
            result[target] = source
    return result


def test_config_is_valid(secrets_dir: Path) -> None:
    result = compose("config", "-q", secrets=secrets_dir)
    assert result.returncode == 0, result.stderr


def test_the_secrets_directory_is_required() -> None:
    result = compose("config", "-q", secrets=None)
    assert result.returncode != 0
    assert "KEYSTREAM_SCALEOUT_SECRETS" in result.stderr


def test_three_replicas_share_postgres_with_secrets_from_files(secrets_dir: Path) -> None:
    config = resolved(secrets_dir)
    services = config["services"]
    assert set(services) == {"postgres", *REPLICAS, "haproxy", "prometheus"}
    assert config["secrets"]["master-key"]["file"] == str(secrets_dir / "master-key")
    for name in REPLICAS:
        replica = services[name]
        env = replica["environment"]
        assert env["KEYSTREAM_DATABASE_URL"] == DATABASE_URL  # from keystream.env
        assert env["KEYSTREAM_MASTER_KEY_FILE"] == "/run/secrets/master-key"
        assert "KEYSTREAM_MASTER_KEY" not in env
        assert [secret["source"] for secret in replica["secrets"]] == ["master-key"]
        assert replica["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert "/readyz" in " ".join(replica["healthcheck"]["test"])
        assert replica["read_only"] is True
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"] == "pw"  # from postgres.env
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])
    for name, service in services.items():
        for port in service.get("ports", []):
            host_ip = port["host_ip"] if isinstance(port, dict) else str(port).split(":")[0]
            assert host_ip == "127.0.0.1", f"{name} publishes {port} beyond 127.0.0.1"


def test_haproxy_config_is_the_generated_one_and_valid(tmp_path: Path) -> None:
    shipped = (SCALEOUT_DIR / "haproxy.cfg").read_text()
    # One home for the balancer's settings: the file is bench/haproxy_process.py's output for the stack.
    assert shipped == haproxy_config(
        [(name, 8000) for name in REPLICAS],
        8000,
        bind="0.0.0.0",  # noqa: S104 - inside the container
        resolver="127.0.0.11:53",
    )
    assert "balance leastconn" in shipped and "option httpchk GET /readyz" in shipped
    assert "http-buffer-request" not in shipped  # request bodies stream through
    assert "nameserver dns 127.0.0.11:53" in shipped and "init-addr last,libc,none" in shipped
    # The replica names do not resolve here; init-addr none lets haproxy -c (and a start) pass anyway.
    config = tmp_path / "haproxy.cfg"
    config.write_text(shipped)
    result = subprocess.run(
        [find_haproxy(), "-c", "-f", str(config)], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_haproxy_serves_the_published_port_with_the_mounted_config(secrets_dir: Path) -> None:
    haproxy = resolved(secrets_dir)["services"]["haproxy"]
    assert mounts(haproxy)["/etc/haproxy/haproxy.cfg"] == str(SCALEOUT_DIR / "haproxy.cfg")
    (port,) = haproxy["ports"]
    assert str(port).startswith("127.0.0.1:") and str(port).endswith(":8000/tcp")
    assert "/readyz" in " ".join(haproxy["healthcheck"]["test"])


def test_prometheus_scrapes_every_replica(secrets_dir: Path, tmp_path: Path) -> None:
    config = yaml.safe_load((SCALEOUT_DIR / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["keystream"]["metrics_path"] == "/metrics"
    assert jobs["keystream"]["static_configs"][0]["targets"] == [f"{name}:8000" for name in REPLICAS]
    prometheus = resolved(secrets_dir)["services"]["prometheus"]
    mounted = mounts(prometheus)
    assert mounted["/etc/prometheus/prometheus.yml"] == str(SCALEOUT_DIR / "prometheus.yml")
    assert mounted["/etc/prometheus/rules"] == str(PROMETHEUS_DIR / "rules")
    # promtool resolves rule_files relative to the config: lay them out as the container sees them.
    shutil.copy(SCALEOUT_DIR / "prometheus.yml", tmp_path / "prometheus.yml")
    (tmp_path / "rules").symlink_to(PROMETHEUS_DIR / "rules")
    result = subprocess.run(
        [tool("promtool"), "check", "config", "prometheus.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_script_and_make_run_the_stack() -> None:
    script = (DEPLOY / "compose.sh").read_text()
    for command in ("scaleout-up)", "scaleout-down)", "scaleout-test)"):
        assert command in script
    assert "deploy/compose/scaleout/check.py" in script
    makefile = (REPO / "Makefile").read_text()
    docker_test = makefile[makefile.index("\ndocker-test:") :].split("\n\n")[0]
    assert "deploy/compose.sh scaleout-test" in docker_test
