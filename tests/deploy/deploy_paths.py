"""Shared helpers for the deploy/ checks: the repository paths and the external tools they need."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

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
