"""Token lifetimes against a real server with two workers (issue 12 item 5): a 2 s token works, then gets 401
``token_expired``; a renewal keeps it alive on every worker (the change log carries it, while each worker's
token cache would otherwise keep the old expiry for a minute); a renewal past ``max_ttl`` is capped."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest

from bench.service_process import Server, start_server, stop_server

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("ttl")
    server = start_server(
        base / "data", base / "server.log", KEYSTREAM_WORKERS="2", KEYSTREAM_TOKEN_CACHE_TTL="60"
    )
    try:
        yield server
    finally:
        stop_server(server)


def _create(server: Server, **fields: Any) -> tuple[str, datetime]:
    with server.client() as client:
        response = client.post("/v1/tokens", json={"scopes": ["encrypt"], **fields})
    assert response.status_code == 201, response.text
    return response.json()["token"], datetime.fromisoformat(response.json()["created_at"])


def _fresh(server: Server, method: str, path: str, token: str, **kwargs: Any) -> httpx.Response:
    """One request on a new connection (so successive calls land on either worker)."""
    headers = {"Authorization": f"Bearer {token}", "Connection": "close"}
    with httpx.Client(base_url=server.url, timeout=30) as client:
        return client.request(method, path, headers=headers, **kwargs)


def _sleep_until(start: float, offset: float) -> None:
    time.sleep(max(0.0, start + offset - time.monotonic()))


def test_a_token_expires_after_its_ttl(two_workers: Server) -> None:
    start = time.monotonic()
    token, _ = _create(two_workers, ttl=2, max_ttl=4)
    for _ in range(6):
        assert _fresh(two_workers, "GET", "/v1/backends", token).status_code == 200
    _sleep_until(start, 2.3)
    for _ in range(6):
        response = _fresh(two_workers, "GET", "/v1/backends", token)
        assert response.status_code == 401, response.text
        assert response.json()["error"] == {"code": "token_expired", "message": "token expired"}
        assert response.headers["WWW-Authenticate"] == "Bearer"


def test_renewal_extends_on_every_worker_and_is_capped_by_max_ttl(two_workers: Server) -> None:
    start = time.monotonic()
    token, created = _create(two_workers, ttl=2, max_ttl=6)
    for _ in range(6):  # both workers cache the record with its first expiry
        assert _fresh(two_workers, "GET", "/v1/tokens/self", token).status_code == 200
    _sleep_until(start, 1.0)
    renewed = _fresh(two_workers, "POST", "/v1/tokens/self/renew", token)
    assert renewed.status_code == 200, renewed.text
    assert renewed.json()["capped"] is False
    new_expiry = datetime.fromisoformat(renewed.json()["expires_at"])
    assert 2.9 <= (new_expiry - created).total_seconds() <= 6.0
    _sleep_until(start, 2.4)  # past the first expiry: alive on every worker thanks to the renewal
    for _ in range(8):
        response = _fresh(two_workers, "GET", "/v1/tokens/self", token)
        assert response.status_code == 200, response.text
        assert response.json()["expires_at"] == renewed.json()["expires_at"]
    capped = _fresh(two_workers, "POST", "/v1/tokens/self/renew", token, json={"ttl": 3600})
    assert capped.status_code == 200, capped.text
    assert capped.json()["capped"] is True
    assert capped.json()["expires_at"] == capped.json()["max_expires_at"]
    assert (datetime.fromisoformat(capped.json()["expires_at"]) - created).total_seconds() == 6
    _sleep_until(start, 6.3)
    for _ in range(6):
        response = _fresh(two_workers, "GET", "/v1/backends", token)
        assert response.json()["error"]["code"] == "token_expired", response.text


def test_renewing_a_token_without_ttl_is_400(two_workers: Server) -> None:
    token, _ = _create(two_workers)
    response = _fresh(two_workers, "POST", "/v1/tokens/self/renew", token)
    assert response.status_code == 400, response.text
    assert "nothing to renew" in response.json()["error"]["message"]
