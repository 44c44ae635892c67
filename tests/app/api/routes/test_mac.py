"""``POST /v1/keys/{name}/hmac`` and ``/verify`` (and ``/batch``): the documented derivation of a version's
HMAC key, versions and ``min_decryption_version``, scopes, per-item errors and bad input (never a 500)."""

from __future__ import annotations

import base64
import hmac as std_hmac
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from app.core.config import Settings
from tests.app.api.conftest import Api, running_api

MATERIAL = bytes(range(32))


@pytest.fixture
async def api(settings_factory: Callable[..., Settings]) -> AsyncIterator[Api]:
    """The app with key import on: tests import known material to check the HMAC key's derivation."""
    async with running_api(settings_factory(allow_key_import=True)) as value:
        yield value


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def expected_tag(material: bytes, version: int, data: bytes, algorithm: str = "sha2-256") -> str:
    """The tag as docs/service-api.md defines it, computed with cryptography's HKDF and hashlib's HMAC."""
    key = HKDF(hashes.SHA256(), 32, salt=None, info=b"keystream hmac key v1").derive(material)
    digest = std_hmac.new(
        key, data, {"sha2-256": "sha256", "sha2-384": "sha384", "sha2-512": "sha512"}[algorithm]
    )
    return f"ks:v{version}:{b64(digest.digest())}"


async def _post(api: Api, path: str, body: dict[str, Any], token: str | None = None) -> httpx.Response:
    return await api.client.post(path, json=body, headers=api.auth(token) if token else api.auth())


async def _imported(api: Api, name: str = "macs") -> None:
    response = await _post(api, f"/v1/keys/{name}/import", {"key": b64(MATERIAL)})
    assert response.status_code == 201, response.text


@pytest.mark.parametrize("algorithm", ["sha2-256", "sha2-384", "sha2-512"])
async def test_hmac_is_the_documented_derivation_and_verifies(api: Api, algorithm: str) -> None:
    await _imported(api)
    data = b"the quick brown fox" * 7
    made = await _post(api, "/v1/keys/macs/hmac", {"input": b64(data), "algorithm": algorithm})
    assert made.status_code == 200, made.text
    assert made.json() == {"hmac": expected_tag(MATERIAL, 1, data, algorithm), "key_version": 1}
    tag = made.json()["hmac"]
    good = await _post(api, "/v1/keys/macs/verify", {"input": b64(data), "hmac": tag, "algorithm": algorithm})
    assert good.json() == {"valid": True, "key_version": 1}
    bad = await _post(
        api, "/v1/keys/macs/verify", {"input": b64(data + b"!"), "hmac": tag, "algorithm": algorithm}
    )
    assert bad.status_code == 200 and bad.json() == {"valid": False, "key_version": 1}
    other = "sha2-512" if algorithm != "sha2-512" else "sha2-256"  # another algorithm's tag does not verify
    wrong = await _post(api, "/v1/keys/macs/verify", {"input": b64(data), "hmac": tag, "algorithm": other})
    assert wrong.json()["valid"] is False


async def test_empty_input_and_default_algorithm(api: Api) -> None:
    await _imported(api)
    made = await _post(api, "/v1/keys/macs/hmac", {"input": ""})
    assert made.json()["hmac"] == expected_tag(MATERIAL, 1, b"")


async def test_versions_rotation_and_min_decryption_version(api: Api) -> None:
    await api.create_key("rot")
    data = b"payload"
    v1 = (await _post(api, "/v1/keys/rot/hmac", {"input": b64(data)})).json()
    assert (await api.client.post("/v1/keys/rot/rotate", headers=api.auth())).status_code == 200
    v2 = (await _post(api, "/v1/keys/rot/hmac", {"input": b64(data)})).json()
    assert (v1["key_version"], v2["key_version"]) == (1, 2)
    assert (
        v1["hmac"].startswith("ks:v1:")
        and v2["hmac"].startswith("ks:v2:")
        and v1["hmac"][6:] != v2["hmac"][6:]
    )
    pinned = (await _post(api, "/v1/keys/rot/hmac", {"input": b64(data), "key_version": 1})).json()
    assert pinned == v1
    for tag in (v1["hmac"], v2["hmac"]):
        assert (await _post(api, "/v1/keys/rot/verify", {"input": b64(data), "hmac": tag})).json()[
            "valid"
        ] is True
    raised = await api.client.patch("/v1/keys/rot", json={"min_decryption_version": 2}, headers=api.auth())
    assert raised.status_code == 200, raised.text
    old = await _post(api, "/v1/keys/rot/verify", {"input": b64(data), "hmac": v1["hmac"]})
    assert old.status_code == 400 and "min_decryption_version" in old.json()["error"]["message"], old.text
    missing = await _post(api, "/v1/keys/rot/verify", {"input": b64(data), "hmac": "ks:v9:" + v2["hmac"][6:]})
    assert missing.status_code == 404, missing.text
    below = await _post(api, "/v1/keys/rot/hmac", {"input": b64(data), "key_version": 1})
    assert below.status_code == 400, below.text


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/v1/keys/macs/hmac", {"input": "not base64!"}, 400),
        ("/v1/keys/macs/hmac", {"input": "", "algorithm": "md5"}, 422),
        ("/v1/keys/macs/hmac", {"input": "", "key_version": 0}, 422),
        ("/v1/keys/macs/hmac", {"input": "", "extra": 1}, 422),
        ("/v1/keys/macs/hmac", {"input": 5}, 422),
        ("/v1/keys/nope/hmac", {"input": ""}, 404),
        ("/v1/keys/macs/verify", {"input": "", "hmac": "vault:v1:AAAA"}, 400),
        ("/v1/keys/macs/verify", {"input": "", "hmac": "ks:v1:not base64"}, 400),
        ("/v1/keys/macs/verify", {"input": "", "hmac": "ks:v0:" + b64(bytes(32))}, 400),
        ("/v1/keys/macs/verify", {"input": "", "hmac": "ks:v1:" + b64(bytes(31))}, 400),
        ("/v1/keys/macs/verify", {"input": "", "hmac": "ks:v99999999999:" + b64(bytes(32))}, 400),
        ("/v1/keys/macs/verify", {"input": ""}, 422),
        ("/v1/keys/nope/verify", {"input": "", "hmac": "ks:v1:" + b64(bytes(32))}, 404),
    ],
)
async def test_bad_input_is_a_clear_4xx(api: Api, path: str, body: dict[str, Any], status: int) -> None:
    await _imported(api)
    response = await _post(api, path, body)
    assert response.status_code == status, response.text
    assert set(response.json()) == {"error"}
    assert response.json()["error"]["message"]


