"""``keystream-server operator rotate-master``: a new master key generation, every secret rewrapped.

The command runs as a real process: it rewraps every version under the new generation and audits its start
and end; killed with SIGKILL half-way (SQLite and PostgreSQL), it leaves every version readable (each under
its own generation), a second run refuses while the dead run's lease lasts and then resumes and finishes;
the shamir seal reads K shares first.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from app.keystore import KeyStore
from app.seal import BlobOrigin, FileSeal, blob_origin
from app.seal.shamir import ShamirSeal
from tests.admin_process import run_admin, start_admin
from tests.app.seal.conftest import materials, open_store

MASTER = bytes(range(9, 41))


def environment(data: Path, **extra: str) -> dict[str, str]:
    return {
        "KEYSTREAM_SEAL": "file",
        "KEYSTREAM_DATA_DIR": str(data),
        "KEYSTREAM_MASTER_KEY": base64.b64encode(MASTER).decode(),
        **extra,
    }


def origins(store: KeyStore) -> set[BlobOrigin | None]:
    return {blob_origin(blob) for key in store.export_keys() for blob in key.wrapped}


def fill(data: Path, keys: int, versions: int, url: str | None = None) -> dict[tuple[str, int], bytes]:
    store = open_store(FileSeal(MASTER), data, url)
    try:
        for index in range(keys):
            store.create_key(f"key-{index:02d}")
            for _ in range(versions - 1):
                store.rotate_key(f"key-{index:02d}")
        return materials(store)
    finally:
        store.close()


def test_rotate_master_rewraps_every_version_and_audits_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    before = fill(data, keys=3, versions=3)
    log = tmp_path / "audit.log"
    env = environment(data, KEYSTREAM_AUDIT_LOG=str(log))
    result = run_admin("operator", "rotate-master", "--batch-size", "2", env=env)
    assert result.returncode == 0, result.stderr
    assert "rotating to master key generation 2 under the file seal" in result.stdout
    assert "generation 2: 9 key versions rewrapped" in result.stdout
    store = open_store(FileSeal(MASTER), data, None)
    try:
        assert origins(store) == {BlobOrigin("file", 2)}
        assert materials(store) == before
    finally:
        store.close()
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(line["operation"], line["phase"], line["generation"]) for line in lines] == [
        ("rotate_master", "start", 2),
        ("rotate_master", "finish", 2),
    ]
    assert lines[1]["rewrapped"] == 9
    verified = run_admin("audit", "verify", str(log), env=env)
    assert verified.returncode == 0, verified.stdout + verified.stderr

    again = run_admin("operator", "rotate-master", env=env)
    assert again.returncode == 0 and "generation 3: 9 key versions rewrapped" in again.stdout


@pytest.mark.slow
def test_a_rotation_killed_half_way_loses_nothing_and_resumes(tmp_path: Path, backing: str | None) -> None:
    data = tmp_path / "data"
    before = fill(data, keys=20, versions=20, url=backing)
    env = environment(data, **({} if backing is None else {"KEYSTREAM_DATABASE_URL": backing}))
    process = start_admin("operator", "rotate-master", "--batch-size", "1", env=env)
    assert process.stdout is not None
    assert "rotating to master key generation 2" in process.stdout.readline()
    watcher = open_store(FileSeal(MASTER), data, backing)
    try:
        deadline = time.monotonic() + 60
        while watcher.master_rotation_status().rewrapped < 20:  # some batches committed, most not
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.01)
        os.kill(process.pid, signal.SIGKILL)
        process.communicate(timeout=30)
        assert process.returncode == -signal.SIGKILL
        assert origins(watcher) == {BlobOrigin("file", 1), BlobOrigin("file", 2)}  # half-way
        assert materials(watcher) == before  # every version readable under its own generation
    finally:
        watcher.close()

    refused = run_admin("operator", "rotate-master", env=env)
    assert refused.returncode == 1
    assert "a rotation of the master key to generation 2 is running" in refused.stderr
    assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr

    # The dead run's lease (10 s) runs out: wait for the time the keystore gives it, then run again (retrying
    # every second for a moment of clock skew) instead of starting a refused run every second until then.
    watcher = open_store(FileSeal(MASTER), data, backing)
    try:
        lease_until = watcher.master_rotation_status().lease_until
    finally:
        watcher.close()
    assert lease_until is not None
    time.sleep(max(0.0, (lease_until - datetime.now(UTC)).total_seconds()))
    deadline = time.monotonic() + 30
    while True:
        resumed = run_admin("operator", "rotate-master", env=env)
        if resumed.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming the rotation to master key generation 2" in resumed.stdout
    store = open_store(FileSeal(MASTER), data, backing)
    try:
        assert origins(store) == {BlobOrigin("file", 2)}
        assert materials(store) == before
        assert not store.master_rotation_status().rotating
    finally:
        store.close()


def test_the_shamir_seal_reads_its_shares_then_rotates(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {"KEYSTREAM_SEAL": "shamir", "KEYSTREAM_DATA_DIR": str(data)}
    made = run_admin("operator", "init", "--shares", "3", "--threshold", "2", "--json", env=env)
    assert made.returncode == 0, made.stderr
    shares: list[str] = json.loads(made.stdout)["shares"]

    def unsealed_store() -> tuple[KeyStore, ShamirSeal]:
        seal = ShamirSeal()
        store = open_store(seal, data, None)
        for share in shares[:2]:
            seal.submit_share(share)
        return store, seal

    store, seal = unsealed_store()
    for name in ("orders", "invoices"):
        store.create_key(name)
        store.rotate_key(name)
    before = materials(store)
    store.close()
    seal.close()

    refused = run_admin("operator", "rotate-master", env=env, stdin=shares[0] + "\n")
    assert refused.returncode == 1 and "give 2 shares" in refused.stderr, refused.stderr
    assert shares[0][5:] not in refused.stdout + refused.stderr
    result = run_admin("operator", "rotate-master", env=env, stdin=f"{shares[2]}\n{shares[1]}\n")
    assert result.returncode == 0, result.stderr
    assert "rotating to master key generation 2 under the shamir seal" in result.stdout
    store, seal = unsealed_store()
    try:
        assert origins(store) == {BlobOrigin("shamir", 2)}
        assert materials(store) == before
    finally:
        store.close()
        seal.close()
