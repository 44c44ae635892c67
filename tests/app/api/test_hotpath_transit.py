"""The Transit API's encrypt, decrypt, rewrap, hmac and verify served ahead of FastAPI's router
(app/api/hotpath.py): every request gets the answer, the audit records and the request metrics it gets through
FastAPI, bad bodies included."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from app.api import hotpath
from app.core.config import Settings
from tests.app.api.conftest import ROOT_TOKEN, Api, compared_headers, make_settings, recorded_run

MATERIAL = bytes(range(32))
NONCE = bytes(12)
VAULT = {"X-Vault-Token": ROOT_TOKEN}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def vault_ciphertext(plaintext: bytes, associated_data: bytes | None = None) -> str:
    """A ciphertext as Vault makes it under ``MATERIAL`` (a fixed nonce, so both runs send the same one)."""
    return "vault:v1:" + b64(NONCE + AESGCM(MATERIAL).encrypt(NONCE, plaintext, associated_data))


def _stable(answer: Any) -> Any:
    """The answer without what differs from one request to the next: request ids and fresh ciphertexts."""
    if isinstance(answer, dict):
        return {
            key: ("<random>" if key in ("request_id", "ciphertext") else _stable(value))
            for key, value in answer.items()
        }
    if isinstance(answer, list):
        return [_stable(value) for value in answer]
    return answer


async def _run_cases(api: Api) -> list[tuple[str, int, dict[str, str], Any]]:
    imported = await api.client.post("/v1/keys/moved/import", json={"key": b64(MATERIAL)}, headers=api.auth())
    assert imported.status_code == 201, imported.text
    encrypt, decrypt = "/v1/transit/encrypt/moved", "/v1/transit/decrypt/moved"
    rewrap = "/v1/transit/rewrap/moved"
    hmac, verify = "/v1/transit/hmac/moved", "/v1/transit/verify/moved"
    # The HMAC key derives from the imported material: the same in both runs (this request is one of them).
    made = await api.client.post(hmac, json={"input": b64(b"row 7")}, headers=VAULT)
    assert made.status_code == 200, made.text
    mac = made.json()["data"]["hmac"]
    good = vault_ciphertext(b"order 42")
    with_ad = vault_ciphertext(b"row", b"ad")
    tampered = good[:-4] + ("AAAA" if not good.endswith("AAAA") else "BBBB")

    def typed(content: bytes | str, media_type: str | None = "application/json") -> dict[str, Any]:
        headers = dict(VAULT)
        if media_type is not None:
            headers["Content-Type"] = media_type
        return {"content": content, "headers": headers}

    def vault(body: Any) -> dict[str, Any]:
        return {"json": body, "headers": VAULT}

    cases: list[tuple[str, str, dict[str, Any]]] = [
        ("encrypt", encrypt, vault({"plaintext": b64(b"hello")})),
        ("encrypt, bearer", encrypt, {"json": {"plaintext": b64(b"x")}, "headers": api.auth()}),
        ("encrypt, no content type", encrypt, typed(json.dumps({"plaintext": b64(b"x")}), None)),
        ("encrypt, form type (curl -d)", encrypt, typed(json.dumps({"plaintext": b64(b"x")}), "text/plain")),
        ("encrypt, key_version", encrypt, vault({"plaintext": b64(b"x"), "key_version": 1})),
        ("encrypt, no such version", encrypt, vault({"plaintext": b64(b"x"), "key_version": 9})),
        ("encrypt, associated data", encrypt, vault({"plaintext": b64(b"x"), "associated_data": b64(b"ad")})),
        ("encrypt, batch", encrypt, vault({"batch_input": [{"plaintext": b64(b"a"), "reference": "1"}] * 3})),
        ("encrypt, batch with a bad item", encrypt, vault({"batch_input": [{"plaintext": "%%"}, {}]})),
        ("encrypt, unknown key", "/v1/transit/encrypt/nope", vault({"plaintext": b64(b"x")})),
        ("encrypt, bad base64", encrypt, vault({"plaintext": "not base64!"})),
        ("encrypt, missing plaintext", encrypt, vault({})),
        ("encrypt, nonce", encrypt, vault({"plaintext": b64(b"x"), "nonce": b64(bytes(12))})),
        ("encrypt, wrong types", encrypt, vault({"plaintext": 1, "key_version": "1"})),
        ("encrypt, a list", encrypt, vault([{"plaintext": b64(b"x")}])),
        ("encrypt, null", encrypt, typed(b"null")),
        ("encrypt, empty", encrypt, typed(b"")),
        ("encrypt, malformed", encrypt, typed(b'{"plaintext": ')),
        ("encrypt, not utf-8", encrypt, typed(b'{"plaintext": "\xff"}')),
        ("encrypt, NaN", encrypt, typed(b'{"key_version": NaN}')),
        ("encrypt, unknown field ignored", encrypt, vault({"plaintext": b64(b"x"), "convergent": None})),
        ("encrypt, no token", encrypt, {"json": {"plaintext": b64(b"x")}}),
        ("encrypt, wrong token", encrypt, {"json": {}, "headers": {"X-Vault-Token": "ks_0_x"}}),
        ("encrypt, two tokens", encrypt, {"json": {}, "headers": [("X-Vault-Token", ROOT_TOKEN)] * 2}),
        ("encrypt, a query", encrypt + "?x=1", vault({"plaintext": b64(b"x")})),
        ("encrypt, body too large", encrypt, typed(json.dumps({"plaintext": "A" * 20_000_000}))),
        ("decrypt", decrypt, vault({"ciphertext": good})),
        ("decrypt, associated data", decrypt, vault({"ciphertext": with_ad, "associated_data": b64(b"ad")})),
        ("decrypt, wrong associated data", decrypt, vault({"ciphertext": with_ad})),
        ("decrypt, tampered", decrypt, vault({"ciphertext": tampered})),
        ("decrypt, not vault's", decrypt, vault({"ciphertext": "v1:abc"})),
        ("decrypt, batch", decrypt, vault({"batch_input": [{"ciphertext": good}, {"ciphertext": tampered}]})),
        ("decrypt, unknown key", "/v1/transit/decrypt/nope", vault({"ciphertext": good})),
        ("rewrap", rewrap, vault({"ciphertext": good})),
        ("rewrap, associated data", rewrap, vault({"ciphertext": with_ad, "associated_data": b64(b"ad")})),
        ("rewrap, tampered", rewrap, vault({"ciphertext": tampered})),
        ("rewrap, no such version", rewrap, vault({"ciphertext": good, "key_version": 9})),
        ("rewrap, batch", rewrap, vault({"batch_input": [{"ciphertext": good}, {"ciphertext": "v1:x"}]})),
        ("rewrap, missing ciphertext", rewrap, vault({})),
        ("rewrap, malformed", rewrap, typed(b'{"ciphertext": ')),
        ("rewrap, no token", rewrap, {"json": {"ciphertext": good}}),
        ("rewrap, a query", rewrap + "?x=1", vault({"ciphertext": good})),
        ("rewrap, unknown key", "/v1/transit/rewrap/nope", vault({"ciphertext": good})),
        ("hmac", hmac, vault({"input": b64(b"row 7")})),
        ("hmac, sha2-512", hmac, vault({"input": b64(b"row 7"), "algorithm": "sha2-512"})),
        ("hmac, unknown algorithm", hmac, vault({"input": b64(b"x"), "algorithm": "md5"})),
        ("hmac, batch", hmac, vault({"batch_input": [{"input": b64(b"a")}, {"input": "%%"}]})),
        ("hmac, missing input", hmac, vault({})),
        ("hmac, no token", hmac, {"json": {"input": b64(b"x")}}),
        ("verify", verify, vault({"input": b64(b"row 7"), "hmac": mac})),
        ("verify, other input", verify, vault({"input": b64(b"row 8"), "hmac": mac})),
        ("verify, malformed hmac", verify, vault({"input": b64(b"row 7"), "hmac": "vault:v1:%%"})),
        ("verify, batch", verify, vault({"batch_input": [{"input": b64(b"row 7"), "hmac": mac}, {}]})),
        ("verify, unknown key", "/v1/transit/verify/nope", vault({"input": b64(b"x"), "hmac": mac})),
        ("verify, wrong types", verify, vault({"input": 1, "hmac": ["x"]})),
    ]
    answers = []
    for label, url, request in cases:
        response = await api.client.post(url, **request)
        headers = compared_headers(response, "content-length")
        answers.append((label, response.status_code, headers, _stable(response.json())))
    return answers


async def test_data_operations_get_the_answers_records_and_metrics_they_get_through_fastapi(
    tmp_path: Path, stack_calls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def settings(name: str) -> Settings:
        return make_settings(
            tmp_path / name,
            audit_log=str(tmp_path / f"{name}.log"),
            allow_key_import=True,
            batch_max_bytes=16 * 2**20,
        )

    shortcut = await recorded_run(settings("shortcut"), _run_cases, ("transit",))
    assert not [path for path in stack_calls if "/v1/transit/" in path]
    monkeypatch.setattr(hotpath, "_TRANSIT", {})  # every Transit request through FastAPI
    monkeypatch.setattr(hotpath, "_found_by_path", {})  # forget the paths the shortcut's run looked up
    stack_calls.clear()
    stack = await recorded_run(settings("stack"), _run_cases, ("transit",))
    assert len([path for path in stack_calls if "/v1/transit/" in path]) == 56
    for (label, *mine), (_, *theirs) in zip(shortcut[0], stack[0], strict=True):
        assert mine == theirs, label
    statuses = {label: status for label, status, _, _ in shortcut[0]}
    assert statuses["encrypt"] == statuses["decrypt"] == statuses["encrypt, form type (curl -d)"] == 200
    assert statuses["encrypt, malformed"] == statuses["encrypt, bad base64"] == 400
    assert statuses["encrypt, no token"] == 403 and statuses["encrypt, body too large"] == 413
    decrypted = {label: answer for label, _, _, answer in shortcut[0]}["decrypt"]
    assert base64.b64decode(decrypted["data"]["plaintext"]) == b"order 42"
    assert statuses["rewrap"] == statuses["rewrap, associated data"] == 200
    assert statuses["rewrap, tampered"] == 400 and statuses["rewrap, no token"] == 403
    assert statuses["hmac"] == statuses["verify"] == statuses["verify, other input"] == 200
    answers = {label: answer for label, _, _, answer in shortcut[0]}
    assert (
        answers["hmac"]["data"]["hmac"].startswith("vault:v1:") and answers["verify"]["data"]["valid"] is True
    )
    assert answers["verify, other input"]["data"]["valid"] is False
    assert shortcut[1] == stack[1] and shortcut[1]
    assert shortcut[2] == stack[2] and shortcut[2]
