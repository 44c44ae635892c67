"""``POST /v1/keys/{name}/rewrap`` and ``/rewrap/batch`` in process (issue 12 item 4): a sealed message of an
older version comes back sealed under the latest one, for both schemes and every backend; failures are
decrypt's; the ``rewrap`` scope allows it without ``decrypt``."""

from __future__ import annotations

import base64
import os
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

import aescore
from app.api.streaming import StreamAbortedError
from tests.app.api.conftest import Api

SEGMENT = 4096
BACKENDS = [name for name in ("aesni", "python", "hwsim") if aescore.available_backends().get(name) is None]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def _rewrap(
    api: Api, name: str, data: bytes, token: str | None = None, **params: Any
) -> httpx.Response:
    headers = api.auth(token) if token else api.auth()
    headers.update(params.pop("headers", {}))
    return await api.client.post(f"/v1/keys/{name}/rewrap", content=data, params=params, headers=headers)


async def _rotate(api: Api, name: str) -> None:
    response = await api.client.post(f"/v1/keys/{name}/rotate", headers=api.auth())
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("scheme", ["ctr-hmac", "gcm"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("size", [0, 1000, 5 * SEGMENT + 7, 300_000])
async def test_rewrap_seals_the_same_plaintext_under_the_latest_version(
    api: Api, scheme: str, backend: str, size: int
) -> None:
    await api.create_key("r", scheme=scheme, segment_size=SEGMENT)
    plaintext = os.urandom(size)
    ad = {"Keystream-Associated-Data": b64(b"tenant=7")}
    old = await api.encrypt("r", plaintext, headers=ad)
    assert old.headers["Keystream-Key-Version"] == "1"
    await _rotate(api, "r")
    await _rotate(api, "r")
    response = await _rewrap(api, "r", old.content, backend=backend, headers=ad)
    assert response.status_code == 200, response.text
    assert response.headers["Keystream-Key-Version"] == "3"
    assert response.headers["Keystream-Backend"] == backend
    rewrapped = response.content
    assert len(rewrapped) == len(old.content)
    assert rewrapped[:8] != old.content[:8]  # a fresh salt
    # Only version 3 opens it now: the old versions no longer do.
    only_v1 = await api.decrypt("r", rewrapped, key_version=1, headers=ad)
    assert only_v1.status_code == 400
    opened = await api.decrypt("r", rewrapped, key_version=3, headers=ad)
    assert opened.status_code == 200, opened.text
    assert opened.content == plaintext


def _in_segments(data: bytes) -> AsyncIterator[bytes]:
    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(data), SEGMENT):
            yield data[start : start + SEGMENT]

    return chunks()


async def _sealed(api: Api, size: int, **params: Any) -> bytes:
    response = await api.encrypt("r", os.urandom(size), **params)
    assert response.status_code == 200, response.text
    return response.content


async def test_key_version_names_the_version_the_input_was_sealed_under(api: Api) -> None:
    await api.create_key("r", segment_size=SEGMENT)
    old = await _sealed(api, 3 * SEGMENT)
    await _rotate(api, "r")
    rewrapped = await _rewrap(api, "r", old, key_version=1)
    assert rewrapped.status_code == 200, rewrapped.text
    assert rewrapped.headers["Keystream-Key-Version"] == "2"
    wrong = await _rewrap(api, "r", old, key_version=2)
    assert wrong.status_code == 400
    assert wrong.json()["error"]["code"] == "decryption_failed"
    again = await _rewrap(api, "r", rewrapped.content, headers={"Keystream-Key-Version": "2"})
    assert again.status_code == 200  # rewrapping under the latest version again: a fresh salt
    assert again.content[1:17] != rewrapped.content[1:17]


async def test_versions_below_min_decryption_version_are_refused(api: Api) -> None:
    await api.create_key("r", segment_size=SEGMENT)
    old = await _sealed(api, 1000)
    await _rotate(api, "r")
    patched = await api.client.patch("/v1/keys/r", json={"min_decryption_version": 2}, headers=api.auth())
    assert patched.status_code == 200, patched.text
    for params in ({}, {"key_version": 1}):
        refused = await _rewrap(api, "r", old, **params)
        assert refused.status_code == 400, refused.text
        assert "plaintext" not in refused.text


async def test_associated_data_opens_and_seals(api: Api) -> None:
    await api.create_key("r", segment_size=SEGMENT)
    ad = {"Keystream-Associated-Data": b64(b"object=42")}
    plaintext = os.urandom(2 * SEGMENT)
    old = (await api.encrypt("r", plaintext, headers=ad)).content
    await _rotate(api, "r")
    without = await _rewrap(api, "r", old)
    assert without.status_code == 400
    assert without.json()["error"]["code"] == "decryption_failed"
    rewrapped = await _rewrap(api, "r", old, headers=ad)
    assert rewrapped.status_code == 200
    assert (await api.decrypt("r", rewrapped.content)).status_code == 400  # still bound to it
    assert (await api.decrypt("r", rewrapped.content, headers=ad)).content == plaintext


@pytest.mark.parametrize("scheme", ["ctr-hmac", "gcm"])
async def test_tampered_first_segment_is_a_clean_400_and_a_later_one_aborts(api: Api, scheme: str) -> None:
    await api.create_key("r", scheme=scheme, segment_size=SEGMENT)
    sealed = await _sealed(api, 100 * SEGMENT)  # over the small-body limit: streamed
    await _rotate(api, "r")
    first = bytearray(sealed)
    first[60] ^= 1
    refused = await _rewrap(api, "r", bytes(first))
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "decryption_failed"
    streamed = await api.client.post(
        "/v1/keys/r/rewrap", content=_in_segments(bytes(first)), headers=api.auth()
    )
    assert streamed.status_code == 400
    assert streamed.json()["error"]["code"] == "decryption_failed"
    later = bytearray(sealed)
    later[50 * SEGMENT + 10] ^= 1
    with pytest.raises(StreamAbortedError, match="decryption_failed"):
        await api.client.post("/v1/keys/r/rewrap", content=_in_segments(bytes(later)), headers=api.auth())
    with pytest.raises(StreamAbortedError, match="decryption_failed"):  # truncated at a segment boundary
        await api.client.post(
            "/v1/keys/r/rewrap", content=_in_segments(sealed[: 50 * SEGMENT]), headers=api.auth()
        )


@pytest.mark.parametrize("body", [b"", b"\x28", b"garbage" * 10])
async def test_garbage_and_empty_bodies_are_400(api: Api, body: bytes) -> None:
    await api.create_key("r", segment_size=SEGMENT)
    response = await _rewrap(api, "r", body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "decryption_failed"


@pytest.mark.parametrize(
    ("params", "status"),
    [({"format": "raw"}, 400), ({"iv": "00" * 16}, 400), ({"offset": 5}, 400), ({"format": "bogus"}, 422)],
)
async def test_raw_parameters_are_refused(api: Api, params: dict[str, Any], status: int) -> None:
    await api.create_key("r", segment_size=SEGMENT)
    response = await _rewrap(api, "r", await _sealed(api, 10), **params)
    assert response.status_code == status, response.text


async def test_unknown_key_and_version_are_404(api: Api) -> None:
    assert (await _rewrap(api, "missing", b"x")).json()["error"]["code"] == "key_not_found"
    await api.create_key("r", segment_size=SEGMENT)
    response = await _rewrap(api, "r", await _sealed(api, 10), key_version=9)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "key_version_not_found"


async def test_the_rewrap_scope_allows_rewrap_without_decrypt(api: Api) -> None:
    await api.create_key("r", segment_size=SEGMENT)
    await api.create_key("other", segment_size=SEGMENT)
    plaintext = os.urandom(3000)
    old = (await api.encrypt("r", plaintext)).content
    await _rotate(api, "r")
    rewrap_only = await api.create_token(["rewrap"], ["r"])
    response = await _rewrap(api, "r", old, token=rewrap_only)
    assert response.status_code == 200, response.text
    assert (await api.decrypt("r", response.content, token=rewrap_only)).status_code == 403
    assert (await api.encrypt("r", b"x", token=rewrap_only)).status_code == 403
    other = await _rewrap(api, "other", old, token=rewrap_only)
    assert other.status_code == 403  # key patterns still apply
    batch = await _rewrap_batch(api, "r", [{"ciphertext": b64(old)}], token=rewrap_only)
    assert batch.status_code == 200
    for scopes in (["decrypt"], ["encrypt"], ["admin"]):
        refused = await _rewrap(api, "r", old, token=await api.create_token(scopes))
        assert refused.status_code == 403, scopes
        assert "'rewrap'" in refused.json()["error"]["message"]
    both = await api.create_token(["encrypt", "decrypt"])  # can already rewrap in two calls
    allowed = await _rewrap(api, "r", old, token=both)
    assert allowed.status_code == 200
    assert (await api.decrypt("r", allowed.content)).content == plaintext


async def _rewrap_batch(
    api: Api, name: str, items: list[dict[str, Any]], token: str | None = None, **params: Any
) -> httpx.Response:
    headers = api.auth(token) if token else api.auth()
    return await api.client.post(
        f"/v1/keys/{name}/rewrap/batch", json={"items": items}, params=params, headers=headers
    )


@pytest.mark.parametrize("scheme", ["ctr-hmac", "gcm"])
@pytest.mark.parametrize("backend", BACKENDS)
async def test_rewrap_batch_items_succeed_or_fail_on_their_own(api: Api, scheme: str, backend: str) -> None:
    await api.create_key("r", scheme=scheme, segment_size=SEGMENT)
    plaintexts = [os.urandom(size) for size in (0, 100, 3 * SEGMENT + 5)]
    ad = b"tenant=1"
    sealed = [
        (await api.encrypt("r", plaintexts[0])).content,
        (await api.encrypt("r", plaintexts[1], headers={"Keystream-Associated-Data": b64(ad)})).content,
    ]
    await _rotate(api, "r")
    sealed.append((await api.encrypt("r", plaintexts[2])).content)  # already under version 2
    await _rotate(api, "r")
    tampered = bytearray(sealed[2])
    tampered[-1] ^= 1
    items = [
        {"ciphertext": b64(sealed[0]), "reference": "a"},
        {"ciphertext": b64(sealed[1]), "associated_data": b64(ad), "reference": "b"},
        {"ciphertext": "not base64!", "reference": "c"},
        {"ciphertext": b64(sealed[2]), "reference": "d"},
        {"ciphertext": b64(bytes(tampered)), "reference": "e"},
        {"ciphertext": b64(sealed[1]), "reference": "f"},  # without its associated data
    ]
    response = await _rewrap_batch(api, "r", items, backend=backend)
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [result["reference"] for result in results] == list("abcdef")
    decrypted = await api.client.post(
        "/v1/keys/r/decrypt/batch", json={"items": items}, params={"backend": backend}, headers=api.auth()
    )
    for result, expected in zip(results, decrypted.json()["results"], strict=True):
        if "error" in expected:  # the same per-item errors as batch decrypt's
            assert result == expected
        else:
            assert result["key_version"] == 3
            assert set(result) == {"ciphertext", "key_version", "reference"}
    opened = await api.client.post(
        "/v1/keys/r/decrypt/batch",
        json={
            "items": [
                {"ciphertext": results[0]["ciphertext"]},
                {"ciphertext": results[1]["ciphertext"], "associated_data": b64(ad)},
                {"ciphertext": results[3]["ciphertext"]},
            ]
        },
        params={"key_version": 3},
        headers=api.auth(),
    )
    assert [base64.b64decode(r["plaintext"]) for r in opened.json()["results"]] == plaintexts
    assert [r["key_version"] for r in opened.json()["results"]] == [3, 3, 3]


async def test_rewrap_batch_with_key_version_and_limits(api: Api) -> None:
    await api.create_key("r", segment_size=SEGMENT)
    old = (await api.encrypt("r", b"hello")).content
    await _rotate(api, "r")
    items = [{"ciphertext": b64(old)}]
    assert "error" in (await _rewrap_batch(api, "r", items, key_version=2)).json()["results"][0]
    assert (await _rewrap_batch(api, "r", items, key_version=1)).json()["results"][0]["key_version"] == 2
    assert (await _rewrap_batch(api, "r", items, key_version=7)).status_code == 404
    assert (await _rewrap_batch(api, "missing", items)).status_code == 404
    assert (await _rewrap_batch(api, "r", [{"plaintext": "aGk="}])).status_code == 422
    assert (await _rewrap_batch(api, "r", [])).json() == {"results": []}


async def test_openapi_documents_rewrap_and_its_batch(api: Api) -> None:
    schema = (await api.client.get("/openapi.json")).json()
    stream = schema["paths"]["/v1/keys/{name}/rewrap"]["post"]
    names = {parameter["name"] for parameter in stream["parameters"]}
    assert names == {
        "name",
        "backend",
        "key_version",
        "Keystream-Associated-Data",
        "Keystream-Key-Version",
        "Keystream-Context",
    }
    assert stream["operationId"] == "rewrap_stream"
    assert "application/octet-stream" in stream["requestBody"]["content"]
    batch = schema["paths"]["/v1/keys/{name}/rewrap/batch"]["post"]
    item = batch["requestBody"]["content"]["application/json"]["schema"]["properties"]["items"]["items"]
    assert set(item["properties"]) == {"ciphertext", "associated_data", "reference"}
    assert {"400", "401", "403", "404", "413", "503"} <= set(batch["responses"])
    assert "Keystream-Context" in {parameter["name"] for parameter in batch["parameters"]}
