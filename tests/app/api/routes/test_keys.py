"""/v1/keys: create, import, list, get, rotate, patch, delete, and cache invalidation on every change."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable

import pytest
from Crypto.Cipher import AES

from app.core.config import Settings
from app.core.secret_memory import SecretBuffer
from app.seal import FileSeal
from tests.app.api.conftest import Api, running_api

KEY_FIELDS = {
    "name",
    "type",
    "scheme",
    "segment_size",
    "deletion_allowed",
    "min_decryption_version",
    "latest_version",
    "imported",
    "auto_rotate_period",
    "derived",
    "convergent_encryption",
    "exportable",
    "allow_plaintext_backup",
    "created_at",
    "updated_at",
    "versions",
}


async def test_create_returns_metadata_only(api: Api) -> None:
    body = await api.create_key("orders", type="aes128", segment_size=4096)
    assert set(body) == KEY_FIELDS
    assert body["type"] == "aes128"
    assert body["segment_size"] == 4096
    assert body["latest_version"] == 1
    assert body["imported"] is False
    assert not any(
        body[flag] for flag in ("derived", "convergent_encryption", "exportable", "allow_plaintext_backup")
    )
    assert [v["version"] for v in body["versions"]] == [1]


async def test_create_defaults_to_aes256_and_1mib_segments(api: Api) -> None:
    body = await api.create_key("defaults")
    assert (body["type"], body["segment_size"], body["deletion_allowed"]) == ("aes256", 1 << 20, False)
    assert body["scheme"] == "ctr-hmac"


@pytest.mark.parametrize("scheme", ["ctr-hmac", "gcm"])
async def test_scheme_is_chosen_at_creation_and_shown(api: Api, scheme: str) -> None:
    created = await api.create_key("s", type="aes128", scheme=scheme)
    assert created["scheme"] == scheme
    assert (await api.client.get("/v1/keys/s", headers=api.auth())).json()["scheme"] == scheme
    listed = (await api.client.get("/v1/keys", headers=api.auth())).json()["keys"]
    assert [k["scheme"] for k in listed] == [scheme]


async def test_patch_cannot_change_the_scheme(api: Api) -> None:
    await api.create_key("s", scheme="gcm")
    same = await api.client.patch("/v1/keys/s", json={"scheme": "gcm"}, headers=api.auth())
    assert same.status_code == 200 and same.json()["scheme"] == "gcm"
    changed = await api.client.patch(
        "/v1/keys/s", json={"scheme": "ctr-hmac", "deletion_allowed": True}, headers=api.auth()
    )
    assert changed.status_code == 400, changed.text
    assert changed.json()["error"]["code"] == "bad_request"
    assert "create a new key" in changed.json()["error"]["message"]
    after = (await api.client.get("/v1/keys/s", headers=api.auth())).json()
    assert (after["scheme"], after["deletion_allowed"]) == ("gcm", False)  # nothing of the PATCH applied
    missing = await api.client.patch("/v1/keys/nope", json={"scheme": "gcm"}, headers=api.auth())
    assert missing.status_code == 404


async def test_duplicate_is_409(api: Api) -> None:
    await api.create_key("dup")
    response = await api.client.post("/v1/keys", json={"name": "dup"}, headers=api.auth())
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "key_exists"


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"name": "bad name!"}, 400),
        ({"name": "k", "type": "aes512"}, 422),
        ({"name": "k", "segment_size": 100}, 422),
        ({"name": "k", "segment_size": (1 << 24) + 1}, 422),
        ({"name": "k", "unknown": 1}, 422),
        ({"name": "k", "scheme": "aes-gcm"}, 422),
        ({"name": "k", "scheme": None}, 422),
        ({}, 422),
    ],
)
async def test_create_rejects_bad_input(api: Api, body: dict[str, object], status: int) -> None:
    response = await api.client.post("/v1/keys", json=body, headers=api.auth())
    assert response.status_code == status, response.text
    assert set(response.json()["error"]) == {"code", "message"}


async def test_list_and_get(api: Api) -> None:
    await api.create_key("a")
    await api.create_key("b")
    listed = (await api.client.get("/v1/keys", headers=api.auth())).json()["keys"]
    assert sorted(k["name"] for k in listed) == ["a", "b"]
    one = await api.client.get("/v1/keys/a", headers=api.auth())
    assert one.status_code == 200 and one.json()["name"] == "a"
    missing = await api.client.get("/v1/keys/nope", headers=api.auth())
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "key_not_found"


async def test_list_is_filtered_by_token_patterns(api: Api) -> None:
    await api.create_key("team-a-1")
    await api.create_key("team-b-1")
    token = await api.create_token(["encrypt"], ["team-a-*"])
    listed = (await api.client.get("/v1/keys", headers=api.auth(token))).json()["keys"]
    assert [k["name"] for k in listed] == ["team-a-1"]


async def test_rotate_switches_encryption_and_keeps_old_versions(api: Api) -> None:
    await api.create_key("rot")
    old = await api.encrypt("rot", b"old data")
    assert old.headers["Keystream-Key-Version"] == "1"
    rotated = await api.client.post("/v1/keys/rot/rotate", headers=api.auth())
    assert rotated.status_code == 200 and rotated.json()["latest_version"] == 2
    new = await api.encrypt("rot", b"new data")
    assert new.headers["Keystream-Key-Version"] == "2"
    decrypted = await api.decrypt("rot", old.content)
    assert decrypted.content == b"old data"
    assert decrypted.headers["Keystream-Key-Version"] == "1"


async def test_patch_min_decryption_version_blocks_old_ciphertexts(api: Api) -> None:
    await api.create_key("p")
    old = await api.encrypt("p", b"v1 data")
    await api.client.post("/v1/keys/p/rotate", headers=api.auth())
    patched = await api.client.patch("/v1/keys/p", json={"min_decryption_version": 2}, headers=api.auth())
    assert patched.status_code == 200 and patched.json()["min_decryption_version"] == 2
    refused = await api.decrypt("p", old.content)
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "decryption_failed"
    too_high = await api.client.patch("/v1/keys/p", json={"min_decryption_version": 3}, headers=api.auth())
    assert too_high.status_code == 400


async def test_delete_requires_deletion_allowed_and_invalidates_cache(api: Api) -> None:
    await api.create_key("d")
    assert (await api.encrypt("d", b"x")).status_code == 200  # now cached
    refused = await api.client.delete("/v1/keys/d", headers=api.auth())
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "deletion_not_allowed"
    await api.client.patch("/v1/keys/d", json={"deletion_allowed": True}, headers=api.auth())
    deleted = await api.client.delete("/v1/keys/d", headers=api.auth())
    assert deleted.status_code == 204 and deleted.content == b""
    assert (await api.encrypt("d", b"x")).status_code == 404
    assert (await api.client.get("/v1/keys/d", headers=api.auth())).status_code == 404


async def test_import_disabled_by_default(api: Api) -> None:
    key = base64.b64encode(bytes(16)).decode()
    response = await api.client.post("/v1/keys/imp/import", json={"key": key}, headers=api.auth())
    assert response.status_code == 403
    assert "KEYSTREAM_ALLOW_KEY_IMPORT" in response.json()["error"]["message"]


async def test_import_then_raw_matches_pycryptodome(settings_factory: Callable[..., Settings]) -> None:
    material = bytes(range(32))
    async with running_api(settings_factory(allow_key_import=True)) as api:
        body = {"key": base64.b64encode(material).decode(), "segment_size": 4096}
        imported = await api.client.post("/v1/keys/imp/import", json=body, headers=api.auth())
        assert imported.status_code == 201, imported.text
        info = imported.json()
        assert info["imported"] is True and info["type"] == "aes256"
        assert base64.b64encode(material).decode() not in imported.text
        iv = bytes(range(16))
        plaintext = bytes(range(256)) * 40
        response = await api.encrypt("imp", plaintext, format="raw", iv=iv.hex())
        expected = AES.new(material, AES.MODE_CTR, nonce=b"", initial_value=iv).encrypt(plaintext)
        assert response.content == expected
        assert response.headers["Keystream-IV"] == iv.hex()


@pytest.mark.parametrize(
    ("key", "status"), [("not base64!", 400), (base64.b64encode(bytes(20)).decode(), 400)]
)
async def test_import_rejects_bad_material_without_echoing_it(
    settings_factory: Callable[..., Settings], key: str, status: int
) -> None:
    async with running_api(settings_factory(allow_key_import=True)) as api:
        response = await api.client.post("/v1/keys/imp/import", json={"key": key}, headers=api.auth())
        assert response.status_code == status, response.text
        assert key not in response.text


async def test_imported_material_reaches_the_seal_in_locked_memory(
    settings_factory: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The route decodes an imported key straight into a secret buffer and the keystore wraps that buffer in
    place: no ``bytes`` copy of the material is made on the way (it would linger in freed memory)."""
    given: list[object] = []
    wrap = FileSeal.wrap

    def spy(self: FileSeal, plaintext: bytes | memoryview, associated_data: bytes) -> bytes:
        given.append(plaintext.obj if isinstance(plaintext, memoryview) else plaintext)
        return wrap(self, plaintext, associated_data)

    async with running_api(settings_factory(allow_key_import=True)) as api:
        monkeypatch.setattr(FileSeal, "wrap", spy)
        material = base64.b64encode(bytes(range(32))).decode()
        imported = await api.client.post("/v1/keys/imp/import", json={"key": material}, headers=api.auth())
        assert imported.status_code == 201, imported.text
        version = {"key": base64.b64encode(bytes(range(1, 33))).decode()}
        added = await api.client.post("/v1/keys/imp/import_version", json=version, headers=api.auth())
        assert added.status_code == 200, added.text
        monkeypatch.undo()
        assert len(given) == 2 and all(isinstance(each, SecretBuffer) for each in given), given
        assert (await api.encrypt("imp", b"x" * 100)).status_code == 200


