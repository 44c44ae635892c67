"""The first-start banner's copy-paste example must work as printed (it once got 415 from curl's default
form content type)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from bench.service_process import start_server, stop_server

pytestmark = pytest.mark.e2e


def test_printed_curl_example_round_trips(tmp_path: Path) -> None:
    assert shutil.which("curl"), "curl is missing: make tools (scripts/install-tools.sh) installs it"
    server = start_server(tmp_path / "data", tmp_path / "server.log", root_token=None)
    try:
        banner = server.log.read_text()
        assert "Try it:\n" in banner, banner
        commands = [line.strip() for line in banner.split("Try it:\n", 1)[1].splitlines()[:3]]
        assert commands[0].startswith("export KEYSTREAM_TOKEN=ks_")
        result = subprocess.run(
            ["bash", "-c", "set -euo pipefail\n" + "\n".join(commands)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith('{"name":"demo"'), result.stdout
        assert result.stdout.endswith("}hello\n"), result.stdout
    finally:
        stop_server(server)
