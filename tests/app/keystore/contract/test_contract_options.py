"""The keystore contract for key options and the ``aes256-siv`` type: stored at creation, read back by every
store on the same data, the one-way flags, and the fixed ones.

Runs against each implementation (see ``conftest.py``).
"""

from __future__ import annotations

import secrets

import pytest

from app.errors import BadRequestError, KeyNotFoundError
from app.keystore import KeyOptions, KeyStore
from tests.app.keystore.contract.conftest import Backing

ALL_ON = KeyOptions(derived=True, convergent_encryption=True, exportable=True, allow_plaintext_backup=True)


def test_a_key_has_no_options_unless_asked(store: KeyStore) -> None:
    info = store.create_key("plain")
    assert info.options == KeyOptions()
    assert {name: info.to_json()[name] for name in KeyOptions().to_json()} == {
        "derived": False,
        "convergent_encryption": False,
        "exportable": False,
        "allow_plaintext_backup": False,
    }


@pytest.mark.parametrize(
    "options",
    [ALL_ON, KeyOptions(derived=True), KeyOptions(exportable=True), KeyOptions(allow_plaintext_backup=True)],
)
def test_options_are_stored_at_creation_and_read_back_by_another_store(
    backing: Backing, master_key: bytes, options: KeyOptions
) -> None:
    store = backing.open(master_key)
    made = store.create_key("k", options=options)
    imported = store.import_key("imp", secrets.token_bytes(16), options=options)
    assert made.options == imported.options == options
    other = backing.open(master_key)  # another worker or replica
    assert other.get_key("k") == made and other.get_key("imp") == imported
    assert [info.options for info in other.list_keys()] == [options, options]
    assert other.get_key("k").to_json()["derived"] is options.derived
    assert store.rotate_key("k").options == options
    assert store.update_key("k", deletion_allowed=True).options == options


def test_convergent_encryption_needs_derived(store: KeyStore) -> None:
    with pytest.raises(BadRequestError, match="convergent_encryption requires derived"):
        store.create_key("k", options=KeyOptions(convergent_encryption=True))
    with pytest.raises(BadRequestError, match="convergent_encryption requires derived"):
        store.import_key("k", bytes(32), options=KeyOptions(convergent_encryption=True))
    assert store.list_keys() == []


def test_options_must_be_booleans(store: KeyStore) -> None:
    with pytest.raises(BadRequestError, match="exportable must be a boolean"):
        store.create_key("k", options=KeyOptions(exportable=1))  # type: ignore[arg-type]
    with pytest.raises(BadRequestError, match="key options must be KeyOptions"):
        store.create_key("k", options={"derived": True})  # type: ignore[arg-type]
    with pytest.raises(BadRequestError, match="allow_plaintext_backup must be a boolean"):
        store.update_key("k", allow_plaintext_backup="yes")  # type: ignore[arg-type]
    assert store.list_keys() == []


@pytest.mark.parametrize("flag", ["exportable", "allow_plaintext_backup"])
def test_exportable_and_backup_turn_on_later_but_never_off(
    backing: Backing, master_key: bytes, flag: str
) -> None:
    store = backing.open(master_key)
    store.create_key("k")
    seq = store.changes_since(0).latest
    updated = store.update_key("k", **{flag: True})  # type: ignore[arg-type]
    assert getattr(updated.options, flag) is True
    assert [(c.kind, c.key_name) for c in store.changes_since(seq).changes] == [("key_updated", "k")]
    assert getattr(backing.open(master_key).get_key("k").options, flag) is True
    assert getattr(store.update_key("k", **{flag: True}).options, flag) is True  # type: ignore[arg-type]
    with pytest.raises(BadRequestError, match=f"{flag} cannot be turned off once it is on"):
        store.update_key("k", **{flag: False})  # type: ignore[arg-type]
    with pytest.raises(BadRequestError, match=f"{flag} cannot be turned off"):
        store.update_key("k", min_decryption_version=1, **{flag: False})  # type: ignore[arg-type]
    assert getattr(store.get_key("k").options, flag) is True


def test_turning_a_flag_off_that_is_off_changes_nothing(store: KeyStore) -> None:
    store.create_key("k")
    assert store.update_key("k", exportable=False, allow_plaintext_backup=False).options == KeyOptions()
    with pytest.raises(KeyNotFoundError):
        store.update_key("missing", exportable=True)


def test_aes256_siv_keys_hold_64_bytes_of_material(store: KeyStore) -> None:
    info = store.create_key("det", "aes256-siv", options=KeyOptions(exportable=True))
    assert info.key_type == "aes256-siv" and info.to_json()["type"] == "aes256-siv"
    first = store.key_material("det", 1)
    assert len(first) == 64
    store.rotate_key("det")
    assert len(store.key_material("det", 2)) == 64 and store.key_material("det", 2) != first
    material = secrets.token_bytes(64)
    assert store.import_key_version("det", material).latest_version == 3
    assert store.key_material("det", 3) == material
    with pytest.raises(BadRequestError, match="aes256-siv: a new version must be 64 bytes long, got 32"):
        store.import_key_version("det", bytes(32))
    with pytest.raises(BadRequestError, match=r"16 \(aes128\), 24 \(aes192\), 32 \(aes256\) bytes long"):
        store.import_key("guessed", secrets.token_bytes(64))  # never guessed from its length


def test_an_aes256_siv_key_cannot_be_derived(store: KeyStore) -> None:
    with pytest.raises(BadRequestError, match="derives no per-context keys"):
        store.create_key("det", "aes256-siv", options=KeyOptions(derived=True))
    assert store.create_key("det", "aes256-siv", options=KeyOptions(exportable=True)).options.exportable
