"""Derived keys through the native API: every data route needs a context (the Keystream-Context header on
the streaming and batch routes, a ``context`` field in the JSON of data keys and HMACs) and works under the
per-context key documented in docs/service-api.md, recomputed here with an independent RFC 5869 HKDF."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from app.core.config import Settings
from app.formats.derivation import derive_native
from app.formats.sealed import KeyParameters, SealedDecryptor
from tests.app.api.conftest import Api, running_api
from tests.app.api.routes.test_mac import MATERIAL, b64
from tests.app.api.routes.test_transit_derived import rfc5869_hkdf_sha256

#: The documented info label of a native per-context key; the context follows it.
LABEL = b"keystream derived key v1\x00"
CONTEXT = b"tenant-42"


def per_context_key(material: bytes, context: bytes) -> bytes:
    return rfc5869_hkdf_sha256(material, LABEL + context, len(material))


def test_the_per_context_key_is_a_pinned_vector() -> None:
    # Material 00 01 .. 1f, context "tenant-42" (docs/service-api.md shows the same): pinned, so that neither
    # the label nor the derivation can change unnoticed; the service's own derivation gives the same bytes.
    expected = "4b9d0bb88271a00c79ee5966ffabb8512a38ca446ecf42659dc4c6fb270e07b4"
    assert per_context_key(MATERIAL, CONTEXT).hex() == expected
    assert bytes(derive_native(MATERIAL, CONTEXT)).hex() == expected


@pytest.fixture
async def api(settings_factory: Callable[..., Settings]) -> AsyncIterator[Api]:
    """The app with key import on: a derived key of known material makes the per-context key computable."""
    async with running_api(settings_factory(allow_key_import=True)) as value:
        await _import(value, "tenants", derived=True, segment_size=4096)
        await _import(value, "plain")
        yield value


async def _import(api: Api, name: str, **options: Any) -> None:
    response = await api.client.post(
        f"/v1/keys/{name}/import", json={"key": b64(MATERIAL), **options}, headers=api.auth()
    )
    assert response.status_code == 201, response.text


def _context(context: bytes = CONTEXT) -> dict[str, str]:
    return {"Keystream-Context": b64(context)}


def _message(response: httpx.Response) -> str:
    return str(response.json()["error"]["message"])


async def _post(
    api: Api, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> httpx.Response:
    return await api.client.post(f"/v1/keys/{path}", json=body, headers={**api.auth(), **(headers or {})})


async def test_streaming_encrypt_seals_under_the_per_context_key(api: Api) -> None:
    plaintext = os.urandom(10_000)  # three segments of 4 KiB
    sealed = await api.encrypt("tenants", plaintext, headers=_context())
    assert sealed.status_code == 200, sealed.text
    backend = api.app.state.keystream.backends.get(None)
    key = per_context_key(MATERIAL, CONTEXT)
    decryptor = SealedDecryptor([(1, key)], KeyParameters("aes256", 4096, "ctr-hmac"), b"", backend)
    assert decryptor.update(sealed.content) + decryptor.finalize() == plaintext
    opened = await api.decrypt("tenants", sealed.content, headers=_context())
    assert opened.status_code == 200 and opened.content == plaintext
    wrong = await api.decrypt("tenants", sealed.content, headers=_context(b"tenant-43"))
    assert wrong.status_code == 400 and wrong.json()["error"]["code"] == "decryption_failed"
    rewrapped = await api.client.post(
        "/v1/keys/tenants/rewrap", content=sealed.content, headers={**api.auth(), **_context()}
    )
    assert rewrapped.status_code == 200, rewrapped.text
    again = await api.decrypt("tenants", rewrapped.content, headers=_context())
    assert again.content == plaintext


async def test_raw_ctr_runs_under_the_per_context_key(api: Api) -> None:
    made = await api.encrypt("tenants", b"raw bytes", format="raw", headers=_context())
    assert made.status_code == 200, made.text
    params = {"format": "raw", "iv": made.headers["Keystream-IV"], "key_version": 1}
    opened = await api.decrypt("tenants", made.content, headers=_context(), **params)
    assert opened.content == b"raw bytes"
    other = await api.decrypt("tenants", made.content, headers=_context(b"other"), **params)
    assert other.status_code == 200 and other.content != b"raw bytes"  # CTR has no tag: another keystream


@pytest.mark.parametrize("route", ["encrypt", "decrypt"])
async def test_a_missing_or_unwanted_context_is_400(api: Api, route: str) -> None:
    call = api.encrypt if route == "encrypt" else api.decrypt
    missing = await call("tenants", b"x")
    assert missing.status_code == 400
    assert "is derived: every operation needs a context" in _message(missing)
    unwanted = await call("plain", b"x", headers=_context())
    assert unwanted.status_code == 400
    assert "is not derived: a context is only for keys created with derived true" in _message(unwanted)
    malformed = await call("tenants", b"x", headers={"Keystream-Context": "%%%"})
    assert malformed.status_code == 400 and "Keystream-Context must be base64" in _message(malformed)


async def test_batches_take_the_context_from_the_header(api: Api) -> None:
    items = [{"plaintext": b64(b"a"), "reference": "1"}, {"plaintext": b64(b"b"), "reference": "2"}]
    made = await _post(api, "tenants/encrypt/batch", {"items": items}, _context())
    assert made.status_code == 200, made.text
    sealed = [{"ciphertext": r["ciphertext"]} for r in made.json()["results"]]
    opened = await _post(api, "tenants/decrypt/batch", {"items": sealed}, _context())
    assert [base64.b64decode(r["plaintext"]) for r in opened.json()["results"]] == [b"a", b"b"]
    rewrapped = await _post(api, "tenants/rewrap/batch", {"items": sealed}, _context())
    assert all("ciphertext" in r for r in rewrapped.json()["results"]), rewrapped.text
    missing = await _post(api, "tenants/decrypt/batch", {"items": sealed})
    assert missing.status_code == 400 and "needs a context" in _message(missing)
    twice = await api.client.post(
        "/v1/keys/tenants/encrypt/batch",
        json={"items": items},
        headers=[*api.auth().items(), ("Keystream-Context", b64(b"a")), ("Keystream-Context", b64(b"b"))],
    )
    assert twice.status_code == 400 and "given more than once" in _message(twice)


async def test_data_keys_and_hmacs_take_a_context_field(api: Api) -> None:
    made = await _post(api, "tenants/datakey", {"type": "aes256", "plaintext": True, "context": b64(CONTEXT)})
    assert made.status_code == 200, made.text
    sealed = [{"ciphertext": made.json()["ciphertext"]}]
    opened = await _post(api, "tenants/decrypt/batch", {"items": sealed}, _context())
    assert opened.json()["results"][0]["plaintext"] == made.json()["plaintext"]
    assert (await _post(api, "tenants/datakey", {"type": "aes256", "plaintext": False})).status_code == 400
    tagged = await _post(api, "tenants/hmac", {"input": b64(b"data"), "context": b64(CONTEXT)})
    hmac_key = rfc5869_hkdf_sha256(per_context_key(MATERIAL, CONTEXT), b"keystream hmac key v1", 32)
    digest = hmac.new(hmac_key, b"data", hashlib.sha256).digest()
    assert tagged.json()["hmac"] == f"ks:v1:{b64(digest)}"
    body = {"input": b64(b"data"), "hmac": tagged.json()["hmac"]}
    assert (await _post(api, "tenants/verify", {**body, "context": b64(CONTEXT)})).json()["valid"] is True
    assert (await _post(api, "tenants/verify", {**body, "context": b64(b"x")})).json()["valid"] is False
    assert (await _post(api, "tenants/verify", body)).status_code == 400
    batch = await _post(
        api, "tenants/hmac/batch", {"items": [{"input": b64(b"data")}], "context": b64(CONTEXT)}
    )
    assert batch.json()["results"][0]["hmac"] == tagged.json()["hmac"]
    assert (await _post(api, "plain/hmac", {"input": b64(b"d"), "context": b64(CONTEXT)})).status_code == 400
