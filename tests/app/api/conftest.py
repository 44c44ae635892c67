"""In-process fixtures: an app on a temporary data dir, driven through httpx's ASGI transport."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.core.config import Settings
from app.main import create_app

ROOT_TOKEN = "ks_0123456789abcdef_root-secret-for-tests-only-0123456789"
MASTER_KEY = base64.b64encode(bytes(range(32))).decode()


def make_settings(data_dir: Path, **overrides: Any) -> Settings:
    """Settings for tests: no .env, fixed root token and master key, everything else overridable."""
    values: dict[str, Any] = {
        "data_dir": data_dir,
        "root_token": ROOT_TOKEN,
        "master_key": MASTER_KEY,
        "key_metadata_ttl": 0.0,
        "token_cache_ttl": 0.0,
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


@dataclass
class Api:
    """A client plus helpers for the common calls."""

    client: httpx.AsyncClient
    app: FastAPI

    @staticmethod
    def auth(token: str = ROOT_TOKEN) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    async def create_key(self, name: str = "k1", **fields: Any) -> dict[str, Any]:
        response = await self.client.post("/v1/keys", json={"name": name, **fields}, headers=self.auth())
        assert response.status_code == 201, response.text
        return dict(response.json())

    async def create_token(self, scopes: list[str], patterns: list[str] | None = None) -> str:
        body: dict[str, Any] = {"scopes": scopes}
        if patterns is not None:
            body["key_patterns"] = patterns
        response = await self.client.post("/v1/tokens", json=body, headers=self.auth())
        assert response.status_code == 201, response.text
        return str(response.json()["token"])

    async def encrypt(self, name: str, data: bytes, token: str = ROOT_TOKEN, **params: Any) -> httpx.Response:
        headers = self.auth(token)
        headers.update(params.pop("headers", {}))
        return await self.client.post(
            f"/v1/keys/{name}/encrypt", content=data, params=params, headers=headers
        )

    async def decrypt(self, name: str, data: bytes, token: str = ROOT_TOKEN, **params: Any) -> httpx.Response:
        headers = self.auth(token)
        headers.update(params.pop("headers", {}))
        return await self.client.post(
            f"/v1/keys/{name}/decrypt", content=data, params=params, headers=headers
        )


@pytest.fixture
def settings_factory(tmp_path: Path) -> Callable[..., Settings]:
    return lambda **overrides: make_settings(tmp_path / "data", **overrides)


@pytest.fixture
async def api(settings_factory: Callable[..., Settings]) -> AsyncIterator[Api]:
    """An app with default settings (every available backend) on a fresh data dir."""
    async with running_api(settings_factory()) as value:
        yield value


class running_api:
    """``async with running_api(settings) as api``: lifespan started, client connected."""

    def __init__(self, settings: Settings) -> None:
        self.app = create_app(settings)
        self._lifespan = self.app.router.lifespan_context(self.app)
        self._client: httpx.AsyncClient | None = None

    async def __aenter__(self) -> Api:
        await self._lifespan.__aenter__()
        transport = httpx.ASGITransport(app=self.app)
        self._client = httpx.AsyncClient(transport=transport, base_url="http://keystream.test")
        return Api(self._client, self.app)

    async def __aexit__(self, *exc: object) -> None:
        assert self._client is not None
        await self._client.aclose()
        await self._lifespan.__aexit__(None, None, None)


@pytest.fixture
def stack_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Paths (with query) of the requests that went through FastAPI's own ``__call__`` (its middleware and
    router), not the fast dispatcher's shortcut."""
    calls: list[str] = []
    original = FastAPI.__call__

    async def counting(self: FastAPI, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            calls.append(
                scope["path"] + ("?" + scope["query_string"].decode() if scope["query_string"] else "")
            )
        await original(self, scope, receive, send)

    monkeypatch.setattr(FastAPI, "__call__", counting)
    return calls


#: A request count of ``/metrics``: its label set and its value.
REQUEST_COUNT = re.compile(r"^keystream_http_request_duration_seconds_count(\{.*\}) (\S+)$", re.MULTILINE)
#: The fields of an audit record that differ from one run to the next.
VOLATILE_AUDIT_FIELDS = ("time", "request_id", "chain", "prev", "hmac")

Recorded = tuple[list[Any], dict[str, float], list[dict[str, Any]]]


def compared_headers(response: httpx.Response, *volatile: str) -> dict[str, str]:
    """``response``'s headers without those that differ from one request to the next (its request id, its
    date, and ``volatile``), for the fast dispatcher's tests that compare two runs."""
    dropped = ("keystream-request-id", "date", *volatile)
    return {name: value for name, value in response.headers.items() if name not in dropped}


async def recorded_run(
    settings: Settings, run_cases: Callable[[Api], Awaitable[list[Any]]], counted: tuple[str, ...]
) -> Recorded:
    """Run ``run_cases`` on a fresh app of ``settings`` (whose ``audit_log`` is a file): what it returned,
    the request counts it added whose label set holds one of ``counted``, and every audit record written,
    without :data:`VOLATILE_AUDIT_FIELDS`. The fast dispatcher's tests run their cases with and without the
    shortcut and compare the three."""

    async def counts() -> dict[str, float]:
        text = (await api.client.get("/metrics")).text
        return {
            labels: float(value)
            for labels, value in REQUEST_COUNT.findall(text)
            if any(part in labels for part in counted)
        }

    async with running_api(settings) as api:
        before = await counts()
        answers = await run_cases(api)
        after = await counts()
    delta = {labels: count - before.get(labels, 0.0) for labels, count in after.items()}
    records = [json.loads(line) for line in Path(str(settings.audit_log)).read_text().splitlines()]
    for record in records:
        for volatile in VOLATILE_AUDIT_FIELDS:
            record.pop(volatile, None)
    return answers, {labels: count for labels, count in delta.items() if count}, records