async def test_scopes_are_separate(api: Api) -> None:
    await _imported(api)
    data = b64(b"webhook body")
    signer = await api.create_token(["hmac"], ["macs"])
    checker = await api.create_token(["verify"], ["macs"])
    crypto = await api.create_token(["encrypt", "decrypt"], ["macs"])
    made = await _post(api, "/v1/keys/macs/hmac", {"input": data}, signer)
    assert made.status_code == 200, made.text
    tag = made.json()["hmac"]
    assert (await _post(api, "/v1/keys/macs/verify", {"input": data, "hmac": tag}, checker)).json()["valid"]
    assert (await _post(api, "/v1/keys/macs/hmac", {"input": data}, checker)).status_code == 403
    assert (await _post(api, "/v1/keys/macs/verify", {"input": data, "hmac": tag}, signer)).status_code == 403
    assert (await _post(api, "/v1/keys/macs/hmac", {"input": data}, crypto)).status_code == 403
    await api.create_key("other")
    assert (await _post(api, "/v1/keys/other/hmac", {"input": data}, signer)).status_code == 403
    anonymous = await api.client.post("/v1/keys/macs/hmac", json={"input": data})
    assert anonymous.status_code == 401


async def test_batches_fail_item_by_item(api: Api) -> None:
    await _imported(api)
    inputs = [b"a", b"bb", b""]
    items: list[dict[str, Any]] = [
        {"input": b64(data), "reference": f"r{i}"} for i, data in enumerate(inputs)
    ]
    items.insert(1, {"input": "%%%", "reference": "bad"})
    made = await _post(api, "/v1/keys/macs/hmac/batch", {"items": items, "algorithm": "sha2-384"})
    assert made.status_code == 200, made.text
    results = made.json()["results"]
    assert [r["reference"] for r in results] == ["r0", "bad", "r1", "r2"]
    assert results[1]["error"]["code"] == "bad_request"
    tags = [results[0]["hmac"], results[2]["hmac"], results[3]["hmac"]]
    assert tags == [expected_tag(MATERIAL, 1, data, "sha2-384") for data in inputs]
    checks = [
        {"input": b64(b"a"), "hmac": tags[0], "reference": "ok"},
        {"input": b64(b"tampered"), "hmac": tags[1], "reference": "no"},
        {"input": b64(b""), "hmac": "garbage", "reference": "malformed"},
        {"input": b64(b""), "hmac": "ks:v7:" + tags[2][6:], "reference": "no-version"},
        {"input": b64(b""), "hmac": tags[2], "reference": "empty"},
    ]
    verified = await _post(api, "/v1/keys/macs/verify/batch", {"items": checks, "algorithm": "sha2-384"})
    assert verified.status_code == 200, verified.text
    answers = verified.json()["results"]
    assert [a.get("valid") for a in answers] == [True, False, None, None, True]
    assert answers[2]["error"]["code"] == "bad_request" and answers[2]["reference"] == "malformed"
    assert answers[3]["error"]["code"] == "key_version_not_found", answers[3]
    unknown = await _post(api, "/v1/keys/nope/verify/batch", {"items": checks})
    assert unknown.status_code == 404
    assert (await _post(api, "/v1/keys/macs/hmac/batch", {"items": []})).json() == {"results": []}


async def test_the_key_is_never_in_an_answer(api: Api) -> None:
    """Neither the material nor the derived HMAC key appears in any answer of these routes."""
    await _imported(api)
    key = HKDF(hashes.SHA256(), 32, salt=None, info=b"keystream hmac key v1").derive(MATERIAL)
    secrets = [form for raw in (MATERIAL, key) for form in (raw.hex(), b64(raw), raw.hex().upper())]
    for path, body in (
        ("/v1/keys/macs/hmac", {"input": b64(b"x")}),
        ("/v1/keys/macs/verify", {"input": b64(b"x"), "hmac": "ks:v1:" + b64(bytes(32))}),
        ("/v1/keys/macs/hmac", {"input": "!"}),
    ):
        text = (await _post(api, path, body)).text
        assert not any(secret in text for secret in secrets)
