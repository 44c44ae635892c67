"""Data keys across two real replicas sharing one keystore, on SQLite and on PostgreSQL (issue 12 item 3):
a data key made by one replica opens on the other, through decrypt and decrypt/batch, and after a rotation
through one replica the other seals new data keys under the new version."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator

import httpx
import pytest

from bench.service_process import Server, started_servers

ENV = {"KEYSTREAM_CHANGE_POLL_INTERVAL": "0.1", "KEYSTREAM_WORKERS": "1"}


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def replicas(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Server, Server]]:
    """Two replicas on one keystore, shared by the tests of this module on that keystore (each test uses a
    key of its own): starting two servers per test cost more than the tests themselves."""
    env = dict(ENV)
    if request.param == "postgres":
        env["KEYSTREAM_DATABASE_URL"] = request.getfixturevalue("pg_cluster").new_schema()
    base = tmp_path_factory.mktemp(f"datakey-{request.param}")
    with started_servers(2, base / "data", base, **env) as (first, second):
        yield first, second


def _datakey(client: httpx.Client, key: str, associated_data: bytes) -> dict[str, object]:
    ad = base64.b64encode(associated_data).decode()
    body = {"type": "aes256", "plaintext": True, "associated_data": ad}
    response = client.post(f"/v1/keys/{key}/datakey", json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


def _opens(client: httpx.Client, key: str, answer: dict[str, object], associated_data: bytes) -> None:
    data_key = base64.b64decode(str(answer["plaintext"]))
    ad = base64.b64encode(associated_data).decode()
    opened = client.post(
        f"/v1/keys/{key}/decrypt",
        content=base64.b64decode(str(answer["ciphertext"])),
        headers={"Content-Type": "application/octet-stream", "Keystream-Associated-Data": ad},
    )
    assert opened.status_code == 200, opened.text
    assert opened.content == data_key
    assert opened.headers["Keystream-Key-Version"] == str(answer["key_version"])
    batch = client.post(
        f"/v1/keys/{key}/decrypt/batch",
        json={"items": [{"ciphertext": answer["ciphertext"], "associated_data": ad}]},
    )
    assert batch.status_code == 200, batch.text
    assert base64.b64decode(batch.json()["results"][0]["plaintext"]) == data_key


@pytest.mark.e2e
@pytest.mark.parametrize("scheme", ["ctr-hmac", "gcm"])
def test_data_keys_across_replicas(replicas: tuple[Server, Server], scheme: str) -> None:
    first, second = replicas
    key = f"envelope-{scheme}"
    with first.client() as one, second.client() as two:
        created = one.post("/v1/keys", json={"name": key, "scheme": scheme, "segment_size": 4096})
        assert created.status_code == 201, created.text
        answer = _datakey(two, key, b"object=1")
        assert answer["key_version"] == 1
        _opens(one, key, answer, b"object=1")

        assert one.post(f"/v1/keys/{key}/rotate").status_code == 200
        deadline = time.monotonic() + 10
        while (answer := _datakey(two, key, b"object=2"))["key_version"] != 2:
            assert time.monotonic() < deadline, "the rotation never reached the second replica"
            time.sleep(0.05)
        _opens(one, key, answer, b"object=2")
        _opens(two, key, answer, b"object=2")
