"""Export of an exportable key's material, natively and through the Transit API: only exportable keys, admin
only, every version or one, and no material in the audit log."""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from app.core.config import Settings
from tests.app.api.conftest import Api, running_api
from tests.app.api.routes.test_mac import MATERIAL, b64
from tests.app.api.routes.test_transit import VAULT, _errors

SECOND = bytes(range(32, 64))


@pytest.fixture
async def api(settings_factory: Callable[..., Settings], tmp_path: Path) -> AsyncIterator[Api]:
    """Key import on (known material to compare), and an audit log to read."""
    settings = settings_factory(allow_key_import=True, audit_log=str(tmp_path / "audit.log"))
    async with running_api(settings) as value:
        response = await value.client.post(
            "/v1/keys/moving/import", json={"key": b64(MATERIAL), "exportable": True}, headers=value.auth()
        )
        assert response.status_code == 201, response.text
        response = await value.client.post(
            "/v1/keys/moving/import_version", json={"key": b64(SECOND)}, headers=value.auth()
        )
        assert response.status_code == 200, response.text
        await value.create_key("kept")
        yield value


async def test_native_export_gives_every_version_or_one(api: Api) -> None:
    response = await api.client.get("/v1/keys/moving/export", headers=api.auth())
    assert response.status_code == 200, response.text
    assert response.headers["Cache-Control"] == "no-store"
    assert response.json() == {
        "name": "moving",
        "type": "aes256",
        "keys": {"1": b64(MATERIAL), "2": b64(SECOND)},
    }
    one = await api.client.get("/v1/keys/moving/export", params={"version": "1"}, headers=api.auth())
    assert one.json()["keys"] == {"1": b64(MATERIAL)}
    latest = await api.client.get("/v1/keys/moving/export", params={"version": "latest"}, headers=api.auth())
    assert latest.json()["keys"] == {"2": b64(SECOND)}
    missing = await api.client.get("/v1/keys/moving/export", params={"version": "9"}, headers=api.auth())
    assert missing.status_code == 404
    malformed = await api.client.get("/v1/keys/moving/export", params={"version": "one"}, headers=api.auth())
    assert malformed.status_code == 422


async def test_only_exportable_keys_and_admins_export(api: Api) -> None:
    refused = await api.client.get("/v1/keys/kept/export", headers=api.auth())
    assert refused.status_code == 400
    assert "is not exportable" in refused.json()["error"]["message"]
    reader = await api.create_token(["encrypt", "decrypt"])
    assert (await api.client.get("/v1/keys/moving/export", headers=api.auth(reader))).status_code == 403
    unknown = await api.client.get("/v1/keys/nothing/export", headers=api.auth())
    assert unknown.status_code == 404


async def test_the_audit_log_names_versions_never_material(api: Api, tmp_path: Path) -> None:
    await api.client.get("/v1/keys/moving/export", headers=api.auth())
    await api.client.get("/v1/transit/export/encryption-key/moving/2", headers=VAULT)
    text = (tmp_path / "audit.log").read_text()
    for secret in (MATERIAL, SECOND):
        assert b64(secret) not in text and secret.hex() not in text
    records = [json.loads(line) for line in text.splitlines() if "export" in line]
    assert [(r["route"], r["key_name"], r["key_version"], r["status"]) for r in records] == [
        ("/v1/keys/{name}/export", "moving", None, 200),
        ("/v1/transit/export/{export_type}/{name}/{version}", "moving", 2, 200),
    ]


async def test_transit_export_in_vaults_shape(api: Api) -> None:
    response = await api.client.get("/v1/transit/export/encryption-key/moving", headers=VAULT)
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert data == {"name": "moving", "type": "aes256-gcm96", "keys": {"1": b64(MATERIAL), "2": b64(SECOND)}}
    one = await api.client.get("/v1/transit/export/encryption-key/moving/latest", headers=VAULT)
    assert one.json()["data"]["keys"] == {"2": b64(SECOND)}
    assert base64.b64decode(one.json()["data"]["keys"]["2"]) == SECOND
    refused = await api.client.get("/v1/transit/export/encryption-key/kept", headers=VAULT)
    assert (await _errors(refused, 400))[0].startswith("key 'kept' is not exportable")
    hmac_key = await api.client.get("/v1/transit/export/hmac-key/moving", headers=VAULT)
    assert await _errors(hmac_key, 400) == ["hmac-key is not exported by Keystream: only encryption-key"]
    bad = await api.client.get(f"/v1/transit/export/{secrets.token_hex(4)}/moving", headers=VAULT)
    await _errors(bad, 400)


