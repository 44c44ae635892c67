"""The JSON routes ``/v1/keys/{name}/hmac``, ``/verify`` and ``/datakey``, ``/v1/random`` and ``/v1/hash``
served ahead of FastAPI's router (app/api/hotpath.py, app/api/request_handler.py): every request gets the
answer (headers included: a data key's ``Cache-Control: no-store``), the audit records and the request metrics
it gets through FastAPI, bad bodies included."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from app.api import hotpath
from app.core.config import Settings
from tests.app.api.conftest import ROOT_TOKEN, Api, compared_headers, make_settings, recorded_run

MATERIAL = bytes(range(32))
#: A data key request's required fields: the sealed key only.
KEY_ONLY = {"type": "aes256", "plaintext": False}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def _run_cases(api: Api) -> list[tuple[str, int, dict[str, str], Any]]:
    imported = await api.client.post("/v1/keys/tags/import", json={"key": b64(MATERIAL)}, headers=api.auth())
    assert imported.status_code == 201, imported.text
    derived = await api.client.post(
        "/v1/keys", json={"name": "per-tenant", "type": "aes256", "derived": True}, headers=api.auth()
    )
    assert derived.status_code == 201, derived.text
    hmac, verify, datakey = "/v1/keys/tags/hmac", "/v1/keys/tags/verify", "/v1/keys/tags/datakey"
    # The HMAC key derives from the imported material: the same tag in both runs (this request is in both).
    made = await api.client.post(hmac, json={"input": b64(b"row 7")}, headers=api.auth())
    assert made.status_code == 200, made.text
    tag = made.json()["hmac"]
    hmac_only = await api.create_token(["hmac"], ["tags"])
    made_random = ("ciphertext", "plaintext", "random")

    def typed(content: bytes | str, media_type: str = "application/json") -> dict[str, Any]:
        return {"content": content, "headers": {**api.auth(), "Content-Type": media_type}}

    def sent(body: Any, **headers: str) -> dict[str, Any]:
        return {"json": body, "headers": {**api.auth(), **headers}}

    cases: list[tuple[str, str, dict[str, Any]]] = [
        ("hmac", hmac, sent({"input": b64(b"row 7")})),
        ("hmac, sha2-512", hmac, sent({"input": b64(b"row 7"), "algorithm": "sha2-512"})),
        ("hmac, key_version", hmac, sent({"input": b64(b"x"), "key_version": 1})),
        ("hmac, no such version", hmac, sent({"input": b64(b"x"), "key_version": 9})),
        ("hmac, unknown algorithm", hmac, sent({"input": b64(b"x"), "algorithm": "md5"})),
        ("hmac, bad base64", hmac, sent({"input": "not base64!"})),
        ("hmac, context on a key not derived", hmac, sent({"input": b64(b"x"), "context": b64(b"t")})),
        ("hmac, derived key", "/v1/keys/per-tenant/hmac", sent({"input": b64(b"x"), "context": b64(b"t")})),
        ("hmac, derived key without context", "/v1/keys/per-tenant/hmac", sent({"input": b64(b"x")})),
        ("hmac, unknown key", "/v1/keys/nope/hmac", sent({"input": b64(b"x")})),
        ("hmac, unknown field", hmac, sent({"input": b64(b"x"), "extra": 1})),
        ("hmac, wrong types", hmac, sent({"input": 1, "key_version": "1"})),
        ("hmac, a list", hmac, sent([{"input": b64(b"x")}])),
        ("hmac, empty", hmac, typed(b"")),
        ("hmac, malformed", hmac, typed(b'{"input": ')),
        ("hmac, NaN", hmac, typed(b'{"key_version": NaN}')),
        ("hmac, not utf-8", hmac, typed(b'{"input": "\xff"}')),
        ("hmac, media type", hmac, typed(json.dumps({"input": b64(b"x")}), "text/plain")),
        ("hmac, a query", hmac + "?x=1", sent({"input": b64(b"x")})),
        ("hmac, no token", hmac, {"json": {"input": b64(b"x")}}),
        ("hmac, two Authorization headers", hmac, {"json": {}, "headers": [("Authorization", "a")] * 2}),
        ("hmac, body too large", hmac, typed(b" " * 70_000)),
        ("verify", verify, sent({"input": b64(b"row 7"), "hmac": tag})),
        ("verify, other input", verify, sent({"input": b64(b"row 8"), "hmac": tag})),
        ("verify, malformed tag", verify, sent({"input": b64(b"row 7"), "hmac": "ks:v1:%%"})),
        (
            "verify, no such version",
            verify,
            sent({"input": b64(b"row 7"), "hmac": "ks:v9:" + b64(bytes(32))}),
        ),
        ("verify, missing hmac", verify, sent({"input": b64(b"row 7")})),
        (
            "verify, scope missing",
            verify,
            sent({"input": b64(b"row 7"), "hmac": tag}, Authorization=f"Bearer {hmac_only}"),
        ),
        ("verify, unknown key", "/v1/keys/nope/verify", sent({"input": b64(b"x"), "hmac": tag})),
        ("datakey", datakey, sent(KEY_ONLY)),
        ("datakey, plaintext too", datakey, sent({"plaintext": True, "type": "aes128"})),
        ("datakey, associated data", datakey, sent({**KEY_ONLY, "associated_data": b64(b"ad")})),
        ("datakey, derived key", "/v1/keys/per-tenant/datakey", sent({**KEY_ONLY, "context": b64(b"t")})),
        ("datakey, unknown type", datakey, sent({**KEY_ONLY, "type": "des"})),
        ("datakey, bad context", datakey, sent({**KEY_ONLY, "context": "%%"})),
        ("datakey, scope missing", datakey, sent(KEY_ONLY, Authorization=f"Bearer {hmac_only}")),
        ("datakey, media type", datakey, typed("{}", "text/plain")),
        ("datakey, unknown key", "/v1/keys/nope/datakey", sent(KEY_ONLY)),
        ("datakey, missing plaintext", datakey, sent({"type": "aes256"})),
        ("random", "/v1/random", sent({"bytes": 16})),
        ("random, hex", "/v1/random", sent({"bytes": 8, "format": "hex"})),
        ("random, too many", "/v1/random", sent({"bytes": 10**9})),
        ("random, no token", "/v1/random", {"json": {"bytes": 16}}),
        ("hash", "/v1/hash", sent({"input": b64(b"abc")})),
        (
            "hash, sha2-512 hex",
            "/v1/hash",
            sent({"input": b64(b"abc"), "algorithm": "sha2-512", "format": "hex"}),
        ),
        ("hash, bad base64", "/v1/hash", sent({"input": "%%"})),
        ("hash, malformed", "/v1/hash", typed(b"{")),
    ]
    answers = []
    for label, url, request in cases:
        response = await api.client.post(url, **request)
        answer = response.json()
        if label == "hmac, derived key":  # a generated key: its tags differ from one run to the next
            answer = {**answer, "hmac": answer["hmac"][:6]}
        if response.status_code == 200:  # fresh data keys and random bytes: their lengths only
            answer = {key: len(value) if key in made_random else value for key, value in answer.items()}
        answers.append((label, response.status_code, compared_headers(response, "content-length"), answer))
    return answers


def _tokens_named(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The audit records with the id of the token each run creates (random) replaced by a name."""
    root = ROOT_TOKEN.split("_")[1]
    return [
        {
            **record,
            "token_id": record.get("token_id") if record.get("token_id") in (None, root) else "created",
        }
        for record in records
    ]


