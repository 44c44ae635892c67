"""The keystore contract for login roles, auth method configurations and token metadata.

Runs against each implementation (see ``conftest.py``): a role is stored as given, replaced in place (its
``created_at`` kept), listed by name, deleted once; every write appends a change naming the role; another
store on the same data (another worker or replica) reads what one wrote.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app.errors import BadRequestError, RoleNotFoundError
from app.keystore import KeyStore, RoleRecord, TokenRecord
from tests.app.keystore.contract.conftest import Backing

CREATED = datetime(2026, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)


def role(name: str = "billing", **changes: Any) -> RoleRecord:
    fields: dict[str, Any] = {
        "name": name,
        "method": "jwt",
        "scopes": ("encrypt", "decrypt"),
        "key_patterns": ("billing-*",),
        "ttl_seconds": 3600,
        "max_ttl_seconds": 86400,
        "bindings": {
            "bound_audiences": ["keystream"],
            "bound_claims": {"kubernetes.io/namespace": ["billing", "billing-*"]},
            "user_claim": "sub",
        },
        "created_at": CREATED,
        "updated_at": CREATED,
    }
    fields.update(changes)
    return RoleRecord(**fields)


def test_role_round_trip_and_list_by_name(store: KeyStore) -> None:
    assert store.list_roles() == []
    written = store.write_role(role())
    assert written == role()
    assert store.get_role("billing") == role()
    store.write_role(role("audit"))
    store.write_role(role("Zeta"))
    assert [r.name for r in store.list_roles()] == ["Zeta", "audit", "billing"]  # byte order


def test_a_cert_role_round_trips_in_the_same_storage(store: KeyStore) -> None:
    """A ``cert`` role's bindings are another JSON object in the same policy column: no schema of its own."""
    bindings = {
        "allowed_common_names": [],
        "allowed_dns_sans": ["*.billing.example.org"],
        "allowed_uri_sans": ["spiffe://example.org/ns/*/sa/billing"],
        "allowed_organizational_units": ["payments"],
    }
    cert_role = role("billing-cert", method="cert", bindings=bindings)
    assert store.write_role(cert_role) == cert_role
    assert store.get_role("billing-cert") == cert_role
    assert [r.method for r in store.list_roles()] == ["cert"]


def test_rewriting_a_role_replaces_it_and_keeps_its_creation_time(store: KeyStore) -> None:
    store.write_role(role())
    later = CREATED + timedelta(hours=1)
    rewritten = store.write_role(
        role(scopes=("encrypt",), bindings={"bound_audiences": ["x"]}, created_at=later, updated_at=later)
    )
    assert rewritten.created_at == CREATED and rewritten.updated_at == later
    assert rewritten.scopes == ("encrypt",) and rewritten.bindings == {"bound_audiences": ["x"]}
    assert store.get_role("billing") == rewritten
    assert len(store.list_roles()) == 1


def test_delete_role_and_not_found(store: KeyStore) -> None:
    store.write_role(role())
    store.delete_role("billing")
    with pytest.raises(RoleNotFoundError, match="role 'billing' not found") as caught:
        store.get_role("billing")
    assert caught.value.code == "role_not_found"
    with pytest.raises(RoleNotFoundError):
        store.delete_role("billing")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"name": "../etc"}, "invalid role name"),
        ({"name": ""}, "invalid role name"),
        ({"method": "ldap"}, "unknown auth method 'ldap'"),
        ({"scopes": "encrypt"}, "scopes must be a sequence of strings"),
        ({"key_patterns": [1]}, "key_patterns must contain only strings"),
        ({"ttl_seconds": 0}, "ttl must be 1.."),
        ({"ttl_seconds": True}, "ttl"),
        ({"max_ttl_seconds": 60}, "max_ttl \\(60\\) may not be below ttl \\(3600\\)"),
        ({"bindings": ["not", "an", "object"]}, "bindings must be a JSON object"),
        ({"bindings": {"x": float("nan")}}, "bindings must hold only JSON values"),
        ({"bindings": {"x": "y" * 70_000}}, "bindings may take at most"),
        ({"created_at": datetime(2026, 1, 1)}, "aware datetimes"),
    ],
)
def test_malformed_roles_are_refused(store: KeyStore, changes: dict[str, Any], message: str) -> None:
    with pytest.raises(BadRequestError, match=message):
        store.write_role(role(**changes))
    assert store.list_roles() == []


def test_bad_role_names_are_refused_on_read_and_delete(store: KeyStore) -> None:
    with pytest.raises(BadRequestError, match="invalid role name"):
        store.get_role("a/b")
    with pytest.raises(BadRequestError, match="invalid role name"):
        store.delete_role("")


def test_role_and_config_writes_append_changes_naming_the_role(store: KeyStore) -> None:
    start = store.changes_since(1 << 62).latest
    store.write_role(role())
    store.write_role(role())
    store.get_role("billing")  # reads append nothing
    store.write_auth_config("jwt", {"jwks_url": "https://issuer.example/keys"})
    store.delete_role("billing")
    changes, _, trimmed = store.changes_since(start)
    assert not trimmed
    assert [(c.kind, c.key_name, c.token_id, c.role_name) for c in changes] == [
        ("role_written", None, None, "billing"),
        ("role_written", None, None, "billing"),
        ("auth_config_written", None, None, None),
        ("role_deleted", None, None, "billing"),
    ]


def test_auth_config_round_trip_and_replace(store: KeyStore) -> None:
    assert store.read_auth_config("jwt") is None
    config: dict[str, object] = {"jwks_url": "https://issuer.example/keys", "leeway": 60}
    store.write_auth_config("jwt", config)
    assert store.read_auth_config("jwt") == config
    store.write_auth_config("jwt", {"jwt_validation_pubkeys": ["pem"]})
    assert store.read_auth_config("jwt") == {"jwt_validation_pubkeys": ["pem"]}
    with pytest.raises(BadRequestError, match="unknown auth method"):
        store.write_auth_config("ldap", {})
    with pytest.raises(BadRequestError, match="unknown auth method"):
        store.read_auth_config("ldap")


def test_a_login_reads_its_role_and_the_methods_configuration_together(store: KeyStore) -> None:
    assert store.read_login("billing", "jwt") == (None, None)
    config: dict[str, object] = {"jwks_url": "https://issuer.example/keys", "leeway": 60}
    store.write_auth_config("jwt", config)
    assert store.read_login("billing", "jwt") == (None, config)
    store.write_role(role())
    assert store.read_login("billing", "jwt") == (role(), config)
    assert store.read_login("billing", "cert") == (role(), None)  # the role whatever its method
    assert store.read_login("no such role", "jwt") == (None, config)  # a name no role can have
    with pytest.raises(BadRequestError, match="unknown auth method"):
        store.read_login("billing", "ldap")


def test_another_store_on_the_same_data_sees_roles_at_once(
    backing: Backing, store: KeyStore, master_key: bytes
) -> None:
    replica = backing.open(master_key)
    start = replica.changes_since(1 << 62).latest
    store.write_role(role())
    assert replica.get_role("billing") == role()
    assert replica.read_login("billing", "jwt") == (role(), None)
    assert [(c.kind, c.role_name) for c in replica.changes_since(start).changes] == [
        ("role_written", "billing")
    ]
    store.delete_role("billing")
    with pytest.raises(RoleNotFoundError):
        replica.get_role("billing")
    assert replica.read_login("billing", "jwt") == (None, None)


def test_token_metadata_round_trips_and_defaults_to_empty(store: KeyStore) -> None:
    now = datetime.now(UTC)
    plain = TokenRecord("plain1", secrets.token_bytes(32), ("encrypt",), ("*",), "", now)
    issued = TokenRecord(
        "login1",
        secrets.token_bytes(32),
        ("encrypt",),
        ("*",),
        "jwt login",
        now,
        metadata={"role": "billing", "subject": "system:serviceaccount:billing:api"},
    )
    store.create_token(plain)
    store.create_token(issued)
    assert store.get_token("plain1").metadata == {}
    assert store.get_token("login1").metadata == issued.metadata
    assert {t.token_id: dict(t.metadata) for t in store.list_tokens()}["login1"]["role"] == "billing"


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        (["role"], "metadata must be a mapping"),
        ({"role": 1}, "metadata 'role' must be a string"),
        ({"": "x"}, "metadata keys must be strings"),
        ({f"k{i}": "v" for i in range(33)}, "at most 32 entries"),
    ],
)
def test_malformed_token_metadata_is_refused(store: KeyStore, metadata: object, message: str) -> None:
    record = TokenRecord(
        "bad1",
        secrets.token_bytes(32),
        ("encrypt",),
        ("*",),
        "",
        datetime.now(UTC),
        metadata=metadata,  # type: ignore[arg-type]
    )
    with pytest.raises(BadRequestError, match=message):
        store.create_token(record)
