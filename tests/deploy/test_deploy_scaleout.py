"""deploy/compose/scaleout.yml (issue 10, deployment): valid for Debian's docker-compose without a daemon, the
secrets from files, three replicas on PostgreSQL behind the HAProxy configuration bench/haproxy_process.py
generates (checked by ``haproxy -c``), Prometheus scraping every replica (checked by ``promtool``).

``deploy/compose.sh scaleout-test`` (part of ``make docker-test``) runs the stack for real."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_paths import DEPLOY, PROMETHEUS_DIR, REPO, make_plan, mounts, tool
from scaleout_compose import (
    DATABASE_URL,
    REPLICAS,
    SCALEOUT_DIR,
    compose,
    resolved,
    write_secrets,
)

from bench.haproxy_process import find_haproxy, haproxy_config


@pytest.fixture
def secrets_dir(tmp_path: Path) -> Path:
    """The files deploy/compose.sh makes in build/scaleout for the file seal."""
    return write_secrets(tmp_path)


def test_config_is_valid(secrets_dir: Path) -> None:
    result = compose("config", "-q", secrets=secrets_dir)
    assert result.returncode == 0, result.stderr


def _copy_of_the_stack(root: Path) -> Path:
    """deploy/compose and deploy/prometheus under ROOT, so a test can give it a build/scaleout of its own."""
    shutil.copytree(DEPLOY / "compose", root / "deploy" / "compose", ignore=shutil.ignore_patterns("tls"))
    shutil.copytree(PROMETHEUS_DIR, root / "deploy" / "prometheus")
    return root


def _compose_project(cwd: Path) -> dict[str, Any]:
    """The project name and each service's environment that ``docker-compose -f deploy/compose/scaleout.yml``
    works with when run in CWD without any variable: docker-compose's own functions (the ones its ``ps`` and
    ``stop`` call), run by its interpreter, minus the connection to a daemon."""
    script = """
import json, sys
from compose.cli.command import get_config_path_from_options, get_project_dir, get_project_name
from compose.config import config
from compose.config.environment import Environment
options = {"--file": ["deploy/compose/scaleout.yml"]}
override_dir = get_project_dir(options)
environment = Environment.from_env_file(override_dir)
details = config.find(".", get_config_path_from_options(options, environment), environment, override_dir)
data = config.load(details)
json.dump({"project": get_project_name(details.working_dir, None, environment),
           "environment": {s["name"]: s.get("environment", {}) for s in data.services}}, sys.stdout)
"""
    docker_compose = Path(tool("docker-compose"))
    interpreter = docker_compose.read_text(errors="replace").splitlines()[0].removeprefix("#!").split()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KEYSTREAM_", "COMPOSE_"))}
    result = subprocess.run(
        [*interpreter, "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    answer: dict[str, Any] = json.loads(result.stdout)
    return answer


def test_bare_docker_compose_commands_find_the_stack_without_variables(
    tmp_path: Path, secrets_dir: Path
) -> None:
    """``docker-compose -f deploy/compose/scaleout.yml ps`` (or ``stop keystream-2``) from the repository root
    works as the docs show it: the project is the one compose.sh starts (deploy/compose/.env) and the secrets
    are build/scaleout's, with neither COMPOSE_PROJECT_NAME nor KEYSTREAM_SCALEOUT_SECRETS set."""
    root = _copy_of_the_stack(tmp_path / "repo")
    (root / "build" / "scaleout").mkdir(parents=True)
    for name in ("keystream.env", "postgres.env", "master-key"):
        shutil.copy(secrets_dir / name, root / "build" / "scaleout" / name)
    project = _compose_project(root)
    assert project["project"] == "keystream-scaleout"
    assert project["environment"]["keystream-2"]["KEYSTREAM_DATABASE_URL"] == DATABASE_URL
    assert project["environment"]["postgres"]["POSTGRES_PASSWORD"] == "pw"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KEYSTREAM_", "COMPOSE_"))}
    result = subprocess.run(
        [tool("docker-compose"), "-f", "deploy/compose/scaleout.yml", "config", "-q"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    script = (DEPLOY / "compose.sh").read_text()
    assert 'COMPOSE_PROJECT_NAME="${COMPOSE_PROJECT_NAME:-keystream-scaleout}"' in script


def test_without_secrets_compose_names_the_missing_file(tmp_path: Path) -> None:
    root = _copy_of_the_stack(tmp_path / "repo")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KEYSTREAM_", "COMPOSE_"))}
    result = subprocess.run(
        [tool("docker-compose"), "-f", "deploy/compose/scaleout.yml", "config", "-q"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert str(root / "build" / "scaleout") in result.stderr


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
        # The console's dashboard reads Prometheus where the browser on this host reaches it: the published
        # port, for every replica alike (tests/app/e2e/test_e2e_console_prometheus.py runs it without Docker).
        (published,) = services["prometheus"]["ports"]
        host_port = published["published"] if isinstance(published, dict) else str(published).split(":")[1]
        assert env["KEYSTREAM_UI_PROMETHEUS_URL"] == f"http://127.0.0.1:{host_port}"
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


@pytest.mark.parametrize("target", ["scaleout-up", "compose-up", "compose-test"])
def test_bringing_a_stack_up_installs_the_lean_server_only(tmp_path: Path, target: str) -> None:
    """The host side of these targets needs a Python with pip, not the test tools (which grew .venv from
    85 to 628 MB)."""
    plan = make_plan(tmp_path / "venv", target)
    assert "[test]" not in plan
    assert f"deploy/compose.sh {target.replace('compose-', '')}" in plan


def test_make_scaleout_test_runs_the_stack_checks(tmp_path: Path) -> None:
    assert "deploy/compose.sh scaleout-test" in make_plan(tmp_path / "venv", "scaleout-test")
