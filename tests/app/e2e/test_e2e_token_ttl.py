"""Token lifetimes against a real server with two workers (issue 12 item 5): a 2 s token works, then gets 401
``token_expired``; a renewal keeps it alive on every worker (the change log carries it, while each worker's
token cache would otherwise keep the old expiry for a minute); a renewal past ``max_ttl`` is capped."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from bench.service_process import Server, start_server, stop_server

pytestmark = [pytest.mark.e2e, pytest.mark.serial]  # a 2 s token lifetime against the clock: alone


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


def _create(server: Server, **fields: Any) -> tuple[str, dict[str, Any]]:
    with server.client() as client:
        response = client.post("/v1/tokens", json={"scopes": ["encrypt"], **fields})
    assert response.status_code == 201, response.text
    return response.json()["token"], response.json()


def _fresh(server: Server, method: str, path: str, token: str, **kwargs: Any) -> httpx.Response:
    """One request on a new connection (so successive calls land on either worker)."""
    headers = {"Authorization": f"Bearer {token}", "Connection": "close"}
    with httpx.Client(base_url=server.url, timeout=30) as client:
        return client.request(method, path, headers=headers, **kwargs)


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _sleep_until(moment: datetime) -> None:
    """Wait until the (shared) wall clock passes ``moment``, a time the server gave."""
    time.sleep(max(0.0, (moment - datetime.now(UTC)).total_seconds()))


def test_a_token_expires_after_its_ttl(two_workers: Server) -> None:
    token, created = _create(two_workers, ttl=2, max_ttl=4)
    expires = _at(created["expires_at"])
    assert (expires - _at(created["created_at"])).total_seconds() == 2
    for _ in range(6):
        assert _fresh(two_workers, "GET", "/v1/backends", token).status_code == 200
    assert datetime.now(UTC) < expires, "the machine is too slow for this test's 2 s"
    _sleep_until(expires + timedelta(seconds=0.2))
    for _ in range(6):
        response = _fresh(two_workers, "GET", "/v1/backends", token)
        assert response.status_code == 401, response.text
        assert response.json()["error"] == {"code": "token_expired", "message": "token expired"}
        assert response.headers["WWW-Authenticate"] == "Bearer"


def test_renewal_extends_on_every_worker_and_is_capped_by_max_ttl(two_workers: Server) -> None:
    # A ttl of 4 s: six fresh connections and the renewal fit in it on a loaded machine (2 s did not).
    token, created = _create(two_workers, ttl=4, max_ttl=12)
    created_at, first_expiry = _at(created["created_at"]), _at(created["expires_at"])
    for _ in range(6):  # both workers cache the record with its first expiry
        assert _fresh(two_workers, "GET", "/v1/tokens/self", token).status_code == 200
    renewed = _fresh(two_workers, "POST", "/v1/tokens/self/renew", token, json={"ttl": 8})
    assert renewed.status_code == 200, renewed.text
    assert renewed.json()["capped"] is False
    new_expiry = _at(renewed.json()["expires_at"])
    assert (new_expiry - created_at).total_seconds() >= 8
    _sleep_until(first_expiry + timedelta(seconds=0.3))  # alive on every worker thanks to the renewal
    for _ in range(8):
        response = _fresh(two_workers, "GET", "/v1/tokens/self", token)
        assert response.status_code == 200, response.text
        assert response.json()["expires_at"] == renewed.json()["expires_at"]
    capped = _fresh(two_workers, "POST", "/v1/tokens/self/renew", token, json={"ttl": 3600})
    assert capped.status_code == 200, capped.text
    assert capped.json()["capped"] is True
    assert capped.json()["expires_at"] == capped.json()["max_expires_at"]
    assert (_at(capped.json()["expires_at"]) - created_at).total_seconds() == 12
    _sleep_until(_at(capped.json()["expires_at"]) + timedelta(seconds=0.2))
    for _ in range(6):
        response = _fresh(two_workers, "GET", "/v1/backends", token)
        assert response.json()["error"]["code"] == "token_expired", response.text
    # ...and an expired token cannot renew itself
    late = _fresh(two_workers, "POST", "/v1/tokens/self/renew", token)
    assert late.status_code == 401 and late.json()["error"]["code"] == "token_expired"


def test_renewing_a_token_without_ttl_is_400(two_workers: Server) -> None:
    token, _ = _create(two_workers)
    response = _fresh(two_workers, "POST", "/v1/tokens/self/renew", token)
    assert response.status_code == 400, response.text
    assert "nothing to renew" in response.json()["error"]["message"]
