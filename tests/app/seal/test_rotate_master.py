"""Rotating the master key under the shamir and pkcs11 seals (SoftHSM2), on SQLite and PostgreSQL.

The file seal runs the keystore contract (``tests/app/keystore/contract/test_contract_master_rotation.py``);
here the other two seals: their generations' blobs name the seal, every version made before decrypts after,
the shamir seal's generations are forgotten on seal and found again on unseal, and the pkcs11 seal's retired
generations' token keys are destroyed.
"""

from __future__ import annotations

from pathlib import Path

import pkcs11
import pytest

from app.keystore import KeyStore
from app.keystore.generations import MasterRotation
from app.seal import BlobOrigin, SealError, blob_origin
from app.seal.pkcs11 import Pkcs11Seal, generation_label
from app.seal.shamir import ShamirSeal
from app.seal.shares import split_master_key
from tests.app.seal.conftest import materials, open_store
from tests.softhsm import SoftHsmToken

MASTER = bytes(range(40, 72))


def blob_origins(store: KeyStore) -> set[BlobOrigin]:
    return {blob_origin(blob) or BlobOrigin("none", 0) for key in store.export_keys() for blob in key.wrapped}


def test_shamir_rotation_keeps_every_version_and_survives_seal_and_unseal(
    tmp_path: Path, backing: str | None
) -> None:
    parameters, _ = split_master_key(MASTER, 2, 3)
    initialising = ShamirSeal(MASTER, parameters, initialising=True)  # operator init's seal
    store = open_store(initialising, tmp_path / "data", backing)
    for name in ("orders", "invoices"):
        store.create_key(name)
        store.rotate_key(name)
    before = materials(store)
    store.close()
    initialising.close()

    seal = ShamirSeal()  # a server's: opened sealed, unsealed with the key the shares rebuild
    store = open_store(seal, tmp_path / "data", backing)
    try:
        seal.unseal_with_key(MASTER)
        rotation = MasterRotation(store, batch_size=1)
        assert rotation.begin().generation == 2
        assert rotation.run() is not None
        assert blob_origins(store) == {BlobOrigin("shamir", 2)}
        assert materials(store) == before
        seal.seal()
        with pytest.raises(SealError, match="sealed"):
            store.key_material("orders", 1)
        assert "open=[]" in repr(store.keyring)  # the generation's key was zeroed with the master key
        seal.unseal_with_key(MASTER)
        assert materials(store) == before  # the generation reloaded from the keystore after the unseal
        store.rotate_key("orders")
        assert blob_origin(store.export_keys()[1].wrapped[-1]) == BlobOrigin("shamir", 2)
    finally:
        store.close()
        seal.close()


def test_pkcs11_rotation_uses_token_keys_and_destroys_retired_ones(
    token: SoftHsmToken,
    tmp_path: Path,
    backing: str | None,
) -> None:
    Pkcs11Seal(str(token.library), token.label, token.pin, "keystream-master", create_key=True).close()
    # As a server opens it: a read-only session (generations are made in a read-write one of their own).
    seal = Pkcs11Seal(str(token.library), token.label, token.pin, "keystream-master")
    store = open_store(seal, tmp_path / "data", backing)
    try:
        for name in ("orders", "invoices"):
            store.create_key(name)
            store.rotate_key(name)
        before = materials(store)
        audit = store.audit_key_material()  # random, stored wrapped: the pkcs11 seal derives nothing
        assert audit is not None
        for generation in (2, 3):
            rotation = MasterRotation(store, batch_size=3)
            assert rotation.begin().generation == generation
            assert rotation.run() is not None
            assert blob_origins(store) == {BlobOrigin("pkcs11", generation)}
            assert materials(store) == before
            assert store.audit_key_material() == audit  # rewrapped, unchanged: old logs keep verifying
        store.create_key("later")
        assert blob_origin(store.export_keys()[1].wrapped[0]) == BlobOrigin("pkcs11", 3)
        with pkcs11.lib(str(token.library)).get_token(token_label=token.label).open() as session:
            labels = {
                str(key[pkcs11.Attribute.LABEL])
                for key in session.get_objects({pkcs11.Attribute.CLASS: pkcs11.ObjectClass.SECRET_KEY})
            }
        assert labels == {"keystream-master", generation_label("keystream-master", 3)}  # .g2 destroyed
    finally:
        store.close()
        seal.close()
    reopened_seal = Pkcs11Seal(str(token.library), token.label, token.pin, "keystream-master")
    reopened = open_store(reopened_seal, tmp_path / "data", backing)
    try:
        assert {place: materials(reopened)[place] for place in before} == before
        assert reopened.audit_key_material() == audit
    finally:
        reopened.close()
        reopened_seal.close()
