"""``keystream-server operator migrate-seal --to SEAL``: every secret rewrapped in one transaction, or none.

Each test makes ciphertext-bearing keys under one seal, moves the keystore and checks that every version's
material is the same afterwards, under the new seal only; the audit log written before the move keeps
verifying after it. A version that does not unwrap refuses the move with nothing written, and a move killed
with SIGKILL in the middle of its transaction leaves the keystore wholly under the old seal.
"""

from __future__ import annotations

import base64
import os
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from app.audit import AuditLog, derive_audit_keys
from app.keystore import MasterKeyError
from app.seal import FileSeal
from app.seal.pkcs11 import Pkcs11Seal
from tests.admin_process import run_admin, start_admin
from tests.app.seal.conftest import materials, open_store
from tests.softhsm import SoftHsmToken

MASTER = bytes(range(7, 39))


def hsm_seal(token: SoftHsmToken) -> Pkcs11Seal:
    return Pkcs11Seal(str(token.library), token.label, token.pin, "keystream-master", create_key=True)


def settings_env(token: SoftHsmToken, data: Path, current: str, url: str | None) -> dict[str, str]:
    env = {
        **token.environment(),
        "KEYSTREAM_SEAL": current,
        "KEYSTREAM_DATA_DIR": str(data),
        "KEYSTREAM_MASTER_KEY": base64.b64encode(MASTER).decode(),
    }
    if url is not None:
        env["KEYSTREAM_DATABASE_URL"] = url
    return env


def test_file_to_pkcs11_and_back_loses_nothing(
    token: SoftHsmToken, tmp_path: Path, backing: str | None
) -> None:
    data = tmp_path / "data"
    store = open_store(FileSeal(MASTER), data, backing)
    for name in ("orders", "invoices"):
        store.create_key(name)
        store.rotate_key(name)
    before = materials(store)
    store.close()
    log = tmp_path / "audit.log"
    old = AuditLog(str(log), derive_audit_keys(MASTER).chain_key)  # a log written before seals existed
    old.write({"type": "request", "route": "/v1/keys"})
    old.close()

    env = {**settings_env(token, data, "file", backing), "KEYSTREAM_AUDIT_LOG": str(log)}
    moved = run_admin("operator", "migrate-seal", "--to", "pkcs11", env=env)
    assert moved.returncode == 0, moved.stderr
    assert "rewrapped 4 key versions" in moved.stdout

    seal = hsm_seal(token)
    store = open_store(seal, data, backing)
    assert materials(store) == before
    store.close()
    seal.close()
    with pytest.raises(MasterKeyError, match="is sealed by the pkcs11 seal"):
        open_store(FileSeal(MASTER), data, backing)
    pkcs11_env = {**env, "KEYSTREAM_SEAL": "pkcs11"}
    verified = run_admin("audit", "verify", str(log), env=pkcs11_env)
    assert verified.returncode == 0, verified.stderr + verified.stdout

    back = run_admin("operator", "migrate-seal", "--to", "file", env=pkcs11_env)
    assert back.returncode == 0, back.stderr
    store = open_store(FileSeal(MASTER), data, backing)
    assert materials(store) == before
    store.close()
    verified = run_admin("audit", "verify", str(log), env=env)
    assert verified.returncode == 0, verified.stderr + verified.stdout
    assert len(log.read_text().splitlines()) == 3


def rows(database: Path) -> list[tuple[str, int, bytes]]:
    with sqlite3.connect(database) as conn:
        return conn.execute("SELECT key_name, version, wrapped FROM key_versions ORDER BY 1, 2").fetchall()


def meta(database: Path) -> list[tuple[str, bytes]]:
    with sqlite3.connect(database) as conn:
        return conn.execute("SELECT name, value FROM meta ORDER BY 1").fetchall()


def test_a_version_that_does_not_unwrap_refuses_the_move(token: SoftHsmToken, tmp_path: Path) -> None:
    data = tmp_path / "data"
    store = open_store(FileSeal(MASTER), data, None)
    store.create_key("orders")
    store.rotate_key("orders")
    store.create_key("zeta")
    store.close()
    database = data / "keystore.db"
    with sqlite3.connect(database) as conn:
        conn.execute(
            "UPDATE key_versions SET wrapped = ? WHERE key_name = 'zeta'",
            (FileSeal(bytes(32)).wrap(b"x", b""),),
        )
    before_rows, before_meta = rows(database), meta(database)
    moved = run_admin(
        "operator", "migrate-seal", "--to", "pkcs11", env=settings_env(token, data, "file", None)
    )
    assert moved.returncode == 1, moved.stderr
    assert "version 1 of key 'zeta'" in moved.stderr and "nothing was written" in moved.stderr
    assert "Traceback" not in moved.stderr
    assert rows(database) == before_rows and meta(database) == before_meta


def locked(database: Path) -> bool:
    """True while another process holds the database's write lock (the move's transaction is open)."""
    conn = sqlite3.connect(database, timeout=0)
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError:
        return True
    finally:
        conn.close()
    return False


def test_a_move_killed_mid_transaction_loses_nothing(token: SoftHsmToken, tmp_path: Path) -> None:
    data = tmp_path / "data"
    store = open_store(FileSeal(MASTER), data, None)
    for index in range(40):
        store.create_key(f"key-{index:02d}")
        for _ in range(49):
            store.rotate_key(f"key-{index:02d}")
    before = materials(store)
    store.close()
    database = data / "keystore.db"
    before_rows = rows(database)
    env = settings_env(token, data, "file", None)
    process = start_admin("operator", "migrate-seal", "--to", "pkcs11", env=env)
    assert process.stdout is not None
    announced = process.stdout.readline()  # printed once both seals and the keystore are open
    assert "rewrapping 2000 key versions" in announced, announced
    deadline = time.monotonic() + 60
    while not locked(database):  # the move's own write transaction has begun
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline
    os.kill(process.pid, signal.SIGKILL)
    process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL
    assert rows(database) == before_rows
    store = open_store(FileSeal(MASTER), data, None)
    assert materials(store) == before
    store.close()
    seal = hsm_seal(token)
    with pytest.raises(MasterKeyError, match="is sealed by the file seal"):
        open_store(seal, data, None)
    finished = run_admin("operator", "migrate-seal", "--to", "pkcs11", env=env)
    assert finished.returncode == 0, finished.stderr
    store = open_store(seal, data, None)
    assert materials(store) == before
    store.close()
    seal.close()