async def test_native_backup_and_restore(api: Api) -> None:
    before = (await api.client.get("/v1/keys/moving", headers=api.auth())).json()
    backup = await api.client.get("/v1/keys/moving/backup", headers=api.auth())
    assert backup.status_code == 200, backup.text
    assert backup.headers["Cache-Control"] == "no-store"
    blob = backup.json()["backup"]
    assert backup.json()["name"] == "moving" and b64(MATERIAL) not in blob
    rotated = await api.client.post("/v1/keys/moving/rotate", headers=api.auth())
    assert rotated.json()["latest_version"] == 3
    again = await api.client.post("/v1/keys/restore", json={"backup": blob}, headers=api.auth())
    assert again.status_code == 409 and "restore with force" in again.json()["error"]["message"]
    forced = await api.client.post(
        "/v1/keys/restore", json={"backup": blob, "force": True}, headers=api.auth()
    )
    assert forced.status_code == 200, forced.text
    assert forced.json() == before  # version 3 is gone: the key is as it was backed up
    assert (await api.encrypt("moving", b"x")).headers["Keystream-Key-Version"] == "2"  # the cache forgot 3
    exported = await api.client.get("/v1/keys/moving/export", headers=api.auth())
    assert exported.json()["keys"] == {"1": b64(MATERIAL), "2": b64(SECOND)}
    await api.client.patch("/v1/keys/moving", json={"deletion_allowed": True}, headers=api.auth())
    assert (await api.client.delete("/v1/keys/moving", headers=api.auth())).status_code == 204
    held = await api.client.post("/v1/keys/restore", json={"backup": blob}, headers=api.auth())
    assert held.status_code == 409 and held.json()["error"]["code"] == "key_recently_deleted"
    renamed = await api.client.post(
        "/v1/keys/restore", json={"backup": blob, "name": "other"}, headers=api.auth()
    )
    assert renamed.status_code == 400 and "made for key 'moving'" in renamed.json()["error"]["message"]
    garbage = await api.client.post("/v1/keys/restore", json={"backup": "%%%"}, headers=api.auth())
    assert garbage.status_code == 400
    refused = await api.client.get("/v1/keys/kept/backup", headers=api.auth())
    assert refused.status_code == 400 and "cannot be backed up" in refused.json()["error"]["message"]
    reader = await api.create_token(["encrypt", "decrypt"])
    assert (await api.client.get("/v1/keys/moving/backup", headers=api.auth(reader))).status_code == 403
    denied = await api.client.post("/v1/keys/restore", json={"backup": blob}, headers=api.auth(reader))
    assert denied.status_code == 403


async def test_transit_backup_needs_both_options_and_restore_answers_204(api: Api) -> None:
    refused = await api.client.get("/v1/transit/backup/moving", headers=VAULT)
    assert await _errors(refused, 400) == [
        "key 'moving' cannot be backed up: allow_plaintext_backup is false (Vault needs both)"
    ]
    configured = await api.client.post(
        "/v1/transit/keys/moving/config", json={"allow_plaintext_backup": True}, headers=VAULT
    )
    assert configured.status_code == 200
    blob = (await api.client.get("/v1/transit/backup/moving", headers=VAULT)).json()["data"]["backup"]
    exists = await api.client.post("/v1/transit/restore", json={"backup": blob}, headers=VAULT)
    assert (await _errors(exists, 400))[0].startswith("key 'moving' already exists")
    forced = await api.client.post(
        "/v1/transit/restore/moving", json={"backup": blob, "force": True}, headers=VAULT
    )
    assert forced.status_code == 204, forced.text
    elsewhere = await api.client.post("/v1/transit/restore/copy", json={"backup": blob}, headers=VAULT)
    assert "made for key 'moving'" in (await _errors(elsewhere, 400))[0]
