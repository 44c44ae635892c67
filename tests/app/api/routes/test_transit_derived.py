"""Derived and convergent keys through the Transit API, checked against Vault's scheme computed here
independently: HKDF-SHA256 (RFC 5869, no salt, info = the context) for the per-context key and, for
convergent encryption (Vault's version 3), 32 more bytes keying an HMAC-SHA256 of the plaintext whose first 12
bytes are the nonce."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from app.core.config import Settings
from tests.app.api.conftest import Api, running_api
from tests.app.api.routes.test_mac import MATERIAL, b64
from tests.app.api.routes.test_transit import VAULT, _data, _errors, _post

MISSING_CONTEXT = (
    "missing 'context' for key derivation; the key was created using a derived key, which means additional, "
    "per-request information must be included in order to perform operations with the key"
)


def rfc5869_hkdf_sha256(ikm: bytes, info: bytes, length: int, salt: bytes = b"") -> bytes:
    """HKDF-SHA256 as RFC 5869 writes it (extract, then expand), with nothing but :mod:`hmac`."""
    prk = hmac.new(salt or bytes(32), ikm, hashlib.sha256).digest()
    okm, block = b"", b""
    for counter in range(1, -(-length // 32) + 1):
        block = hmac.new(prk, block + info + bytes([counter]), hashlib.sha256).digest()
        okm += block
    return okm[:length]


def test_the_hkdf_here_is_rfc_5869() -> None:
    # RFC 5869, appendix A.3 (SHA-256, zero-length salt and info).
    ikm = bytes.fromhex("0b" * 22)
    expected = "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8"
    assert rfc5869_hkdf_sha256(ikm, b"", 42).hex() == expected


def vault_derived(material: bytes, context: bytes, plaintext: bytes, associated: bytes | None = None) -> str:
    """What Vault makes for a derived, non-convergent aes-gcm96 key version 1 (random nonce)."""
    key = rfc5869_hkdf_sha256(material, context, len(material))
    nonce = os.urandom(12)
    return "vault:v1:" + b64(nonce + AESGCM(key).encrypt(nonce, plaintext, associated))


def vault_convergent(material: bytes, context: bytes, plaintext: bytes) -> str:
    """What Vault makes for a convergent (version 3) aes-gcm96 key version 1: the same every time."""
    derived = rfc5869_hkdf_sha256(material, context, len(material) + 32)
    key, nonce_key = derived[: len(material)], derived[len(material) :]
    nonce = hmac.new(nonce_key, plaintext, hashlib.sha256).digest()[:12]
    return "vault:v1:" + b64(nonce + AESGCM(key).encrypt(nonce, plaintext, None))


@pytest.fixture
async def api(settings_factory: Callable[..., Settings]) -> AsyncIterator[Api]:
    """The app with key import on: known material makes Vault's expected values computable here."""
    async with running_api(settings_factory(allow_key_import=True)) as value:
        yield value


async def _import(api: Api, name: str, material: bytes = MATERIAL, **options: Any) -> dict[str, Any]:
    response = await api.client.post(
        f"/v1/keys/{name}/import", json={"key": b64(material), **options}, headers=api.auth()
    )
    assert response.status_code == 201, response.text
    return dict(response.json())


async def test_a_derived_key_opens_what_vault_derived_and_needs_a_context(api: Api) -> None:
    info = await _import(api, "tenants", derived=True)
    assert info["derived"] is True and info["convergent_encryption"] is False
    context = b"tenant-42"
    made_by_vault = vault_derived(MATERIAL, context, b"row 7", b"ad")
    opened = await _data(
        api,
        "decrypt/tenants",
        {"ciphertext": made_by_vault, "context": b64(context), "associated_data": b64(b"ad")},
    )
    assert base64.b64decode(opened["plaintext"]) == b"row 7"
    ours = await _data(api, "encrypt/tenants", {"plaintext": b64(b"row 8"), "context": b64(context)})
    raw = base64.b64decode(ours["ciphertext"].removeprefix("vault:v1:"))
    key = rfc5869_hkdf_sha256(MATERIAL, context, 32)
    assert AESGCM(key).decrypt(raw[:12], raw[12:], None) == b"row 8"
    for path, body in (
        ("encrypt/tenants", {"plaintext": b64(b"x")}),
        ("decrypt/tenants", {"ciphertext": made_by_vault}),
        ("rewrap/tenants", {"ciphertext": made_by_vault}),
        ("datakey/plaintext/tenants", {}),
    ):
        assert await _errors(await _post(api, path, body), 400) == [MISSING_CONTEXT]
    data_key = await _data(api, "datakey/plaintext/tenants", {"context": b64(context)})
    opened_key = await _data(
        api, "decrypt/tenants", {"ciphertext": data_key["ciphertext"], "context": b64(context)}
    )
    assert opened_key["plaintext"] == data_key["plaintext"]
    wrong = await _post(api, "decrypt/tenants", {"ciphertext": made_by_vault, "context": b64(b"tenant-43")})
    assert await _errors(wrong, 400) == ["cipher: message authentication failed"]
    assert (
        await _errors(await _post(api, "encrypt/tenants", {"plaintext": b64(b"x"), "context": "%%"}), 400)
    )[0].startswith("context must be base64")


