"""The Transit-compatible API in process: Vault's ciphertext layout both ways (a hand-made Vault ciphertext
opens, ours opens under the material by hand), Vault's answer and error shapes and statuses only on
``/v1/transit/``, ``X-Vault-Token``, key management, batches, HMACs, data keys, random and hash."""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from app.core.config import Settings
from tests.app.api.conftest import ROOT_TOKEN, Api, running_api
from tests.app.api.routes.test_mac import MATERIAL, b64, expected_tag

VAULT = {"X-Vault-Token": ROOT_TOKEN}


@pytest.fixture
async def api(settings_factory: Callable[..., Settings]) -> AsyncIterator[Api]:
    """The app with key import on: the migration tests import known material."""
    async with running_api(settings_factory(allow_key_import=True)) as value:
        yield value


async def _post(
    api: Api, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> httpx.Response:
    return await api.client.post(
        f"/v1/transit/{path}", json=body, headers=VAULT if headers is None else headers
    )


async def _data(api: Api, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = await _post(api, path, body)
    assert response.status_code == 200, response.text
    assert response.json()["mount_type"] == "transit"
    return dict(response.json()["data"])


async def _errors(response: httpx.Response, status: int) -> list[str]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) <= {"errors", "data"}, body
    return list(body["errors"])


async def _imported(api: Api, name: str = "moved", material: bytes = MATERIAL) -> None:
    response = await api.client.post(
        f"/v1/keys/{name}/import", json={"key": b64(material)}, headers=api.auth()
    )
    assert response.status_code == 201, response.text


def _vault_ciphertext(
    material: bytes, version: int, plaintext: bytes, associated: bytes | None = None
) -> str:
    """What Vault's Transit makes for a non-derived aes-gcm96 key: nonce || ciphertext || tag, base64."""
    nonce = os.urandom(12)
    return f"vault:v{version}:" + b64(nonce + AESGCM(material).encrypt(nonce, plaintext, associated))


async def test_a_vault_ciphertext_opens_once_its_material_is_imported(api: Api) -> None:
    await _imported(api)
    for associated in (None, b"row 17"):
        ciphertext = _vault_ciphertext(MATERIAL, 1, b"made by vault", associated)
        body = {"ciphertext": ciphertext}
        if associated:
            body["associated_data"] = b64(associated)
        assert await _data(api, "decrypt/moved", body) == {"plaintext": b64(b"made by vault")}


async def test_ours_is_vaults_layout_under_the_material(api: Api) -> None:
    await _imported(api)
    made = await _data(api, "encrypt/moved", {"plaintext": b64(b"hello"), "associated_data": b64(b"ad")})
    assert made["key_version"] == 1
    prefix, version, text = made["ciphertext"].split(":")
    assert (prefix, version) == ("vault", "v1")
    raw = base64.b64decode(text)
    assert len(raw) == 12 + 5 + 16
    assert AESGCM(MATERIAL).decrypt(raw[:12], raw[12:], b"ad") == b"hello"
    again = await _data(api, "encrypt/moved", {"plaintext": b64(b"hello"), "associated_data": b64(b"ad")})
    assert again["ciphertext"] != made["ciphertext"]  # a fresh nonce each time


async def test_wrong_associated_data_or_tampering_is_400(api: Api) -> None:
    await _imported(api)
    made = await _data(api, "encrypt/moved", {"plaintext": b64(b"x"), "associated_data": b64(b"a")})
    wrong = await _post(
        api, "decrypt/moved", {"ciphertext": made["ciphertext"], "associated_data": b64(b"b")}
    )
    assert await _errors(wrong, 400) == ["cipher: message authentication failed"]
    raw = bytearray(base64.b64decode(made["ciphertext"].split(":")[2]))
    raw[-1] ^= 1
    tampered = await _post(api, "decrypt/moved", {"ciphertext": "vault:v1:" + b64(bytes(raw))})
    await _errors(tampered, 400)
    short = await _post(api, "decrypt/moved", {"ciphertext": "vault:v1:" + b64(b"too short")})
    await _errors(short, 400)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"plaintext": "not base64!"}, "plaintext must be base64"),
        ({}, "missing plaintext"),
        ({"plaintext": b64(b"x"), "key_version": 9}, None),
        ({"plaintext": b64(b"x"), "key_version": "one"}, None),
        ({"plaintext": b64(b"x"), "nonce": b64(b"n" * 12)}, None),
    ],
)
async def test_bad_encrypt_input_is_vaults_400(api: Api, body: dict[str, Any], message: str | None) -> None:
    await _imported(api)
    errors = await _errors(await _post(api, "encrypt/moved", body), 400)
    assert len(errors) == 1
    if message is not None:
        assert errors == [message]


