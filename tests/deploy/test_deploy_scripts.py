"""The shell scripts: they parse, and the tool installer is a quick no-op once the tools are there."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from deploy_paths import REPO, tool

SCRIPTS = [
    REPO / "deploy" / "docker-test.sh",
    REPO / "deploy" / "compose" / "make-test-certs.sh",
    REPO / "deploy" / "compose" / "scaleout" / "softhsm-init.sh",
    REPO / "deploy" / "compose.sh",
    REPO / "scripts" / "install-tools.sh",
]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_parses_and_is_executable(script: Path) -> None:
    path = script
    assert path.stat().st_mode & 0o111, f"{path} is not executable"
    result = subprocess.run(
        ["bash", "-n", str(path)], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, result.stderr


def test_install_tools_is_quick_when_everything_is_present() -> None:
    for name in ("prometheus", "promtool", "docker-compose"):
        tool(name)
    start = time.monotonic()
    result = subprocess.run(
        [str(REPO / "scripts" / "install-tools.sh")], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "present" in result.stdout
    assert time.monotonic() - start < 5
