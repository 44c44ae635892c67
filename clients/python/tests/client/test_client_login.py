"""``login_jwt``, sync and async, against a real server: a JWT for a token whose metadata names the role
and subject, and the service's refusals as :class:`KeystreamAPIError`."""

from __future__ import annotations

import pytest

from jwt_login import ROLE, configure, k8s_jwt
from keystream_client import AsyncKeystreamClient, KeystreamAPIError, KeystreamClient
from keystream_server import RunningServer


@pytest.fixture(scope="module", autouse=True)
def configured(server: RunningServer) -> None:
    configure(server.url, server.token)


def test_login_jwt_gives_a_token_that_works(server: RunningServer) -> None:
    with KeystreamClient(server.url, token="") as anonymous:
        issued = anonymous.login_jwt(ROLE, k8s_jwt())
    assert issued.token.startswith("ks_") and issued.scopes == ("encrypt",)
    assert issued.metadata == {"role": ROLE, "subject": "system:serviceaccount:apps:worker"}
    assert issued.to_json()["metadata"]["role"] == ROLE and issued.token not in repr(issued)
    with KeystreamClient(server.url, issued.token) as own:
        assert own.token_self().metadata["subject"] == "system:serviceaccount:apps:worker"


def test_login_jwt_refusals_are_api_errors(server: RunningServer) -> None:
    with KeystreamClient(server.url, token="") as anonymous:
        with pytest.raises(KeystreamAPIError) as wrong_namespace:
            anonymous.login_jwt(ROLE, k8s_jwt(namespace="other"))
        assert wrong_namespace.value.status == 400 and "matches none" in wrong_namespace.value.message
        with pytest.raises(KeystreamAPIError) as no_role:
            anonymous.login_jwt("no-such-role", k8s_jwt())
        assert no_role.value.status == 400 and "login refused" in no_role.value.message


async def test_async_login_jwt(server: RunningServer) -> None:
    async with AsyncKeystreamClient(server.url, token="") as anonymous:
        issued = await anonymous.login_jwt(ROLE, k8s_jwt())
    assert issued.metadata["role"] == ROLE


async def test_roles_sync_and_async(server: RunningServer) -> None:
    body = {"method": "jwt", "scopes": ["encrypt"], "bound_audiences": ["keystream"], "ttl": 120}
    with KeystreamClient(server.url, server.token) as admin:
        written = admin.write_role("client-roles", body)
        assert written.bindings["bound_audiences"] == ["keystream"] and written.ttl == 120
        assert admin.get_role("client-roles") == written
        with pytest.raises(TypeError):
            admin.write_role("client-roles", [("method", "jwt")])  # type: ignore[arg-type]
    async with AsyncKeystreamClient(server.url, server.token) as admin_async:
        assert "client-roles" in [role.name for role in await admin_async.list_roles()]
        assert (await admin_async.get_role("client-roles")).to_json() == written.to_json()
        await admin_async.delete_role("client-roles")
        with pytest.raises(KeystreamAPIError) as gone:
            await admin_async.get_role("client-roles")
    assert gone.value.status == 404 and gone.value.code == "role_not_found"
