"""``/v1/auth/roles``: admins with the key pattern ``*`` write, list, read and delete login roles; a role
grants no scope its writer lacks; malformed roles are 422 with the field named."""

from __future__ import annotations

from typing import Any

import pytest

from tests.app.api.conftest import Api

ROLE: dict[str, Any] = {
    "method": "jwt",
    "scopes": ["encrypt", "decrypt"],
    "key_patterns": ["billing-*"],
    "ttl": 600,
    "max_ttl": 3600,
    "bound_audiences": ["keystream"],
    "bound_claims": {
        "/kubernetes.io/namespace": "billing",
        "/kubernetes.io/serviceaccount/name": ["api", "w*"],
    },
    "claim_mappings": {"/kubernetes.io/pod/name": "pod"},
}


async def test_write_read_list_delete(api: Api) -> None:
    written = await api.client.post("/v1/auth/roles/billing", json=ROLE, headers=api.auth())
    assert written.status_code == 200, written.text
    role = written.json()
    assert role["name"] == "billing" and role["method"] == "jwt"
    assert (role["scopes"], role["key_patterns"], role["ttl"], role["max_ttl"]) == (
        ["encrypt", "decrypt"],
        ["billing-*"],
        600,
        3600,
    )
    assert role["bound_claims"] == {
        "/kubernetes.io/namespace": ["billing"],
        "/kubernetes.io/serviceaccount/name": ["api", "w*"],
    }
    assert role["user_claim"] == "sub" and role["bound_subject"] is None
    assert (await api.client.get("/v1/auth/roles/billing", headers=api.auth())).json() == role
    await api.client.post(
        "/v1/auth/roles/audit", json={**ROLE, "ttl": 60, "max_ttl": None}, headers=api.auth()
    )
    listed = (await api.client.get("/v1/auth/roles", headers=api.auth())).json()["roles"]
    assert [r["name"] for r in listed] == ["audit", "billing"]
    assert listed[0]["max_ttl"] == 86_400  # the default: 24 h
    assert (await api.client.delete("/v1/auth/roles/billing", headers=api.auth())).status_code == 204
    missing = await api.client.get("/v1/auth/roles/billing", headers=api.auth())
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "role_not_found"
    gone = await api.client.delete("/v1/auth/roles/billing", headers=api.auth())
    assert gone.status_code == 404


async def test_rewriting_a_role_keeps_its_creation_time(api: Api) -> None:
    first = (await api.client.post("/v1/auth/roles/r1", json=ROLE, headers=api.auth())).json()
    second = (
        await api.client.post("/v1/auth/roles/r1", json={**ROLE, "scopes": ["encrypt"]}, headers=api.auth())
    ).json()
    assert second["created_at"] == first["created_at"] and second["scopes"] == ["encrypt"]


async def test_a_role_grants_no_more_than_its_writer(api: Api) -> None:
    limited_admin = await api.create_token(["admin", "encrypt"])
    refused = await api.client.post("/v1/auth/roles/r1", json=ROLE, headers=api.auth(limited_admin))
    assert refused.status_code == 403
    assert "cannot grant scopes this token does not have: decrypt" in refused.json()["error"]["message"]
    narrow = {**ROLE, "scopes": ["encrypt"]}
    allowed = await api.client.post("/v1/auth/roles/r1", json=narrow, headers=api.auth(limited_admin))
    assert allowed.status_code == 200, allowed.text
    some_keys = await api.create_token(["admin", "encrypt"], ["billing-*"])
    refused = await api.client.post("/v1/auth/roles/r2", json=narrow, headers=api.auth(some_keys))
    assert refused.status_code == 403 and "key pattern '*'" in refused.json()["error"]["message"]
    user = await api.create_token(["encrypt"])
    for call in (
        api.client.get("/v1/auth/roles", headers=api.auth(user)),
        api.client.get("/v1/auth/roles/r1", headers=api.auth(user)),
        api.client.delete("/v1/auth/roles/r1", headers=api.auth(user)),
    ):
        assert (await call).status_code == 403
    assert (await api.client.get("/v1/auth/roles")).status_code == 401


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"method": "ldap"}, "method"),
        ({"scopes": []}, "scopes"),
        ({"scopes": ["root"]}, "scopes"),
        ({"bound_audiences": []}, "bound_audiences"),
        ({"bound_audiences": None}, "bound_audiences"),
        ({"ttl": 0}, "ttl"),
        ({"key_patterns": ["a/b"]}, "key_patterns"),
        ({"claim_mappings": {"/x": "has space"}}, "claim_mappings"),
        ({"bound_claims": {"/x": 3}}, "bound_claims"),
        ({"surprise": 1}, "surprise"),
    ],
)
async def test_malformed_roles_are_422(api: Api, change: dict[str, Any], field: str) -> None:
    response = await api.client.post("/v1/auth/roles/r1", json={**ROLE, **change}, headers=api.auth())
    assert response.status_code == 422, response.text
    assert field in response.json()["error"]["message"]


