"""A login runs on the event loop when nothing in it would wait (the issuer's keys held, the SQLite keystore's
write lock free) and again in a worker thread when something would: the first login after the JWT method names
a key source (its JWKS fetched), and a login while another connection holds the keystore's write lock. Either
way the caller gets the same answer, and the token it gets works."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from anyio import to_thread

from app.api.routes import auth
from tests.app.api.conftest import Api, make_settings, running_api
from tests.jwt_issuer import ISSUER, Issuer, Signer, k8s_claims, k8s_role, serve_issuer

SIGNER = Signer.rsa("loop-key")
ROLE = k8s_role()


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The logins' hops to a worker thread (the route's ``to_thread.run_sync`` calls), by function."""
    seen: list[str] = []

    async def counted(work: Any, *args: Any, **kwargs: Any) -> Any:
        name = getattr(getattr(work, "func", work), "__qualname__", "?")
        if name.endswith("Login.login"):  # not the admin's writes of the config and the role
            seen.append(name)
        return await to_thread.run_sync(work, *args, **kwargs)

    monkeypatch.setattr(auth, "to_thread", SimpleNamespace(run_sync=counted))
    return seen


@pytest.fixture(scope="module")
def issuer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Issuer]:
    with serve_issuer(tmp_path_factory.mktemp("issuer"), [SIGNER]) as running:
        yield running


async def _configure(api: Api, config: dict[str, Any]) -> None:
    """The key the issued tokens encrypt with, the JWT method's ``config`` and the role."""
    await api.create_key("billing-orders")
    assert (await api.client.post("/v1/auth/jwt/config", json=config, headers=api.auth())).status_code == 200
    assert (await api.client.post("/v1/auth/roles/billing", json=ROLE, headers=api.auth())).status_code == 200


async def _configure(api: Api, config: dict[str, Any]) -> None:
    """The key the issued tokens encrypt with, the JWT method's ``config`` and the role."""
    await api.create_key("billing-orders")
    written = await api.client.post("/v1/auth/jwt/config", json=config, headers=api.auth())
    assert written.status_code == 200, written.text
    written = await api.client.post("/v1/auth/roles/billing", json=ROLE, headers=api.auth())
    assert written.status_code == 200, written.text


async def _login(api: Api, namespace: str = "billing") -> tuple[int, dict[str, Any]]:
    response = await api.client.post(
        "/v1/auth/jwt/login", json={"role": "billing", "jwt": SIGNER.sign(k8s_claims(namespace, "api"))}
    )
    return response.status_code, response.json()


async def _encrypts_with(api: Api, token: str) -> None:
    response = await api.encrypt("billing-orders", b"hello", token=token)
    assert response.status_code == 200, response.text


async def test_with_keys_held_logins_and_refusals_stay_on_the_loop(tmp_path: Path, hops: list[str]) -> None:
    async with running_api(make_settings(tmp_path / "data")) as api:
        await _configure(api, {"jwt_validation_pubkeys": [SIGNER.public_pem()]})
        for _ in range(3):
            status, answer = await _login(api)
            assert status == 201, answer
            await _encrypts_with(api, answer["token"])
        status, answer = await _login(api, namespace="payroll")  # a bound claim not met
        assert status == 400, answer
    assert hops == []


async def test_a_jwks_fetch_runs_in_a_worker_thread_then_the_keys_held_serve_on_the_loop(
    tmp_path: Path, hops: list[str], issuer: Issuer
) -> None:
    async with running_api(make_settings(tmp_path / "data")) as api:
        await _configure(
            api, {"jwks_url": issuer.jwks_url, "jwks_ca_pem": issuer.ca_pem, "bound_issuer": ISSUER}
        )
        fetched = issuer.count("/openid/v1/jwks")
        for _ in range(3):
            status, answer = await _login(api)
            assert status == 201, answer
            await _encrypts_with(api, answer["token"])
    assert issuer.count("/openid/v1/jwks") == fetched + 1
    assert hops == ["JwtLogin.login"]


async def test_a_held_write_lock_sends_the_login_to_a_worker_thread_that_waits_for_it(
    tmp_path: Path, hops: list[str]
) -> None:
    async with running_api(make_settings(tmp_path / "data")) as api:
        await _configure(api, {"jwt_validation_pubkeys": [SIGNER.public_pem()]})
        other = sqlite3.connect(tmp_path / "data" / "keystore.db", isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            login = asyncio.ensure_future(_login(api))
            for _ in range(500):  # the attempt on the loop is refused at once; the thread waits for the lock
                if hops or login.done():
                    break
                await asyncio.sleep(0.01)
            assert hops and not login.done(), login.result() if login.done() else hops
            await asyncio.sleep(0.2)
            assert not login.done()
            other.execute("ROLLBACK")
            status, answer = await asyncio.wait_for(login, 10)
        finally:
            other.close()
        assert status == 201, answer
        await _encrypts_with(api, answer["token"])
        assert hops == ["JwtLogin.login"]
        status, answer = await _login(api)  # the lock is free again: back on the loop
        assert status == 201, answer
    assert hops == ["JwtLogin.login"]
