"""The file seal wraps byte for byte as Keystream did before seals, and derives the same audit keys."""

from __future__ import annotations

import secrets

import pytest

from app.audit import audit_keys_for, derive_audit_keys
from app.keystore.master import (
    KeyUnwrapError,
    make_master_key_check,
    master_key_matches,
    unwrap_key_material,
    wrap_key_material,
)
from app.seal import FileSeal, SealError, SealUnwrapError, blob_origin
from app.seal.blob import BlobOrigin, v2_header

MASTER = bytes(range(32))
MATERIAL = bytes(range(100, 132))
#: Written by the code before seals (commit 7dd64cc, app/keystore/master.py) under MASTER: version 3 of key
#: "orders" holding MATERIAL, and the keystore's check value.
OLD_WRAPPED = bytes.fromhex(
    "01c319b1ae4100b6690d6fa5767ef1d3cb24a46c9b0ed4735ace662de6dba5349baaae5250880f7148d2011d71b97ce59d153e"
    "39da4fd26c5973db45ab"
)
OLD_CHECK = bytes.fromhex(
    "01453b43ce0afb4873702494d53cf39ffaf7d451bf4599e6ae5bf2618921047b833fd8d6097519a1bfa9a23452ee3a4be9e0"
    "61cce26ad3ce8a2f"
)
#: The audit keys that code derived from MASTER (so logs written before seals keep verifying).
OLD_CHAIN_KEY = "378f893c8861dfb5919898cd5d979507bb47513b892444ef4ea158eba504c9e9"
OLD_HASH_KEY = "ed493d8665c35fb101e99dd3202f55014a240ae7b68539834f3e8df80404633a"


def test_a_blob_written_before_seals_unwraps() -> None:
    seal = FileSeal(MASTER)
    assert unwrap_key_material(seal, "orders", 3, OLD_WRAPPED) == MATERIAL
    assert master_key_matches(seal, OLD_CHECK)
    with pytest.raises(KeyUnwrapError):
        unwrap_key_material(seal, "orders", 2, OLD_WRAPPED)
    assert not master_key_matches(FileSeal(bytes(32)), OLD_CHECK)


def test_the_file_seal_writes_the_old_layout() -> None:
    seal = FileSeal(MASTER)
    wrapped = wrap_key_material(seal, "orders", 3, MATERIAL)
    assert len(wrapped) == len(OLD_WRAPPED) and wrapped[0] == 0x01
    assert blob_origin(wrapped) == BlobOrigin("file", 1)
    assert unwrap_key_material(MASTER, "orders", 3, wrapped) == MATERIAL
    assert master_key_matches(MASTER, make_master_key_check(seal))


def test_the_file_seal_derives_the_audit_keys_of_before() -> None:
    keys = audit_keys_for(FileSeal(MASTER))
    assert keys.chain_key.hex() == OLD_CHAIN_KEY
    assert keys.hash_key.hex() == OLD_HASH_KEY
    assert keys == derive_audit_keys(MASTER)


def test_a_v2_blob_is_not_a_file_seal_blob() -> None:
    header = v2_header("pkcs11", 7)
    blob = header + bytes(12 + 32 + 16)
    assert blob_origin(blob) == BlobOrigin("pkcs11", 7)
    with pytest.raises(SealUnwrapError):
        FileSeal(MASTER).unwrap(blob, b"")
    assert blob_origin(b"\x03" + bytes(40)) is None
    with pytest.raises(ValueError, match="unknown seal kind"):
        v2_header("paper", 1)
    with pytest.raises(ValueError, match="generation"):
        v2_header("file", 0)


def test_the_key_never_shows_and_a_closed_seal_refuses() -> None:
    key = secrets.token_bytes(32)
    seal = FileSeal(key, "data/master.key")
    assert key.hex() not in repr(seal) and "data/master.key" in seal.describe()
    blob = seal.wrap(b"secret", b"ad")
    seal.close()
    assert seal.sealed
    with pytest.raises(SealError, match="closed"):
        seal.unwrap(blob, b"ad")