@pytest.mark.parametrize("ciphertext", ["v1:abcd", "vault:v0:AAAA", "vault:v1:not base64", "vault:vx:AAAA"])
async def test_malformed_ciphertexts_are_400(api: Api, ciphertext: str) -> None:
    await _imported(api)
    await _errors(await _post(api, "decrypt/moved", {"ciphertext": ciphertext}), 400)


async def test_unknown_key_is_400_and_unknown_path_404(api: Api) -> None:
    assert await _errors(await _post(api, "encrypt/nope", {"plaintext": b64(b"x")}), 400)
    assert await _errors(await api.client.get("/v1/transit/keys/nope", headers=VAULT), 404) == []
    assert await _errors(await _post(api, "nowhere/nope", {}), 404) == []


async def test_auth_by_either_header_errors_only_in_vaults_shape_here(api: Api) -> None:
    await _imported(api)
    bearer = await _post(api, "encrypt/moved", {"plaintext": b64(b"x")}, headers=api.auth())
    assert bearer.status_code == 200
    missing = await _post(api, "encrypt/moved", {"plaintext": b64(b"x")}, headers={})
    assert len(await _errors(missing, 403)) == 1
    wrong = await _post(api, "encrypt/moved", {"plaintext": b64(b"x")}, headers={"X-Vault-Token": "ks_0_x"})
    assert len(await _errors(wrong, 403)) == 1
    twice = await api.client.post(
        "/v1/transit/encrypt/moved",
        json={"plaintext": b64(b"x")},
        headers=[("X-Vault-Token", ROOT_TOKEN), ("X-Vault-Token", ROOT_TOKEN)],
    )
    await _errors(twice, 400)
    native = await api.client.post("/v1/keys/moved/hmac", json={"input": b64(b"x")}, headers=VAULT)
    assert native.status_code == 401  # X-Vault-Token is the Transit API's alone
    assert native.json()["error"]["code"] == "unauthorized"
    bad = await api.client.post("/v1/keys/moved/hmac", json={"input": 1}, headers=api.auth())
    assert bad.status_code == 422 and "error" in bad.json()  # the native shape is unchanged


async def test_scopes_map_to_the_native_ones(api: Api) -> None:
    await _imported(api)
    token = await api.create_token(["encrypt"], ["moved"])
    headers = {"X-Vault-Token": token}
    made = await _post(api, "encrypt/moved", {"plaintext": b64(b"x")}, headers=headers)
    assert made.status_code == 200
    ciphertext = made.json()["data"]["ciphertext"]
    for path, body in (
        ("decrypt/moved", {"ciphertext": ciphertext}),
        ("rewrap/moved", {"ciphertext": ciphertext}),
        ("hmac/moved", {"input": b64(b"x")}),
        ("verify/moved", {"input": b64(b"x"), "hmac": "vault:v1:" + b64(bytes(32))}),
        ("datakey/plaintext/moved", {}),
        ("keys/moved/rotate", {}),
        ("keys/other", {}),
        ("encrypt/other", {"plaintext": b64(b"x")}),
    ):
        assert len(await _errors(await _post(api, path, body, headers=headers), 403)) == 1, path
    wrapped = await _post(api, "datakey/wrapped/moved", {}, headers=headers)
    assert wrapped.status_code == 200 and "plaintext" not in wrapped.json()["data"]


