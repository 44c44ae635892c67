"""The batch routes served ahead of FastAPI's stack (app/api/hotpath.py, ``serve_batch``): every request gets
the answer, the audit records and the request metrics it gets through the stack."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from app.api import hotpath
from app.core.config import Settings
from tests.app.api.conftest import ROOT_TOKEN, Api, Recorded, compared_headers, make_settings, recorded_run

BATCH_MAX_BYTES = 4096
BATCH_MAX_ITEMS = 3


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def _chunks(data: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(data), 1000):
        yield data[start : start + 1000]


async def _run_cases(api: Api) -> list[tuple[str, int, dict[str, str], Any]]:
    """Every kind of batch answer: successes, per-item errors, and each request-level refusal."""
    await api.create_key("k")
    sealed = (await api.encrypt("k", b"hello")).content
    encrypt_only = await api.create_token(["encrypt"])
    rewrapper = await api.create_token(["rewrap"])
    root = api.auth()
    good = {"items": [{"plaintext": b64(b"one"), "reference": "a"}, {"plaintext": "not base64!"}]}
    opened = {"items": [{"ciphertext": b64(sealed)}, {"ciphertext": b64(b"\x00" * 80), "reference": "x"}]}
    cases: list[tuple[str, str, dict[str, Any]]] = [
        ("encrypt", "/v1/keys/k/encrypt/batch", {"json": good, "headers": root}),
        ("decrypt", "/v1/keys/k/decrypt/batch", {"json": opened, "headers": root}),
        ("rewrap", "/v1/keys/k/rewrap/batch", {"json": opened, "headers": api.auth(rewrapper)}),
        (
            "rewrap needs its scope",
            "/v1/keys/k/rewrap/batch",
            {"json": opened, "headers": api.auth(encrypt_only)},
        ),
        ("no token", "/v1/keys/k/encrypt/batch", {"json": good}),
        ("bad token", "/v1/keys/k/encrypt/batch", {"json": good, "headers": api.auth("ks_nope_nope")}),
        ("scope", "/v1/keys/k/decrypt/batch", {"json": opened, "headers": api.auth(encrypt_only)}),
        ("unknown key", "/v1/keys/nope/encrypt/batch", {"json": good, "headers": root}),
        (
            "media type",
            "/v1/keys/k/encrypt/batch",
            {"content": json.dumps(good), "headers": root | {"Content-Type": "text/plain"}},
        ),
        (
            "media type with parameters",
            "/v1/keys/k/encrypt/batch",
            {
                "content": json.dumps(good),
                "headers": root | {"Content-Type": "Application/JSON; charset=utf-8"},
            },
        ),
        ("malformed", "/v1/keys/k/encrypt/batch", {"content": b"{", "headers": root}),
        ("unknown field", "/v1/keys/k/encrypt/batch", {"json": {"items": [{"x": 1}]}, "headers": root}),
        (
            "wrong item type",
            "/v1/keys/k/decrypt/batch",
            {"json": {"items": [{"ciphertext": 1}]}, "headers": root},
        ),
        (
            "too many items",
            "/v1/keys/k/encrypt/batch",
            {"json": {"items": [{"plaintext": ""}] * 4}, "headers": root},
        ),
        (
            "declared too large",
            "/v1/keys/k/encrypt/batch",
            {"content": b" " * (BATCH_MAX_BYTES + 1), "headers": root},
        ),
        (
            "chunked too large",
            "/v1/keys/k/encrypt/batch",
            {"content": _chunks(b" " * (BATCH_MAX_BYTES + 1)), "headers": root},
        ),
        (
            "chunked",
            "/v1/keys/k/encrypt/batch",
            {"content": _chunks(json.dumps(good).encode()), "headers": root},
        ),
        ("query: bad version", "/v1/keys/k/encrypt/batch?key_version=0", {"json": good, "headers": root}),
        ("query: version", "/v1/keys/k/decrypt/batch?key_version=1", {"json": opened, "headers": root}),
    ]
    answers = []
    for label, url, request in cases:
        response = await api.client.post(url, **request)
        headers = compared_headers(response)
        body = response.json()
        for result in body.get("results", []):
            if "ciphertext" in result:  # random nonces: compare the length
                result["ciphertext"] = len(base64.b64decode(result["ciphertext"]))
        answers.append((label, response.status_code, headers, body))
    return answers


def _tokens_numbered(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The audit records with each token id replaced by the order of its first appearance (ids are new at
    each run)."""
    tokens: dict[str | None, int] = {}
    for record in records:
        record["token_id"] = tokens.setdefault(record["token_id"], len(tokens))
    return records


async def _run(settings: Settings) -> Recorded:
    answers, counts, records = await recorded_run(settings, _run_cases, ("batch", "unmatched"))
    return answers, counts, _tokens_numbered(records)


async def test_batch_requests_get_the_stacks_answers_records_and_metrics(
    tmp_path: Path,
    stack_calls: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def settings(name: str) -> Settings:
        return make_settings(
            tmp_path / name,
            audit_log=str(tmp_path / f"{name}.log"),
            batch_max_bytes=BATCH_MAX_BYTES,
            batch_max_items=BATCH_MAX_ITEMS,
        )

    shortcut = await _run(settings("shortcut"))
    batch_calls = [path for path in stack_calls if "/batch" in path]
    assert batch_calls == ["/v1/keys/k/encrypt/batch?key_version=0", "/v1/keys/k/decrypt/batch?key_version=1"]
    monkeypatch.setattr(hotpath, "BATCH_ROUTE", re.compile(r"(?!)"))  # every batch request through the stack
    monkeypatch.setattr(hotpath, "_found_by_path", {})  # forget the paths the shortcut's run looked up
    stack_calls.clear()
    stack = await _run(settings("stack"))
    assert len([path for path in stack_calls if "/batch" in path]) == 19
    for (label, *mine), (_, *theirs) in zip(shortcut[0], stack[0], strict=True):
        assert mine == theirs, label
    statuses = [status for _, status, _, _ in shortcut[0]]
    assert statuses == [
        200,
        200,
        200,
        403,
        401,
        401,
        403,
        404,
        415,
        200,
        422,
        422,
        422,
        413,
        413,
        413,
        200,
        422,
        200,
    ]
    assert shortcut[1] == stack[1]
    assert shortcut[2] == stack[2]
    assert any(record.get("route") == "/v1/keys/{name}/rewrap/batch" for record in shortcut[2])


async def test_an_unexpected_error_in_a_batch_route_is_a_500_json(
    api: Api, monkeypatch: pytest.MonkeyPatch, stack_calls: list[str]
) -> None:
    await api.create_key("k")

    async def broken(*args: object) -> None:
        raise RuntimeError("secret detail")

    route, _ = hotpath._BATCH["encrypt"]
    monkeypatch.setitem(hotpath._BATCH, "encrypt", (route, broken))
    response = await api.client.post(
        "/v1/keys/k/encrypt/batch", json={"items": []}, headers=api.auth(ROOT_TOKEN)
    )
    assert response.status_code == 500
    assert response.json() == {"error": {"code": "internal_error", "message": "internal server error"}}
    assert stack_calls == ["/v1/keys"]
