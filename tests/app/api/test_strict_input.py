"""Strict input: JSON fields take only their own JSON type, integer parameters only ASCII digits.

A lax parser reads ``"yes"`` as true, ``true`` or ``0.0`` as a number and ``"٣"`` (an Arabic-Indic digit) as
3; a client, a proxy or an auditor that reads the same request more strictly then disagrees with the
service about what was asked (issue 11 item 7: the DELETE that followed ``"yes"`` succeeded).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.app.api.conftest import Api


def _assert_422_naming(response: Any, field: str) -> None:
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert field in error["message"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"min_decryption_version": True}, "min_decryption_version"),
        ({"min_decryption_version": 1.0}, "min_decryption_version"),
        ({"min_decryption_version": "1"}, "min_decryption_version"),
        ({"deletion_allowed": "yes"}, "deletion_allowed"),
        ({"deletion_allowed": 1}, "deletion_allowed"),
        ({"deletion_allowed": "true"}, "deletion_allowed"),
    ],
)
async def test_patch_key_takes_only_json_types(api: Api, body: dict[str, Any], field: str) -> None:
    await api.create_key("strict")
    response = await api.client.patch("/v1/keys/strict", json=body, headers=api.auth())
    _assert_422_naming(response, field)
    # nothing changed: the key still refuses deletion
    assert (await api.client.delete("/v1/keys/strict", headers=api.auth())).status_code == 409


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "k", "deletion_allowed": "yes"}, "deletion_allowed"),
        ({"name": "k", "deletion_allowed": 0}, "deletion_allowed"),
        ({"name": "k", "segment_size": 4096.0}, "segment_size"),
        ({"name": "k", "segment_size": "4096"}, "segment_size"),
        ({"name": "k", "segment_size": True}, "segment_size"),
        ({"name": 1}, "name"),
    ],
)
async def test_create_key_takes_only_json_types(api: Api, body: dict[str, Any], field: str) -> None:
    response = await api.client.post("/v1/keys", json=body, headers=api.auth())
    _assert_422_naming(response, field)


async def test_import_key_takes_only_json_types(api: Api) -> None:
    body = {"key": "A" * 44, "deletion_allowed": "yes"}
    response = await api.client.post("/v1/keys/imp/import", json=body, headers=api.auth())
    _assert_422_naming(response, "deletion_allowed")


@pytest.mark.parametrize(
    ("body", "field"),
    [({"scopes": ["encrypt"], "description": 5}, "description"), ({"scopes": "encrypt"}, "scopes")],
)
async def test_create_token_takes_only_json_types(api: Api, body: dict[str, Any], field: str) -> None:
    response = await api.client.post("/v1/tokens", json=body, headers=api.auth())
    _assert_422_naming(response, field)


async def test_batch_items_take_only_json_types(api: Api) -> None:
    await api.create_key("batch")
    body = {"items": [{"plaintext": "aGk=", "reference": 7}]}
    response = await api.client.post("/v1/keys/batch/encrypt/batch", json=body, headers=api.auth())
    _assert_422_naming(response, "reference")


NOT_ASCII_INTEGERS = ["٣", "３", "+1", " 1", "1_0", "1.0", "0x1", "9" * 21]


@pytest.mark.parametrize("text", NOT_ASCII_INTEGERS)
@pytest.mark.parametrize("where", ["query", "header"])
async def test_streaming_key_version_is_ascii_digits(api: Api, text: str, where: str) -> None:
    await api.create_key("digits")
    for _ in range(3):
        await api.client.post("/v1/keys/digits/rotate", headers=api.auth())
    if where == "query":
        response = await api.encrypt("digits", b"x", key_version=text)
    else:
        # as UTF-8 bytes: httpx refuses a non-ASCII str header value
        response = await api.encrypt("digits", b"x", headers={"Keystream-Key-Version": text.encode()})
    _assert_422_naming(response, "key_version")


@pytest.mark.parametrize("text", NOT_ASCII_INTEGERS)
async def test_raw_offset_is_ascii_digits(api: Api, text: str) -> None:
    await api.create_key("offsets")
    response = await api.encrypt("offsets", b"x", format="raw", offset=text)
    _assert_422_naming(response, "offset")


@pytest.mark.parametrize("text", NOT_ASCII_INTEGERS)
@pytest.mark.parametrize("operation", ["encrypt", "decrypt"])
async def test_batch_key_version_is_ascii_digits(api: Api, text: str, operation: str) -> None:
    await api.create_key("bversion")
    for _ in range(3):
        await api.client.post("/v1/keys/bversion/rotate", headers=api.auth())
    response = await api.client.post(
        f"/v1/keys/bversion/{operation}/batch",
        params={"key_version": text},
        json={"items": []},
        headers=api.auth(),
    )
    _assert_422_naming(response, "key_version")


async def test_ascii_digits_still_work(api: Api) -> None:
    await api.create_key("fine")
    await api.client.post("/v1/keys/fine/rotate", headers=api.auth())
    response = await api.encrypt("fine", b"x", key_version="1")
    assert response.status_code == 200, response.text
    assert response.headers["Keystream-Key-Version"] == "1"
    response = await api.client.post(
        "/v1/keys/fine/encrypt/batch", params={"key_version": "2"}, json={"items": []}, headers=api.auth()
    )
    assert response.status_code == 200, response.text
    patched = await api.client.patch(
        "/v1/keys/fine", json={"min_decryption_version": 2, "deletion_allowed": True}, headers=api.auth()
    )
    assert patched.status_code == 200, patched.text
    assert (patched.json()["min_decryption_version"], patched.json()["deletion_allowed"]) == (2, True)


@pytest.mark.parametrize("route", ["encrypt", "decrypt", "rewrap"])
async def test_unknown_query_parameters_are_refused_not_ignored(api: Api, route: str) -> None:
    """``?associated_data=`` was ignored: the message was sealed without the associated data its sender meant
    to bind, and the same mistake on decrypt then failed for a reason nobody could see."""
    await api.create_key("strict")
    sealed = (await api.encrypt("strict", b"data")).content
    response = await api.client.post(
        f"/v1/keys/strict/{route}",
        content=b"data" if route == "encrypt" else sealed,
        params={"associated_data": "c2VjcmV0", "key_version": "1"},
        headers=api.auth(),
    )
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert "'associated_data'" in message and "Keystream-Associated-Data" in message
    assert "c2VjcmV0" not in message  # names, never values
    known = await api.client.post(
        f"/v1/keys/strict/{route}",
        content=b"data" if route == "encrypt" else sealed,
        params={"key_version": "1", "backend": "aesni", "format": "sealed"},
        headers=api.auth(),
    )
    assert known.status_code == 200, known.text
