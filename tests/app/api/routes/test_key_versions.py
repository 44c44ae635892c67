"""``POST /v1/keys/{name}/import_version`` and ``/trim`` (issue 12 item 5; Vault's import_version, trim)."""

from __future__ import annotations

import base64
from collections.abc import Callable

import pytest
from Crypto.Cipher import AES

from app.core.config import Settings
from tests.app.api.conftest import Api, running_api


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def test_import_version_is_refused_while_import_is_disabled(api: Api) -> None:
    await api.create_key("k")
    response = await api.client.post(
        "/v1/keys/k/import_version", json={"key": _b64(bytes(32))}, headers=api.auth()
    )
    assert response.status_code == 403
    assert "KEYSTREAM_ALLOW_KEY_IMPORT" in response.json()["error"]["message"]
    assert (await api.client.get("/v1/keys/k", headers=api.auth())).json()["latest_version"] == 1


@pytest.mark.parametrize(("key_type", "size"), [("aes128", 16), ("aes192", 24), ("aes256", 32)])
async def test_import_version_becomes_latest_and_encrypts_with_the_given_bytes(
    settings_factory: Callable[..., Settings], key_type: str, size: int
) -> None:
    material = bytes(range(100, 100 + size))
    async with running_api(settings_factory(allow_key_import=True)) as api:
        await api.create_key("k", type=key_type, segment_size=4096)
        old = (await api.encrypt("k", b"before")).content  # caches version 1
        response = await api.client.post(
            "/v1/keys/k/import_version", json={"key": _b64(material)}, headers=api.auth()
        )
        assert response.status_code == 200, response.text
        info = response.json()
        assert (info["latest_version"], info["imported"], info["type"]) == (2, True, key_type)
        assert [v["version"] for v in info["versions"]] == [1, 2]
        assert _b64(material) not in response.text
        iv = bytes(range(16))
        plaintext = bytes(range(256)) * 20
        raw = await api.encrypt("k", plaintext, format="raw", iv=iv.hex())
        assert raw.headers["Keystream-Key-Version"] == "2"
        assert raw.content == AES.new(material, AES.MODE_CTR, nonce=b"", initial_value=iv).encrypt(plaintext)
        opened = await api.decrypt("k", old)
        assert opened.status_code == 200 and opened.content == b"before"


@pytest.mark.parametrize("size", [16, 24, 20])
async def test_import_version_refuses_material_that_does_not_fit_the_key_type(
    settings_factory: Callable[..., Settings], size: int
) -> None:
    async with running_api(settings_factory(allow_key_import=True)) as api:
        await api.create_key("k", type="aes256")
        key = _b64(bytes(range(size)))
        response = await api.client.post("/v1/keys/k/import_version", json={"key": key}, headers=api.auth())
        assert response.status_code == 400, response.text
        assert key not in response.text
        if size in (16, 24):
            assert "a new version must be 32 bytes long" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"key": "not base64!"}, 400),
        ({"key": 5}, 422),
        ({}, 400),  # neither key nor ciphertext
        ({"key": _b64(bytes(32)), "extra": 1}, 422),
    ],
)
async def test_import_version_validation(
    settings_factory: Callable[..., Settings], body: dict[str, object], status: int
) -> None:
    async with running_api(settings_factory(allow_key_import=True)) as api:
        await api.create_key("k")
        response = await api.client.post("/v1/keys/k/import_version", json=body, headers=api.auth())
        assert response.status_code == status, response.text
        assert _b64(bytes(32)) not in response.text


async def test_import_version_of_a_missing_key_and_without_admin(
    settings_factory: Callable[..., Settings],
) -> None:
    async with running_api(settings_factory(allow_key_import=True)) as api:
        missing = await api.client.post(
            "/v1/keys/nope/import_version", json={"key": _b64(bytes(32))}, headers=api.auth()
        )
        assert missing.status_code == 404
        await api.create_key("k")
        token = await api.create_token(["encrypt", "decrypt"])
        refused = await api.client.post(
            "/v1/keys/k/import_version", json={"key": _b64(bytes(32))}, headers=api.auth(token)
        )
        assert refused.status_code == 403