async def test_key_management_in_vaults_shapes(api: Api) -> None:
    created = await _data(api, "keys/orders", {})
    assert created["type"] == "aes256-gcm96"
    assert created["latest_version"] == 1 and list(created["keys"]) == ["1"]
    assert isinstance(created["keys"]["1"], int)
    assert created["supports_encryption"] and not created["exportable"] and not created["deletion_allowed"]
    assert await _data(api, "keys/orders", {}) == {**created}  # an existing key is read back, unchanged
    small = await _data(api, "keys/small", {"type": "aes128-gcm96"})
    assert small["type"] == "aes128-gcm96"
    listed = await api.client.get("/v1/transit/keys", params={"list": "true"}, headers=VAULT)
    assert listed.json()["data"] == {"keys": ["orders", "small"]}
    await _errors(await api.client.get("/v1/transit/keys", headers=VAULT), 405)
    rotated = await _data(api, "keys/orders/rotate", {})
    assert rotated["latest_version"] == 2 and list(rotated["keys"]) == ["1", "2"]
    configured = await _data(api, "keys/orders/config", {"min_decryption_version": 2})
    assert configured["min_decryption_version"] == 2
    refused = await api.client.delete("/v1/transit/keys/orders", headers=VAULT)
    await _errors(refused, 400)
    await _data(api, "keys/orders/config", {"deletion_allowed": True})
    deleted = await api.client.delete("/v1/transit/keys/orders", headers=VAULT)
    assert deleted.status_code == 204
    await _errors(await api.client.get("/v1/transit/keys/orders", headers=VAULT), 404)
    await _errors(await _post(api, "keys/opt", {"convergent_encryption": True}), 400)  # needs derived
    await _errors(await _post(api, "keys/small/config", {"min_encryption_version": 1}), 400)
    await _errors(await _post(api, "keys/small/config", {"min_decryption_version": 5}), 400)
    await _errors(await _post(api, "keys/x", {"type": "rsa-2048"}), 400)


async def test_an_empty_list_is_404_as_in_vault(api: Api) -> None:
    assert await _errors(await api.client.get("/v1/transit/keys?list=true", headers=VAULT), 404) == []


async def test_versions_rewrap_and_min_decryption_version(api: Api) -> None:
    await _data(api, "keys/k", {})
    old = (await _data(api, "encrypt/k", {"plaintext": b64(b"old")}))["ciphertext"]
    await _data(api, "keys/k/rotate", {})
    rewrapped = await _data(api, "rewrap/k", {"ciphertext": old})
    assert rewrapped["key_version"] == 2 and rewrapped["ciphertext"].startswith("vault:v2:")
    assert await _data(api, "decrypt/k", {"ciphertext": rewrapped["ciphertext"]}) == {
        "plaintext": b64(b"old")
    }
    pinned = await _data(api, "encrypt/k", {"plaintext": b64(b"x"), "key_version": 1})
    assert pinned["ciphertext"].startswith("vault:v1:")
    await _data(api, "keys/k/config", {"min_decryption_version": 2})
    assert await _errors(await _post(api, "decrypt/k", {"ciphertext": old}), 400)
    assert await _errors(await _post(api, "decrypt/k", {"ciphertext": "vault:v3:" + b64(bytes(40))}), 400)


