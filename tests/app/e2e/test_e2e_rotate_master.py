"""Online rotation of the master key against real server processes.

* SQLite, one server killed with SIGKILL half-way through a rotation of many one-version batches: restarted,
  it decrypts everything made before, refuses a second rotation while the dead one's lease lasts, then
  resumes it to the end; the rotation's start and end are in the audit log. A two-worker server keeps
  serving during a rotation and both workers wrap new versions under the new generation.
* PostgreSQL, two replicas: the one that did not rotate wraps new versions under the new generation and
  opens the rewrapped blobs, across two rotations (the second retiring the first's generation).
* The shamir seal: a sealed server answers 503 ``sealed``; unsealed, the client CLI rotates it, and after a
  seal and an unseal it still decrypts what it made before.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from app.keystore import KeyStore, open_keystore
from app.seal import BlobOrigin, FileSeal, blob_origin
from bench.service_process import MASTER_KEY, ROOT_TOKEN, Server, start_server, started_servers, stop_server
from keystream_client import AsyncKeystreamClient, KeystreamClient, MasterRotation
from tests.app.e2e.test_e2e_shamir import call, init, keystream_cli, unseal, wait_for_workers

# Serial: kills timed against a running rotation: alone.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.serial]

SEAL = FileSeal(base64.b64decode(MASTER_KEY))


def origins(store: KeyStore) -> set[BlobOrigin | None]:
    return {blob_origin(blob) for key in store.export_keys() for blob in key.wrapped}


def encrypt_each(server: Server, names: list[str]) -> dict[tuple[str, bytes], bytes]:
    """One ciphertext per key (a fresh connection each): ``{(key, ciphertext): plaintext}``."""
    made = {}
    for name in names:
        plaintext = f"made under {name} ".encode() * 50
        response = call(server, "POST", f"/v1/keys/{name}/encrypt", content=plaintext)
        assert response.status_code == 200, response.text
        made[(name, response.content)] = plaintext
    return made


def decrypt_each(server: Server, made: dict[tuple[str, bytes], bytes]) -> None:
    for (name, ciphertext), plaintext in made.items():
        response = call(server, "POST", f"/v1/keys/{name}/decrypt", content=ciphertext)
        assert response.status_code == 200, (name, response.text)
        assert response.content == plaintext


def wait_finished(client: KeystreamClient, generation: int) -> int:
    """Wait (<= 60 s) until the rotation to ``generation`` finished; return how many it rewrapped."""
    deadline = time.monotonic() + 60
    while True:
        status = client.master_rotation()
        if status.generation == generation and not status.rotating:
            return status.rewrapped
        assert time.monotonic() < deadline, status
        time.sleep(0.2)


def test_a_server_killed_mid_rotation_loses_nothing_and_the_rotation_resumes(tmp_path: Path) -> None:
    data, log = tmp_path / "data", tmp_path / "audit.log"
    store = open_keystore(data, SEAL)
    names = [f"key-{index:02d}" for index in range(50)]  # 500 versions: one a batch, far from done at 30
    for name in names:
        store.create_key(name)
        for _ in range(9):
            store.rotate_key(name)
    store.close()
    env = {"KEYSTREAM_AUDIT_LOG": str(log)}
    server = start_server(data, tmp_path / "server-1.log", **env)
    try:
        made = encrypt_each(server, names)
        with KeystreamClient(server.url, ROOT_TOKEN) as client:
            started = client.rotate_master(batch_size=1)
            assert (started.generation, started.rotating, started.resumed) == (2, True, False)
            made |= encrypt_each(server, names[:1])  # the server keeps serving meanwhile
            deadline = time.monotonic() + 60
            while client.master_rotation().rewrapped < 30:
                assert time.monotonic() < deadline
            # Killed at once: on a quiet machine the rest of 300 versions went by while three more
            # requests were served here, and the rotation was found finished.
            os.kill(server.process.pid, signal.SIGKILL)
        server.process.wait(timeout=30)
    finally:
        stop_server(server)
    store = open_keystore(data, SEAL)
    try:
        assert origins(store) == {BlobOrigin("file", 1), BlobOrigin("file", 2)}  # killed half-way
        assert 30 <= store.master_rotation_status().rewrapped < 500
    finally:
        store.close()

    server = start_server(data, tmp_path / "server-2.log", **env)
    try:
        decrypt_each(server, made)  # every blob opens under its own generation
        with KeystreamClient(server.url, ROOT_TOKEN) as client:
            # Nobody asks again: once the dead server's lease (10 s after its last batch) runs out, the new
            # server takes the rotation over by itself (it checks at start and every lease period).
            wait_finished(client, 2)
        decrypt_each(server, made)
    finally:
        stop_server(server)
    store = open_keystore(data, SEAL)
    try:
        assert origins(store) == {BlobOrigin("file", 2)}
    finally:
        store.close()
    records = [json.loads(line) for line in log.read_text().splitlines()]
    rotations = [
        (record["phase"], record["generation"], record.get("resumed"))
        for record in records
        if record.get("operation") == "rotate_master"
    ]
    assert rotations == [("start", 2, False), ("start", 2, True), ("finish", 2, None)]
    assert [record.get("automatic") for record in records if record.get("phase") == "start"] == [None, True]
    for name in ("server-1.log", "server-2.log"):
        assert "Traceback" not in (tmp_path / name).read_text()


def test_two_workers_serve_during_a_rotation_and_both_wrap_under_the_new_generation(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = start_server(data, tmp_path / "server.log", KEYSTREAM_WORKERS="2")
    try:
        wait_for_workers(server, 2, 0.0)
        names = [f"key-{index}" for index in range(8)]
        for name in names:
            assert call(server, "POST", "/v1/keys", json={"name": name}).status_code == 201
        made = encrypt_each(server, names)
        rotated = call(server, "POST", "/v1/sys/rotate-master", json={"batch_size": 1})
        assert rotated.status_code == 202, rotated.text
        for name in names:  # fresh connections: both workers rotate keys while the master key rotates
            assert call(server, "POST", f"/v1/keys/{name}/rotate").status_code == 200
        made |= encrypt_each(server, names)
        with KeystreamClient(server.url, ROOT_TOKEN) as client:
            wait_finished(client, 2)
        decrypt_each(server, made)
        for name in names:
            assert call(server, "POST", f"/v1/keys/{name}/rotate").status_code == 200
        made |= encrypt_each(server, names)
        decrypt_each(server, made)
    finally:
        stop_server(server)
    store = open_keystore(data, SEAL)
    try:
        assert origins(store) == {BlobOrigin("file", 2)}
    finally:
        store.close()


async def rotate_async(server: Server) -> tuple[MasterRotation, MasterRotation]:
    """The async client's ``rotate_master`` and, once it finished, ``master_rotation``."""
    async with AsyncKeystreamClient(server.url, ROOT_TOKEN) as client:
        started = await client.rotate_master(batch_size=2)
        status = await client.master_rotation()
        while status.rotating:
            await asyncio.sleep(0.2)
            status = await client.master_rotation()
        return started, status


