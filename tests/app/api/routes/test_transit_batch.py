"""Transit batches whose items need different ciphers: the route makes each (version, context) cipher once,
on the first item that asks, and runs the later items without awaiting anything. These tests mix versions,
contexts, failures and made-once failures in one batch, on both ways of serving (the fast dispatcher and
FastAPI, which a ``root_path`` selects), and check the answers item by item and the body byte for byte as
``JSONResponse`` writes it."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from starlette.responses import JSONResponse

from app.api.vault import vault_response
from app.core.config import Settings
from app.formats.derivation import derive_transit
from app.services.transit import MISSING_CONTEXT
from tests.app.api.conftest import ROOT_TOKEN, Api, running_api
from tests.app.api.routes.test_mac import MATERIAL, b64

VAULT = {"X-Vault-Token": ROOT_TOKEN}
UNKNOWN_VERSION = "key 'mixed' has no version 9 (versions 1 to 2)"


@pytest.fixture(params=["dispatcher", "fastapi"])
async def api(
    settings_factory: Callable[..., Settings], request: pytest.FixtureRequest
) -> AsyncIterator[Api]:
    """The app, served by the fast dispatcher or (with a ``root_path``) by FastAPI."""
    async with running_api(settings_factory(allow_key_import=True)) as value:
        if request.param == "fastapi":
            value.app.root_path = "/prefix"
        yield value


async def _post(api: Api, path: str, body: dict[str, Any]) -> httpx.Response:
    response = await api.client.post(f"/v1/transit/{path}", json=body, headers=VAULT)
    # The body is what JSONResponse writes for the same answer.
    assert response.content == json.dumps(
        response.json(), ensure_ascii=False, allow_nan=False, separators=(",", ":")
    ).encode("utf-8")
    assert response.headers["content-type"] == "application/json"
    return response


def _results(response: httpx.Response, status: int) -> list[dict[str, Any]]:
    assert response.status_code == status, response.text
    return list(response.json()["data"]["batch_results"])


async def _rotated(api: Api, name: str = "mixed", **options: Any) -> None:
    """Key ``name`` with known material as version 1 and a second, random version."""
    made = await api.client.post(
        f"/v1/keys/{name}/import", json={"key": b64(MATERIAL), **options}, headers=api.auth()
    )
    assert made.status_code == 201, made.text
    rotated = await api.client.post(f"/v1/transit/keys/{name}/rotate", json={}, headers=VAULT)
    assert rotated.status_code == 200, rotated.text


async def test_a_batch_mixing_versions_and_failures(api: Api) -> None:
    await _rotated(api)
    items = [
        {"plaintext": b64(b"latest"), "reference": "a"},
        {"plaintext": b64(b"first"), "key_version": 1, "reference": "b"},
        {"plaintext": "!!", "key_version": 1, "reference": "c"},
        {"plaintext": b64(b"none"), "key_version": 9, "reference": "d"},
        {"plaintext": b64(b"again"), "key_version": 1},
        {"plaintext": b64(b"nine again"), "key_version": 9, "reference": "é\n\u2028"},
        {"plaintext": b64(b"nonce"), "nonce": b64(b"n"), "reference": "f"},
        {"reference": "g"},
        {"plaintext": b64(b"last"), "associated_data": b64(b"ad"), "reference": "h"},
    ]
    results = _results(await _post(api, "encrypt/mixed", {"batch_input": items}), 400)
    assert [r["reference"] for r in results] == ["a", "b", "c", "d", "", "é\n\u2028", "f", "g", "h"]
    assert [r.get("key_version") for r in results] == [2, 1, None, None, 1, None, None, None, 2]
    assert [r.get("error") for r in results] == [
        None,
        None,
        "plaintext must be base64",
        UNKNOWN_VERSION,
        None,
        UNKNOWN_VERSION,
        "nonce provided when not allowed",
        "missing plaintext",
        None,
    ]
    raw = base64.b64decode(results[1]["ciphertext"].removeprefix("vault:v1:"))
    assert AESGCM(MATERIAL).decrypt(raw[:12], raw[12:], None) == b"first"

    ciphertexts = [r["ciphertext"] for r in results if "ciphertext" in r]
    opened = _results(
        await _post(
            api,
            "decrypt/mixed",
            {
                "batch_input": [
                    {"ciphertext": ciphertexts[0]},
                    {"ciphertext": ciphertexts[1]},
                    {"ciphertext": ciphertexts[3]},  # needs its associated data
                    {"ciphertext": ciphertexts[2]},
                    {"ciphertext": "vault:v9:" + b64(bytes(40))},
                    {"ciphertext": "vault:v1:%%"},
                    {"ciphertext": ciphertexts[3], "associated_data": b64(b"ad")},
                ]
            },
        ),
        400,
    )
    assert opened == [
        {"plaintext": b64(b"latest"), "reference": ""},
        {"plaintext": b64(b"first"), "reference": ""},
        {"error": "cipher: message authentication failed", "reference": ""},
        {"plaintext": b64(b"again"), "reference": ""},
        {"error": UNKNOWN_VERSION, "reference": ""},
        {"error": "invalid ciphertext: expected vault:v<version>:<base64>", "reference": ""},
        {"plaintext": b64(b"last"), "reference": ""},
    ]

    rewrapped = _results(
        await _post(
            api,
            "rewrap/mixed",
            {
                "batch_input": [
                    {"ciphertext": ciphertexts[1]},
                    {"ciphertext": ciphertexts[0], "key_version": 1},
                ]
            },
        ),
        200,
    )
    assert [r["key_version"] for r in rewrapped] == [2, 1]
    again = _results(
        await _post(
            api, "decrypt/mixed", {"batch_input": [{"ciphertext": r["ciphertext"]} for r in rewrapped]}
        ),
        200,
    )
    assert [r["plaintext"] for r in again] == [b64(b"first"), b64(b"latest")]


async def test_a_derived_batch_with_and_without_contexts(api: Api) -> None:
    await _rotated(api, "tenants", derived=True)
    items = [
        {"plaintext": b64(b"a"), "context": b64(b"t1"), "key_version": 1},
        {"plaintext": b64(b"b"), "context": b64(b"t2"), "key_version": 1},
        {"plaintext": b64(b"c")},
        {"plaintext": b64(b"d"), "context": ""},
        {"plaintext": b64(b"e"), "context": b64(b"t1"), "key_version": 1},
        {"plaintext": b64(b"f"), "context": "%%"},
        {"plaintext": b64(b"g"), "context": b64(b"t1")},
    ]
    results = _results(await _post(api, "encrypt/tenants", {"batch_input": items}), 400)
    assert [r.get("error") for r in results] == [
        None,
        None,
        MISSING_CONTEXT,
        MISSING_CONTEXT,
        None,
        "context must be base64",
        None,
    ]
    assert [r.get("key_version") for r in results] == [1, 1, None, None, 1, None, 2]
    for result, context, plaintext in (
        (results[0], b"t1", b"a"),
        (results[4], b"t1", b"e"),
        (results[1], b"t2", b"b"),
    ):
        raw = base64.b64decode(result["ciphertext"].removeprefix("vault:v1:"))
        key = bytes(derive_transit(MATERIAL, context, 32))
        assert AESGCM(key).decrypt(raw[:12], raw[12:], None) == plaintext

    opened = _results(
        await _post(
            api,
            "decrypt/tenants",
            {
                "batch_input": [
                    {"ciphertext": results[0]["ciphertext"], "context": b64(b"t1")},
                    {"ciphertext": results[1]["ciphertext"], "context": b64(b"t1")},  # the wrong context
                    {"ciphertext": results[1]["ciphertext"]},
                    {"ciphertext": results[6]["ciphertext"], "context": b64(b"t1")},
                    {"ciphertext": results[1]["ciphertext"], "context": b64(b"t2")},
                ]
            },
        ),
        400,
    )
    assert [r.get("plaintext") or r["error"] for r in opened] == [
        b64(b"a"),
        "cipher: message authentication failed",
        MISSING_CONTEXT,
        b64(b"g"),
        b64(b"b"),
    ]


async def test_an_items_own_error_comes_before_its_versions(api: Api) -> None:
    """A malformed plaintext or ciphertext is the item's error even when its version or context fails too,
    whether that failure is met first in the batch or already kept."""
    await _rotated(api)
    await _rotated(api, "tenants", derived=True)
    for name in ("mixed", "tenants"):
        items = [
            {"plaintext": "!!", "key_version": 9},
            {"plaintext": b64(b"x"), "key_version": 9},
            {"plaintext": "!!", "key_version": 9},
            {"plaintext": "!!", "context": "%%"},
            {"plaintext": "!!", "key_version": 1},
        ]
        results = _results(await _post(api, f"encrypt/{name}", {"batch_input": items}), 400)
        version_error = UNKNOWN_VERSION.replace("mixed", name)
        assert [r["error"] for r in results[:4]] == [
            "plaintext must be base64",
            version_error,
            "plaintext must be base64",
            "plaintext must be base64",
        ]
        ciphertexts = [
            {"ciphertext": "vault:v9:QQ"},
            {"ciphertext": "vault:v9:" + b64(bytes(40))},
            {"ciphertext": "vault:v9:QQ"},
            {"ciphertext": "vault:v1:QQ", "context": "%%"},
            {"ciphertext": "vault:v1:QQ"},
        ]
        opened = _results(await _post(api, f"decrypt/{name}", {"batch_input": ciphertexts}), 400)
        assert [r["error"] for r in opened] == [
            "invalid ciphertext: malformed base64",
            version_error,
            "invalid ciphertext: malformed base64",
            "invalid ciphertext: malformed base64",
            "invalid ciphertext: malformed base64",
        ]
        single = await _post(api, f"decrypt/{name}", {"ciphertext": "vault:v9:QQ"})
        assert single.status_code == 400 and single.json() == {
            "errors": ["invalid ciphertext: malformed base64"]
        }


async def test_an_unknown_key_fails_the_request_not_each_item(api: Api) -> None:
    response = await _post(api, "encrypt/nowhere", {"batch_input": [{"plaintext": b64(b"x")}] * 3})
    assert response.status_code == 400, response.text  # Vault's status for a key it lacks
    assert response.json() == {"errors": ["key 'nowhere' not found"]}


async def test_single_requests_answer_as_before(api: Api) -> None:
    await _rotated(api)
    made = await _post(api, "encrypt/mixed", {"plaintext": b64(b"one"), "key_version": 1})
    assert made.status_code == 200 and made.json()["data"]["key_version"] == 1
    opened = await _post(api, "decrypt/mixed", {"ciphertext": made.json()["data"]["ciphertext"]})
    assert opened.json()["data"] == {"plaintext": b64(b"one")}
    for path, body, error in (
        ("encrypt/mixed", {"plaintext": b64(b"x"), "key_version": 9}, UNKNOWN_VERSION),
        ("encrypt/mixed", {"plaintext": "!!"}, "plaintext must be base64"),
        ("decrypt/mixed", {"ciphertext": "vault:v9:" + b64(bytes(40))}, UNKNOWN_VERSION),
    ):
        failed = await _post(api, path, body)
        assert failed.status_code == 400, failed.text
        assert failed.json() == {"errors": [error]}


@pytest.mark.parametrize("status", [200, 400])
def test_vault_response_writes_what_json_response_writes(status: int) -> None:
    text = "".join(chr(code) for code in range(0x10FFFF + 1) if not 0xD800 <= code < 0xE000)
    data = {"batch_results": [{"reference": text, "key_version": 7, "valid": False, "none": None}]}
    ours = vault_response(data, status)
    answer = json.loads(bytes(ours.body))
    assert ours.body == JSONResponse(answer, status_code=status).body
    assert ours.status_code == status
    assert ours.headers.items() == JSONResponse(answer, status_code=status).headers.items()


def test_vault_response_fails_as_json_response_on_a_lone_surrogate() -> None:
    with pytest.raises(UnicodeEncodeError):
        vault_response({"reference": "\ud800"})


async def test_the_body_limit_answers_a_cached_token_without_awaiting(
    settings_factory: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The JSON routes' token check awaits TokenVerifier.authenticate only when the token is not cached;
    a revoked token is refused as before."""
    from app.services.security import TokenVerifier

    awaited: list[str] = []
    original = TokenVerifier.authenticate

    async def counted(self: TokenVerifier, authorization: str | None) -> Any:
        awaited.append("authenticate")
        return await original(self, authorization)

    monkeypatch.setattr(TokenVerifier, "authenticate", counted)
    async with running_api(settings_factory(token_cache_ttl=60.0, key_metadata_ttl=60.0)) as api:
        assert (await api.client.post("/v1/transit/keys/k", json={}, headers=VAULT)).status_code in (200, 204)
        token = await api.create_token(["encrypt"])
        headers = {"X-Vault-Token": token}
        body = {"batch_input": [{"plaintext": b64(b"x")}]}
        awaited.clear()
        first = await api.client.post("/v1/transit/encrypt/k", json=body, headers=headers)
        assert first.status_code == 200, first.text
        assert awaited == ["authenticate"]  # not cached yet
        for _ in range(5):  # (the change-log follower may forget the new token once more)
            awaited.clear()
            again = await api.client.post("/v1/transit/encrypt/k", json=body, headers=headers)
            assert again.status_code == 200, again.text
            if not awaited:
                break
        assert awaited == []
        token_id = token.split("_")[1]
        revoked = await api.client.delete(f"/v1/tokens/{token_id}", headers=api.auth())
        assert revoked.status_code == 204, revoked.text
        refused = await api.client.post("/v1/transit/encrypt/k", json=body, headers=headers)
        assert refused.status_code == 403, refused.text
        assert refused.json() == {"errors": ["invalid token"]}
