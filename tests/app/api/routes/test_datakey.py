"""``POST /v1/keys/{name}/datakey``: data keys sealed under the named key, opened by decrypt and batch
decrypt; scopes, strict input, and the data key kept out of logs, metrics and error bodies."""

from __future__ import annotations

import base64
import logging
import re
from typing import Any

import httpx
import pytest

from app.core.config import Settings
from tests.app.api.conftest import Api, running_api


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def _datakey(api: Api, name: str, token: str | None = None, **body: Any) -> httpx.Response:
    headers = api.auth(token) if token else api.auth()
    return await api.client.post(f"/v1/keys/{name}/datakey", json=body, headers=headers)


async def _decrypt_batch(api: Api, name: str, ciphertext: str, associated_data: bytes | None) -> bytes:
    item: dict[str, Any] = {"ciphertext": ciphertext}
    if associated_data is not None:
        item["associated_data"] = b64(associated_data)
    response = await api.client.post(
        f"/v1/keys/{name}/decrypt/batch", json={"items": [item]}, headers=api.auth()
    )
    assert response.status_code == 200, response.text
    result = response.json()["results"][0]
    assert "error" not in result, result
    return base64.b64decode(result["plaintext"])


@pytest.mark.parametrize("scheme", ["ctr-hmac", "gcm"])
@pytest.mark.parametrize(("key_type", "size"), [("aes128", 16), ("aes256", 32)])
@pytest.mark.parametrize("associated_data", [None, b"", b"tenant=42;object=invoice-7"])
async def test_plaintext_data_key_is_what_decrypt_returns(
    api: Api, scheme: str, key_type: str, size: int, associated_data: bytes | None
) -> None:
    await api.create_key("wrap", scheme=scheme)
    body: dict[str, Any] = {"type": key_type, "plaintext": True}
    if associated_data is not None:
        body["associated_data"] = b64(associated_data)
    response = await _datakey(api, "wrap", **body)
    assert response.status_code == 200, response.text
    assert response.headers["cache-control"] == "no-store"
    answer = response.json()
    assert set(answer) == {"ciphertext", "key_version", "plaintext"}
    assert answer["key_version"] == 1
    data_key = base64.b64decode(answer["plaintext"], validate=True)
    assert len(data_key) == size
    ciphertext = base64.b64decode(answer["ciphertext"], validate=True)
    # The streaming decrypt route opens it ...
    headers = {"Keystream-Associated-Data": b64(associated_data)} if associated_data else {}
    opened = await api.decrypt("wrap", ciphertext, headers=headers)
    assert opened.status_code == 200, opened.text
    assert opened.content == data_key
    # ... and so does the batch decrypt route.
    assert await _decrypt_batch(api, "wrap", answer["ciphertext"], associated_data) == data_key
    if associated_data:  # bound to the associated data: without it (or with another) it does not open
        assert (await api.decrypt("wrap", ciphertext)).status_code == 400
        assert (await _datakey(api, "wrap", type=key_type, plaintext=False)).status_code == 200


@pytest.mark.parametrize("scheme", ["ctr-hmac", "gcm"])
async def test_wrapped_only_answer_uses_the_latest_version(api: Api, scheme: str) -> None:
    await api.create_key("wrap", scheme=scheme)
    rotated = await api.client.post("/v1/keys/wrap/rotate", headers=api.auth())
    assert rotated.status_code == 200
    response = await _datakey(api, "wrap", type="aes256", plaintext=False)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert set(answer) == {"ciphertext", "key_version"}
    assert answer["key_version"] == 2
    opened = await api.decrypt("wrap", base64.b64decode(answer["ciphertext"]))
    assert opened.status_code == 200 and len(opened.content) == 32
    assert opened.headers["Keystream-Key-Version"] == "2"
    assert len(await _decrypt_batch(api, "wrap", answer["ciphertext"], None)) == 32


async def test_every_data_key_is_fresh(api: Api) -> None:
    await api.create_key("wrap")
    answers = [(await _datakey(api, "wrap", type="aes256", plaintext=True)).json() for _ in range(8)]
    assert len({answer["plaintext"] for answer in answers}) == 8
    assert len({answer["ciphertext"] for answer in answers}) == 8


