"""``POST /v1/random`` and ``POST /v1/hash``: sizes and encodings, digests equal to hashlib's, bounds and
bad input as clear 4xx answers, and a token required."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import pytest

from tests.app.api.conftest import Api


@pytest.mark.parametrize("size", [1, 32, 1000, 65536])
async def test_random_bytes_in_both_encodings(api: Api, size: int) -> None:
    seen = set()
    for encoding in ("base64", "hex"):
        response = await api.client.post(
            "/v1/random", json={"bytes": size, "format": encoding}, headers=api.auth()
        )
        assert response.status_code == 200, response.text
        assert response.headers["cache-control"] == "no-store"
        text = response.json()["random"]
        raw = bytes.fromhex(text) if encoding == "hex" else base64.b64decode(text, validate=True)
        assert len(raw) == size
        seen.add(raw)
    assert len(seen) == 2  # two draws differ
    default = await api.client.post("/v1/random", json={}, headers=api.auth())
    assert len(base64.b64decode(default.json()["random"])) == 32


@pytest.mark.parametrize(
    "body",
    [
        {"bytes": 0},
        {"bytes": 65537},
        {"bytes": -1},
        {"bytes": "8"},
        {"format": "base32"},
        {"bytes": 8, "x": 1},
    ],
)
async def test_random_bad_input(api: Api, body: dict[str, Any]) -> None:
    response = await api.client.post("/v1/random", json=body, headers=api.auth())
    assert response.status_code == 422, response.text
    assert response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("algorithm", "constructor"),
    [
        ("sha2-224", hashlib.sha224),
        ("sha2-256", hashlib.sha256),
        ("sha2-384", hashlib.sha384),
        ("sha2-512", hashlib.sha512),
        ("sha3-224", hashlib.sha3_224),
        ("sha3-256", hashlib.sha3_256),
        ("sha3-384", hashlib.sha3_384),
        ("sha3-512", hashlib.sha3_512),
    ],
)
async def test_hash_matches_hashlib(api: Api, algorithm: str, constructor: Any) -> None:
    data = bytes(range(256)) * 10
    for encoding in ("base64", "hex"):
        body = {"input": base64.b64encode(data).decode(), "algorithm": algorithm, "format": encoding}
        response = await api.client.post("/v1/hash", json=body, headers=api.auth())
        assert response.status_code == 200, response.text
        digest = constructor(data).digest()
        assert response.json() == {
            "sum": digest.hex() if encoding == "hex" else base64.b64encode(digest).decode()
        }


async def test_hash_defaults_and_bad_input(api: Api) -> None:
    empty = await api.client.post("/v1/hash", json={"input": ""}, headers=api.auth())
    assert empty.json() == {"sum": base64.b64encode(hashlib.sha256(b"").digest()).decode()}
    for body, status in (
        ({"input": "%%"}, 400),
        ({"input": "", "algorithm": "md5"}, 422),
        ({}, 422),
        ({"input": "", "format": "raw"}, 422),
    ):
        response = await api.client.post("/v1/hash", json=body, headers=api.auth())
        assert response.status_code == status, (body, response.text)
        assert response.json()["error"]["message"]
    too_big = {"input": base64.b64encode(bytes(70_000)).decode()}
    assert (await api.client.post("/v1/hash", json=too_big, headers=api.auth())).status_code == 413


async def test_a_token_is_needed_but_no_scope(api: Api) -> None:
    assert (await api.client.post("/v1/random", json={})).status_code == 401
    assert (await api.client.post("/v1/hash", json={"input": ""})).status_code == 401
    narrow = await api.create_token(["decrypt"], ["nothing-*"])
    assert (await api.client.post("/v1/random", json={}, headers=api.auth(narrow))).status_code == 200
    assert (
        await api.client.post("/v1/hash", json={"input": ""}, headers=api.auth(narrow))
    ).status_code == 200