async def test_role_rules_checked_past_the_schema_are_400(api: Api) -> None:
    below = await api.client.post("/v1/auth/roles/r1", json={**ROLE, "max_ttl": 60}, headers=api.auth())
    assert below.status_code == 400 and "max_ttl (60) may not be below ttl (600)" in below.text
    reserved = {**ROLE, "claim_mappings": {"/x": "subject"}}
    taken = await api.client.post("/v1/auth/roles/r1", json=reserved, headers=api.auth())
    assert taken.status_code == 400 and "metadata key(s) subject" in taken.text
    bad_name = await api.client.post("/v1/auth/roles/-dash", json=ROLE, headers=api.auth())
    assert bad_name.status_code == 400 and "invalid role name" in bad_name.text


CERT_ROLE: dict[str, Any] = {
    "method": "cert",
    "scopes": ["encrypt"],
    "key_patterns": ["billing-*"],
    "ttl": 600,
    "allowed_uri_sans": ["spiffe://example.org/ns/*/sa/billing"],
    "allowed_dns_sans": ["*.Billing.example.org"],
    "allowed_organizational_units": ["payments"],
}


async def test_a_cert_role_is_stored_with_its_allowed_names(api: Api) -> None:
    written = await api.client.post("/v1/auth/roles/billing-cert", json=CERT_ROLE, headers=api.auth())
    assert written.status_code == 200, written.text
    role = written.json()
    assert role["method"] == "cert" and role["scopes"] == ["encrypt"]
    assert role["allowed_uri_sans"] == ["spiffe://example.org/ns/*/sa/billing"]
    assert role["allowed_dns_sans"] == ["*.billing.example.org"]  # DNS names compare without case
    assert role["allowed_common_names"] == [] and role["allowed_organizational_units"] == ["payments"]
    assert (await api.client.get("/v1/auth/roles/billing-cert", headers=api.auth())).json() == role


@pytest.mark.parametrize(
    ("change", "status", "message"),
    [
        ({"allowed_uri_sans": [], "allowed_dns_sans": []}, 400, "needs at least one of allowed_common_names"),
        ({"allowed_uri_sans": [""]}, 422, "allowed_uri_sans"),
        ({"allowed_common_names": [" padded"]}, 422, "allowed_common_names"),
        ({"allowed_dns_sans": ["a\nb"]}, 422, "allowed_dns_sans"),
        ({"allowed_organizational_units": "payments"}, 422, "allowed_organizational_units"),
        ({"bound_audiences": ["keystream"]}, 422, "bound_audiences"),
    ],
)
async def test_malformed_cert_roles_are_refused(
    api: Api, change: dict[str, Any], status: int, message: str
) -> None:
    response = await api.client.post("/v1/auth/roles/r1", json={**CERT_ROLE, **change}, headers=api.auth())
    assert response.status_code == status, response.text
    assert message in response.json()["error"]["message"]
    assert (await api.client.get("/v1/auth/roles/r1", headers=api.auth())).status_code == 404
