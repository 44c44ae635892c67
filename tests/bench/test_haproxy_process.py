"""The HAProxy configuration of :mod:`bench.haproxy_process`: valid for Debian's haproxy, as documented."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench import haproxy_process
from bench.haproxy_process import HaproxyError, find_haproxy, haproxy_config


def test_the_printed_configuration_is_valid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    haproxy_process.main(["--bind", "127.0.0.2", "--port", "8080", "127.0.0.3:8000", "127.0.0.1:8001"])
    config = tmp_path / "haproxy.cfg"
    config.write_text(capsys.readouterr().out)
    text = config.read_text()
    assert "bind 127.0.0.2:8080" in text and "server r1 127.0.0.1:8001 check" in text
    assert "option httpchk GET /readyz" in text and "balance leastconn" in text
    assert "server r0-fallback 127.0.0.3:8000 backup" in text and "http-buffer-request" not in text
    # Fails (never skips) when haproxy is missing: find_haproxy raises with the package to install.
    result = subprocess.run([find_haproxy(), "-c", "-f", str(config)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_resolved_backups_may_share_their_replica_address() -> None:
    """Through DNS a fallback server resolves to its replica's address; without allow-dup-ip HAProxy leaves it
    without one ("No IP for server"), and with every replica failing /readyz (all sealed, or the keystore
    down) it answered its own 503 instead of passing requests to the replicas."""
    servers = [("keystream-1", 8000), ("keystream-2", 8000)]
    resolved = haproxy_config(servers, 8000, resolver="127.0.0.11:53").splitlines()
    backups = [line for line in resolved if " backup" in line]
    assert len(backups) == 2 and all(line.endswith("backup resolve-opts allow-dup-ip") for line in backups)
    assert "allow-dup-ip" not in haproxy_config(servers, 8000)  # fixed addresses: nothing to resolve


def test_haproxy_errors_are_json_in_the_api_shape() -> None:
    lines = [line for line in haproxy_config([("h", 1)], 2).splitlines() if "http-error" in line]
    assert len(lines) == 3 and all("content-type application/json" in line for line in lines)
    assert "hdr Retry-After 1" in next(line for line in lines if "status 503" in line)


def test_a_missing_haproxy_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(haproxy_process.shutil, "which", lambda *args, **kwargs: None)
    with pytest.raises(HaproxyError, match="install Debian's haproxy"):
        find_haproxy()
