"""Malformed JSON is one answer on every JSON route: 422 ``validation_error``, never a 500 or a 400.

Bytes that are not UTF-8 inside a JSON string made the batch routes' decoder raise ``UnicodeDecodeError``
(a 500 with a traceback logged per request, on both dispatch paths: the fast one without a query string and
FastAPI's with one), and FastAPI's own body parsing turned them, and nesting past its recursion limit, into a
generic 400 "There was an error parsing the body" where every other malformed JSON is 422.
"""

from __future__ import annotations

import logging

import httpx
import pytest

from tests.app.api.conftest import Api

_BATCH_ROUTES = [
    ("encrypt", "plaintext"),
    ("decrypt", "ciphertext"),
    ("rewrap", "ciphertext"),
]


def _assert_malformed_422(response: httpx.Response, logged: pytest.LogCaptureFixture, detail: str) -> None:
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert "JSON decode error" in error["message"] and detail in error["message"], error
    assert "\\xff" not in error["message"] and "0xff" not in error["message"]  # the bytes are not quoted
    assert not [record for record in logged.records if record.levelno >= logging.ERROR], logged.text


@pytest.mark.parametrize("query", ["", "?backend=aesni"], ids=["fast-path", "fastapi"])
@pytest.mark.parametrize(("operation", "field"), _BATCH_ROUTES)
@pytest.mark.parametrize(
    "template",
    [
        b'{"items":[{"FIELD":"\xff"}]}',  # in the base64 field
        b'{"items":[{"FIELD":"aGk=","reference":"r\xc3"}]}',  # a truncated sequence in the reference
        b'{"items":[{"FIELD":"aGk=","\xfe":"x"}]}',  # in a field name
    ],
    ids=["base64-field", "reference", "field-name"],
)
async def test_batch_body_not_utf8_is_422(
    api: Api, caplog: pytest.LogCaptureFixture, query: str, operation: str, field: str, template: bytes
) -> None:
    await api.create_key("utf")
    caplog.clear()
    with caplog.at_level(logging.ERROR):
        response = await api.client.post(
            f"/v1/keys/utf/{operation}/batch{query}",
            content=template.replace(b"FIELD", field.encode()),
            headers={**api.auth(), "Content-Type": "application/json"},
        )
    _assert_malformed_422(response, caplog, "not valid UTF-8")


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/keys", b'{"name":"k\xff"}'),
        ("POST", "/v1/keys/utf/import", b'{"key":"\xff"}'),
        ("PATCH", "/v1/keys/utf", b'{"deletion_allowed":"\xff"}'),
        ("POST", "/v1/keys/utf/datakey", b'{"type":"\xff"}'),
        ("POST", "/v1/tokens", b'{"scopes":["\xff"]}'),
    ],
)
async def test_fastapi_body_not_utf8_is_422(
    api: Api, caplog: pytest.LogCaptureFixture, method: str, path: str, body: bytes
) -> None:
    await api.create_key("utf")
    headers = {**api.auth(), "Content-Type": "application/json"}
    response = await api.client.request(method, path, content=body, headers=headers)
    _assert_malformed_422(response, caplog, "not valid UTF-8")


@pytest.mark.parametrize("path", ["/v1/keys", "/v1/tokens", "/v1/keys/utf/datakey"])
async def test_fastapi_body_nested_too_deeply_is_422(
    api: Api, caplog: pytest.LogCaptureFixture, path: str
) -> None:
    await api.create_key("utf")
    body = b'{"name":' + b"[" * 20_000 + b"]" * 20_000 + b"}"
    headers = {**api.auth(), "Content-Type": "application/json"}
    response = await api.client.post(path, content=body, headers=headers)
    _assert_malformed_422(response, caplog, "nested too deeply")


async def test_other_malformed_json_is_still_422(api: Api) -> None:
    """The answer the docs already promised for malformed JSON, unchanged: the reference for the above."""
    headers = {**api.auth(), "Content-Type": "application/json"}
    for path in ["/v1/keys", "/v1/keys/x/encrypt/batch", "/v1/keys/x/encrypt/batch?backend=aesni"]:
        response = await api.client.post(path, content=b'{"name":', headers=headers)
        assert response.status_code == 422, (path, response.text)
        assert response.json()["error"]["code"] == "validation_error"


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32"])
@pytest.mark.parametrize(
    ("method", "path", "document"),
    [
        ("POST", "/v1/keys", '{"name":"wide"}'),
        ("PATCH", "/v1/keys/utf", '{"deletion_allowed":true}'),
        ("POST", "/v1/keys/utf/datakey", '{"type":"aes256","plaintext":false}'),
        ("POST", "/v1/tokens", '{"scopes":["encrypt"]}'),
    ],
)
async def test_fastapi_body_in_another_unicode_encoding_is_422(
    api: Api, caplog: pytest.LogCaptureFixture, encoding: str, method: str, path: str, document: str
) -> None:
    """JSON exchanged between systems is UTF-8 (RFC 8259): Python's reader guessed UTF-16/32 from the zero
    bytes and answered 201/200, where the batch routes answer 422."""
    await api.create_key("utf")
    headers = {**api.auth(), "Content-Type": "application/json"}
    utf8 = await api.client.request(method, path, content=document.encode(), headers=headers)
    assert utf8.status_code in (200, 201), utf8.text  # the same document in UTF-8 is fine
    if path == "/v1/keys":
        await api.client.delete("/v1/keys/wide", headers=api.auth())
    response = await api.client.request(method, path, content=document.encode(encoding), headers=headers)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "validation_error" and "JSON decode error" in error["message"], error


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
@pytest.mark.parametrize(
    ("path", "template"),
    [
        ("/v1/tokens", '{"scopes":["encrypt"],"ttl":CONSTANT}'),
        ("/v1/keys", '{"name":"nan","auto_rotate_period":CONSTANT}'),
        ("/v1/keys/utf/datakey", '{"type":"aes256","plaintext":false,"associated_data":CONSTANT}'),
    ],
)
async def test_fastapi_body_with_nan_or_infinity_is_422(
    api: Api, caplog: pytest.LogCaptureFixture, constant: str, path: str, template: str
) -> None:
    """``NaN`` and ``Infinity`` are not JSON numbers: refused where they stand, whatever the field's type."""
    await api.create_key("utf")
    headers = {**api.auth(), "Content-Type": "application/json"}
    response = await api.client.post(path, content=template.replace("CONSTANT", constant), headers=headers)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "validation_error", error
    assert f"JSON decode error: {constant} is not a JSON number" in error["message"], error
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR], caplog.text


def test_every_fastapi_route_reads_json_strictly() -> None:
    """A router of :mod:`app.api.routes` without :class:`StrictJsonRoute` would take UTF-16 and NaN again."""
    import importlib
    import pkgutil

    from fastapi import APIRouter

    import app.api.routes
    from app.api.strict_json import StrictJsonRoute

    routers = [
        value
        for module in pkgutil.iter_modules(app.api.routes.__path__)
        for value in vars(importlib.import_module(f"app.api.routes.{module.name}")).values()
        if isinstance(value, APIRouter)
    ]
    assert len(routers) >= 8
    loose = [
        route.path for router in routers for route in router.routes if not isinstance(route, StrictJsonRoute)
    ]
    assert loose == []