async def test_batch_items_carry_their_own_context(api: Api) -> None:
    await _import(api, "tenants", derived=True)
    items = [
        {"plaintext": b64(b"a"), "context": b64(b"t1"), "reference": "1"},
        {"plaintext": b64(b"b"), "context": b64(b"t2"), "reference": "2"},
        {"plaintext": b64(b"c"), "reference": "3"},
    ]
    response = await _post(api, "encrypt/tenants", {"batch_input": items})
    results = response.json()["data"]["batch_results"]
    assert response.status_code == 400  # one item failed; the others are there
    assert [r.get("error") for r in results] == [None, None, MISSING_CONTEXT]
    opened = await _data(
        api,
        "decrypt/tenants",
        {
            "batch_input": [
                {"ciphertext": results[0]["ciphertext"], "context": b64(b"t1")},
                {"ciphertext": results[1]["ciphertext"], "context": b64(b"t2")},
            ]
        },
    )
    assert [base64.b64decode(r["plaintext"]) for r in opened["batch_results"]] == [b"a", b"b"]
    rewrapped = await _data(
        api, "rewrap/tenants", {"ciphertext": results[1]["ciphertext"], "context": b64(b"t2")}
    )
    again = await _data(
        api, "decrypt/tenants", {"ciphertext": rewrapped["ciphertext"], "context": b64(b"t2")}
    )
    assert base64.b64decode(again["plaintext"]) == b"b"


async def test_convergent_encryption_is_vaults_version_3_byte_for_byte(api: Api) -> None:
    await _import(api, "dedup", derived=True, convergent_encryption=True)
    read = (await api.client.get("/v1/transit/keys/dedup", headers=VAULT)).json()["data"]
    assert (read["derived"], read["kdf"], read["convergent_encryption"]) == (True, "hkdf_sha256", True)
    assert read["convergent_encryption_version"] == 3
    context = b"column:email"
    first = await _data(api, "encrypt/dedup", {"plaintext": b64(b"a@example.com"), "context": b64(context)})
    second = await _data(api, "encrypt/dedup", {"plaintext": b64(b"a@example.com"), "context": b64(context)})
    assert (
        first["ciphertext"] == second["ciphertext"] == vault_convergent(MATERIAL, context, b"a@example.com")
    )
    other = await _data(api, "encrypt/dedup", {"plaintext": b64(b"a@example.com"), "context": b64(b"other")})
    assert other["ciphertext"] != first["ciphertext"]
    made_by_vault = vault_convergent(MATERIAL, context, b"b@example.com")
    opened = await _data(api, "decrypt/dedup", {"ciphertext": made_by_vault, "context": b64(context)})
    assert base64.b64decode(opened["plaintext"]) == b"b@example.com"
    refused = await _post(
        api, "encrypt/dedup", {"plaintext": b64(b"x"), "context": b64(context), "nonce": b64(bytes(12))}
    )
    assert await _errors(refused, 400) == ["nonce provided when not allowed"]


async def test_options_are_created_and_configured_as_in_vault(api: Api) -> None:
    created = await _data(api, "keys/opts", {"derived": True, "exportable": True})
    assert (created["derived"], created["exportable"], created["allow_plaintext_backup"]) == (
        True,
        True,
        False,
    )
    assert created["supports_derivation"] is True and created["kdf"] == "hkdf_sha256"
    assert "convergent_encryption_version" not in created
    plain = await _data(api, "keys/plain", {})
    assert "kdf" not in plain and plain["derived"] is False
    configured = await _data(api, "keys/plain/config", {"allow_plaintext_backup": True})
    assert configured["allow_plaintext_backup"] is True
    assert (await _errors(await _post(api, "keys/opts/config", {"exportable": False}), 400)) == [
        "exportable cannot be turned off once it is on (key 'opts')"
    ]
    refused = await _post(api, "keys/conv", {"convergent_encryption": True})
    assert (await _errors(refused, 400))[0].startswith("convergent_encryption requires derived")
    # a context on a key that is not derived is ignored, as Vault ignores it
    made = await _data(api, "encrypt/plain", {"plaintext": b64(b"x"), "context": b64(b"c")})
    opened = await _data(api, "decrypt/plain", {"ciphertext": made["ciphertext"]})
    assert base64.b64decode(opened["plaintext"]) == b"x"


async def test_the_native_api_refuses_a_derived_key_without_a_context(api: Api) -> None:
    await _import(api, "tenants", derived=True)
    response = await api.client.post(
        "/v1/keys/tenants/encrypt/batch", json={"items": [{"plaintext": b64(b"x")}]}, headers=api.auth()
    )
    assert response.status_code == 400, response.text
    assert "is derived: every operation needs a context" in response.text
