"""Auth matrix: every /v1 route answers 401 without or with a bad token and 403 on a wrong scope or key."""

from __future__ import annotations

from typing import Any

import pytest

from tests.app.api.conftest import ROOT_TOKEN, Api

BATCH = {"items": [{"plaintext": "aGk="}]}
DBATCH = {"items": [{"ciphertext": "aGk="}]}

# (method, path, json body, raw body, scope that grants it; None = any valid token)
ROUTES: list[tuple[str, str, dict[str, Any] | None, bytes | None, str | None]] = [
    ("POST", "/v1/keys", {"name": "k"}, None, "admin"),
    ("POST", "/v1/keys/k/import", {"key": "AAAAAAAAAAAAAAAAAAAAAA=="}, None, "admin"),
    ("GET", "/v1/keys", None, None, None),
    ("GET", "/v1/keys/k", None, None, None),
    ("POST", "/v1/keys/k/rotate", None, None, "admin"),
    ("PATCH", "/v1/keys/k", {"deletion_allowed": True}, None, "admin"),
    ("DELETE", "/v1/keys/k", None, None, "admin"),
    ("POST", "/v1/keys/k/encrypt", None, b"data", "encrypt"),
    ("POST", "/v1/keys/k/decrypt", None, b"data", "decrypt"),
    ("POST", "/v1/keys/k/encrypt/batch", BATCH, None, "encrypt"),
    ("POST", "/v1/keys/k/decrypt/batch", DBATCH, None, "decrypt"),
    ("GET", "/v1/backends", None, None, None),
    ("POST", "/v1/tokens", {"scopes": ["encrypt"]}, None, "admin"),
    ("GET", "/v1/tokens", None, None, "admin"),
    ("DELETE", "/v1/tokens/0000000000000000", None, None, "admin"),
    ("GET", "/v1/tokens/self", None, None, None),
    ("POST", "/v1/tokens/self/renew", {"ttl": 60}, None, None),
]
KEYED = {path for _, path, *_ in ROUTES if path.startswith("/v1/keys/k")}
IDS = [f"{method} {path}" for method, path, *_ in ROUTES]


async def _call(api: Api, route: tuple[Any, ...], headers: dict[str, str]) -> Any:
    method, path, json_body, raw, _ = route
    if raw is not None:
        headers = {**headers, "Content-Type": "application/octet-stream"}
        return await api.client.request(method, path, content=raw, headers=headers)
    return await api.client.request(method, path, json=json_body, headers=headers)


@pytest.mark.parametrize("route", ROUTES, ids=IDS)
@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer"},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": "Bearer not-a-token"},
        {"Authorization": "Bearer ks_0123456789abcdef_wrong-secret-0123456789abc"},
        {"Authorization": "Bearer ks_ffffffffffffffff_root-secret-for-tests-only-0123456789"},
    ],
    ids=["none", "empty", "basic", "malformed", "wrong-secret", "unknown-id"],
)
async def test_401_without_valid_token(api: Api, route: tuple[Any, ...], headers: dict[str, str]) -> None:
    response = await _call(api, route, headers)
    assert response.status_code == 401, response.text
    assert response.json()["error"]["code"] == "unauthorized"
    assert response.headers["WWW-Authenticate"] == "Bearer"
    assert ROOT_TOKEN not in response.text


@pytest.mark.parametrize(
    "route",
    [r for r in ROUTES if r[4] is not None],
    ids=[i for r, i in zip(ROUTES, IDS, strict=True) if r[4]],
)
async def test_403_on_wrong_scope(api: Api, route: tuple[Any, ...]) -> None:
    granted = route[4]
    others = [scope for scope in ("admin", "encrypt", "decrypt") if scope != granted]
    token = await api.create_token(others)
    response = await _call(api, route, api.auth(token))
    assert response.status_code == 403, response.text
    assert response.json()["error"]["code"] == "forbidden"


@pytest.mark.parametrize(
    "route",
    [r for r in ROUTES if r[1] in KEYED],
    ids=[i for r, i in zip(ROUTES, IDS, strict=True) if r[1] in KEYED],
)
async def test_403_on_key_pattern_mismatch(api: Api, route: tuple[Any, ...]) -> None:
    token = await api.create_token(["admin", "encrypt", "decrypt"], ["other-*"])
    response = await _call(api, route, api.auth(token))
    assert response.status_code == 403, response.text


async def test_create_key_needs_matching_pattern(api: Api) -> None:
    token = await api.create_token(["admin"], ["team-*"])
    denied = await api.client.post("/v1/keys", json={"name": "k"}, headers=api.auth(token))
    assert denied.status_code == 403
    allowed = await api.client.post("/v1/keys", json={"name": "team-1"}, headers=api.auth(token))
    assert allowed.status_code == 201


