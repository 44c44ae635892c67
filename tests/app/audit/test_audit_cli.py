"""``keystream-server audit verify`` exit codes: 0 intact, 1 broken or truncated, 2 usage."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from app.admin import main
from app.audit import AuditLog, derive_audit_keys

MASTER = bytes(range(32))


@pytest.fixture
def log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # no .env from the repository
    for name in ("KEYSTREAM_MASTER_KEY_FILE", "KEYSTREAM_DATABASE_URL", "KEYSTREAM_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KEYSTREAM_MASTER_KEY", base64.b64encode(MASTER).decode())
    path = tmp_path / "audit.log"
    writer = AuditLog(str(path), derive_audit_keys(MASTER).chain_key)
    for index in range(4):
        writer.write({"type": "response", "n": index})
    writer.close()
    return path


def test_exit_codes(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "verify", str(log)]) == 0
    head = next(line.split()[1] for line in capsys.readouterr().out.splitlines() if line.startswith("head "))
    assert main(["audit", "verify", str(log), "--expect-head", head]) == 0
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(lines[:3]))
    assert main(["audit", "verify", str(log), "--expect-head", head]) == 1
    assert "truncated" in capsys.readouterr().err
    log.write_text("".join([lines[0], lines[2], lines[1], lines[3]]))
    assert main(["audit", "verify", str(log)]) == 1
    assert f"{log}:2: removed or reordered" in capsys.readouterr().err
    assert main(["audit", "verify", str(log.parent / "missing.log")]) == 2
    assert main(["audit", "verify", str(log), "--expect-head", "nonsense"]) == 2


def test_another_master_key_sees_every_line_changed(
    log: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KEYSTREAM_MASTER_KEY", base64.b64encode(bytes(32)).decode())
    assert main(["audit", "verify", str(log)]) == 1
    assert f"{log}:1: changed" in capsys.readouterr().err


def test_no_master_key_is_a_usage_error(
    log: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KEYSTREAM_MASTER_KEY")
    monkeypatch.setenv("KEYSTREAM_DATA_DIR", str(tmp_path / "empty"))
    assert main(["audit", "verify", str(log)]) == 2
    assert "no master key" in capsys.readouterr().err
    assert not (tmp_path / "empty").exists()  # nothing generated
