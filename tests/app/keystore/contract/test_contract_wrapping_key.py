"""The import wrapping key (:mod:`app.keystore.wrapping_key`), the same contract for SQLite and PostgreSQL:
made once and then read by every store on the same data, even when several make one at once; stored wrapped
under the seal (never in clear); kept through a master key rotation and a reseal to another seal.

The keystore treats the key as opaque bytes, so these tests store random bytes of an RSA-4096 key's DER
length instead of generating one each time (the service's key is generated in
``tests/app/formats/test_wrapped_import_format.py``).
"""

from __future__ import annotations

import secrets
import threading

from app.keystore import KeyStore
from app.keystore.generations import MasterRotation
from app.keystore.wrapping_key import WRAPPING_KEY_ROW, read_wrapping_key
from app.seal import BlobOrigin, FileSeal, blob_origin
from tests.app.keystore.contract.conftest import Backing

#: About the length of an RSA-4096 private key's PKCS#8 DER.
DER_LENGTH = 2374


def _stored_blob(store: KeyStore) -> bytes:
    blob = store._run_read(lambda conn: read_wrapping_key(conn, store._dialect))
    assert blob is not None, f"no {WRAPPING_KEY_ROW} row"
    return blob


def test_the_first_key_made_is_stored_wrapped_and_returned_ever_after(store: KeyStore) -> None:
    assert store.stored_import_wrapping_key() is None
    made = secrets.token_bytes(DER_LENGTH)
    assert store.import_wrapping_key(lambda: made) == made
    blob = _stored_blob(store)
    assert made not in blob and made[:64] not in blob  # wrapped, not stored in clear
    assert blob_origin(blob) == BlobOrigin("file", 1)

    def must_not_run() -> bytes:
        raise AssertionError("a stored wrapping key is never made again")

    assert store.import_wrapping_key(must_not_run) == made
    assert store.stored_import_wrapping_key() == made


def test_another_store_on_the_same_data_reads_the_same_key(
    store: KeyStore, backing: Backing, master_key: bytes
) -> None:
    made = store.import_wrapping_key(lambda: secrets.token_bytes(DER_LENGTH))
    other = backing.open(master_key)
    assert other.import_wrapping_key(lambda: secrets.token_bytes(DER_LENGTH)) == made


def test_concurrent_first_uses_agree_on_one_key(store: KeyStore, backing: Backing, master_key: bytes) -> None:
    stores = [store, backing.open(master_key), backing.open(master_key)]
    barrier = threading.Barrier(len(stores))
    results: list[bytes] = []
    errors: list[BaseException] = []

    def make() -> bytes:
        barrier.wait()  # every store has read "none stored" before any inserts
        return secrets.token_bytes(DER_LENGTH)

    def first_use(each: KeyStore) -> None:
        try:
            results.append(each.import_wrapping_key(make))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=first_use, args=(each,)) for each in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert len(results) == len(stores) and len(set(results)) == 1
    assert store.stored_import_wrapping_key() == results[0]


def test_a_master_key_rotation_rewraps_it_under_the_new_generation(store: KeyStore) -> None:
    made = store.import_wrapping_key(lambda: secrets.token_bytes(DER_LENGTH))
    store.create_key("orders")
    rotation = MasterRotation(store)
    rotation.begin()
    finished = rotation.run()
    assert finished is not None and not finished.rotating
    assert blob_origin(_stored_blob(store)) == BlobOrigin("file", 2)
    assert store.stored_import_wrapping_key() == made


def test_a_reseal_rewraps_it_under_the_target_seal(store: KeyStore) -> None:
    made = store.import_wrapping_key(lambda: secrets.token_bytes(DER_LENGTH))
    rotation = MasterRotation(store)
    rotation.begin()
    rotation.run()
    target = FileSeal(bytes(range(32)))
    audit = store.audit_key_material()
    store.reseal(target, audit if audit is not None else bytes(64))
    assert blob_origin(_stored_blob(store)) == BlobOrigin("file", 1)
    assert store.stored_import_wrapping_key() == made