async def test_scopes(api: Api) -> None:
    await api.create_key("wrap")
    await api.create_key("other")
    encrypt_only = await api.create_token(["encrypt"], ["wrap"])
    decrypt_only = await api.create_token(["decrypt"], ["wrap"])
    both = await api.create_token(["encrypt", "decrypt"], ["wrap"])
    admin_only = await api.create_token(["admin"])

    wrapped = await _datakey(api, "wrap", encrypt_only, type="aes256", plaintext=False)
    assert wrapped.status_code == 200, wrapped.text
    assert "plaintext" not in wrapped.json()
    # Asking for the key itself is a decrypt: an encrypt-only token gets 403 and no key.
    refused = await _datakey(api, "wrap", encrypt_only, type="aes256", plaintext=True)
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["code"] == "forbidden"
    assert "'decrypt' scope" in refused.json()["error"]["message"]
    assert set(refused.json()) == {"error"}
    for token in (decrypt_only, admin_only):
        for plaintext in (False, True):
            answer = await _datakey(api, "wrap", token, type="aes128", plaintext=plaintext)
            assert answer.status_code == 403, answer.text
            assert "'encrypt' scope" in answer.json()["error"]["message"]
    assert (await _datakey(api, "wrap", both, type="aes128", plaintext=True)).status_code == 200
    # Key patterns apply: the token may not use "other" whatever it asks.
    for plaintext in (False, True):
        other = await _datakey(api, "other", both, type="aes256", plaintext=plaintext)
        assert other.status_code == 403
        assert "key pattern" in other.json()["error"]["message"]


async def test_no_token_gets_401(api: Api) -> None:
    await api.create_key("wrap")
    response = await api.client.post("/v1/keys/wrap/datakey", json={"type": "aes256", "plaintext": True})
    assert response.status_code == 401
    assert set(response.json()) == {"error"}


@pytest.mark.parametrize(
    "body",
    [
        {"type": "aes192", "plaintext": True},
        {"type": "AES256", "plaintext": True},
        {"type": "rsa2048", "plaintext": False},
        {"type": "aes256", "plaintext": "true"},
        {"type": "aes256", "plaintext": 1},
        {"type": "aes256"},
        {"plaintext": True},
        {"type": "aes256", "plaintext": True, "associated_data": 5},
        {"type": "aes256", "plaintext": True, "bits": 256},
        [],
    ],
)
async def test_strict_input_is_422(api: Api, body: Any) -> None:
    await api.create_key("wrap")
    response = await api.client.post("/v1/keys/wrap/datakey", json=body, headers=api.auth())
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "validation_error"


async def test_request_errors(settings_factory: Any) -> None:
    settings: Settings = settings_factory(max_associated_data=64)
    async with running_api(settings) as api:
        await api.create_key("wrap")
        missing = await _datakey(api, "nope", type="aes256", plaintext=True)
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "key_not_found"
        bad = await _datakey(api, "wrap", type="aes256", plaintext=True, associated_data="%%not base64")
        assert bad.status_code == 400 and "associated_data must be base64" in bad.json()["error"]["message"]
        big = await _datakey(api, "wrap", type="aes256", plaintext=True, associated_data=b64(bytes(65)))
        assert big.status_code == 413, big.text
        text = await api.client.post(
            "/v1/keys/wrap/datakey",
            content=b'{"type": "aes256", "plaintext": true}',
            headers={**api.auth(), "Content-Type": "text/plain"},
        )
        assert text.status_code == 415


def _counter(metrics: str, name: str, labels: str) -> float:
    match = re.search(rf"^{re.escape(name)}\{{{re.escape(labels)}\}} (\S+)$", metrics, re.MULTILINE)
    return float(match[1]) if match else 0.0


async def test_data_key_stays_out_of_logs_and_metrics(api: Api, caplog: pytest.LogCaptureFixture) -> None:
    await api.create_key("wrap")
    backend = api.app.state.keystream.backends.default
    labels = f'backend="{backend}",operation="encrypt"'
    before = _counter((await api.client.get("/metrics")).text, "keystream_crypto_bytes_total", labels)
    with caplog.at_level(logging.DEBUG):
        response = await _datakey(api, "wrap", type="aes256", plaintext=True)
        assert response.status_code == 200
        metrics = (await api.client.get("/metrics")).text
    data_key = base64.b64decode(response.json()["plaintext"])
    # Counted like any sealing: 32 bytes of plaintext into the crypto core, and the route's requests.
    assert _counter(metrics, "keystream_crypto_bytes_total", labels) == before + 32
    assert 'route="/v1/keys/{name}/datakey",status="200"' in metrics
    logged = "\n".join(record.getMessage() + repr(record.args) for record in caplog.records)
    for form in (response.json()["plaintext"], data_key.hex(), repr(data_key)):
        assert form not in logged
        assert form not in metrics


async def test_openapi_documents_the_route(api: Api) -> None:
    document = (await api.client.get("/openapi.json")).json()
    operation = document["paths"]["/v1/keys/{name}/datakey"]["post"]
    assert {"200", "400", "401", "403", "404", "413", "415", "422"} <= set(operation["responses"])
    schemas = document["components"]["schemas"]
    request = schemas["DataKeyRequest"]
    assert request["required"] == ["type", "plaintext"] and request["additionalProperties"] is False
    assert request["properties"]["type"]["enum"] == ["aes128", "aes256"]
    answer = schemas["DataKeyResponse"]
    assert answer["required"] == ["ciphertext", "key_version"]
    assert answer["properties"]["plaintext"]["type"] == "string"  # left out when not asked for, never null
