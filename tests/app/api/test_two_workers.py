"""Two app instances over one keystore, as two uvicorn workers are.

A rotation made through one is seen at once by decrypt on the other, although the other's key metadata is
cached for a long ``key_metadata_ttl``.
"""

from __future__ import annotations

import base64
import os
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack

import pytest

from app.core.config import Settings
from app.keystore.errors import KeystoreUnavailableError
from tests.app.api.conftest import Api, running_api

SEGMENT = 4096
#: Long enough that no test here can pass by the metadata simply expiring.
TTL = 600.0


@pytest.fixture
async def workers(settings_factory: Callable[..., Settings]) -> AsyncIterator[tuple[Api, Api]]:
    """Worker A and worker B: separate apps (key caches) on the same data dir and SQLite keystore."""
    async with AsyncExitStack() as stack:
        first = await stack.enter_async_context(running_api(settings_factory(key_metadata_ttl=TTL)))
        second = await stack.enter_async_context(running_api(settings_factory(key_metadata_ttl=TTL)))
        yield first, second


async def _rotated_elsewhere(a: Api, b: Api, name: str) -> None:
    """Create ``name``, let B cache its metadata (version 1), then rotate it through A."""
    await a.create_key(name, segment_size=SEGMENT)
    warm = await b.encrypt(name, b"warm-up")
    assert warm.status_code == 200 and warm.headers["Keystream-Key-Version"] == "1"
    rotated = await a.client.post(f"/v1/keys/{name}/rotate", headers=a.auth())
    assert rotated.status_code == 200 and rotated.json()["latest_version"] == 2


@pytest.mark.parametrize("size", [10, 3 * SEGMENT + 5, 300_000])  # one call, a few segments, streamed
async def test_sealed_decrypt_sees_a_rotation_by_another_worker(workers: tuple[Api, Api], size: int) -> None:
    a, b = workers
    await _rotated_elsewhere(a, b, "k")
    plaintext = os.urandom(size)
    encrypted = await a.encrypt("k", plaintext)
    assert encrypted.headers["Keystream-Key-Version"] == "2"
    decrypted = await b.decrypt("k", encrypted.content)
    assert decrypted.status_code == 200, decrypted.text
    assert decrypted.content == plaintext
    assert decrypted.headers["Keystream-Key-Version"] == "2"
    # Version 1 still decrypts on B, and B now encrypts with version 2 too.
    old = await b.decrypt("k", (await b.encrypt("k", b"x", key_version=1)).content)
    assert old.status_code == 200 and old.headers["Keystream-Key-Version"] == "1"
    assert (await b.encrypt("k", b"y")).headers["Keystream-Key-Version"] == "2"


async def test_sealed_decrypt_with_associated_data_and_explicit_new_version(workers: tuple[Api, Api]) -> None:
    a, b = workers
    await _rotated_elsewhere(a, b, "k")
    ad = {"Keystream-Associated-Data": base64.b64encode(b"tenant=1").decode()}
    encrypted = await a.encrypt("k", b"secret", headers=ad)
    explicit = await b.decrypt("k", encrypted.content, key_version=2, headers=ad)
    assert explicit.status_code == 200 and explicit.content == b"secret"


async def test_wrong_ciphertext_still_fails_after_the_fresh_look(workers: tuple[Api, Api]) -> None:
    a, b = workers
    await _rotated_elsewhere(a, b, "k")
    tampered = bytearray((await a.encrypt("k", b"payload")).content)
    tampered[-1] ^= 1
    refused = await b.decrypt("k", bytes(tampered))
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "decryption_failed"
    assert "tried 2, 1" in refused.json()["error"]["message"]


async def test_raw_decrypt_and_encrypt_with_a_version_rotated_elsewhere(workers: tuple[Api, Api]) -> None:
    a, b = workers
    await _rotated_elsewhere(a, b, "k")
    encrypted = await a.encrypt("k", b"raw bytes", format="raw")
    assert encrypted.headers["Keystream-Key-Version"] == "2"
    iv = encrypted.headers["Keystream-IV"]
    decrypted = await b.decrypt("k", encrypted.content, format="raw", iv=iv, key_version=2)
    assert decrypted.status_code == 200 and decrypted.content == b"raw bytes"
    again = await b.encrypt("k", b"raw bytes", format="raw", iv=iv, key_version=2)
    assert again.content == encrypted.content


async def test_batch_decrypt_sees_a_rotation_by_another_worker(workers: tuple[Api, Api]) -> None:
    a, b = workers
    await _rotated_elsewhere(a, b, "k")
    items = [{"plaintext": base64.b64encode(b"item %d" % n).decode()} for n in range(3)]
    sealed = await a.client.post("/v1/keys/k/encrypt/batch", json={"items": items}, headers=a.auth())
    ciphertexts = [{"ciphertext": result["ciphertext"]} for result in sealed.json()["results"]]
    opened = await b.client.post("/v1/keys/k/decrypt/batch", json={"items": ciphertexts}, headers=b.auth())
    assert opened.status_code == 200, opened.text
    results = opened.json()["results"]
    assert [base64.b64decode(result["plaintext"]) for result in results] == [b"item 0", b"item 1", b"item 2"]
    assert {result["key_version"] for result in results} == {2}


@pytest.mark.parametrize("route", ["rewrap", "rewrap/batch"])
async def test_rewrap_seals_under_a_version_rotated_elsewhere(
    settings_factory: Callable[..., Settings], route: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """B's cached metadata still says version 1 is the latest (B has not applied the change log's news yet:
    the propagation window); a rewrap must not seal a version-2 input under version 1, an output older than
    its input."""
    settings = settings_factory(key_metadata_ttl=TTL)
    async with running_api(settings) as a, running_api(settings) as b:
        # B's window stays open for the whole test: its follower reads the log but drops nothing.
        monkeypatch.setattr(b.app.state.keystream.keycache, "invalidate", lambda name: None)
        await _rotated_elsewhere(a, b, "k")
        assert b.app.state.keystream.keycache.key_info("k", cached_only=True).latest_version == 1
        sealed = (await a.encrypt("k", b"payload")).content
        if route == "rewrap":
            rewrapped = await b.client.post("/v1/keys/k/rewrap", content=sealed, headers=b.auth())
            assert rewrapped.status_code == 200, rewrapped.text
            assert rewrapped.headers["Keystream-Key-Version"] == "2"
            output = rewrapped.content
        else:
            item = {"ciphertext": base64.b64encode(sealed).decode()}
            answer = await b.client.post("/v1/keys/k/rewrap/batch", json={"items": [item]}, headers=b.auth())
            (result,) = answer.json()["results"]
            assert result.get("key_version") == 2, answer.text
            output = base64.b64decode(result["ciphertext"])
        opened = await a.decrypt("k", output, key_version=2)
        assert opened.status_code == 200 and opened.content == b"payload"


async def test_rewrap_uses_the_cached_latest_when_the_keystore_cannot_be_read(
    workers: tuple[Api, Api], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, _ = workers
    await a.create_key("k")
    sealed = (await a.encrypt("k", b"payload")).content  # caches the key's metadata and version 1

    def unreachable(name: str) -> None:
        raise KeystoreUnavailableError("the keystore cannot be reached (test)")

    monkeypatch.setattr(a.app.state.keystream.keycache, "refresh", unreachable)
    rewrapped = await a.client.post("/v1/keys/k/rewrap", content=sealed, headers=a.auth())
    assert rewrapped.status_code == 200, rewrapped.text
    assert (await a.decrypt("k", rewrapped.content)).content == b"payload"