async def test_trim_deletes_only_versions_that_no_longer_decrypt(api: Api) -> None:
    await _data(api, "keys/t", {})
    for _ in range(2):
        await _data(api, "keys/t/rotate", {})
    # Above min_decryption_version (still 1): refused, nothing deleted.
    assert await _errors(await _post(api, "keys/t/trim", {"min_available_version": 2}), 400)
    assert await _errors(await _post(api, "keys/t/trim", {}), 400)  # the field is required
    await _data(api, "keys/t/config", {"min_decryption_version": 3})
    trimmed = await _data(api, "keys/t/trim", {"min_available_version": 3})
    assert trimmed["min_available_version"] == 3 and sorted(trimmed["keys"]) == ["3"]
    read = await api.client.get("/v1/transit/keys/t", headers=VAULT)
    assert sorted(read.json()["data"]["keys"]) == ["3"]
    assert await _errors(await _post(api, "encrypt/t", {"plaintext": b64(b"x"), "key_version": 1}), 400)
    assert await _errors(await _post(api, "keys/nope/trim", {"min_available_version": 1}), 400)


async def test_batches_with_references_and_failed_items(api: Api) -> None:
    """As OpenBao answers: every item has its reference; a failed encrypt/decrypt item makes the batch 400,
    with every result still in data.batch_results."""
    await _data(api, "keys/b", {})
    items = [{"plaintext": b64(b"one"), "reference": "r1"}, {"plaintext": b64(b"two")}]
    results = (await _data(api, "encrypt/b", {"batch_input": items, "plaintext": None}))["batch_results"]
    assert results[0]["reference"] == "r1" and results[0]["ciphertext"].startswith("vault:v1:")
    assert results[1]["reference"] == ""
    opened = await _data(api, "decrypt/b", {"batch_input": [{"ciphertext": results[0]["ciphertext"]}]})
    assert opened == {"batch_results": [{"plaintext": b64(b"one"), "reference": ""}]}
    items[1] = {"plaintext": "!!", "reference": "r2"}
    failed = await _post(api, "encrypt/b", {"batch_input": items})
    assert failed.status_code == 400 and "errors" not in failed.json()
    results = failed.json()["data"]["batch_results"]
    assert results[0]["ciphertext"].startswith("vault:v1:")
    assert results[1] == {"error": "plaintext must be base64", "reference": "r2"}


@pytest.mark.parametrize("algorithm", ["sha2-256", "sha2-384", "sha2-512"])
async def test_hmac_is_the_native_derivation_with_vaults_prefix(api: Api, algorithm: str) -> None:
    await _imported(api)
    data = b"payload"
    made = await _data(api, f"hmac/moved/{algorithm}", {"input": b64(data)})
    assert made == {"hmac": "vault" + expected_tag(MATERIAL, 1, data, algorithm).removeprefix("ks")}
    body = {"input": b64(data), "hmac": made["hmac"], "hash_algorithm": algorithm}
    assert await _data(api, "verify/moved", body) == {"valid": True}
    body["input"] = b64(b"other")
    assert await _data(api, "verify/moved", body) == {"valid": False}


async def test_hmac_batches_and_refusals(api: Api) -> None:
    await _imported(api)
    made = await _data(api, "hmac/moved", {"batch_input": [{"input": b64(b"a")}, {"input": b64(b"b")}]})
    tags = [item["hmac"] for item in made["batch_results"]]
    bad_item = await _data(api, "hmac/moved", {"batch_input": [{"input": "!!"}]})  # 200, as OpenBao
    assert bad_item == {"batch_results": [{"error": "input must be base64", "reference": ""}]}
    checked = await _data(
        api,
        "verify/moved",
        {"batch_input": [{"input": b64(b"a"), "hmac": tags[0]}, {"input": b64(b"a"), "hmac": tags[1]}]},
    )
    assert checked == {"batch_results": [{"valid": True, "reference": ""}, {"valid": False, "reference": ""}]}
    await _errors(await _post(api, "hmac/moved/sha2-224", {"input": b64(b"a")}), 400)
    await _errors(await _post(api, "verify/moved", {"input": b64(b"a"), "signature": "vault:v1:AAAA"}), 400)
    await _errors(
        await _post(api, "verify/moved", {"input": b64(b"a"), "hmac": "ks:v1:" + b64(bytes(32))}), 400
    )


