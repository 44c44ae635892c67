"""Wrapped import through the Transit-compatible API, in Vault's shapes and with plain httpx (hvac has no
method for it): ``GET /v1/transit/wrapping_key``, ``/keys/{name}/import`` and ``/import_version`` with a
``ciphertext`` wrapped as ``vault transit import`` wraps (``tests/byok.py``); a Vault ciphertext of the
imported material decrypts; Vault's refusals answer 400 in Vault's error shape, never 500.
"""

from __future__ import annotations

import base64
import os
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from tests.app.api.conftest import Api, running_api
from tests.app.api.routes.test_transit import VAULT, _data, _errors, _post, _vault_ciphertext, api
from tests.byok import vault_wrap

__all__ = ["api"]  # the fixture, imported for the tests below


async def _public_key(api: Api) -> str:
    response = await api.client.get("/v1/transit/wrapping_key", headers=VAULT)
    assert response.status_code == 200, response.text
    assert response.json()["mount_type"] == "transit"
    return str(response.json()["data"]["public_key"])


async def _write(api: Api, path: str, body: dict[str, Any]) -> None:
    response = await _post(api, path, body)
    assert response.status_code == 204, response.text
    assert response.content == b""


async def test_import_and_import_version_take_vault_s_wrapped_material(api: Api) -> None:
    pem = await _public_key(api)
    native = await api.client.get("/v1/wrapping_key", headers=api.auth())
    assert native.json()["public_key"] == pem  # one wrapping key for both APIs
    first, second = os.urandom(16), os.urandom(16)
    await _write(api, "keys/moved/import", {"ciphertext": vault_wrap(pem, first), "type": "aes128-gcm96"})
    key = await api.client.get("/v1/transit/keys/moved", headers=VAULT)
    assert (key.json()["data"]["type"], key.json()["data"]["imported_key"]) == ("aes128-gcm96", True)
    old = _vault_ciphertext(first, 1, b"made by vault")
    assert await _data(api, "decrypt/moved", {"ciphertext": old}) == {
        "plaintext": base64.b64encode(b"made by vault").decode()
    }
    wrapped = vault_wrap(pem, second, "SHA512")
    await _write(api, "keys/moved/import_version", {"ciphertext": wrapped, "hash_function": "sha512"})
    made = await _data(api, "encrypt/moved", {"plaintext": base64.b64encode(b"new").decode()})
    assert made["ciphertext"].startswith("vault:v2:")
    sealed = base64.b64decode(made["ciphertext"].removeprefix("vault:v2:"))
    assert AESGCM(second).decrypt(sealed[:12], sealed[12:], None) == b"new"  # really the second material
    put = await api.client.put(
        "/v1/transit/keys/put-made/import",
        json={"ciphertext": vault_wrap(pem, first), "type": "aes128-gcm96"},
        headers=VAULT,
    )
    assert put.status_code == 204, put.text  # the vault CLI writes with PUT


async def test_vault_s_refusals_are_400s_in_vault_s_shape(api: Api) -> None:
    pem = await _public_key(api)
    material = os.urandom(32)
    good = vault_wrap(pem, material)
    raw = base64.b64decode(good)
    tampered = base64.b64encode(raw[:-1] + bytes([raw[-1] ^ 1])).decode()
    await _write(api, "keys/there/import", {"ciphertext": good})
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("keys/there/import", {"ciphertext": good}, "cannot be used with an existing key"),
        ("keys/c/import", {"ciphertext": good, "convergent_encryption": False}, "convergent encryption"),
        ("keys/r/import", {"ciphertext": good, "auto_rotate_period": "24h"}, "allow_rotation must be set"),
        ("keys/h/import", {"ciphertext": good, "hash_function": "MD5"}, "hash_function must be one of"),
        ("keys/b/import", {"ciphertext": tampered}, "does not verify"),
        ("keys/s/import", {"ciphertext": good, "type": "aes128-gcm96"}, "16 bytes"),
    ]
    for path, body, message in cases:
        errors = await _errors(await _post(api, path, body), 400)
        assert any(message in error for error in errors), (path, errors)
        assert all(material.hex() not in error and good[:60] not in error for error in errors)
    await api.create_key("native")
    errors = await _errors(await _post(api, "keys/native/import_version", {"ciphertext": good}), 400)
    assert errors == ["the import_version endpoint can only be used with an imported key"]
    rotating = {"ciphertext": good, "auto_rotate_period": "24h", "allow_rotation": True}
    await _write(api, "keys/rotating/import", rotating)
    listed = await api.client.get("/v1/transit/keys?list=true", headers=VAULT)
    assert sorted(listed.json()["data"]["keys"]) == ["native", "rotating", "there"]  # nothing else written


async def test_wrapped_import_needs_import_enabled_and_admin(
    settings_factory: Any,
) -> None:
    async with running_api(settings_factory()) as disabled:
        response = await disabled.client.get("/v1/transit/wrapping_key", headers=VAULT)
        assert any("KEYSTREAM_ALLOW_KEY_IMPORT" in error for error in await _errors(response, 403))
    async with running_api(settings_factory(allow_key_import=True)) as enabled:
        token = await enabled.create_token(["encrypt", "decrypt"])
        reader = {"X-Vault-Token": token}
        assert (await enabled.client.get("/v1/transit/wrapping_key", headers=reader)).status_code == 403
        pem = await _public_key(enabled)
        refused = await _post(enabled, "keys/k/import", {"ciphertext": vault_wrap(pem, bytes(32))}, reader)
        await _errors(refused, 403)
