"""``copy_keystore``: SQLite -> PostgreSQL and back against a real PostgreSQL (the ``pg_url`` fixture).

Covers: every key, version, policy, time and token arrives; the copied change-log rows; data encrypted before
the copy decrypts with the copied key; a second run copies nothing; a destination key whose material differs
(or a token whose hash differs) is refused with its name and nothing is written; a version that does not
unwrap under the master key is refused before any write.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

import aescore
from app.errors import KeyExistsError
from app.formats.sealed import KeyParameters, SealedDecryptor, SealedEncryptor
from app.keystore import KeyOptions, KeyStore, KeyUnwrapError, SqliteKeyStore, TokenRecord
from app.keystore.copy import CopyConflictError, copy_keystore
from app.keystore.generations import MasterRotation
from app.keystore.postgres import PostgresKeyStore
from app.keystore.records import KeyExport, RoleRecord
from app.seal import BlobOrigin, blob_origin

AD = b"orders/2026"


@pytest.fixture
def sqlite_store(tmp_path: Path, master_key: bytes) -> Iterator[SqliteKeyStore]:
    store = SqliteKeyStore(tmp_path / "keystore.db", master_key)
    yield store
    store.close()


@pytest.fixture
def postgres_store(pg_url: str, master_key: bytes) -> Iterator[PostgresKeyStore]:
    store = PostgresKeyStore(pg_url, master_key)
    yield store
    store.close()


@pytest.fixture(params=["sqlite-to-postgres", "postgres-to-sqlite"])
def pair(
    request: pytest.FixtureRequest, sqlite_store: SqliteKeyStore, postgres_store: PostgresKeyStore
) -> tuple[KeyStore, KeyStore]:
    """``(source, target)`` in each direction."""
    if request.param == "sqlite-to-postgres":
        return sqlite_store, postgres_store
    return postgres_store, sqlite_store


def _token(token_id: str, description: str = "ci") -> TokenRecord:
    return TokenRecord(
        token_id=token_id,
        secret_hash=secrets.token_bytes(32),
        scopes=("encrypt", "decrypt"),
        key_patterns=("orders*",),
        description=description,
        created_at=datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
    )


def _fill(store: KeyStore) -> None:
    store.create_key("orders", "aes256", segment_size=4096, deletion_allowed=True)
    store.rotate_key("orders")
    store.rotate_key("orders")
    store.update_key("orders", min_decryption_version=2)
    store.create_key(
        "gcm-key",
        "aes128",
        scheme="gcm",
        auto_rotate_period="24h",
        options=KeyOptions(derived=True, convergent_encryption=True, allow_plaintext_backup=True),
    )
    store.import_key(
        "imported", secrets.token_bytes(24), auto_rotate_period=7200, options=KeyOptions(exportable=True)
    )
    store.create_token(_token("tok-a"))
    store.create_token(_token("tok-b", "second"))


def _seal(material: bytes, key_type: str, segment_size: int, scheme: str, plaintext: bytes) -> bytes:
    encryptor = SealedEncryptor(
        material, KeyParameters(key_type, segment_size, scheme), AD, aescore.get_backend("python")
    )
    return encryptor.update(plaintext) + encryptor.finalize()


def _open(
    candidates: list[tuple[int, bytes]], key_type: str, segment_size: int, scheme: str, data: bytes
) -> bytes:
    decryptor = SealedDecryptor(
        candidates, KeyParameters(key_type, segment_size, scheme), AD, aescore.get_backend("python")
    )
    return decryptor.update(data) + decryptor.finalize()


def test_copy_carries_every_key_version_policy_and_token(
    pair: tuple[KeyStore, KeyStore], master_key: bytes
) -> None:
    source, target = pair
    _fill(source)
    plaintext = secrets.token_bytes(10_000)
    before = {
        key.name: (
            key,
            _seal(
                source.key_material(key.name, key.latest_version),
                key.key_type,
                key.segment_size,
                key.scheme,
                plaintext,
            ),
        )
        for key in source.list_keys()
    }
    seq_before = target.changes_since(0).latest
    summary = copy_keystore(source, target)
    assert (summary.keys_copied, summary.keys_skipped, summary.versions_copied) == (3, 0, 5)
    assert (summary.tokens_copied, summary.tokens_skipped) == (2, 0)
    assert target.list_keys() == source.list_keys()  # versions, created_at, policies, scheme, imported
    assert {key.name: key.auto_rotate_period for key in target.list_keys()} == {
        "gcm-key": 86_400,
        "imported": 7200,
        "orders": 0,
    }
    assert {key.name: key.options for key in target.list_keys()} == {
        "gcm-key": KeyOptions(derived=True, convergent_encryption=True, allow_plaintext_backup=True),
        "imported": KeyOptions(exportable=True),
        "orders": KeyOptions(),
    }
    assert target.list_tokens() == source.list_tokens()
    for key in source.list_keys():
        for version in key.versions:
            assert target.key_material(key.name, version.version) == source.key_material(
                key.name, version.version
            )
    # Encrypted before the copy, decrypted with the copied key only.
    for name, (_key, sealed) in before.items():
        copied = target.get_key(name)
        candidates = [(v.version, target.key_material(name, v.version)) for v in copied.versions]
        assert _open(candidates, copied.key_type, copied.segment_size, copied.scheme, sealed) == plaintext
    # Running replicas of the target learn of the copies through the change log.
    changes = target.changes_since(seq_before).changes
    assert sorted((c.kind, c.key_name or c.token_id) for c in changes) == sorted(
        [("key_created", n) for n in ("gcm-key", "imported", "orders")]
        + [("token_created", t) for t in ("tok-a", "tok-b")]
    )


def test_a_differing_auto_rotate_period_is_a_conflict(
    pair: tuple[KeyStore, KeyStore], master_key: bytes
) -> None:
    source, target = pair
    _fill(source)
    copy_keystore(source, target)
    target.update_key("orders", auto_rotate_period="1h")
    with pytest.raises(CopyConflictError, match="key 'orders' \\(its auto rotate period differs\\)"):
        copy_keystore(source, target)


def test_a_differing_option_is_a_conflict(pair: tuple[KeyStore, KeyStore], master_key: bytes) -> None:
    source, target = pair
    _fill(source)
    copy_keystore(source, target)
    target.update_key("orders", exportable=True)
    with pytest.raises(CopyConflictError, match="key 'orders' \\(its option exportable differs\\)"):
        copy_keystore(source, target)


def test_second_copy_copies_nothing_and_succeeds(pair: tuple[KeyStore, KeyStore], master_key: bytes) -> None:
    source, target = pair
    _fill(source)
    copy_keystore(source, target)
    seq = target.changes_since(0).latest
    summary = copy_keystore(source, target)
    assert (summary.keys_copied, summary.keys_skipped, summary.versions_copied) == (0, 3, 0)
    assert (summary.tokens_copied, summary.tokens_skipped) == (0, 2)
    assert target.changes_since(seq).changes == []


def test_new_keys_are_copied_next_to_skipped_ones(pair: tuple[KeyStore, KeyStore], master_key: bytes) -> None:
    source, target = pair
    _fill(source)
    copy_keystore(source, target)
    source.create_key("later")
    summary = copy_keystore(source, target)
    assert (summary.keys_copied, summary.keys_skipped) == (1, 3)
    assert target.get_key("later") == source.get_key("later")


def test_differing_material_is_refused_and_nothing_is_written(
    pair: tuple[KeyStore, KeyStore], master_key: bytes
) -> None:
    source, target = pair
    _fill(source)
    target.create_key("orders", "aes256", segment_size=4096, deletion_allowed=True)
    target.rotate_key("orders")
    target.rotate_key("orders")
    target.update_key("orders", min_decryption_version=2)
    before = (target.list_keys(), target.list_tokens(), target.changes_since(0).latest)
    with pytest.raises(CopyConflictError) as refused:
        copy_keystore(source, target)
    message = str(refused.value)
    assert "key 'orders' (its material differs)" in message
    assert "Nothing was copied" in message
    for version in (1, 2, 3):
        assert target.key_material("orders", version).hex() not in message
        assert source.key_material("orders", version).hex() not in message
    assert (target.list_keys(), target.list_tokens(), target.changes_since(0).latest) == before


def test_differing_versions_and_token_hash_are_refused(
    pair: tuple[KeyStore, KeyStore], master_key: bytes
) -> None:
    source, target = pair
    _fill(source)
    copy_keystore(source, target)
    source.rotate_key("gcm-key")
    target.delete_token("tok-a")
    target.create_token(_token("tok-a"))  # same id, another secret hash
    with pytest.raises(CopyConflictError) as refused:
        copy_keystore(source, target)
    assert "key 'gcm-key' (it has versions [1], the source [1, 2])" in str(refused.value)
    assert "token 'tok-a' (its secret hash differs)" in str(refused.value)


def test_a_version_that_does_not_unwrap_is_refused_before_any_write(
    sqlite_store: SqliteKeyStore, postgres_store: PostgresKeyStore, master_key: bytes
) -> None:
    sqlite_store.create_key("good")
    sqlite_store.create_key("bad")
    with sqlite_store._write() as conn:  # a corrupt row: one byte of the wrapped blob flipped
        blob = bytearray(
            conn.execute("SELECT wrapped FROM key_versions WHERE key_name = 'bad'").fetchone()[0]
        )
        blob[-1] ^= 1
        conn.execute("UPDATE key_versions SET wrapped = ? WHERE key_name = 'bad'", (bytes(blob),))
    with pytest.raises(KeyUnwrapError, match="version 1 of key 'bad'"):
        copy_keystore(sqlite_store, postgres_store)
    assert postgres_store.list_keys() == []


def test_insert_copied_is_all_or_nothing(pair: tuple[KeyStore, KeyStore], master_key: bytes) -> None:
    """A key created in the target between the check and the write rolls the whole copy back."""
    source, target = pair
    _fill(source)
    exported = source.export_keys()
    target.create_key("orders")
    with pytest.raises(KeyExistsError):
        target.insert_copied(exported, source.list_tokens())
    assert [key.name for key in target.list_keys()] == ["orders"]
    assert target.list_tokens() == []


def test_export_never_shows_material(sqlite_store: SqliteKeyStore) -> None:
    sqlite_store.create_key("orders")
    (key,) = sqlite_store.export_keys()
    assert isinstance(key, KeyExport)
    assert key.wrapped[0].hex() not in repr(key)
    assert sqlite_store.key_material("orders", 1).hex() not in repr(key)


def test_token_fields_are_compared_generically(pair: tuple[KeyStore, KeyStore], master_key: bytes) -> None:
    source, target = pair
    record = _token("tok-c")
    source.create_token(record)
    target.create_token(dataclasses.replace(record, description="changed"))
    with pytest.raises(CopyConflictError, match="token 'tok-c' \\(its description differs\\)"):
        copy_keystore(source, target)


def test_a_trimmed_key_with_an_imported_version_is_copied_as_it_is(
    pair: tuple[KeyStore, KeyStore], master_key: bytes
) -> None:
    source, target = pair
    source.create_key("trimmed")
    source.rotate_key("trimmed")
    material = secrets.token_bytes(32)
    source.import_key_version("trimmed", material)
    source.update_key("trimmed", min_decryption_version=2)
    info = source.trim_key("trimmed", 2)
    summary = copy_keystore(source, target)
    assert (summary.keys_copied, summary.versions_copied) == (1, 2)
    assert target.get_key("trimmed") == info
    assert target.key_material("trimmed", 3) == material
    assert copy_keystore(source, target).keys_skipped == 1


def test_a_rotated_source_is_copied_under_the_destination_s_own_generation(
    pair: tuple[KeyStore, KeyStore],
) -> None:
    source, target = pair
    _fill(source)
    rotation = MasterRotation(source)
    rotation.begin()
    rotation.run()  # every source version now under generation 2, which the destination does not hold
    before = {
        (key.name, version.version): bytes(source.key_material(key.name, version.version))
        for key in source.list_keys()
        for version in key.versions
    }
    assert copy_keystore(source, target).versions_copied == len(before)
    assert {
        (key.name, version.version): bytes(target.key_material(key.name, version.version))
        for key in target.list_keys()
        for version in key.versions
    } == before
    assert {blob_origin(blob) for key in target.export_keys() for blob in key.wrapped} == {
        BlobOrigin("file", 1)
    }
    assert copy_keystore(source, target).keys_skipped == len(source.list_keys())  # compared, not copied


def _role(name: str, scopes: tuple[str, ...] = ("encrypt",)) -> RoleRecord:
    now = datetime(2026, 5, 1, tzinfo=UTC)
    bindings = {"bound_audiences": ["keystream"], "bound_claims": {"/kubernetes.io/namespace": ["billing"]}}
    return RoleRecord(name, "jwt", scopes, ("billing-*",), 600, 3600, bindings, now, now)


def test_roles_and_auth_configurations_are_copied_once(pair: tuple[KeyStore, KeyStore]) -> None:
    source, target = pair
    source.write_role(_role("billing"))
    source.write_role(_role("audit"))
    source.write_auth_config("jwt", {"jwks_url": "https://issuer.example/keys", "leeway": 60})
    start = target.changes_since(1 << 62).latest
    summary = copy_keystore(source, target)
    assert (summary.roles_copied, summary.roles_skipped) == (2, 0)
    assert "copied 2 roles" in summary.describe()
    assert target.list_roles() == source.list_roles()
    assert target.read_auth_config("jwt") == source.read_auth_config("jwt")
    kinds = [(c.kind, c.role_name) for c in target.changes_since(start).changes]
    assert kinds == [("role_written", "audit"), ("role_written", "billing"), ("auth_config_written", None)]
    again = copy_keystore(source, target)
    assert (again.roles_copied, again.roles_skipped) == (0, 2)


def test_a_differing_role_or_configuration_is_a_conflict(pair: tuple[KeyStore, KeyStore]) -> None:
    source, target = pair
    source.write_role(_role("billing"))
    source.write_role(_role("audit"))
    target.write_role(_role("billing", scopes=("encrypt", "decrypt")))
    source.write_auth_config("jwt", {"jwks_url": "https://a.example/keys"})
    target.write_auth_config("jwt", {"jwks_url": "https://b.example/keys"})
    with pytest.raises(
        CopyConflictError,
        match=r"role 'billing' \(its scopes field differs\).*the jwt auth configuration \(it differs\)",
    ):
        copy_keystore(source, target)
    assert [role.name for role in target.list_roles()] == ["billing"]  # nothing was written


def test_the_import_wrapping_key_is_copied_rewrapped_once_and_a_different_one_conflicts(
    pair: tuple[KeyStore, KeyStore], master_key: bytes, tmp_path: Path
) -> None:
    source, target = pair
    made = source.import_wrapping_key(lambda: secrets.token_bytes(2374))
    rotation = MasterRotation(source)
    rotation.begin()
    rotation.run()  # the source's blob is under generation 2, which the destination does not hold
    copy_keystore(source, target)
    assert target.stored_import_wrapping_key() == made  # public keys handed out before the copy still work
    copy_keystore(source, target)  # the same key there: nothing to do, no conflict
    other = SqliteKeyStore(tmp_path / "other.db", master_key)
    try:
        other.import_wrapping_key(lambda: secrets.token_bytes(2374))
        other.create_key("only-in-other")
        with pytest.raises(CopyConflictError, match="import wrapping key"):
            copy_keystore(other, target)
    finally:
        other.close()
    assert target.stored_import_wrapping_key() == made
    assert "only-in-other" not in {key.name for key in target.list_keys()}  # all or nothing