async def test_datakeys_open_through_decrypt(api: Api) -> None:
    await _data(api, "keys/env", {})
    made = await _data(api, "datakey/plaintext/env", {"bits": 512})
    assert len(base64.b64decode(made["plaintext"])) == 64 and made["key_version"] == 1
    opened = await _data(api, "decrypt/env", {"ciphertext": made["ciphertext"]})
    assert opened == {"plaintext": made["plaintext"]}
    wrapped = await _data(api, "datakey/wrapped/env", {})
    assert set(wrapped) == {"ciphertext", "key_version"}
    await _errors(await _post(api, "datakey/plaintext/env", {"bits": 100}), 400)
    await _errors(await _post(api, "datakey/other/env", {}), 400)


async def test_random_and_hash(api: Api) -> None:
    assert len(base64.b64decode((await _data(api, "random", {}))["random_bytes"])) == 32
    assert len((await _data(api, "random/16", {"format": "hex"}))["random_bytes"]) == 32
    await _errors(await _post(api, "random/0", {}), 400)
    await _errors(await _post(api, "random", {"bytes": 1 << 20}), 400)

    hashed = await _data(api, "hash", {"input": b64(b"abc")})
    assert hashed == {"sum": hashlib.sha256(b"abc").hexdigest()}
    sha3 = await _data(api, "hash/sha3-256", {"input": b64(b"abc"), "format": "base64"})
    assert sha3 == {"sum": b64(hashlib.sha3_256(b"abc").digest())}
    await _errors(await _post(api, "hash/md5", {"input": b64(b"abc")}), 400)


@pytest.mark.parametrize("content_type", [None, "application/x-www-form-urlencoded", "text/plain"])
async def test_a_body_is_json_whatever_its_content_type(api: Api, content_type: str | None) -> None:
    """As Vault reads it: ``curl -d`` sends a form type, some clients none."""
    await _data(api, "keys/typed", {})
    headers = dict(VAULT)
    if content_type is not None:
        headers["Content-Type"] = content_type
    body = f'{{"plaintext": "{b64(b"x")}"}}'
    made = await api.client.post("/v1/transit/encrypt/typed", content=body, headers=headers)
    assert made.status_code == 200, made.text
    bad = await api.client.post("/v1/transit/encrypt/typed", content=b"plaintext=eA==", headers=headers)
    assert len(await _errors(bad, 400)) == 1


async def test_batch_input_is_bounded_as_the_batch_routes_are(api: Api) -> None:
    """A Transit batch takes batch_max_bytes (100 items of 1 KiB are about 140 KB of JSON, over the 64 KiB
    of the other JSON routes, which answer 413 in Vault's shape)."""
    await _data(api, "keys/big", {})
    items = [{"plaintext": b64(os.urandom(1024))} for _ in range(100)]
    made = await _data(api, "encrypt/big", {"batch_input": items})
    assert len(made["batch_results"]) == 100
    too_large = await _post(api, "keys/big/config", {"deletion_allowed": False, "padding": "x" * 70000})
    assert len(await _errors(too_large, 413)) == 1
    many = await _post(api, "encrypt/big", {"batch_input": [{"plaintext": ""}] * 1001})
    assert await _errors(many, 413) == ["batch_input has 1001 items; the limit is 1000"]


async def test_writes_take_put_as_post_as_the_vault_command_sends_them(api: Api) -> None:
    created = await api.client.put("/v1/transit/keys/put", headers=VAULT)  # vault write -f transit/keys/put
    assert created.status_code == 200, created.text
    made = await api.client.put("/v1/transit/encrypt/put", json={"plaintext": b64(b"x")}, headers=VAULT)
    assert made.status_code == 200 and made.json()["data"]["ciphertext"].startswith("vault:v1:")
    schema = (await api.client.get("/openapi.json")).json()
    operations = schema["paths"]["/v1/transit/encrypt/{name}"]
    assert operations["put"]["operationId"] != operations["post"]["operationId"]
