"""Shared helpers for the deploy/ checks: the repository paths and the external tools they need."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
PROMETHEUS_DIR = DEPLOY / "prometheus"
GRAFANA_DIR = DEPLOY / "grafana"
K8S_DIR = DEPLOY / "k8s"
DASHBOARD = GRAFANA_DIR / "dashboards" / "keystream.json"


def tool(name: str) -> str:
    """The path of an external tool; fails (not skips) when it is missing, naming the installer."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: run scripts/install-tools.sh (make tools) as root")
    return path


def run_compose(
    files: Sequence[Path], *args: str, env: Mapping[str, str]
) -> subprocess.CompletedProcess[str]:
    """``docker-compose [-f FILE ...] ARGS`` from the repository with exactly ``env`` (no daemon needed for
    ``config``); no ``-f`` runs the repository's docker-compose.yml."""
    arguments = [part for path in files for part in ("-f", str(path))]
    return subprocess.run(
        [tool("docker-compose"), *arguments, *args],
        cwd=REPO,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def compose_config(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The stack a successful ``docker-compose config`` printed."""
    assert result.returncode == 0, result.stderr
    config: dict[str, Any] = yaml.safe_load(result.stdout)
    return config


def mounts(service: dict[str, Any]) -> dict[str, str]:
    """Container path -> source (a named volume or a host path), from the short (``src:target:ro``) or the
    long volume syntax."""
    result: dict[str, str] = {}
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):
            result[volume["target"]] = volume["source"]
        else:
            source, target = str(volume).split(":")[:2]
            result[target] = source
    return result


def make_plan(venv: Path, target: str) -> str:
    """What ``make TARGET`` would run with an empty venv VENV (``make -n``: nothing runs); fails the test when
    make refuses."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))}
    result = subprocess.run(
        ["make", "--no-print-directory", "-n", f"VENV={venv}", target],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout
