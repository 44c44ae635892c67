"""The keystore contract for key backups: who may be backed up, what a restore brings back, the binding to
the key's name, ``force``, and what other stores on the same data see.

Runs against each implementation (see ``conftest.py``).
"""

from __future__ import annotations

import base64
import secrets

import pytest

from app.errors import BadRequestError, KeyExistsError
from app.keystore import KeyOptions, KeyStore
from tests.app.keystore.contract.conftest import Backing


def _fill(store: KeyStore) -> None:
    store.import_key(
        "orders",
        secrets.token_bytes(32),
        scheme="gcm",
        auto_rotate_period=7200,
        options=KeyOptions(derived=True, allow_plaintext_backup=True),
    )
    store.rotate_key("orders")
    store.update_key("orders", min_decryption_version=2, deletion_allowed=True)


def test_a_backup_restores_the_key_as_it_was(backing: Backing, master_key: bytes) -> None:
    store = backing.open(master_key)
    _fill(store)
    before = store.get_key("orders")
    materials = [store.key_material("orders", version) for version in (1, 2)]
    blob = store.backup_key("orders")
    assert base64.b64decode(blob).startswith(b"KSBK1")
    for material in materials:
        assert (
            bytes(material) not in base64.b64decode(blob) and base64.b64encode(material).decode() not in blob
        )
    store.delete_key("orders")
    restored = store.restore_key(blob)
    assert restored == before  # versions, policy, options, scheme, times
    other = backing.open(master_key)
    assert other.get_key("orders") == before
    assert [other.key_material("orders", version) for version in (1, 2)] == materials
    assert [c.kind for c in store.changes_since(0).changes if c.key_name == "orders"][-1] == "key_created"


def test_force_replaces_and_the_name_is_bound(store: KeyStore) -> None:
    _fill(store)
    blob = store.backup_key("orders")
    store.rotate_key("orders")
    with pytest.raises(KeyExistsError, match="restore with force"):
        store.restore_key(blob)
    seq = store.changes_since(0).latest
    assert store.restore_key(blob, "orders", force=True).latest_version == 2
    assert [c.kind for c in store.changes_since(seq).changes] == ["key_updated"]
    with pytest.raises(BadRequestError, match="does not open as key 'copy': it was made for key 'orders'"):
        store.restore_key(blob, "copy")
    assert [info.name for info in store.list_keys()] == ["orders"]


def test_only_keys_that_allow_it_are_backed_up(store: KeyStore) -> None:
    store.create_key("plain")
    store.create_key("exportable", options=KeyOptions(exportable=True))
    store.create_key("both", options=KeyOptions(exportable=True, allow_plaintext_backup=True))
    with pytest.raises(BadRequestError, match="set allow_plaintext_backup \\(or exportable\\)"):
        store.backup_key("plain")
    assert store.backup_key("exportable")
    with pytest.raises(BadRequestError, match="allow_plaintext_backup is false \\(Vault needs both\\)"):
        store.backup_key("exportable", vault_rule=True)
    assert store.backup_key("both", vault_rule=True)


@pytest.mark.parametrize("blob", ["not base64!", base64.b64encode(b"something else").decode(), ""])
def test_what_is_not_a_backup_is_400(store: KeyStore, blob: str) -> None:
    with pytest.raises(BadRequestError, match="backup"):
        store.restore_key(blob, "x")


def test_a_backup_from_another_master_key_does_not_open(backing: Backing, master_key: bytes) -> None:
    store = backing.open(master_key)
    _fill(store)
    blob = store.backup_key("orders")
    tampered = base64.b64decode(blob)
    broken = base64.b64encode(tampered[:-1] + bytes([tampered[-1] ^ 1])).decode()
    store.delete_key("orders")
    with pytest.raises(BadRequestError, match="under a master key this keystore does not hold"):
        store.restore_key(broken)
