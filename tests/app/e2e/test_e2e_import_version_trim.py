"""``import_version`` and ``trim`` across two real replicas sharing one keystore, on SQLite and on PostgreSQL
(issue 12 item 5).

A version imported through one replica encrypts on the other (whose cache held the key before), and Tink,
given only the imported material, opens what it sealed: the version really uses the given bytes. A trim
through one replica deletes the old versions for good: the other replica lists only the remaining versions
and refuses a ciphertext of a trimmed version with 400, never 500.
"""

from __future__ import annotations

import base64
import io
import os
import time
from collections.abc import Iterator

import httpx
import pytest
from tink import streaming_aead

from bench.service_process import Server, started_servers
from tests.app.formats.conftest import tink_keyset_handle

pytestmark = pytest.mark.e2e
ENV = {
    "KEYSTREAM_CHANGE_POLL_INTERVAL": "0.1",
    "KEYSTREAM_WORKERS": "1",
    "KEYSTREAM_ALLOW_KEY_IMPORT": "true",
}
SEGMENT = 4096
AD = b"tenant=42"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def replicas(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Server, Server]]:
    """Two replicas on one keystore, shared by the tests of this module on that keystore (each test uses a
    key of its own): starting two servers per test cost more than the tests themselves."""
    env = dict(ENV)
    if request.param == "postgres":
        env["KEYSTREAM_DATABASE_URL"] = request.getfixturevalue("pg_cluster").new_schema()
    base = tmp_path_factory.mktemp(f"import-version-trim-{request.param}")
    with started_servers(2, base / "data", base, **env) as (first, second):
        yield first, second


def _encrypt(client: httpx.Client, key: str, plaintext: bytes) -> httpx.Response:
    response = client.post(
        f"/v1/keys/{key}/encrypt",
        content=plaintext,
        headers={"Content-Type": "application/octet-stream", "Keystream-Associated-Data": _b64(AD)},
    )
    assert response.status_code == 200, response.text
    return response


def _decrypt(client: httpx.Client, key: str, ciphertext: bytes, **params: int) -> httpx.Response:
    return client.post(
        f"/v1/keys/{key}/decrypt",
        content=ciphertext,
        params=params,
        headers={"Content-Type": "application/octet-stream", "Keystream-Associated-Data": _b64(AD)},
    )


@pytest.mark.parametrize("scheme", ["ctr-hmac", "gcm"])
def test_import_version_then_trim_across_replicas(replicas: tuple[Server, Server], scheme: str) -> None:
    streaming_aead.register()
    first, second = replicas
    material = os.urandom(32)
    plaintext = os.urandom(3 * SEGMENT + 11)
    key = f"life-{scheme}"
    with first.client() as one, second.client() as two:
        created = one.post("/v1/keys", json={"name": key, "scheme": scheme, "segment_size": SEGMENT})
        assert created.status_code == 201, created.text
        old = _encrypt(two, key, b"sealed under version 1").content  # the second replica caches version 1

        imported = one.post(f"/v1/keys/{key}/import_version", json={"key": _b64(material)})
        assert imported.status_code == 200, imported.text
        assert (imported.json()["latest_version"], imported.json()["imported"]) == (2, True)
        assert _b64(material) not in imported.text

        deadline = time.monotonic() + 10
        while (sealed := _encrypt(two, key, plaintext)).headers["Keystream-Key-Version"] != "2":
            assert time.monotonic() < deadline, "the imported version never reached the second replica"
            time.sleep(0.05)
        tink_aead = tink_keyset_handle([(9, material)], 32, SEGMENT, scheme).primitive(
            streaming_aead.StreamingAead
        )
        with tink_aead.new_decrypting_stream(io.BytesIO(sealed.content), AD) as stream:
            assert stream.read() == plaintext
        assert _decrypt(one, key, sealed.content).content == plaintext
        assert _decrypt(two, key, old).content == b"sealed under version 1"

        too_far = one.post(f"/v1/keys/{key}/trim", json={"min_available_version": 2})
        assert too_far.status_code == 400, too_far.text  # min_decryption_version is still 1
        assert one.patch(f"/v1/keys/{key}", json={"min_decryption_version": 2}).status_code == 200
        trimmed = one.post(f"/v1/keys/{key}/trim", json={"min_available_version": 2})
        assert trimmed.status_code == 200, trimmed.text
        assert [v["version"] for v in trimmed.json()["versions"]] == [2]
        assert one.post(f"/v1/keys/{key}/trim", json={"min_available_version": 2}).json() == trimmed.json()

        assert [v["version"] for v in two.get(f"/v1/keys/{key}").json()["versions"]] == [2]
        for params in ({}, {"key_version": 1}):
            refused = _decrypt(two, key, old, **params)
            assert refused.status_code == 400, refused.text
        lowered = two.patch(f"/v1/keys/{key}", json={"min_decryption_version": 1})
        assert lowered.status_code == 400, lowered.text
        assert _decrypt(two, key, sealed.content).content == plaintext