async def _key_with_versions(api: Api, count: int) -> dict[int, bytes]:
    await api.create_key("t", segment_size=4096)
    sealed = {1: (await api.encrypt("t", b"v1")).content}
    for version in range(2, count + 1):
        assert (await api.client.post("/v1/keys/t/rotate", headers=api.auth())).status_code == 200
        sealed[version] = (await api.encrypt("t", f"v{version}".encode())).content
    return sealed


async def test_trim_deletes_old_versions_and_their_ciphertexts_fail_cleanly(api: Api) -> None:
    sealed = await _key_with_versions(api, 4)
    patched = await api.client.patch("/v1/keys/t", json={"min_decryption_version": 3}, headers=api.auth())
    assert patched.status_code == 200
    response = await api.client.post("/v1/keys/t/trim", json={"min_available_version": 3}, headers=api.auth())
    assert response.status_code == 200, response.text
    assert [v["version"] for v in response.json()["versions"]] == [3, 4]
    shown = (await api.client.get("/v1/keys/t", headers=api.auth())).json()
    assert [v["version"] for v in shown["versions"]] == [3, 4]
    for version in (3, 4):
        opened = await api.decrypt("t", sealed[version])
        assert opened.status_code == 200 and opened.content == f"v{version}".encode()
    for version in (1, 2):
        for extra in ({}, {"key_version": version}):
            refused = await api.decrypt("t", sealed[version], **extra)
            assert refused.status_code == 400, refused.text
    again = await api.client.post("/v1/keys/t/trim", json={"min_available_version": 3}, headers=api.auth())
    assert again.status_code == 200 and again.json() == shown


async def test_lowering_min_decryption_version_below_trimmed_versions_never_gives_500(api: Api) -> None:
    sealed = await _key_with_versions(api, 3)
    await api.client.patch("/v1/keys/t", json={"min_decryption_version": 3}, headers=api.auth())
    trimmed = await api.client.post("/v1/keys/t/trim", json={"min_available_version": 3}, headers=api.auth())
    assert trimmed.status_code == 200
    lowered = await api.client.patch("/v1/keys/t", json={"min_decryption_version": 1}, headers=api.auth())
    assert lowered.status_code == 400, lowered.text
    for version in (1, 2):
        for extra in ({}, {"key_version": version}):
            refused = await api.decrypt("t", sealed[version], **extra)
            assert refused.status_code == 400, refused.text
    assert (await api.decrypt("t", sealed[3])).status_code == 200


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"min_available_version": 3}, 400),  # above min_decryption_version (2)
        ({"min_available_version": 0}, 422),
        ({"min_available_version": "1"}, 422),
        ({"min_available_version": 1.0}, 422),
        ({"min_available_version": True}, 422),
        ({}, 422),
        ({"min_available_version": 1, "x": 1}, 422),
    ],
)
async def test_trim_validation(api: Api, body: dict[str, object], status: int) -> None:
    await _key_with_versions(api, 3)
    await api.client.patch("/v1/keys/t", json={"min_decryption_version": 2}, headers=api.auth())
    response = await api.client.post("/v1/keys/t/trim", json=body, headers=api.auth())
    assert response.status_code == status, response.text
    shown = (await api.client.get("/v1/keys/t", headers=api.auth())).json()
    assert [v["version"] for v in shown["versions"]] == [1, 2, 3]


async def test_trim_needs_admin_and_an_existing_key(api: Api) -> None:
    missing = await api.client.post(
        "/v1/keys/nope/trim", json={"min_available_version": 1}, headers=api.auth()
    )
    assert missing.status_code == 404
    await api.create_key("k")
    token = await api.create_token(["encrypt", "decrypt"])
    refused = await api.client.post(
        "/v1/keys/k/trim", json={"min_available_version": 1}, headers=api.auth(token)
    )
    assert refused.status_code == 403
