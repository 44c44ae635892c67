"""The OpenAPI document says what the service answers (issue 11 item 9; the full check is the schemathesis
run in tests/app/e2e/test_e2e_openapi.py)."""

from __future__ import annotations

import pytest

from app.api.paths import NO_TOKEN_PATHS
from tests.app.api.conftest import Api


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("PUT", "/v1/keys/k", "DELETE, GET, PATCH"),
        ("DELETE", "/v1/keys", "GET, POST"),
        ("PUT", "/v1/tokens", "GET, POST"),
        ("GET", "/v1/keys/k/encrypt", "POST"),
    ],
)
async def test_405_allow_lists_every_method(api: Api, method: str, path: str, allowed: str) -> None:
    response = await api.client.request(method, path, headers=api.auth())
    assert response.status_code == 405
    assert response.headers["Allow"] == allowed
    assert response.json()["error"]["code"] == "method_not_allowed"


async def test_key_name_pattern_and_error_answers_are_documented(api: Api) -> None:
    schema = (await api.client.get("/openapi.json")).json()
    error_ref = {"$ref": "#/components/schemas/Error"}
    vault_ref = {"$ref": "#/components/schemas/VaultError"}
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            for parameter in operation.get("parameters", []):
                if parameter["name"] == "name":
                    assert parameter["schema"]["pattern"] == "^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$", path
            transit = path.startswith("/v1/transit/")  # Vault's error shape, 403 for a missing token
            for status, response in operation["responses"].items():
                if int(status) >= 400:
                    expected = vault_ref if transit else error_ref
                    assert response["content"]["application/json"]["schema"] == expected, (path, status)
            if path in NO_TOKEN_PATHS:  # the seal status and unseal routes take no token
                assert "security" not in operation, (method, path)
            elif transit:
                assert {"400", "403"} <= set(operation["responses"]), (method, path)
                assert operation["security"] == [{"bearer": []}, {"vault_token": []}], (method, path)
            elif path.startswith("/v1/"):
                assert {"400", "401"} <= set(operation["responses"]), (method, path)
                assert operation["security"] == [{"bearer": []}], (method, path)
    responses = schema["paths"]["/v1/keys/{name}"]["delete"]["responses"]
    assert {"404", "409"} <= set(responses)
    assert "409" in schema["paths"]["/v1/keys"]["post"]["responses"]
    assert "404" in schema["paths"]["/v1/tokens/{token_id}"]["delete"]["responses"]
    assert "requestBody" in schema["paths"]["/v1/keys/{name}/encrypt/batch"]["post"]
    assert "HTTPValidationError" not in schema["components"]["schemas"]


async def test_key_version_in_query_and_header_must_agree(api: Api) -> None:
    await api.create_key("both")
    await api.client.post("/v1/keys/both/rotate", headers=api.auth())
    response = await api.encrypt("both", b"x", key_version="1", headers={"Keystream-Key-Version": "2"})
    assert response.status_code == 400, response.text
    assert "key_version" in response.json()["error"]["message"]
    response = await api.encrypt("both", b"x", key_version="1", headers={"Keystream-Key-Version": "1"})
    assert response.status_code == 200, response.text


async def test_malformed_key_pattern_is_422_not_403(api: Api) -> None:
    response = await api.client.post(
        "/v1/tokens", json={"scopes": ["encrypt"], "key_patterns": [" "]}, headers=api.auth()
    )
    assert response.status_code == 422, response.text
    assert "key_patterns" in response.json()["error"]["message"]


async def test_documented_key_version_maximum_is_what_the_parser_takes(api: Api) -> None:
    """schemathesis sent a 21-digit key_version the schema allowed and the parser refused (422)."""
    schema = (await api.client.get("/openapi.json")).json()
    params = {p["name"]: p for p in schema["paths"]["/v1/keys/{name}/encrypt"]["post"]["parameters"]}
    maximum = params["key_version"]["schema"]["maximum"]
    assert maximum == params["Keystream-Key-Version"]["schema"]["maximum"] == 10**20 - 1
    await api.create_key("max")
    assert (await api.encrypt("max", b"x", key_version=str(maximum))).status_code == 404
    assert (await api.encrypt("max", b"x", key_version=str(maximum + 1))).status_code == 422


async def test_operation_descriptions_are_for_api_readers(api: Api) -> None:
    """The OpenAPI page shows no Python docstring sections or Sphinx roles (double backticks are Markdown
    code spans, fine there), and says why a route outside ``/v1`` can be a 400 (only for more than one
    Authorization header: those routes read nothing else)."""
    schema = (await api.client.get("/openapi.json")).json()
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            text = operation.get("description", "")
            for marker in (
                "Raises:",
                "Args:",
                "Returns:",
                "Yields:",
                ":class:",
                ":func:",
                ":meth:",
                ":data:",
            ):
                assert marker not in text, (method, path, text)
            if not path.startswith("/v1/") and "400" in operation["responses"]:
                assert "Authorization header" in operation["responses"]["400"]["description"], (method, path)
                assert "decrypt" not in operation["responses"]["400"]["description"], (method, path)
    readyz = schema["paths"]["/readyz"]["get"]
    assert "503" in readyz["description"] and "503" in readyz["responses"]
    health = await api.client.get("/healthz", headers=[("Authorization", "Bearer a")] * 2)
    assert health.status_code == 400, "the documented 400 of /healthz must be real"
