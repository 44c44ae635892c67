"""The shamir seal: shares that check themselves, K of N rebuild the key, and a keystore opened sealed.

Every test that unseals reads back key material wrapped before it was sealed (nothing is lost).
"""

from __future__ import annotations

import itertools
import secrets
from pathlib import Path

import pytest

from app.keystore import KeyStore, open_keystore
from app.keystore.master import MasterKeyError
from app.keystore.postgres import PostgresKeyStore
from app.seal import FileSeal, SealError, blob_origin
from app.seal.shamir import ShamirSeal, new_master_key
from app.seal.shares import (
    SHARE_PREFIX,
    InvalidShareError,
    Share,
    combine_shares,
    decode_share,
    encode_share,
    split_master_key,
)


def initialise(data_dir: Path, threshold: int = 3, shares: int = 5) -> tuple[list[str], bytes]:
    """What ``operator init`` does: a keystore with one key; returns the shares and that key's material."""
    key = new_master_key()
    parameters, texts = split_master_key(key, threshold, shares)
    seal = ShamirSeal(key, parameters, initialising=True)
    store = open_keystore(data_dir, seal)
    try:
        store.create_key("orders", "aes256")
        material = store.key_material("orders", 1)
    finally:
        store.close()
        seal.close()
    return texts, material


def open_sealed(data_dir: Path) -> tuple[ShamirSeal, KeyStore]:
    seal = ShamirSeal()
    return seal, open_keystore(data_dir, seal)


def mistype(share: str, position: int) -> str:
    body = share[len(SHARE_PREFIX) :]
    replacement = "a" if body[position] != "a" else "b"
    return SHARE_PREFIX + body[:position] + replacement + body[position + 1 :]


def test_any_k_of_n_rebuild_the_key_and_k_minus_1_do_not() -> None:
    key = new_master_key()
    _, texts = split_master_key(key, 3, 5)
    shares = [decode_share(text) for text in texts]
    for chosen in itertools.combinations(shares, 3):
        assert combine_shares(list(chosen)) == key
    for chosen in itertools.combinations(shares, 2):
        assert combine_shares(list(chosen)) != key


def test_every_single_character_typo_is_an_invalid_share() -> None:
    _, texts = split_master_key(new_master_key(), 2, 3)
    body_length = len(texts[0]) - len(SHARE_PREFIX)
    for position in range(body_length):
        with pytest.raises(InvalidShareError) as caught:
            decode_share(mistype(texts[0], position))
        assert caught.value.reason in {"checksum", "malformed"}
    with pytest.raises(InvalidShareError) as caught:
        decode_share(texts[0][:-1])
    assert caught.value.reason == "malformed"
    for text in ("", "hello", SHARE_PREFIX + "01890", 42):
        with pytest.raises(InvalidShareError):
            decode_share(text)  # type: ignore[arg-type]
    # Case, spaces and dashes are forgiven: the share is the same.
    assert decode_share("  " + texts[0].upper() + "\n") == decode_share(texts[0])


def test_an_invalid_share_error_never_holds_the_share() -> None:
    _, texts = split_master_key(new_master_key(), 2, 3)
    typo = mistype(texts[1], 10)
    with pytest.raises(InvalidShareError) as caught:
        decode_share(typo)
    assert typo[len(SHARE_PREFIX) :] not in str(caught.value)
    assert texts[1][len(SHARE_PREFIX) + 4 :] not in repr(decode_share(texts[1]))


def test_k_shares_unseal_a_keystore_and_its_keys_read_back(tmp_path: Path) -> None:
    texts, material = initialise(tmp_path, 3, 5)
    seal, store = open_sealed(tmp_path)
    try:
        assert seal.sealed
        assert seal.status().threshold == 3 and seal.status().shares == 5
        assert seal.submit_share(texts[4]) is None
        assert seal.submit_share(texts[0]) is None
        assert seal.status().progress == 2 and seal.sealed
        with pytest.raises(SealError, match="sealed"):
            store.key_material("orders", 1)
        rebuilt = seal.submit_share(texts[2])
        assert rebuilt is not None and not seal.sealed
        assert store.key_material("orders", 1) == material
        assert seal.status().progress == 0
        seal.seal()
        assert seal.sealed
        with pytest.raises(SealError):
            store.key_material("orders", 1)
        for text in texts[1:4]:
            seal.submit_share(text)
        assert store.key_material("orders", 1) == material
    finally:
        store.close()
        seal.close()


def test_foreign_duplicate_and_mistyped_shares_leave_progress_unchanged(tmp_path: Path) -> None:
    texts, material = initialise(tmp_path / "one", 2, 3)
    foreign, _ = initialise(tmp_path / "two", 2, 3)
    seal, store = open_sealed(tmp_path / "one")
    try:
        seal.submit_share(texts[0])
        refusals = {
            "foreign": foreign[1],
            "duplicate": texts[0],
            "checksum": mistype(texts[1], 7),
            "malformed": "kss1-not-a-share",
        }
        for reason, text in refusals.items():
            with pytest.raises(InvalidShareError) as caught:
                seal.submit_share(text)
            assert caught.value.reason == reason
            assert seal.status().progress == 1 and seal.sealed
        seal.submit_share(texts[2])
        assert store.key_material("orders", 1) == material
    finally:
        store.close()
        seal.close()


