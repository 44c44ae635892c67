"""The keystore contract for ``import_key_version`` and ``trim_key`` (Vault's import_version and trim).

Runs against each implementation (see ``conftest.py``): SQLite and a real PostgreSQL.
"""

from __future__ import annotations

import secrets

import pytest

from app.errors import BadRequestError, KeyNotFoundError, KeyVersionNotFoundError
from app.keystore import KeyStore
from tests.app.keystore.contract.conftest import Backing


@pytest.mark.parametrize(
    ("key_type", "size"), [("aes128", 16), ("aes192", 24), ("aes256", 32), ("aes256-siv", 64)]
)
def test_import_version_adds_the_given_material_as_latest(store: KeyStore, key_type: str, size: int) -> None:
    created = store.create_key("k", key_type)
    assert created.imported is False
    material = secrets.token_bytes(size)
    info = store.import_key_version("k", material)
    assert (info.latest_version, info.min_decryption_version, info.imported) == (2, 1, True)
    assert [v.version for v in info.versions] == [1, 2]
    assert info.updated_at >= created.updated_at
    assert store.key_material("k", 2) == material
    assert store.key_material("k", 1) != material
    assert store.get_key("k") == info
    # a later rotation is random again, and the key stays marked as imported
    rotated = store.rotate_key("k")
    assert (rotated.latest_version, rotated.imported) == (3, True)
    assert store.key_material("k", 3) != material


@pytest.mark.parametrize("length", [0, 15, 16, 24, 31, 33, 64])
def test_import_version_refuses_material_of_another_size(store: KeyStore, length: int) -> None:
    store.create_key("k", "aes256")
    material = b"\x7f" * length
    with pytest.raises(
        BadRequestError, match=f"aes256: a new version must be 32 bytes long, got {length}"
    ) as e:
        store.import_key_version("k", material)
    assert material.hex() not in str(e.value) or length == 0
    info = store.get_key("k")
    assert (info.latest_version, info.imported) == (1, False)


def test_import_version_refuses_non_bytes_unknown_keys_and_bad_names(store: KeyStore) -> None:
    store.create_key("k")
    with pytest.raises(BadRequestError, match="must be bytes"):
        store.import_key_version("k", "a" * 32)  # type: ignore[arg-type]
    with pytest.raises(KeyNotFoundError):
        store.import_key_version("missing", secrets.token_bytes(32))
    with pytest.raises(BadRequestError, match="invalid key name"):
        store.import_key_version("../x", secrets.token_bytes(32))


def test_import_version_appends_a_rotation_to_the_change_log(store: KeyStore) -> None:
    store.create_key("k")
    start = store.changes_since(1 << 62).latest
    store.import_key_version("k", secrets.token_bytes(32))
    changes, _, trimmed = store.changes_since(start)
    assert not trimmed
    assert [(c.kind, c.key_name) for c in changes] == [("key_rotated", "k")]


def test_trim_deletes_versions_below_for_good(store: KeyStore, backing: Backing, master_key: bytes) -> None:
    store.create_key("k")
    for _ in range(3):
        store.rotate_key("k")
    kept = store.key_material("k", 3)
    store.update_key("k", min_decryption_version=3)
    start = store.changes_since(1 << 62).latest
    info = store.trim_key("k", 3)
    assert [v.version for v in info.versions] == [3, 4]
    assert (info.latest_version, info.min_decryption_version) == (4, 3)
    assert store.get_key("k") == info
    assert store.list_keys() == [info]
    for gone in (1, 2):
        with pytest.raises(KeyVersionNotFoundError, match=f"no version {gone} \\(versions 3 to 4\\)"):
            store.key_material("k", gone)
    assert store.key_material("k", 3) == kept
    changes, _, _ = store.changes_since(start)
    assert [(c.kind, c.key_name) for c in changes] == [("key_updated", "k")]
    # another store on the same data (a reopen, another replica) sees the versions gone
    other = backing.open(master_key)
    assert [v.version for v in other.get_key("k").versions] == [3, 4]
    with pytest.raises(KeyVersionNotFoundError):
        other.key_material("k", 1)
    # a rotation after a trim continues the numbering
    assert store.rotate_key("k").latest_version == 5


def test_trim_is_idempotent_and_changes_nothing_the_second_time(store: KeyStore) -> None:
    store.create_key("k")
    store.rotate_key("k")
    store.update_key("k", min_decryption_version=2)
    first = store.trim_key("k", 2)
    head = store.changes_since(1 << 62).latest
    assert store.trim_key("k", 2) == first
    assert store.trim_key("k", 1) == first
    assert store.changes_since(head).changes == []


def test_trim_to_version_1_keeps_everything(store: KeyStore) -> None:
    info = store.create_key("k")
    head = store.changes_since(1 << 62).latest
    assert store.trim_key("k", 1) == info
    assert store.changes_since(head).changes == []


@pytest.mark.parametrize("bad", [0, -1, 3, 4])
def test_trim_refuses_versions_outside_1_to_min_decryption_version(store: KeyStore, bad: int) -> None:
    store.create_key("k")
    for _ in range(3):
        store.rotate_key("k")
    store.update_key("k", min_decryption_version=2)
    with pytest.raises(BadRequestError, match="min_available_version must be between 1 and the min_decry"):
        store.trim_key("k", bad)
    assert [v.version for v in store.get_key("k").versions] == [1, 2, 3, 4]


@pytest.mark.parametrize("bad", [True, 1.0, "1", None])
def test_trim_refuses_non_integers(store: KeyStore, bad: object) -> None:
    store.create_key("k")
    with pytest.raises(BadRequestError, match="min_available_version must be an integer"):
        store.trim_key("k", bad)  # type: ignore[arg-type]


def test_trim_of_an_unknown_key(store: KeyStore) -> None:
    with pytest.raises(KeyNotFoundError):
        store.trim_key("missing", 1)
