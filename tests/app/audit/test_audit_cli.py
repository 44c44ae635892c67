"""``keystream-server audit verify`` exit codes: 0 intact, 1 broken or truncated, 2 usage."""

from __future__ import annotations

import base64
import json
import os
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


def _write(path: Path, count: int, **options: int) -> None:
    writer = AuditLog(str(path), derive_audit_keys(MASTER).chain_key, **options)
    for index in range(count):
        writer.write({"type": "response", "n": index, "pad": "x" * 100})
    writer.close()


def test_the_configured_path_finds_every_worker_file_and_its_rotations(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With several workers PATH itself does not exist: `audit verify PATH` used to fail to read it."""
    configured = log.parent / "workers.log"
    _write(Path(f"{configured}.w0"), 12, max_bytes=1000, keep=100)  # rotated: w0.N ... w0.1 w0
    _write(Path(f"{configured}.w1"), 3)
    rotations = sorted(
        (path for path in log.parent.iterdir() if path.name.startswith("workers.log.w0.")),
        key=lambda path: -int(path.suffix[1:]),
    )
    assert len(rotations) >= 3
    assert main(["audit", "verify", str(configured)]) == 0
    out = capsys.readouterr().out
    assert out.count("lines intact") == 2 and "older files not given" not in out  # a chain per worker
    files = " ".join(map(str, [*rotations, f"{configured}.w0", f"{configured}.w1"]))
    assert f"ok: 15 lines in {len(rotations) + 2} file(s) ({files})" in out
    lines = Path(f"{configured}.w1").read_text().splitlines(keepends=True)
    Path(f"{configured}.w1").write_text(lines[0] + lines[1].replace('"n":1', '"n":7') + lines[2])
    assert main(["audit", "verify", str(configured)]) == 1
    assert f"{configured}.w1:2: changed" in capsys.readouterr().err
    assert main(["audit", "verify", str(log.parent / "none.log")]) == 2
    assert "no such file, nor worker files" in capsys.readouterr().err


def test_lines_removed_from_the_start_of_an_unrotated_file_are_reported(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Dropping the first lines of a single file left a valid chain starting later: it verified, even
    against a remembered head."""
    assert main(["audit", "verify", str(log)]) == 0
    head = next(line.split()[1] for line in capsys.readouterr().out.splitlines() if line.startswith("head "))
    lines = log.read_text().splitlines(keepends=True)
    first = json.loads(lines[0])
    log.write_text("".join(lines[1:]))
    assert main(["audit", "verify", str(log)]) == 1
    assert f"{log}:1: removed: chain {first['chain']} starts here at record 2" in capsys.readouterr().err
    assert main(["audit", "verify", str(log), "--expect-head", head]) == 1
    capsys.readouterr()
    # The start the operator remembered (the head where the archived lines ended) makes it whole again.
    kept = f"{first['chain']}:1:{first['hmac']}"
    assert main(["audit", "verify", str(log), "--expect-head", kept, "--expect-head", head]) == 0
    assert main(["audit", "verify", str(log), "--expect-head", f"{first['chain']}:1:{'0' * 64}"]) == 1


def test_a_log_whose_oldest_rotations_were_deleted_still_verifies(tmp_path: Path, log: Path) -> None:
    """Rotation deletes files beyond KEYSTREAM_AUDIT_LOG_KEEP: the oldest kept file starts mid-chain."""
    path = tmp_path / "rotated.log"
    _write(path, 30, max_bytes=600, keep=2)
    assert not Path(f"{path}.3").exists() and Path(f"{path}.2").exists()
    assert main(["audit", "verify", str(path)]) == 0
    assert main(["audit", "verify", f"{path}.2", f"{path}.1", str(path)]) == 0
    os.unlink(f"{path}.2")
    os.unlink(f"{path}.1")  # nothing older is left beside it: the file must start its chain, and does not
    assert main(["audit", "verify", str(path)]) == 1