async def test_import_validation_error_does_not_echo_key(settings_factory: Callable[..., Settings]) -> None:
    async with running_api(settings_factory(allow_key_import=True)) as api:
        secret = base64.b64encode(bytes(range(32))).decode()
        body = {"key": secret, "segment_size": "huge"}
        response = await api.client.post("/v1/keys/imp/import", json=body, headers=api.auth())
        assert response.status_code == 422
        assert secret not in response.text


async def test_a_deleted_name_is_refused_with_409_and_retry_after_until_its_tombstone_expires(
    settings_factory: Callable[..., Settings],
) -> None:
    async with running_api(settings_factory(change_poll_interval=0.05)) as api:  # 0.5 s tombstone
        body = {"name": "gone", "deletion_allowed": True}
        assert (await api.client.post("/v1/keys", json=body, headers=api.auth())).status_code == 201
        assert (await api.client.delete("/v1/keys/gone", headers=api.auth())).status_code == 204
        again = await api.client.post("/v1/keys", json=body, headers=api.auth())
        assert again.status_code == 409 and again.headers["Retry-After"] == "1"
        error = again.json()["error"]
        assert error["code"] == "key_recently_deleted"
        assert "can be re-created from" in error["message"] and "Z (in 0." in error["message"]
        await asyncio.sleep(0.6)
        assert (await api.client.post("/v1/keys", json=body, headers=api.auth())).status_code == 201