def test_a_wrong_share_with_a_valid_check_is_refused_at_the_threshold(tmp_path: Path) -> None:
    texts, material = initialise(tmp_path, 2, 3)
    genuine = decode_share(texts[1])
    forged = encode_share(
        Share(genuine.parameters, genuine.index, (secrets.token_bytes(16), genuine.halves[1]))
    )
    seal, store = open_sealed(tmp_path)
    try:
        seal.submit_share(texts[0])
        with pytest.raises(InvalidShareError) as caught:
            seal.submit_share(forged)
        assert caught.value.reason == "mismatch"
        assert seal.sealed and seal.status().progress == 1
        seal.reset()
        assert seal.status().progress == 0
        seal.submit_share(texts[2])
        seal.submit_share(texts[1])
        assert store.key_material("orders", 1) == material
    finally:
        store.close()
        seal.close()


def test_a_key_handed_over_is_checked_first(tmp_path: Path) -> None:
    texts, material = initialise(tmp_path, 2, 2)
    donor, donor_store = open_sealed(tmp_path)
    seal, store = open_sealed(tmp_path)
    try:
        donor.submit_share(texts[0])
        key = donor.submit_share(texts[1])
        assert key is not None
        with pytest.raises(SealError, match="does not open"):
            seal.unseal_with_key(secrets.token_bytes(32))
        assert seal.sealed
        seal.unseal_with_key(key)
        assert store.key_material("orders", 1) == material
    finally:
        for each in (store, donor_store):
            each.close()
        seal.close()
        donor.close()


def test_init_is_refused_on_an_initialised_keystore(tmp_path: Path) -> None:
    initialise(tmp_path)
    key = new_master_key()
    parameters, _ = split_master_key(key, 2, 3)
    with pytest.raises(MasterKeyError, match="already initialised"):
        open_keystore(tmp_path, ShamirSeal(key, parameters, initialising=True))
    sealed, store = open_sealed(tmp_path)  # the first init's parameters are still there
    assert sealed.status().threshold == 3
    store.close()


def test_a_sealed_seal_refuses_a_keystore_it_did_not_initialise(tmp_path: Path) -> None:
    with pytest.raises(MasterKeyError, match="operator init"):
        open_keystore(tmp_path / "empty", ShamirSeal())
    file_store = open_keystore(tmp_path / "file", FileSeal(bytes(32)))
    file_store.close()
    with pytest.raises(MasterKeyError, match="sealed by the file seal"):
        open_keystore(tmp_path / "file", ShamirSeal())
    initialise(tmp_path / "shamir")
    with pytest.raises(MasterKeyError, match="sealed by the shamir seal"):
        open_keystore(tmp_path / "shamir", FileSeal(bytes(32)))


def test_blobs_name_the_shamir_seal_and_sealing_wipes_the_key() -> None:
    key = new_master_key()
    parameters, _ = split_master_key(key, 1, 1)
    seal = ShamirSeal(key, parameters)
    blob = seal.wrap(b"material", b"ad")
    origin = blob_origin(blob)
    assert origin is not None and origin.kind == "shamir" and origin.generation == 1
    assert seal.unwrap(blob, b"ad") == b"material"
    assert key.hex() not in repr(seal)
    seal.seal()
    assert seal.sealed
    with pytest.raises(SealError, match="sealed"):
        seal.unwrap(blob, b"ad")
    with pytest.raises(SealError):
        ShamirSeal(b"short")


def test_a_postgres_keystore_is_initialised_opened_sealed_and_unsealed(pg_url: str) -> None:
    """The share parameters row and the check value live in PostgreSQL's meta table as in SQLite's."""
    key = new_master_key()
    parameters, texts = split_master_key(key, 2, 3)
    seal = ShamirSeal(key, parameters, initialising=True)
    store = PostgresKeyStore(pg_url, seal, pool_size=2)
    try:
        store.create_key("orders", "aes256")
        material = store.key_material("orders", 1)
    finally:
        store.close()
        seal.close()
    with pytest.raises(MasterKeyError, match="already initialised"):
        PostgresKeyStore(pg_url, ShamirSeal(new_master_key(), parameters, initialising=True), pool_size=2)
    sealed = ShamirSeal()
    store = PostgresKeyStore(pg_url, sealed, pool_size=2)
    try:
        assert sealed.status().threshold == 2 and sealed.status().shares == 3
        sealed.submit_share(texts[2])
        sealed.submit_share(texts[0])
        assert store.key_material("orders", 1) == material
    finally:
        store.close()
        sealed.close()