def test_a_replica_that_did_not_rotate_uses_the_new_generations(tmp_path: Path, pg_url: str) -> None:
    with started_servers(2, tmp_path / "data", tmp_path, KEYSTREAM_DATABASE_URL=pg_url) as (first, second):
        assert call(first, "POST", "/v1/keys", json={"name": "seen"}).status_code == 201
        made = encrypt_each(first, ["seen"])
        decrypt_each(second, made)  # the second replica caches "seen" version 1 now
        for generation in (2, 3):
            assert call(first, "POST", "/v1/keys", json={"name": f"unseen-{generation}"}).status_code == 201
            made |= encrypt_each(first, [f"unseen-{generation}"])
            if generation == 2:
                with KeystreamClient(first.url, ROOT_TOKEN) as client:
                    assert client.rotate_master().generation == generation
                    wait_finished(client, generation)
            else:
                started, finished = asyncio.run(asyncio.wait_for(rotate_async(first), 60))
                assert (started.generation, started.rotating) == (3, True)
                assert (finished.generation, finished.rotating, finished.rewrapped) == (3, False, 4)
            decrypt_each(second, made)  # blobs of the new generation, unwrapped by the other replica
            rotated = call(second, "POST", "/v1/keys/seen/rotate")
            assert rotated.status_code == 200, rotated.text
            made |= encrypt_each(second, ["seen"])
            decrypt_each(first, made)
            store = open_keystore(tmp_path, SEAL, pg_url)
            try:
                assert origins(store) == {BlobOrigin("file", generation)}  # the second's new version too
            finally:
                store.close()


def rotate_status(server: Server) -> dict[str, Any]:
    response = call(server, "GET", "/v1/sys/rotate-master")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_a_sealed_server_refuses_and_the_client_cli_rotates_an_unsealed_one(tmp_path: Path) -> None:
    data = tmp_path / "data"
    shares = init(data, 2, 3)
    server = start_server(data, tmp_path / "server.log", KEYSTREAM_SEAL="shamir")
    try:
        sealed = call(server, "POST", "/v1/sys/rotate-master")
        assert sealed.status_code == 503 and sealed.json()["error"]["code"] == "sealed"
        unseal(server, shares[:2])
        assert call(server, "POST", "/v1/keys", json={"name": "orders"}).status_code == 201
        made = encrypt_each(server, ["orders"])
        assert keystream_cli(server, "operator", "rotate-master").returncode != 0  # no token
        result = keystream_cli(server, "operator", "rotate-master", "--wait", token=ROOT_TOKEN)
        assert result.returncode == 0, result.stderr
        assert "rotating to master key generation 2" in result.stdout
        assert "master key generation 2: 1 key versions rewrapped" in result.stdout
        as_json = keystream_cli(server, "operator", "rotate-master", "--json", "--wait", token=ROOT_TOKEN)
        assert json.loads(as_json.stdout)["generation"] == 3, as_json.stderr
        decrypt_each(server, made)
        assert call(server, "POST", "/v1/sys/seal").status_code == 200
        unseal(server, shares[1:])
        decrypt_each(server, made)  # generation 3 found again in the keystore after the unseal
        assert rotate_status(server)["generation"] == 3
    finally:
        stop_server(server)
    assert "Traceback" not in (tmp_path / "server.log").read_text()
