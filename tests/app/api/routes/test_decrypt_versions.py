"""A decrypt without ``key_version`` tries at most ``max_decrypt_versions`` versions (issue 11 item 4).

Each version tried costs an HKDF and an HMAC over the first segment: against a key with 300 versions a garbage
1 MiB decrypt took 184 ms on the event loop. The newest ``max_decrypt_versions`` (64 by default) are tried;
a ciphertext of an older version needs ``key_version``, streaming and batch alike.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping

import httpx
import pytest

from app.core.config import Settings
from tests.app.api.conftest import Api, running_api


@pytest.mark.parametrize("scheme", ["ctr-hmac", "gcm"])
@pytest.mark.parametrize("body_size", [10, 200_000])  # read whole / streamed
async def test_a_version_beyond_the_bound_is_not_tried_and_key_version_reaches_it(
    settings_factory: Callable[..., Settings], body_size: int, scheme: str
) -> None:
    async with running_api(settings_factory(max_decrypt_versions=2)) as api:
        await api.create_key("v", segment_size=4096, scheme=scheme)
        for _ in range(2):
            assert (await api.client.post("/v1/keys/v/rotate", headers=api.auth())).status_code == 200
        plaintext = b"p" * body_size
        sealed = {
            version: (await api.encrypt("v", plaintext, key_version=version)).content for version in (1, 2, 3)
        }

        for version in (3, 2):
            opened = await api.decrypt("v", sealed[version])
            assert opened.status_code == 200 and opened.content == plaintext
            assert opened.headers["Keystream-Key-Version"] == str(version)
        refused = await api.decrypt("v", sealed[1])
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["code"] == "decryption_failed"
        assert "(tried 3, 2)" in refused.json()["error"]["message"]
        explicit = await api.decrypt("v", sealed[1], key_version=1)
        assert explicit.status_code == 200 and explicit.content == plaintext


async def test_batch_decrypt_tries_the_same_bounded_versions(
    settings_factory: Callable[..., Settings],
) -> None:
    async with running_api(settings_factory(max_decrypt_versions=2)) as api:
        await api.create_key("b")
        ciphertexts = []
        for version in (1, 2, 3):
            if version > 1:
                await api.client.post("/v1/keys/b/rotate", headers=api.auth())
            sealed = await api.encrypt("b", b"hi", key_version=version)
            ciphertexts.append(base64.b64encode(sealed.content).decode())
        items = {"items": [{"ciphertext": ciphertext} for ciphertext in ciphertexts]}

        results = (await _decrypt_batch(api, items)).json()["results"]
        assert [result.get("key_version") for result in results] == [None, 2, 3]
        assert results[0]["error"]["code"] == "decryption_failed"
        old = (await _decrypt_batch(api, {"items": items["items"][:1]}, key_version=1)).json()["results"]
        assert old[0]["key_version"] == 1 and base64.b64decode(old[0]["plaintext"]) == b"hi"


async def _decrypt_batch(api: Api, body: Mapping[str, object], **params: int) -> httpx.Response:
    response = await api.client.post("/v1/keys/b/decrypt/batch", json=body, params=params, headers=api.auth())
    assert response.status_code == 200, response.text
    return response


def test_the_default_bound_is_64() -> None:
    assert Settings.model_fields["max_decrypt_versions"].default == 64
