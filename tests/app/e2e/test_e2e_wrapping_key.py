"""Wrapped import's wrapping key across real server processes: two replicas of two workers each share one
keystore (SQLite, then PostgreSQL); sixteen connections ask for the wrapping key at once before any exists,
so several workers race to make it, and every answer is the same public key. Material wrapped under it
imports through one replica and encrypts identically through the other.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from Crypto.Cipher import AES

from bench.service_process import Server, started_servers
from tests.byok import vault_wrap

pytestmark = pytest.mark.e2e
ENV = {"KEYSTREAM_WORKERS": "2", "KEYSTREAM_ALLOW_KEY_IMPORT": "true"}
CONNECTIONS = 16


@pytest.fixture(params=["sqlite", "postgres"])
def replicas(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Server, Server]]:
    env = dict(ENV)
    if request.param == "postgres":
        env["KEYSTREAM_DATABASE_URL"] = request.getfixturevalue("pg_url")
    with started_servers(2, tmp_path / "data", tmp_path, **env) as (first, second):
        yield first, second


def _racing_first_uses(servers: tuple[Server, Server]) -> list[str]:
    """The public key as answered on ``CONNECTIONS`` fresh connections opened at once, half per replica."""
    barrier = threading.Barrier(CONNECTIONS)
    answers: list[str] = []
    failures: list[str] = []

    def ask(server: Server) -> None:
        with server.client() as client:  # its own connection: the kernel picks the worker
            barrier.wait()
            response = client.get("/v1/wrapping_key")
            if response.status_code == 200:
                answers.append(response.json()["public_key"])
            else:
                failures.append(f"{response.status_code} {response.text}")

    threads = [threading.Thread(target=ask, args=(servers[index % 2],)) for index in range(CONNECTIONS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert failures == []
    assert len(answers) == CONNECTIONS
    return answers


def test_every_worker_of_every_replica_hands_out_one_wrapping_key(replicas: tuple[Server, Server]) -> None:
    answers = _racing_first_uses(replicas)
    assert len(set(answers)) == 1 and answers[0].startswith("-----BEGIN PUBLIC KEY-----")
    material, iv, plaintext = os.urandom(32), bytes(16), b"imported through one replica"
    first, second = replicas
    with first.client() as one, second.client() as two:
        imported = one.post("/v1/keys/byok/import", json={"ciphertext": vault_wrap(answers[0], material)})
        assert imported.status_code == 201, imported.text
        sealed = two.post(
            "/v1/keys/byok/encrypt",
            content=plaintext,
            params={"format": "raw", "iv": iv.hex()},
            headers={"Content-Type": "application/octet-stream"},
        )
        assert sealed.status_code == 200, sealed.text
        assert sealed.content == AES.new(material, AES.MODE_CTR, nonce=b"", initial_value=iv).encrypt(
            plaintext
        )
    assert httpx.get(f"{second.url}/v1/wrapping_key").status_code == 401  # no token
