"""The JWT and certificate logins served ahead of FastAPI's router (app/api/hotpath.py): every request gets
the answer, the audit records and the request metrics it gets through FastAPI, bad bodies included."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.api import hotpath
from app.core.config import Settings
from tests.app.api.conftest import Api, Recorded, compared_headers, make_settings, recorded_run
from tests.jwt_issuer import Signer, k8s_claims, k8s_role

SIGNER = Signer.ec("parity-key")
ROLE = k8s_role()
#: The fields of a login's answer that differ from one login to the next.
ISSUED = ("token", "id", "expires_at", "max_expires_at", "created_at")


async def _run_cases(api: Api) -> list[tuple[str, int, dict[str, str], Any]]:
    """Every kind of login answer: a token, each refusal of the login, each refusal of the request."""
    config = {"jwt_validation_pubkeys": [SIGNER.public_pem()]}
    assert (await api.client.post("/v1/auth/jwt/config", json=config, headers=api.auth())).status_code == 200
    assert (await api.client.post("/v1/auth/roles/billing", json=ROLE, headers=api.auth())).status_code == 200
    good = SIGNER.sign(k8s_claims("billing", "api"))
    body = {"role": "billing", "jwt": good}
    login, cert_login = "/v1/auth/jwt/login", "/v1/auth/cert/login"

    def typed(content: bytes | str, media_type: str = "application/json") -> dict[str, Any]:
        return {"content": content, "headers": {"Content-Type": media_type}}

    cases: list[tuple[str, str, dict[str, Any]]] = [
        ("login", login, {"json": body}),
        ("login with a query", f"{login}?x=1", {"json": body}),
        ("charset", login, typed(json.dumps(body), "application/json; charset=utf-8")),
        ("no role", login, {"json": {"role": "nope", "jwt": good}}),
        ("other namespace", login, {"json": {**body, "jwt": SIGNER.sign(k8s_claims("payroll", "api"))}}),
        ("malformed jwt", login, {"json": {"role": "billing", "jwt": "a.b"}}),
        ("jwt too long", login, {"json": {"role": "billing", "jwt": "a" * 17_000}}),
        ("media type", login, typed(json.dumps(body), "text/plain")),
        ("+json media type, malformed", login, typed(b"{", "application/merge-patch+json")),
        ("+json media type", login, typed(json.dumps(body), "application/merge-patch+json")),
        ("no media type", login, typed(json.dumps(body), "")),
        ("empty", login, typed(b"")),
        ("null", login, typed(b"null")),
        ("malformed", login, typed(b'{"role": ')),
        ("not utf-8", login, typed(b'{"role": "\xff"}')),
        ("NaN", login, typed(b'{"role": NaN}')),
        ("a list", login, {"json": [body]}),
        ("missing jwt", login, {"json": {"role": "billing"}}),
        ("wrong types", login, {"json": {"role": 1, "jwt": ["x"]}}),
        ("unknown field", login, {"json": {**body, "extra": 1}}),
        ("role too long", login, {"json": {"role": "r" * 200, "jwt": good}}),
        ("two Authorization headers", login, {"json": body, "headers": [("Authorization", "a")] * 2}),
        ("body too large", login, typed(b" " * 70_000)),
        ("cert login without a certificate", cert_login, {"json": {"role": "billing"}}),
        ("cert login, bad body", cert_login, {"json": {"role": "billing", "jwt": "x"}}),
    ]
    answers = []
    for label, url, request in cases:
        response = await api.client.post(url, **request)
        headers = compared_headers(response, "content-length")
        answer = response.json()
        if response.status_code == 201:
            assert answer["token"].startswith("ks_") and answer["metadata"]["role"] == "billing", label
            answer = {name: value for name, value in answer.items() if name not in ISSUED}
        answers.append((label, response.status_code, headers, answer))
    return answers


def _logins(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of the logins, without the id of the token each issued (new at each run)."""
    return [
        {name: value for name, value in record.items() if name != "issued_token_id"}
        for record in records
        if "login" in str(record.get("route", record.get("path")))
    ]


async def _run(settings: Settings) -> Recorded:
    answers, counts, records = await recorded_run(settings, _run_cases, ("auth", "unmatched"))
    return answers, counts, _logins(records)


async def test_logins_get_the_answers_records_and_metrics_they_get_through_fastapi(
    tmp_path: Path, stack_calls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def settings(name: str) -> Settings:
        return make_settings(tmp_path / name, audit_log=str(tmp_path / f"{name}.log"))

    shortcut = await _run(settings("shortcut"))
    assert not [path for path in stack_calls if "login" in path]
    monkeypatch.setattr(hotpath, "_FIXED", {})  # every login through FastAPI
    monkeypatch.setattr(hotpath, "_found_by_path", {})  # forget the paths the shortcut's run looked up
    stack_calls.clear()
    stack = await _run(settings("stack"))
    assert len([path for path in stack_calls if "login" in path]) == 25
    for (label, *mine), (_, *theirs) in zip(shortcut[0], stack[0], strict=True):
        assert mine == theirs, label
    statuses = [status for _, status, _, _ in shortcut[0]]
    assert statuses[:16] == [201, 201, 201, 400, 400, 400, 413, 415, 422, 415, 422, 422, 422, 422, 422, 422]
    assert statuses[16:] == [422, 422, 422, 422, 422, 400, 413, 400, 422]
    assert shortcut[1] == stack[1]
    assert shortcut[2] == stack[2]
    assert any(record.get("subject") == "system:serviceaccount:billing:api" for record in shortcut[2])
