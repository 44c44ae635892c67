"""The keystore contract for keys: every method, its validation and errors, persistence and the master key.

Runs against each implementation (see ``conftest.py``). Built from the implementation-neutral tests of
``tests/app/keystore/sqlite/test_store.py``.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta

import pytest

from app.errors import (
    BadRequestError,
    DeletionNotAllowedError,
    KeyExistsError,
    KeyNotFoundError,
    KeyVersionNotFoundError,
    ServiceUnavailableError,
)
from app.keystore import KeyOptions, KeyStore, MasterKeyError
from tests.app.keystore.contract.conftest import Backing


def test_is_a_keystore_and_its_repr_has_no_secret(store: KeyStore, master_key: bytes) -> None:
    assert isinstance(store, KeyStore)
    for text in (repr(store), str(store)):
        assert master_key.hex() not in text and repr(master_key) not in text


def test_create_key_defaults(store: KeyStore) -> None:
    before = datetime.now(UTC)
    info = store.create_key("orders")
    assert (info.name, info.key_type, info.segment_size, info.scheme) == (
        "orders",
        "aes256",
        1 << 20,
        "ctr-hmac",
    )
    assert (info.deletion_allowed, info.min_decryption_version, info.latest_version) == (False, 1, 1)
    assert info.imported is False
    assert before - timedelta(seconds=1) <= info.created_at == info.updated_at <= datetime.now(UTC)
    assert [v.version for v in info.versions] == [1]
    assert info.versions[0].created_at == info.created_at
    assert store.get_key("orders") == info
    assert len(store.key_material("orders", 1)) == 32


@pytest.mark.parametrize(("key_type", "size"), [("aes128", 16), ("aes192", 24), ("aes256", 32)])
def test_create_key_of_each_type(store: KeyStore, key_type: str, size: int) -> None:
    info = store.create_key("k", key_type, segment_size=4096, deletion_allowed=True)
    assert (info.key_type, info.segment_size, info.deletion_allowed) == (key_type, 4096, True)
    assert len(store.key_material("k", 1)) == size


def test_created_material_is_random(store: KeyStore) -> None:
    store.create_key("a")
    store.create_key("b")
    assert store.key_material("a", 1) != store.key_material("b", 1)


def test_create_existing_key_conflicts(store: KeyStore) -> None:
    store.create_key("orders")
    material = store.key_material("orders", 1)
    with pytest.raises(KeyExistsError, match="'orders' already exists") as caught:
        store.create_key("orders", "aes128")
    assert caught.value.code == "key_exists"
    with pytest.raises(KeyExistsError):
        store.import_key("orders", bytes(16))
    assert store.key_material("orders", 1) == material
    assert store.get_key("orders").key_type == "aes256"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": "bad name"}, "invalid key name"),
        ({"name": "x" * 129}, "invalid key name"),
        ({"name": "x", "key_type": "aes512"}, "aes128, aes192, aes256"),
        ({"name": "x", "segment_size": 4095}, "between 4096"),
        ({"name": "x", "segment_size": (1 << 24) + 1}, "between 4096"),
        ({"name": "x", "segment_size": True}, "must be an integer"),
        ({"name": "x", "deletion_allowed": "yes"}, "deletion_allowed must be a boolean"),
        ({"name": "x", "scheme": "ctr"}, "allowed schemes are ctr-hmac, gcm"),
        ({"name": "x", "scheme": None}, "allowed schemes are ctr-hmac, gcm"),
    ],
)
def test_create_key_validation(store: KeyStore, kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(BadRequestError, match=match):
        store.create_key(**kwargs)  # type: ignore[arg-type]
    assert store.list_keys() == []


@pytest.mark.parametrize(("size", "key_type"), [(16, "aes128"), (24, "aes192"), (32, "aes256")])
def test_import_key_takes_type_from_length(store: KeyStore, size: int, key_type: str) -> None:
    material = secrets.token_bytes(size)
    info = store.import_key("imported", bytearray(material), segment_size=8192)
    assert (info.key_type, info.imported, info.segment_size, info.latest_version) == (key_type, True, 8192, 1)
    assert store.get_key("imported") == info
    assert store.key_material("imported", 1) == material
    rotated = store.rotate_key("imported")
    assert rotated.imported is True and len(store.key_material("imported", 2)) == size


@pytest.mark.parametrize("size", [0, 8, 20, 31, 33, 48])
def test_import_key_wrong_length(store: KeyStore, size: int) -> None:
    with pytest.raises(BadRequestError, match=r"16 \(aes128\), 24 \(aes192\), 32 \(aes256\)"):
        store.import_key("imported", b"\x01" * size)
    with pytest.raises(KeyNotFoundError):
        store.get_key("imported")


@pytest.mark.parametrize("scheme", ["ctr-hmac", "gcm"])
def test_scheme_is_kept_for_the_key_life(store: KeyStore, scheme: str) -> None:
    assert store.create_key("made", "aes128", scheme=scheme).scheme == scheme
    assert store.import_key("imp", bytes(32), scheme=scheme).scheme == scheme
    store.rotate_key("made")
    updated = store.update_key("made", min_decryption_version=2, deletion_allowed=True)
    assert updated.scheme == scheme
    assert [info.scheme for info in store.list_keys()] == [scheme, scheme]
    assert store.get_key("imp").to_json()["scheme"] == scheme


def test_import_key_validation(store: KeyStore) -> None:
    with pytest.raises(BadRequestError, match="invalid key name"):
        store.import_key("-x", bytes(16))
    with pytest.raises(BadRequestError, match="between 4096"):
        store.import_key("x", bytes(16), segment_size=100)
    with pytest.raises(BadRequestError, match="must be bytes"):
        store.import_key("x", "0" * 16)  # type: ignore[arg-type]
    with pytest.raises(BadRequestError, match="deletion_allowed must be a boolean"):
        store.import_key("x", bytes(16), deletion_allowed=None)  # type: ignore[arg-type]
    with pytest.raises(BadRequestError, match="invalid scheme 'GCM'"):
        store.import_key("x", bytes(16), scheme="GCM")
    assert store.list_keys() == []


def test_get_key(store: KeyStore) -> None:
    created = store.create_key("orders", "aes128", 4096)
    assert store.get_key("orders") == created
    with pytest.raises(KeyNotFoundError, match="'nothing' not found") as caught:
        store.get_key("nothing")
    assert caught.value.code == "key_not_found"
    with pytest.raises(BadRequestError):
        store.get_key("no/such")


def test_list_keys_sorted_with_versions(store: KeyStore) -> None:
    assert store.list_keys() == []
    for name in ("c", "a", "B", "b", "a.b", "a-b", "a_b"):
        store.create_key(name)
    store.rotate_key("b")
    store.rotate_key("b")
    keys = store.list_keys()
    assert [k.name for k in keys] == ["B", "a", "a-b", "a.b", "a_b", "b", "c"]  # byte order
    assert [[v.version for v in k.versions] for k in keys] == [[1], [1], [1], [1], [1], [1, 2, 3], [1]]
    assert keys == [store.get_key(k.name) for k in keys]


def test_rotate_adds_a_version_and_keeps_old_ones(store: KeyStore) -> None:
    created = store.create_key("orders")
    first = store.key_material("orders", 1)
    info = store.rotate_key("orders")
    assert info.latest_version == 2 and [v.version for v in info.versions] == [1, 2]
    assert info.updated_at >= created.updated_at and info.created_at == created.created_at
    assert info.versions[1].created_at == info.updated_at
    assert info.min_decryption_version == 1
    assert store.get_key("orders") == info
    second = store.key_material("orders", 2)
    assert second != first and len(second) == 32
    assert store.key_material("orders", 1) == first
    with pytest.raises(KeyNotFoundError):
        store.rotate_key("nothing")
    with pytest.raises(BadRequestError):
        store.rotate_key("no such")


def test_key_material_errors(store: KeyStore) -> None:
    store.create_key("orders")
    with pytest.raises(KeyVersionNotFoundError, match="no version 2 \\(versions 1 to 1\\)") as caught:
        store.key_material("orders", 2)
    assert caught.value.code == "key_version_not_found"
    with pytest.raises(KeyVersionNotFoundError):
        store.key_material("orders", 0)
    with pytest.raises(KeyVersionNotFoundError):
        store.key_material("orders", 1 << 40)
    with pytest.raises(KeyNotFoundError):
        store.key_material("nothing", 1)
    with pytest.raises(BadRequestError, match="must be an integer"):
        store.key_material("orders", True)
    with pytest.raises(BadRequestError, match="must be an integer"):
        store.key_material("orders", "1")  # type: ignore[arg-type]


def test_update_key(store: KeyStore) -> None:
    store.create_key("orders")
    store.rotate_key("orders")
    store.rotate_key("orders")
    info = store.update_key("orders", min_decryption_version=3)
    assert (info.min_decryption_version, info.deletion_allowed, info.latest_version) == (3, False, 3)
    info = store.update_key("orders", deletion_allowed=True)
    assert (info.min_decryption_version, info.deletion_allowed) == (3, True)
    info = store.update_key("orders", min_decryption_version=1, deletion_allowed=False)
    assert (info.min_decryption_version, info.deletion_allowed) == (1, False)
    assert store.update_key("orders") == info
    assert store.get_key("orders") == info
    assert len(store.key_material("orders", 1)) == 32  # still stored; the cache enforces the policy


@pytest.mark.parametrize("value", [0, -1, 4, 100])
def test_update_key_min_decryption_version_out_of_range(store: KeyStore, value: int) -> None:
    store.create_key("orders")
    store.rotate_key("orders")
    store.rotate_key("orders")
    with pytest.raises(BadRequestError, match=f"between 1 and the latest version \\(3\\).*got {value}"):
        store.update_key("orders", min_decryption_version=value, deletion_allowed=True)
    info = store.get_key("orders")
    assert (info.min_decryption_version, info.deletion_allowed) == (1, False)  # nothing half-applied


def test_update_key_type_errors(store: KeyStore) -> None:
    store.create_key("orders")
    with pytest.raises(BadRequestError, match="must be an integer"):
        store.update_key("orders", min_decryption_version=True)
    with pytest.raises(BadRequestError, match="must be an integer"):
        store.update_key("orders", min_decryption_version="1")  # type: ignore[arg-type]
    with pytest.raises(BadRequestError, match="must be a boolean"):
        store.update_key("orders", deletion_allowed=1)  # type: ignore[arg-type]
    with pytest.raises(KeyNotFoundError):
        store.update_key("nothing", deletion_allowed=True)
    with pytest.raises(KeyNotFoundError):
        store.update_key("nothing")


def test_delete_key_needs_deletion_allowed(store: KeyStore) -> None:
    store.create_key("orders")
    store.rotate_key("orders")
    with pytest.raises(DeletionNotAllowedError, match="set deletion_allowed") as caught:
        store.delete_key("orders")
    assert caught.value.code == "deletion_not_allowed"
    assert store.get_key("orders").latest_version == 2
    store.update_key("orders", deletion_allowed=True)
    store.delete_key("orders")
    with pytest.raises(KeyNotFoundError):
        store.get_key("orders")
    with pytest.raises(KeyNotFoundError):
        store.key_material("orders", 1)
    with pytest.raises(KeyNotFoundError):
        store.delete_key("orders")
    assert store.list_keys() == []
    # the name is free again, with fresh material and no old version left behind
    store.create_key("orders", deletion_allowed=True)
    assert [v.version for v in store.get_key("orders").versions] == [1]
    with pytest.raises(KeyVersionNotFoundError):
        store.key_material("orders", 2)


def test_everything_persists_across_reopen(backing: Backing, master_key: bytes) -> None:
    store = backing.open(master_key)
    store.create_key("orders", "aes128", 4096, deletion_allowed=True)
    store.rotate_key("orders")
    store.update_key("orders", min_decryption_version=2)
    store.import_key("imp", bytes(range(24)), scheme="gcm")
    keys = store.list_keys()
    materials = [store.key_material("orders", 1), store.key_material("orders", 2)]
    store.close()

    reopened = backing.open(master_key)
    assert reopened.list_keys() == keys
    assert [reopened.key_material("orders", v) for v in (1, 2)] == materials
    assert reopened.key_material("imp", 1) == bytes(range(24))
    assert reopened.get_key("imp").scheme == "gcm"


def test_a_second_store_sees_the_first_ones_changes(backing: Backing, master_key: bytes) -> None:
    """Two workers or replicas on the same data: a change through one is read through the other."""
    first, second = backing.open(master_key), backing.open(master_key)
    first.create_key("orders", deletion_allowed=True)
    assert second.rotate_key("orders").latest_version == 2
    assert first.key_material("orders", 2) == second.key_material("orders", 2)
    second.delete_key("orders")
    with pytest.raises(KeyNotFoundError):
        first.get_key("orders")


def test_wrong_master_key_is_refused_at_open(backing: Backing, master_key: bytes) -> None:
    backing.open(master_key).create_key("orders")
    other = secrets.token_bytes(32)
    with pytest.raises(MasterKeyError, match="does not match") as caught:
        backing.open(other)
    message = str(caught.value)
    assert master_key.hex() not in message and other.hex() not in message
    assert caught.value.__context__ is None and caught.value.__cause__ is None
    with pytest.raises(MasterKeyError, match="32 bytes long"):
        backing.open(master_key[:16])
    assert len(backing.open(master_key).key_material("orders", 1)) == 32  # the right key still opens it


def test_closed_store_refuses_calls(backing: Backing, master_key: bytes) -> None:
    store = backing.open(master_key)
    store.create_key("orders")
    store.close()
    store.close()  # idempotent
    with pytest.raises(ServiceUnavailableError, match="closed"):
        store.get_key("orders")
    with pytest.raises(ServiceUnavailableError, match="closed"):
        store.create_key("other")


def test_import_key_takes_the_type_it_is_given_and_holds_the_material_to_it(store: KeyStore) -> None:
    material = secrets.token_bytes(64)
    info = store.import_key("det", material, key_type="aes256-siv")
    assert (info.key_type, info.imported) == ("aes256-siv", True)
    assert store.key_material("det", 1) == material
    assert store.import_key("aes", material[:32], key_type="aes256").key_type == "aes256"
    with pytest.raises(
        BadRequestError, match="an imported aes256-siv key must be 64 bytes long, got 32 bytes"
    ):
        store.import_key("short", material[:32], key_type="aes256-siv")
    with pytest.raises(BadRequestError, match="invalid key type 'aes512'"):
        store.import_key("odd", material, key_type="aes512")
    with pytest.raises(KeyNotFoundError):
        store.get_key("short")


@pytest.mark.parametrize(
    "options", [KeyOptions(derived=True), KeyOptions(derived=True, convergent_encryption=True)]
)
def test_an_aes256_siv_key_takes_no_derivation(store: KeyStore, options: KeyOptions) -> None:
    with pytest.raises(BadRequestError, match="derived and convergent_encryption apply to AES keys"):
        store.create_key("det", "aes256-siv", options=options)
    with pytest.raises(BadRequestError, match="derived and convergent_encryption apply to AES keys"):
        store.import_key("det", secrets.token_bytes(64), options=options, key_type="aes256-siv")
    assert store.create_key("det", "aes256-siv", options=KeyOptions(exportable=True)).options.exportable
