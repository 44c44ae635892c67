"""``POST /v1/sys/rotate-master`` and ``GET /v1/sys/rotate-master`` in process: admin only, 202 with the
new generation, the rotation running on in the background, 409 while one holds its lease, and every ciphertext
made before decrypting after."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from app.keystore.generations import MasterRotation
from app.seal import BlobOrigin, blob_origin
from tests.app.api.conftest import Api


async def finished(api: Api, generation: int) -> dict[str, Any]:
    """The rotation's status once it finished ``generation`` (polled, at most 30 s)."""
    for _ in range(300):
        response = await api.client.get("/v1/sys/rotate-master", headers=api.auth())
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        if body["generation"] == generation and not body["rotating"]:
            return body
        await asyncio.sleep(0.1)
    raise AssertionError(f"the rotation to generation {generation} did not finish: {body}")


async def test_rotation_rewraps_in_the_background_and_old_ciphertexts_still_decrypt(api: Api) -> None:
    ciphertexts = {}
    for index in range(3):
        name = f"k{index}"
        await api.create_key(name)
        plaintext = os.urandom(1000)
        sealed = await api.encrypt(name, plaintext)
        assert sealed.status_code == 200
        ciphertexts[name] = (plaintext, sealed.content)
        await api.client.post(f"/v1/keys/{name}/rotate", headers=api.auth())

    response = await api.client.post("/v1/sys/rotate-master", json={"batch_size": 1}, headers=api.auth())
    assert response.status_code == 202, response.text
    assert response.json()["generation"] == 2 and response.json()["resumed"] is False
    status = await finished(api, 2)
    assert status["rewrapped"] == 6 and status["finished_at"] is not None

    for name, (plaintext, sealed) in ciphertexts.items():
        opened = await api.decrypt(name, sealed)
        assert opened.status_code == 200 and opened.content == plaintext
    keystore = api.app.state.keystream.keystore
    assert {blob_origin(blob) for key in keystore.export_keys() for blob in key.wrapped} == {
        BlobOrigin("file", 2)
    }
    await api.client.post("/v1/keys/k0/rotate", headers=api.auth())
    newest = keystore.export_keys()[0].wrapped[-1]
    assert blob_origin(newest) == BlobOrigin("file", 2)  # new versions under the new generation

    again = await api.client.post("/v1/sys/rotate-master", headers=api.auth())  # no body: the default batch
    assert again.status_code == 202 and again.json()["generation"] == 3
    await finished(api, 3)


async def test_a_second_rotation_while_one_holds_the_lease_is_409(api: Api) -> None:
    await api.create_key("k")
    keystore = api.app.state.keystream.keystore
    elsewhere = MasterRotation(keystore)  # another process's rotation, begun and holding its lease
    await asyncio.to_thread(elsewhere.begin)
    response = await api.client.post("/v1/sys/rotate-master", headers=api.auth())
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "master_rotation_running"
    assert "generation 2 is running" in error["message"]


async def test_only_an_admin_token_rotates_and_bad_bodies_are_422(api: Api) -> None:
    token = await api.create_token(["encrypt", "decrypt"])
    for method in ("post", "get"):
        refused = await getattr(api.client, method)("/v1/sys/rotate-master", headers=api.auth(token))
        assert refused.status_code == 403, refused.text
    anonymous = await api.client.post("/v1/sys/rotate-master")
    assert anonymous.status_code == 401
    for body in ({"batch_size": 0}, {"batch_size": "10"}, {"batch_size": 10**6}, {"other": 1}):
        bad = await api.client.post("/v1/sys/rotate-master", json=body, headers=api.auth())
        assert bad.status_code == 422, (body, bad.text)
        assert bad.json()["error"]["code"] == "validation_error"
    status = await api.client.get("/v1/sys/rotate-master", headers=api.auth())
    assert status.json()["generation"] == 1 and status.json()["rotating"] is False