async def test_scoped_token_can_do_its_job(api: Api) -> None:
    await api.create_key("app-1")
    enc_token = await api.create_token(["encrypt"], ["app-*"])
    dec_token = await api.create_token(["decrypt"], ["app-?"])
    encrypted = await api.encrypt("app-1", b"secret", token=enc_token)
    assert encrypted.status_code == 200
    assert (await api.decrypt("app-1", encrypted.content, token=dec_token)).content == b"secret"
    assert (await api.decrypt("app-1", encrypted.content, token=enc_token)).status_code == 403


async def test_public_endpoints_need_no_token(api: Api) -> None:
    for path in ("/healthz", "/readyz", "/metrics"):
        assert (await api.client.get(path)).status_code == 200, path


async def test_token_lifecycle(api: Api) -> None:
    created = await api.client.post(
        "/v1/tokens",
        json={"scopes": ["encrypt"], "key_patterns": ["a*"], "description": "ci"},
        headers=api.auth(),
    )
    assert created.status_code == 201
    body = created.json()
    token = body["token"]
    assert token.startswith("ks_" + body["id"] + "_")
    assert body["scopes"] == ["encrypt"] and body["key_patterns"] == ["a*"] and body["description"] == "ci"
    listed = (await api.client.get("/v1/tokens", headers=api.auth())).json()["tokens"]
    ids = {t["id"] for t in listed}
    assert body["id"] in ids and "0123456789abcdef" in ids
    secret = token.split("_", 2)[2]
    listing = (await api.client.get("/v1/tokens", headers=api.auth())).text
    assert secret not in listing and "hash" not in listing
    assert (await api.client.get("/v1/backends", headers=api.auth(token))).status_code == 200
    deleted = await api.client.delete(f"/v1/tokens/{body['id']}", headers=api.auth())
    assert deleted.status_code == 204
    assert (await api.client.get("/v1/backends", headers=api.auth(token))).status_code == 401
    again = await api.client.delete(f"/v1/tokens/{body['id']}", headers=api.auth())
    assert again.status_code == 404
    assert again.json()["error"]["code"] == "token_not_found"


async def test_admin_cannot_grant_more_than_it_has(api: Api) -> None:
    unrestricted = await api.create_token(["admin", "encrypt"], ["*"])
    wider_scope = await api.client.post(
        "/v1/tokens", json={"scopes": ["decrypt"]}, headers=api.auth(unrestricted)
    )
    assert wider_scope.status_code == 403
    assert "decrypt" in wider_scope.json()["error"]["message"]
    same = await api.client.post(
        "/v1/tokens", json={"scopes": ["encrypt"], "key_patterns": ["team-*"]}, headers=api.auth(unrestricted)
    )
    assert same.status_code == 201


async def test_token_validation(api: Api) -> None:
    for body in ({"scopes": []}, {"scopes": ["root"]}, {"scopes": ["admin"], "key_patterns": []}):
        response = await api.client.post("/v1/tokens", json=body, headers=api.auth())
        assert response.status_code == 422, body


@pytest.mark.parametrize("route", ROUTES, ids=IDS)
@pytest.mark.parametrize("valid_first", [True, False], ids=["valid-first", "valid-last"])
async def test_more_than_one_authorization_header_is_400(
    api: Api, route: tuple[Any, ...], valid_first: bool
) -> None:
    """JSON routes read the first header and streaming routes the last: whichever came first, both are
    refused, so no route can be reached with a token another part of the service did not see."""
    await api.create_key("k")
    method, path, json_body, raw, _ = route
    tokens = [f"Bearer {ROOT_TOKEN}", "Bearer ks_ffffffffffffffff_not-the-root-secret-0123456789"]
    if not valid_first:
        tokens.reverse()
    headers = [("Authorization", token) for token in tokens]
    if raw is not None:
        headers.append(("Content-Type", "application/octet-stream"))
        response = await api.client.request(method, path, content=raw, headers=headers)
    else:
        response = await api.client.request(method, path, json=json_body, headers=headers)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "bad_request"
    assert "more than one Authorization header" in response.json()["error"]["message"]
    assert ROOT_TOKEN not in response.text


async def test_two_identical_authorization_headers_are_400_on_public_routes_too(api: Api) -> None:
    headers = [("Authorization", f"Bearer {ROOT_TOKEN}")] * 2
    response = await api.client.get("/healthz", headers=headers)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "bad_request"
