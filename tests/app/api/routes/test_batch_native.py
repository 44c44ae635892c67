"""Where batch crypto runs: native batches stay on the event loop up to inline_crypto_max_bytes (no thread
hand-off, whose GIL contention made batch req/s fall as connections rose), bigger ones go to a thread."""

from __future__ import annotations

import base64
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from anyio import to_thread

from app.core.config import Settings
from app.services import offload
from tests.app.api.conftest import running_api


async def test_small_native_batches_run_inline_and_big_ones_in_a_thread(
    settings_factory: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_api(settings_factory(inline_crypto_max_bytes=64 * 1024)) as api:
        await api.create_key("b")
        small = {"items": [{"plaintext": base64.b64encode(bytes(500)).decode()}] * 100}
        big = {"items": [{"plaintext": base64.b64encode(bytes(70 * 1024)).decode()}]}
        warm = await api.client.post("/v1/keys/b/encrypt/batch", json=small, headers=api.auth())
        assert warm.status_code == 200  # the key is cached from here on: no thread for its lookup
        offloaded: list[str] = []
        real = to_thread.run_sync

        async def spy(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            offloaded.append(getattr(function, "__name__", "work"))
            return await real(function, *args, **kwargs)

        monkeypatch.setattr(offload, "to_thread", SimpleNamespace(run_sync=spy))
        ciphertexts = []
        for body in (small, big):
            response = await api.client.post("/v1/keys/b/encrypt/batch", json=body, headers=api.auth())
            assert response.status_code == 200
            ciphertexts.append(response.json()["results"][0]["ciphertext"])
            assert len(offloaded) == (0 if body is small else 1), offloaded
        items = {"items": [{"ciphertext": ciphertexts[1]}]}
        opened = await api.client.post("/v1/keys/b/decrypt/batch", json=items, headers=api.auth())
        assert base64.b64decode(opened.json()["results"][0]["plaintext"]) == bytes(70 * 1024)
        assert len(offloaded) == 2
