"""``POST /v1/keys/{name}/rewrap`` and ``/rewrap/batch`` in process (issue 12 item 4): a sealed message of an
older version comes back sealed under the latest one, for both schemes and every backend; failures are
decrypt's; the ``rewrap`` scope allows it without ``decrypt``."""

from __future__ import annotations

import base64
import os
from typing import Any

import httpx
import pytest

import aescore
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
