"""The Transit API at another mount (Vault's ``-path``): served under ``/v1/<mount>/`` in Vault's shapes, the
default ``/v1/transit/`` then answers Vault's 404, the native API is untouched, and a mount over the
service's own paths refuses the start."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Callable

import pytest

from app.api import paths
from app.core.config import Settings
from app.errors import StartupRefusedError
from tests.app.api.conftest import ROOT_TOKEN, Api, running_api

VAULT = {"X-Vault-Token": ROOT_TOKEN}


@pytest.fixture
async def api(settings_factory: Callable[..., Settings]) -> AsyncIterator[Api]:
    async with running_api(settings_factory(transit_mount="team/kms")) as value:
        yield value


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def test_the_api_answers_at_the_mount_in_vaults_shapes(api: Api) -> None:
    created = await api.client.post("/v1/team/kms/keys/orders", json={}, headers=VAULT)
    assert created.status_code in (200, 204), created.text
    made = await api.client.post("/v1/team/kms/encrypt/orders", json={"plaintext": b64(b"hi")}, headers=VAULT)
    assert made.status_code == 200, made.text
    ciphertext = made.json()["data"]["ciphertext"]
    assert ciphertext.startswith("vault:v1:")
    opened = await api.client.post(
        "/v1/team/kms/decrypt/orders", json={"ciphertext": ciphertext}, headers=VAULT
    )
    assert opened.json()["data"]["plaintext"] == b64(b"hi")
    listed = await api.client.request("LIST", "/v1/team/kms/keys", headers=VAULT)
    assert listed.status_code == 200 and "orders" in listed.json()["data"]["keys"]
    # Errors keep Vault's shape at the mount.
    unknown = await api.client.post("/v1/team/kms/encrypt/nope", json={"plaintext": b64(b"x")}, headers=VAULT)
    assert unknown.status_code == 400 and set(unknown.json()) == {"errors"}
    missing = await api.client.get("/v1/team/kms/nowhere", headers=VAULT)
    assert missing.status_code == 404 and missing.json() == {"errors": []}
    # The key is an ordinary key: the native API sees it under its own paths.
    native = await api.client.get("/v1/keys/orders", headers=api.auth())
    assert native.status_code == 200 and native.json()["name"] == "orders"


async def test_the_default_mount_is_not_served_then(api: Api) -> None:
    for path in ("/v1/transit/keys/orders", "/v1/transit", "/v1/transit/encrypt/orders"):
        response = await api.client.post(path, json={"plaintext": b64(b"x")}, headers=VAULT)
        assert response.status_code == 404 and response.json() == {"errors": []}, path
    # A path that only starts like the mount is not it.
    near = await api.client.get("/v1/team/kmsx/keys", headers=api.auth())
    assert near.status_code == 404 and "error" in near.json()


def test_mounts_over_the_services_own_paths_are_refused() -> None:
    assert paths.transit_alias("transit") is None
    assert paths.transit_alias("kms") == "/v1/kms/"
    for mount in ("keys", "sys/transit", "tokens", "transit/inner", "auth"):
        with pytest.raises(StartupRefusedError, match="KEYSTREAM_TRANSIT_MOUNT"):
            paths.transit_alias(mount)


@pytest.mark.parametrize("mount", ["", "/kms", "kms/", "a b", "../kms", "kms//x"])
def test_malformed_mounts_are_invalid_settings(mount: str, settings_factory: Callable[..., Settings]) -> None:
    with pytest.raises(ValueError, match="transit_mount"):
        settings_factory(transit_mount=mount)
