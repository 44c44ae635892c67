"""Wrapped import (bring your own key) through the native API: ``GET /v1/wrapping_key`` and ``ciphertext`` on
``import`` and ``import_version``, wrapped by ``tests/byok.py`` exactly as Vault's key wrapping guide says;
gated as plaintext import; every bad ciphertext a 400 that names no byte of it.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable

from Crypto.Cipher import AES

from app.core.config import Settings
from app.keystore.master import WRAPPING_KEY_ROW
from app.keystore.wrapping_key import read_wrapping_key
from tests.app.api.conftest import ROOT_TOKEN, Api, running_api
from tests.byok import vault_wrap


async def _public_key(api: Api) -> str:
    response = await api.client.get("/v1/wrapping_key", headers=api.auth())
    assert response.status_code == 200, response.text
    pem = response.json()["public_key"]
    assert isinstance(pem, str) and pem.startswith("-----BEGIN PUBLIC KEY-----")
    return pem


async def _raw_encrypt(api: Api, name: str, plaintext: bytes, iv: bytes) -> bytes:
    response = await api.encrypt(name, plaintext, format="raw", iv=iv.hex())
    assert response.status_code == 200, response.text
    return response.content


async def test_wrapped_material_imports_as_a_key_and_as_a_version(
    settings_factory: Callable[..., Settings],
) -> None:
    first, second = os.urandom(32), os.urandom(16)
    iv, plaintext = bytes(range(16)), b"wrapped import " * 10
    async with running_api(settings_factory(allow_key_import=True)) as api:
        pem = await _public_key(api)
        assert await _public_key(api) == pem  # made once
        ciphertext = vault_wrap(pem, first)
        made = await api.client.post(
            "/v1/keys/byok/import", json={"ciphertext": ciphertext}, headers=api.auth()
        )
        assert made.status_code == 201, made.text
        assert (made.json()["type"], made.json()["imported"]) == ("aes256", True)
        expected = AES.new(first, AES.MODE_CTR, nonce=b"", initial_value=iv).encrypt(plaintext)
        assert await _raw_encrypt(api, "byok", plaintext, iv) == expected
        await api.create_key("small", type="aes128")
        added = await api.client.post(
            "/v1/keys/small/import_version",
            json={"ciphertext": vault_wrap(pem, second, "SHA1"), "hash_function": "SHA1"},
            headers=api.auth(),
        )
        assert added.status_code == 200, added.text
        assert added.json()["latest_version"] == 2
        expected = AES.new(second, AES.MODE_CTR, nonce=b"", initial_value=iv).encrypt(plaintext)
        assert await _raw_encrypt(api, "small", plaintext, iv) == expected
        for answer in (made, added):
            assert first.hex() not in answer.text and base64.b64encode(first).decode() not in answer.text


async def test_wrapped_import_is_gated_as_import_is(
    api: Api, settings_factory: Callable[..., Settings]
) -> None:
    disabled = await api.client.get("/v1/wrapping_key", headers=api.auth())
    assert disabled.status_code == 403
    assert "KEYSTREAM_ALLOW_KEY_IMPORT" in disabled.json()["error"]["message"]
    async with running_api(settings_factory(allow_key_import=True)) as enabled:
        token = await enabled.create_token(["encrypt", "decrypt"])
        assert (await enabled.client.get("/v1/wrapping_key", headers=enabled.auth(token))).status_code == 403
        pem = await _public_key(enabled)
        refused = await enabled.client.post(
            "/v1/keys/k/import", json={"ciphertext": vault_wrap(pem, bytes(32))}, headers=enabled.auth(token)
        )
        assert refused.status_code == 403
        assert (await enabled.client.get("/v1/wrapping_key")).status_code == 401


async def test_bad_wrapped_imports_are_clear_400s(settings_factory: Callable[..., Settings]) -> None:
    material = bytes(range(32))
    async with running_api(settings_factory(allow_key_import=True)) as api:
        pem = await _public_key(api)
        good = vault_wrap(pem, material)
        raw = base64.b64decode(good)
        flipped = raw[:-1] + bytes([raw[-1] ^ 1])
        cases: list[tuple[dict[str, object], str]] = [
            ({"ciphertext": good, "key": base64.b64encode(material).decode()}, "exactly one of key"),
            ({}, "exactly one of key"),
            ({"key": base64.b64encode(material).decode(), "hash_function": "SHA1"}, "hash_function applies"),
            ({"ciphertext": "@@@@"}, "standard base64"),
            ({"ciphertext": base64.b64encode(raw[:300]).decode()}, "got 300 bytes"),
            ({"ciphertext": good, "hash_function": "SHA384"}, "does not decrypt"),
            ({"ciphertext": base64.b64encode(flipped).decode()}, "does not verify"),
            ({"ciphertext": vault_wrap(pem, os.urandom(20))}, "got 20"),
            ({"ciphertext": good, "type": "aes128"}, "16 bytes"),
        ]
        for body, message in cases:
            response = await api.client.post("/v1/keys/bad/import", json=body, headers=api.auth())
            assert response.status_code == 400, (body, response.text)
            assert message in response.json()["error"]["message"], response.text
            assert material.hex() not in response.text and good[:60] not in response.text
        await api.create_key("v", type="aes128")
        wrong_length = await api.client.post(
            "/v1/keys/v/import_version", json={"ciphertext": good}, headers=api.auth()
        )
        assert wrong_length.status_code == 400 and "16 bytes" in wrong_length.json()["error"]["message"]
        unknown_hash = await api.client.post(
            "/v1/keys/v/import_version", json={"ciphertext": good, "hash_function": "MD5"}, headers=api.auth()
        )
        assert unknown_hash.status_code == 422
        listed = await api.client.get("/v1/keys", headers=api.auth())
        assert [key["name"] for key in listed.json()["keys"]] == ["v"]


async def test_a_corrupt_stored_wrapping_key_is_a_clear_503(
    settings_factory: Callable[..., Settings],
) -> None:
    """A wrapping key row that does not unwrap (a corrupt record, or a keystore from another master key) is
    the JSON 503 a key version that does not unwrap gets, on every route that needs it; nothing of the row is
    shown."""
    async with running_api(settings_factory(allow_key_import=True)) as api:
        pem = await _public_key(api)
        keystore = api.app.state.keystream.keystore
        stored = keystore._run_read(lambda conn: read_wrapping_key(conn, keystore._dialect))
        corrupt = stored[:-1] + bytes([stored[-1] ^ 1])
        keystore._run_write(
            lambda conn: conn.execute("UPDATE meta SET value = ? WHERE name = ?", (corrupt, WRAPPING_KEY_ROW))
        )
        native = [
            await api.client.get("/v1/wrapping_key", headers=api.auth()),
            await api.client.post(
                "/v1/keys/byok/import",
                json={"ciphertext": vault_wrap(pem, os.urandom(32))},
                headers=api.auth(),
            ),
        ]
        for response in native:
            assert response.status_code == 503, response.text
            error = response.json()["error"]
            assert error["code"] == "key_unwrap_failed" and "import wrapping key" in error["message"]
        transit = await api.client.get("/v1/transit/wrapping_key", headers={"X-Vault-Token": ROOT_TOKEN})
        assert transit.status_code == 503, transit.text
        assert any("import wrapping key" in message for message in transit.json()["errors"])
        for response in [*native, transit]:
            assert corrupt.hex()[:32] not in response.text
            assert base64.b64encode(corrupt).decode()[:32] not in response.text
