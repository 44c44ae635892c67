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