async def test_json_routes_get_the_answers_records_and_metrics_they_get_through_fastapi(
    tmp_path: Path, stack_calls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def settings(name: str) -> Settings:
        return make_settings(tmp_path / name, audit_log=str(tmp_path / f"{name}.log"), allow_key_import=True)

    def fastapi_calls() -> list[str]:
        return [
            path
            for path in stack_calls
            if path.endswith(("/hmac", "/verify", "/datakey", "/v1/random", "/v1/hash")) or "/hmac?" in path
        ]

    counted = ("hmac", "verify", "datakey", "random", "hash")
    shortcut = await recorded_run(settings("shortcut"), _run_cases, counted)
    assert fastapi_calls() == []
    monkeypatch.setattr(hotpath, "_KEY_JSON", {})  # every one of these requests through FastAPI
    monkeypatch.setattr(hotpath, "_FIXED", {})
    monkeypatch.setattr(hotpath, "_found_by_path", {})  # forget the paths the shortcut's run looked up
    stack_calls.clear()
    stack = await recorded_run(settings("stack"), _run_cases, counted)
    assert len(fastapi_calls()) == 48
    for (label, *mine), (_, *theirs) in zip(shortcut[0], stack[0], strict=True):
        assert mine == theirs, label
    statuses = {label: status for label, status, _, _ in shortcut[0]}
    assert statuses["hmac"] == statuses["verify"] == statuses["verify, other input"] == 200
    assert statuses["hmac, derived key"] == 200 and statuses["hmac, unknown key"] == 404
    assert statuses["hmac, malformed"] == 422 and statuses["hmac, media type"] == 415
    assert statuses["hmac, no token"] == 401 and statuses["verify, scope missing"] == 403
    assert statuses["hmac, body too large"] == 413
    assert statuses["datakey"] == statuses["random"] == statuses["hash"] == 200
    assert statuses["datakey, scope missing"] == 403 and statuses["random, too many"] == 422
    headers = {label: headers for label, _, headers, _ in shortcut[0]}
    assert headers["datakey"]["cache-control"] == headers["random"]["cache-control"] == "no-store"
    answers = {label: answer for label, _, _, answer in shortcut[0]}
    assert answers["hash"]["sum"] == "ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0="
    assert answers["verify"]["valid"] is True and answers["verify, other input"]["valid"] is False
    assert shortcut[1] == stack[1] and shortcut[1]
    assert _tokens_named(shortcut[2]) == _tokens_named(stack[2]) and shortcut[2]
