"""The batch buffer budget (503 + Retry-After when full) and the batch routes' OpenAPI entries."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Callable

from app.core.config import Settings
from app.services.budget import ByteBudget
from tests.app.api.conftest import running_api


async def _until_reserved(budget: ByteBudget) -> None:
    """Wait (up to 10 s) until the first batch holds its reservation: a fixed sleep is too short on a loaded
    machine, and the request behind it would then not find the budget full."""
    for _ in range(1000):
        if budget.held:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the first batch never reserved its bytes")


async def test_over_budget_batches_get_503_with_retry_after(
    settings_factory: Callable[..., Settings],
) -> None:
    settings = settings_factory(batch_buffer_budget_bytes=1024, batch_buffer_wait_seconds=0.2)
    async with running_api(settings) as api:
        await api.create_key("b")
        headers = {**api.auth(), "Content-Type": "application/json"}
        body = json.dumps({"items": [{"plaintext": base64.b64encode(b"held").decode()}]}).encode()
        release = asyncio.Event()

        async def slow_body() -> AsyncIterator[bytes]:
            yield body[:10]
            await release.wait()  # the first request holds its reservation until then
            yield body[10:]

        holder = asyncio.ensure_future(
            api.client.post("/v1/keys/b/encrypt/batch", content=slow_body(), headers=headers)
        )
        await _until_reserved(api.app.state.keystream.batch_budget)
        refused = await api.client.post("/v1/keys/b/encrypt/batch", content=body, headers=headers)
        assert refused.status_code == 503, refused.text
        assert refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["code"] == "overloaded"
        release.set()
        held = await holder
        assert held.status_code == 200, held.text
        assert (
            await api.client.post("/v1/keys/b/decrypt/batch", json={"items": []}, headers=headers)
        ).status_code == 200
        assert api.app.state.keystream.batch_budget.held == 0


async def test_a_waiting_batch_runs_once_the_budget_frees(settings_factory: Callable[..., Settings]) -> None:
    settings = settings_factory(batch_buffer_budget_bytes=1024, batch_buffer_wait_seconds=5)
    async with running_api(settings) as api:
        await api.create_key("b")
        headers = {**api.auth(), "Content-Type": "application/json"}
        body = json.dumps({"items": [{"plaintext": "aGk="}]}).encode()
        release = asyncio.Event()

        async def slow_body() -> AsyncIterator[bytes]:
            yield body[:5]
            await release.wait()
            yield body[5:]

        holder = asyncio.ensure_future(
            api.client.post("/v1/keys/b/encrypt/batch", content=slow_body(), headers=headers)
        )
        await _until_reserved(api.app.state.keystream.batch_budget)
        waiter = asyncio.ensure_future(
            api.client.post("/v1/keys/b/encrypt/batch", content=body, headers=headers)
        )
        await asyncio.sleep(0.1)
        assert not waiter.done()
        release.set()
        assert [(await holder).status_code, (await waiter).status_code] == [200, 200]


async def test_openapi_documents_the_batch_bodies(settings_factory: Callable[..., Settings]) -> None:
    async with running_api(settings_factory()) as api:
        schema = (await api.client.get("/openapi.json")).json()
        for operation, field, output in (
            ("encrypt", "plaintext", "ciphertext"),
            ("decrypt", "ciphertext", "plaintext"),
        ):
            post = schema["paths"][f"/v1/keys/{{name}}/{operation}/batch"]["post"]
            body = post["requestBody"]["content"]["application/json"]["schema"]
            item = body["properties"]["items"]["items"]
            assert item["required"] == [field] and item["additionalProperties"] is False
            assert item["properties"]["reference"]["anyOf"][0]["maxLength"] == 256
            results = post["responses"]["200"]["content"]["application/json"]["schema"]["properties"][
                "results"
            ]
            assert output in results["items"]["anyOf"][0]["required"]
            assert {"413", "503"} <= set(post["responses"])
