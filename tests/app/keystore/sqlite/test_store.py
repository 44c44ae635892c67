"""The SQLite keystore: every method, its errors, persistence, schema versions, WAL, permissions."""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
import stat
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.api.errors import http_status
from app.errors import (
    BadRequestError,
    ConflictError,
    DeletionNotAllowedError,
    KeyExistsError,
    KeyNotFoundError,
    KeyVersionNotFoundError,
    ServiceUnavailableError,
    TokenNotFoundError,
)
from app.keystore import (
    SCHEMA_VERSION,
    KeyOptions,
    KeyStore,
    KeystoreSchemaError,
    KeyUnwrapError,
    MasterKeyError,
    SqliteKeyStore,
    TokenRecord,
    open_keystore,
)
from app.keystore.generations import MasterRotation
from app.keystore.master import wrap_key_material
from app.keystore.sqlite import MIGRATIONS, Migration


@contextlib.contextmanager
def raw_connection(store: SqliteKeyStore) -> Iterator[sqlite3.Connection]:
    """A connection of the test's own, to look at what is really on disk."""
    conn = sqlite3.connect(store.path, isolation_level=None)
    try:
        yield conn
    finally:
        conn.close()


def token(token_id: str = "tok1", **changes: object) -> TokenRecord:  # noqa: S107 - an id, not a secret
    fields: dict[str, object] = {
        "token_id": token_id,
        "secret_hash": secrets.token_bytes(32),
        "scopes": ("encrypt", "decrypt"),
        "key_patterns": ("orders*", "billing"),
        "description": "ci pipeline",
        "created_at": datetime(2026, 3, 4, 5, 6, 7, 123456, tzinfo=UTC),
    }
    fields.update(changes)
    return TokenRecord(**fields)  # type: ignore[arg-type]


# -- keys --------------------------------------------------------------------------------------------------


def test_is_a_keystore(store: SqliteKeyStore, master_key: bytes) -> None:
    assert isinstance(store, KeyStore)
    assert store.path.name == "keystore.db"
    assert "keystore.db" in repr(store) and master_key.hex() not in repr(store)
    assert repr(master_key) not in repr(store) and repr(master_key) not in str(store)


def test_create_key_defaults(store: SqliteKeyStore) -> None:
    before = datetime.now(UTC)
    info = store.create_key("orders")
    assert (info.name, info.key_type, info.segment_size) == ("orders", "aes256", 1 << 20)
    assert (info.deletion_allowed, info.min_decryption_version, info.latest_version) == (False, 1, 1)
    assert info.imported is False
    assert before - timedelta(seconds=1) <= info.created_at == info.updated_at <= datetime.now(UTC)
    assert [v.version for v in info.versions] == [1]
    assert info.versions[0].created_at == info.created_at
    assert len(store.key_material("orders", 1)) == 32


@pytest.mark.parametrize(("key_type", "size"), [("aes128", 16), ("aes192", 24), ("aes256", 32)])
def test_create_key_of_each_type(store: SqliteKeyStore, key_type: str, size: int) -> None:
    info = store.create_key("k", key_type, segment_size=4096, deletion_allowed=True)
    assert (info.key_type, info.segment_size, info.deletion_allowed) == (key_type, 4096, True)
    assert len(store.key_material("k", 1)) == size


def test_created_material_is_random(store: SqliteKeyStore) -> None:
    store.create_key("a")
    store.create_key("b")
    assert store.key_material("a", 1) != store.key_material("b", 1)


def test_create_existing_key_conflicts(store: SqliteKeyStore) -> None:
    store.create_key("orders")
    material = store.key_material("orders", 1)
    with pytest.raises(KeyExistsError, match="'orders' already exists") as caught:
        store.create_key("orders", "aes128")
    assert http_status(caught.value) == 409
    with pytest.raises(KeyExistsError):
        store.import_key("orders", bytes(16))
    assert store.key_material("orders", 1) == material


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": "bad name"}, "invalid key name"),
        ({"name": "x", "key_type": "aes512"}, "aes128, aes192, aes256"),
        ({"name": "x", "segment_size": 4095}, "between 4096"),
        ({"name": "x", "segment_size": (1 << 24) + 1}, "between 4096"),
        ({"name": "x", "deletion_allowed": "yes"}, "deletion_allowed must be a boolean"),
    ],
)
def test_create_key_validation(store: SqliteKeyStore, kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(BadRequestError, match=match):
        store.create_key(**kwargs)  # type: ignore[arg-type]
    assert store.list_keys() == []


@pytest.mark.parametrize(("size", "key_type"), [(16, "aes128"), (24, "aes192"), (32, "aes256")])
def test_import_key_takes_type_from_length(store: SqliteKeyStore, size: int, key_type: str) -> None:
    material = secrets.token_bytes(size)
    info = store.import_key("imported", material, segment_size=8192)
    assert (info.key_type, info.imported, info.segment_size, info.latest_version) == (key_type, True, 8192, 1)
    assert store.key_material("imported", 1) == material
    rotated = store.rotate_key("imported")
    assert rotated.imported is True and len(store.key_material("imported", 2)) == size


@pytest.mark.parametrize("size", [0, 8, 20, 31, 33, 48])
def test_import_key_wrong_length(store: SqliteKeyStore, size: int) -> None:
    with pytest.raises(BadRequestError, match=r"16 \(aes128\), 24 \(aes192\), 32 \(aes256\)"):
        store.import_key("imported", b"\x01" * size)
    with pytest.raises(KeyNotFoundError):
        store.get_key("imported")


def test_import_key_validation(store: SqliteKeyStore) -> None:
    with pytest.raises(BadRequestError, match="invalid key name"):
        store.import_key("-x", bytes(16))
    with pytest.raises(BadRequestError, match="between 4096"):
        store.import_key("x", bytes(16), segment_size=100)
    with pytest.raises(BadRequestError, match="must be bytes"):
        store.import_key("x", "0" * 16)  # type: ignore[arg-type]


def test_get_key(store: SqliteKeyStore) -> None:
    created = store.create_key("orders", "aes128", 4096)
    assert store.get_key("orders") == created
    with pytest.raises(KeyNotFoundError, match="'nothing' not found") as caught:
        store.get_key("nothing")
    assert http_status(caught.value) == 404
    with pytest.raises(BadRequestError):
        store.get_key("no/such")


def test_list_keys_sorted_with_versions(store: SqliteKeyStore) -> None:
    assert store.list_keys() == []
    for name in ("c", "a", "b"):
        store.create_key(name)
    store.rotate_key("b")
    store.rotate_key("b")
    keys = store.list_keys()
    assert [k.name for k in keys] == ["a", "b", "c"]
    assert [[v.version for v in k.versions] for k in keys] == [[1], [1, 2, 3], [1]]
    assert keys == [store.get_key(name) for name in ("a", "b", "c")]


def test_rotate_adds_a_version_and_keeps_old_ones(store: SqliteKeyStore) -> None:
    created = store.create_key("orders")
    first = store.key_material("orders", 1)
    info = store.rotate_key("orders")
    assert info.latest_version == 2 and [v.version for v in info.versions] == [1, 2]
    assert info.updated_at >= created.updated_at and info.created_at == created.created_at
    assert info.min_decryption_version == 1
    second = store.key_material("orders", 2)
    assert second != first and len(second) == 32
    assert store.key_material("orders", 1) == first
    with pytest.raises(KeyNotFoundError):
        store.rotate_key("nothing")


def test_key_material_errors(store: SqliteKeyStore) -> None:
    store.create_key("orders")
    with pytest.raises(KeyVersionNotFoundError, match="no version 2 \\(versions 1 to 1\\)"):
        store.key_material("orders", 2)
    with pytest.raises(KeyVersionNotFoundError):
        store.key_material("orders", 0)
    with pytest.raises(KeyNotFoundError):
        store.key_material("nothing", 1)
    with pytest.raises(BadRequestError, match="must be an integer"):
        store.key_material("orders", True)


def test_update_key(store: SqliteKeyStore) -> None:
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
def test_update_key_min_decryption_version_out_of_range(store: SqliteKeyStore, value: int) -> None:
    store.create_key("orders")
    store.rotate_key("orders")
    store.rotate_key("orders")
    with pytest.raises(BadRequestError, match=f"between 1 and the latest version \\(3\\).*got {value}"):
        store.update_key("orders", min_decryption_version=value, deletion_allowed=True)
    info = store.get_key("orders")
    assert (info.min_decryption_version, info.deletion_allowed) == (1, False)  # nothing half-applied


def test_update_key_type_errors(store: SqliteKeyStore) -> None:
    store.create_key("orders")
    with pytest.raises(BadRequestError, match="must be an integer"):
        store.update_key("orders", min_decryption_version=True)
    with pytest.raises(BadRequestError, match="must be an integer"):
        store.update_key("orders", min_decryption_version="1")  # type: ignore[arg-type]
    with pytest.raises(BadRequestError, match="must be a boolean"):
        store.update_key("orders", deletion_allowed=1)  # type: ignore[arg-type]
    with pytest.raises(KeyNotFoundError):
        store.update_key("nothing", deletion_allowed=True)


def test_delete_key_needs_deletion_allowed(store: SqliteKeyStore) -> None:
    store.create_key("orders")
    store.rotate_key("orders")
    with pytest.raises(DeletionNotAllowedError, match="set deletion_allowed") as caught:
        store.delete_key("orders")
    assert http_status(caught.value) == 409
    assert store.get_key("orders").latest_version == 2
    store.update_key("orders", deletion_allowed=True)
    store.delete_key("orders")
    with pytest.raises(KeyNotFoundError):
        store.get_key("orders")
    with pytest.raises(KeyNotFoundError):
        store.key_material("orders", 1)
    with pytest.raises(KeyNotFoundError):
        store.delete_key("orders")
    with raw_connection(store) as conn:
        assert conn.execute("SELECT COUNT(*) FROM key_versions").fetchone()[0] == 0
    # the name is free again, with fresh material
    store.create_key("orders", deletion_allowed=True)
    assert store.get_key("orders").latest_version == 1


def test_only_wrapped_material_reaches_the_disk(store: SqliteKeyStore) -> None:
    materials = [store.key_material(store.create_key(f"k{i}", "aes128").name, 1) for i in range(3)]
    imported = secrets.token_bytes(32)
    store.import_key("imp", imported)
    store.rotate_key("imp")
    materials += [imported, store.key_material("imp", 2)]
    with raw_connection(store) as conn:
        conn.execute("PRAGMA wal_checkpoint(FULL)")
        wrapped = [row[0] for row in conn.execute("SELECT wrapped FROM key_versions")]
    assert len(wrapped) == 5
    on_disk = b"".join(
        path.read_bytes() for path in store.path.parent.iterdir() if path.name.startswith("keystore.db")
    )
    for material in materials:
        assert material not in on_disk
        assert all(material not in blob for blob in wrapped)


# -- tokens ------------------------------------------------------------------------------------------------


def test_token_round_trip(store: SqliteKeyStore) -> None:
    record = token()
    store.create_token(record)
    assert store.get_token("tok1") == record
    assert store.count_tokens() == 1


def test_token_conflict_and_not_found(store: SqliteKeyStore) -> None:
    store.create_token(token())
    with pytest.raises(ConflictError, match="'tok1' already exists"):
        store.create_token(token())
    with pytest.raises(TokenNotFoundError) as caught:
        store.get_token("other")
    assert http_status(caught.value) == 404
    with pytest.raises(TokenNotFoundError):
        store.delete_token("other")


def test_list_and_delete_tokens(store: SqliteKeyStore) -> None:
    base = datetime(2026, 1, 1, tzinfo=UTC)
    records = [token(f"t{i}", created_at=base + timedelta(minutes=m)) for i, m in enumerate((5, 1, 3))]
    for record in records:
        store.create_token(record)
    assert [r.token_id for r in store.list_tokens()] == ["t1", "t2", "t0"]
    store.delete_token("t2")
    assert [r.token_id for r in store.list_tokens()] == ["t1", "t0"]
    assert store.count_tokens() == 2
    with pytest.raises(TokenNotFoundError):
        store.get_token("t2")


def test_naive_token_time_is_taken_as_utc(store: SqliteKeyStore) -> None:
    store.create_token(token(created_at=datetime(2026, 5, 6, 7, 8, 9)))
    assert store.get_token("tok1").created_at == datetime(2026, 5, 6, 7, 8, 9, tzinfo=UTC)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"token_id": "bad id"}, "invalid token id"),
        ({"secret_hash": b""}, "secret_hash"),
        ({"secret_hash": "abc"}, "secret_hash"),
        ({"scopes": "admin"}, "scopes must be a tuple"),
        ({"scopes": ("admin", 1)}, "scopes must contain only strings"),
        ({"key_patterns": None}, "key_patterns must be a tuple"),
        ({"description": 5}, "description must be a string"),
        ({"created_at": "2026-01-01"}, "created_at must be a datetime"),
    ],
)
def test_token_validation(store: SqliteKeyStore, changes: dict[str, object], match: str) -> None:
    with pytest.raises(BadRequestError, match=match):
        store.create_token(token(**changes))
    assert store.count_tokens() == 0


def test_only_the_given_hash_is_stored(store: SqliteKeyStore) -> None:
    record = token()
    store.create_token(record)
    with raw_connection(store) as conn:
        assert conn.execute("SELECT secret_hash FROM tokens").fetchone()[0] == record.secret_hash


# -- persistence, master key, schema -----------------------------------------------------------------------


def test_everything_persists_across_reopen(data_dir: Path, master_key: bytes) -> None:
    store = open_keystore(data_dir, master_key)
    store.create_key("orders", "aes128", 4096, deletion_allowed=True)
    store.rotate_key("orders")
    store.update_key("orders", min_decryption_version=2)
    store.import_key("imp", bytes(range(24)))
    store.create_token(token())
    keys, tokens = store.list_keys(), store.list_tokens()
    materials = [store.key_material("orders", 1), store.key_material("orders", 2)]
    store.close()

    with contextlib.closing(open_keystore(data_dir, master_key)) as reopened:
        assert reopened.list_keys() == keys
        assert reopened.list_tokens() == tokens
        assert [reopened.key_material("orders", v) for v in (1, 2)] == materials
        assert reopened.key_material("imp", 1) == bytes(range(24))


def test_wrong_master_key_is_refused_at_open(data_dir: Path, master_key: bytes) -> None:
    store = open_keystore(data_dir, master_key)
    store.create_key("orders")
    store.close()
    other = secrets.token_bytes(32)
    with pytest.raises(MasterKeyError, match="does not match keystore") as caught:
        open_keystore(data_dir, other)
    message = str(caught.value)
    assert master_key.hex() not in message and other.hex() not in message and "Restore" in message
    assert caught.value.__context__ is None and caught.value.__cause__ is None
    with pytest.raises(MasterKeyError, match="32 bytes long"):
        open_keystore(data_dir, master_key[:16])


def test_rows_moved_between_keys_do_not_unwrap(store: SqliteKeyStore) -> None:
    store.create_key("a")
    store.create_key("b")
    with raw_connection(store) as conn:
        conn.execute(
            "UPDATE key_versions SET wrapped = (SELECT wrapped FROM key_versions WHERE key_name = 'b') "
            "WHERE key_name = 'a'"
        )
    with pytest.raises(KeyUnwrapError, match="version 1 of key 'a'") as caught:
        store.key_material("a", 1)
    assert http_status(caught.value) == 503
    assert len(store.key_material("b", 1)) == 32


def test_wal_mode_and_pragmas(store: SqliteKeyStore) -> None:
    store.create_key("orders")
    with raw_connection(store) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.path.with_name("keystore.db-wal").exists()


def test_file_permissions(store: SqliteKeyStore, data_dir: Path) -> None:
    store.create_key("orders")
    assert stat.S_IMODE(os.stat(data_dir).st_mode) == 0o700
    for name in ("keystore.db", "keystore.db-wal", "keystore.db-shm"):
        assert stat.S_IMODE(os.stat(data_dir / name).st_mode) == 0o600, name


def test_open_database_file_is_tightened(data_dir: Path, master_key: bytes) -> None:
    data_dir.mkdir(mode=0o700)
    (data_dir / "keystore.db").touch()
    os.chmod(data_dir / "keystore.db", 0o644)
    open_keystore(data_dir, master_key).close()
    assert stat.S_IMODE(os.stat(data_dir / "keystore.db").st_mode) == 0o600


def test_schema_version_is_recorded(store: SqliteKeyStore) -> None:
    assert SCHEMA_VERSION == MIGRATIONS[-1].version == 8
    assert store.schema_version() == SCHEMA_VERSION
    with raw_connection(store) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        rows = conn.execute("SELECT version, description FROM schema_version").fetchall()
    assert [row[0] for row in rows] == [1, 2, 3, 4, 5, 6, 7, 8]


def test_reopen_does_not_migrate_again(data_dir: Path, master_key: bytes) -> None:
    open_keystore(data_dir, master_key).close()
    with contextlib.closing(open_keystore(data_dir, master_key)) as store, raw_connection(store) as conn:
        assert conn.execute("SELECT COUNT(*) FROM schema_version").fetchone()[0] == 8


def test_migration_3_gives_existing_keys_the_ctr_hmac_scheme(data_dir: Path, master_key: bytes) -> None:
    path = data_dir / "keystore.db"
    data_dir.mkdir(mode=0o700)
    with contextlib.closing(SqliteKeyStore(path, master_key, migrations=MIGRATIONS[:2])) as old:
        assert old.schema_version() == 2
        with raw_connection(old) as conn:  # version 2 has no scheme column: insert as that release did
            now = "2026-01-01T00:00:00.000000+00:00"
            conn.execute(
                "INSERT INTO keys (name, key_type, segment_size, deletion_allowed, min_decryption_version, "
                "latest_version, imported, created_at, updated_at) "
                "VALUES ('old', 'aes128', 4096, 0, 1, 1, 0, ?, ?)",
                (now, now),
            )
            conn.execute(
                "INSERT INTO key_versions (key_name, version, wrapped, created_at) "
                "VALUES ('old', 1, x'00', ?)",
                (now,),
            )
    with contextlib.closing(open_keystore(data_dir, master_key)) as store:
        assert store.schema_version() == SCHEMA_VERSION
        assert store.get_key("old").scheme == "ctr-hmac"
        assert store.create_key("new", scheme="gcm").scheme == "gcm"
        assert [info.scheme for info in store.list_keys()] == ["gcm", "ctr-hmac"]
        with raw_connection(store) as conn, pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            conn.execute("UPDATE keys SET scheme = 'rot13' WHERE name = 'old'")


def insert_old_key(store: SqliteKeyStore, name: str) -> None:
    """Store key ``name`` (version 1) and its change row as a release before schema version 5 did."""
    now = "2026-01-01T00:00:00.000000+00:00"
    with raw_connection(store) as conn:
        conn.execute(
            "INSERT INTO keys (name, key_type, segment_size, deletion_allowed, min_decryption_version, "
            "latest_version, imported, created_at, updated_at) VALUES (?, 'aes128', 4096, 0, 1, 1, 0, ?, ?)",
            (name, now, now),
        )
        conn.execute(
            "INSERT INTO key_versions (key_name, version, wrapped, created_at) VALUES (?, 1, x'00', ?)",
            (name, now),
        )
        conn.execute("INSERT INTO key_changes (kind, key_name, at) VALUES ('key_created', ?, ?)", (name, now))


def test_migration_4_adds_token_lifetimes_and_keeps_the_change_log(data_dir: Path, master_key: bytes) -> None:
    path = data_dir / "keystore.db"
    data_dir.mkdir(mode=0o700)
    with contextlib.closing(SqliteKeyStore(path, master_key, migrations=MIGRATIONS[:3])) as old:
        insert_old_key(old, "k1")
        with raw_connection(old) as conn:  # version 3 has no lifetime columns: insert as that release did
            conn.execute(
                "INSERT INTO tokens (token_id, secret_hash, scopes, key_patterns, description, created_at) "
                "VALUES ('old', x'00', '[\"admin\"]', '[\"*\"]', '', '2026-01-01T00:00:00.000000+00:00')"
            )
            conn.execute(
                "INSERT INTO key_changes (kind, token_id, at) "
                "VALUES ('token_created', 'old', '2026-01-01T00:00:00.000000+00:00')"
            )
        insert_old_key(old, "k2")
        insert_old_key(old, "k3")
        insert_old_key(old, "k4")  # seq 5
        assert old.trim_changes(0) == 5  # the counter (5) is now above every row: none is left
    with contextlib.closing(open_keystore(data_dir, master_key)) as store:
        assert store.schema_version() == SCHEMA_VERSION
        record = store.get_token("old")
        assert (record.ttl_seconds, record.expires_at, record.max_expires_at) == (None, None, None)
        assert store.changes_since(5) == ([], 5, False)  # the number a replica remembered is still valid
        store.create_key("k5")
        assert [(c.seq, c.kind) for c in store.changes_since(5).changes] == [(6, "key_created")]
        now = datetime.now(UTC)
        store.create_token(
            TokenRecord(
                "new",
                b"h" * 32,
                ("encrypt",),
                ("*",),
                "",
                now,
                60,
                now + timedelta(seconds=60),
                now + timedelta(seconds=120),
            )
        )
        store.renew_token("new", now + timedelta(seconds=90))
        assert [c.kind for c in store.changes_since(6).changes] == ["token_created", "token_renewed"]
        with raw_connection(store) as conn, pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            conn.execute("INSERT INTO key_changes (kind, token_id, at) VALUES ('token_melted', 'x', 'now')")


def test_migration_5_gives_existing_keys_no_automatic_rotation(data_dir: Path, master_key: bytes) -> None:
    path = data_dir / "keystore.db"
    data_dir.mkdir(mode=0o700)
    with contextlib.closing(SqliteKeyStore(path, master_key, migrations=MIGRATIONS[:4])) as old:
        insert_old_key(old, "old")  # version 4 has no auto_rotate_period column
        with raw_connection(old) as conn:
            assert "auto_rotate_period" not in [row[1] for row in conn.execute("PRAGMA table_info(keys)")]
    with contextlib.closing(SqliteKeyStore(path, master_key, auto_rotate_min_period=1)) as store:
        assert store.schema_version() == SCHEMA_VERSION == 8
        assert store.get_key("old").auto_rotate_period == 0
        assert store.due_for_rotation() == []
        assert store.update_key("old", auto_rotate_period="2s").auto_rotate_period == 2
        assert store.due_for_rotation() == ["old"]  # its version 1 dates from 2026-01-01
        assert store.create_key("new", auto_rotate_period=3600).auto_rotate_period == 3600
        assert [(info.name, info.auto_rotate_period) for info in store.list_keys()] == [
            ("new", 3600),
            ("old", 2),
        ]
        with raw_connection(store) as conn, pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            conn.execute("UPDATE keys SET auto_rotate_period = -1 WHERE name = 'old'")


def test_a_new_migration_is_applied_once_on_open(data_dir: Path, master_key: bytes) -> None:
    store = open_keystore(data_dir, master_key)
    store.create_key("orders")
    store.close()
    step = Migration(9, "key labels", ("ALTER TABLE keys ADD COLUMN label TEXT NOT NULL DEFAULT ''",))
    path = data_dir / "keystore.db"
    for _ in range(2):
        with contextlib.closing(SqliteKeyStore(path, master_key, migrations=(*MIGRATIONS, step))) as upgraded:
            assert upgraded.schema_version() == 9
            assert upgraded.get_key("orders").latest_version == 1
            with raw_connection(upgraded) as conn:
                assert [r[0] for r in conn.execute("SELECT version FROM schema_version")] == [
                    1,
                    2,
                    3,
                    4,
                    5,
                    6,
                    7,
                    8,
                    9,
                ]
                assert conn.execute("SELECT label FROM keys").fetchone()[0] == ""
    # ...and the release that only knows version 8 refuses the upgraded file instead of misreading it
    with pytest.raises(
        KeystoreSchemaError, match="schema version 9, newer than this release supports \\(8\\)"
    ):
        open_keystore(data_dir, master_key)


def test_failed_migration_leaves_the_database_unchanged(data_dir: Path, master_key: bytes) -> None:
    open_keystore(data_dir, master_key).close()
    broken = Migration(9, "broken", ("ALTER TABLE keys ADD COLUMN x TEXT", "THIS IS NOT SQL"))
    with pytest.raises(sqlite3.OperationalError):
        SqliteKeyStore(data_dir / "keystore.db", master_key, migrations=(*MIGRATIONS, broken))
    with contextlib.closing(open_keystore(data_dir, master_key)) as store, raw_connection(store) as conn:
        assert store.schema_version() == 8
        assert "x" not in [row[1] for row in conn.execute("PRAGMA table_info(keys)")]


def test_closed_store_refuses_calls(data_dir: Path, master_key: bytes) -> None:
    store = open_keystore(data_dir, master_key)
    store.create_key("orders")
    store.close()
    store.close()  # idempotent
    with pytest.raises(ServiceUnavailableError, match="closed"):
        store.get_key("orders")
    with pytest.raises(ServiceUnavailableError, match="closed"):
        store.create_key("other")


def test_write_lock_held_too_long_gives_503(data_dir: Path, master_key: bytes) -> None:
    open_keystore(data_dir, master_key).close()
    store = SqliteKeyStore(data_dir / "keystore.db", master_key, busy_timeout=0.2)
    blocker = sqlite3.connect(store.path, isolation_level=None)
    try:
        store.create_key("orders")
        blocker.execute("BEGIN IMMEDIATE")
        with pytest.raises(ServiceUnavailableError, match="keystore database error: database is locked"):
            store.rotate_key("orders")
        assert store.get_key("orders").latest_version == 1  # WAL: readers are not blocked by the writer
        blocker.execute("ROLLBACK")
        assert store.rotate_key("orders").latest_version == 2
    finally:
        blocker.close()
        store.close()


def test_unavailable_errors_do_not_name_the_file(
    data_dir: Path, master_key: bytes, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Security review L5: 503 bodies carry the message; the keystore path belongs in the server log only."""
    store = open_keystore(data_dir, master_key)
    try:

        def refuse(self: SqliteKeyStore, kind: str = "full") -> sqlite3.Connection:
            raise sqlite3.OperationalError("unable to open database file")

        monkeypatch.setattr(SqliteKeyStore, "_new_connection", refuse)
        for pool in store._idle.values():  # force a new connection
            pool.clear()
        with pytest.raises(ServiceUnavailableError) as info:
            store.get_key("orders")
        assert str(data_dir) not in info.value.message and "keystore.db" not in info.value.message
        assert str(data_dir) in caplog.text
    finally:
        monkeypatch.undo()
        store.close()
    bad = data_dir / "not-a-dir"
    bad.write_bytes(b"")
    with pytest.raises(ServiceUnavailableError) as opened:
        SqliteKeyStore(bad / "keystore.db", master_key)
    assert str(bad) not in opened.value.message


def test_migration_6_starts_at_generation_1_and_keeps_the_change_log(
    data_dir: Path, master_key: bytes
) -> None:
    path = data_dir / "keystore.db"
    data_dir.mkdir(mode=0o700)
    material = secrets.token_bytes(32)
    with contextlib.closing(SqliteKeyStore(path, master_key, migrations=MIGRATIONS[:5])) as old:
        now = "2026-01-01T00:00:00.000000+00:00"
        with raw_connection(old) as conn:  # as a release before schema version 6 stored a key
            conn.execute(
                "INSERT INTO keys (name, key_type, segment_size, deletion_allowed, min_decryption_version, "
                "latest_version, imported, created_at, updated_at) "
                "VALUES ('old', 'aes256', 4096, 0, 1, 1, 1, ?, ?)",
                (now, now),
            )
            conn.execute(
                "INSERT INTO key_versions (key_name, version, wrapped, created_at) VALUES ('old', 1, ?, ?)",
                (wrap_key_material(master_key, "old", 1, material), now),
            )
            for _ in range(3):
                conn.execute(
                    "INSERT INTO key_changes (kind, key_name, at) VALUES ('key_created', 'old', ?)", (now,)
                )
            conn.execute("DELETE FROM key_changes WHERE seq = 3")  # the counter (3) is above every row now
    with contextlib.closing(SqliteKeyStore(path, master_key)) as store:
        assert store.schema_version() == SCHEMA_VERSION == 8
        status = store.master_rotation_status()
        assert (status.generation, status.rotating, status.rewrapped) == (1, False, 0)
        assert [change.seq for change in store.changes_since(0).changes] == [1, 2]
        rotation = MasterRotation(store)
        rotation.begin()
        rotation.run()
        assert [(c.seq, c.kind, c.key_name) for c in store.changes_since(2).changes] == [
            (4, "master_key_rotated", None),  # numbers go on above the old counter
            (5, "master_key_rotated", None),
        ]
        assert bytes(store.key_material("old", 1)) == material
        with raw_connection(store) as conn, pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            conn.execute("INSERT INTO key_changes (kind, at) VALUES ('key_created', 'x')")


def test_migration_7_keeps_tokens_and_the_change_log_and_adds_roles(
    data_dir: Path, master_key: bytes
) -> None:
    path = data_dir / "keystore.db"
    data_dir.mkdir(mode=0o700)
    with contextlib.closing(SqliteKeyStore(path, master_key, migrations=MIGRATIONS[:6])) as old:
        with raw_connection(old) as conn:  # as a release at schema version 6 stored a token
            conn.execute(
                "INSERT INTO tokens (token_id, secret_hash, scopes, key_patterns, description, created_at) "
                "VALUES ('old1', x'00', '[\"admin\"]', '[\"*\"]', '', '2026-01-01T00:00:00+00:00')"
            )
            conn.execute(
                "INSERT INTO key_changes (kind, token_id, at) "
                "VALUES ('token_created', 'old1', '2026-01-01T00:00:00+00:00')"
            )
            with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
                conn.execute("INSERT INTO key_changes (kind, at) VALUES ('auth_config_written', 'x')")
    with contextlib.closing(SqliteKeyStore(path, master_key)) as store:
        assert store.schema_version() == SCHEMA_VERSION == 8
        assert store.get_token("old1").metadata == {}
        assert [(c.seq, c.kind, c.token_id) for c in store.changes_since(0).changes] == [
            (1, "token_created", "old1")
        ]
        store.write_auth_config("jwt", {"leeway": 60})
        assert [c.seq for c in store.changes_since(1).changes] == [2]
        with raw_connection(store) as conn, pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            conn.execute("INSERT INTO key_changes (kind, at) VALUES ('role_written', 'x')")  # names nothing


def test_migration_8_keeps_keys_and_versions_and_adds_options_and_siv(
    data_dir: Path, master_key: bytes
) -> None:
    path = data_dir / "keystore.db"
    data_dir.mkdir(mode=0o700)
    with contextlib.closing(SqliteKeyStore(path, master_key, migrations=MIGRATIONS[:7])) as old:
        with raw_connection(old) as conn:  # as a release at schema version 7 stored a key with two versions
            now = "2026-01-01T00:00:00.000000+00:00"
            conn.execute(
                "INSERT INTO keys (name, key_type, segment_size, deletion_allowed, min_decryption_version, "
                "latest_version, imported, created_at, updated_at, scheme, auto_rotate_period) "
                "VALUES ('old', 'aes128', 4096, 1, 2, 2, 0, ?, ?, 'gcm', 7200)",
                (now, now),
            )
            for version in (1, 2):
                blob = wrap_key_material(old.keyring, "old", version, bytes([version]) * 16)
                conn.execute(
                    "INSERT INTO key_versions (key_name, version, wrapped, created_at) "
                    "VALUES ('old', ?, ?, ?)",
                    (version, blob, now),
                )
            with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
                conn.execute(
                    "INSERT INTO keys (name, key_type, segment_size, deletion_allowed, "
                    "min_decryption_version, latest_version, imported, created_at, updated_at) "
                    "VALUES ('siv', 'aes256-siv', 4096, 0, 1, 1, 0, 'x', 'x')"
                )
    with contextlib.closing(SqliteKeyStore(path, master_key)) as store:
        assert store.schema_version() == SCHEMA_VERSION == 8
        info = store.get_key("old")
        assert (info.key_type, info.scheme, info.segment_size, info.auto_rotate_period) == (
            "aes128",
            "gcm",
            4096,
            7200,
        )
        assert (info.deletion_allowed, info.min_decryption_version, [v.version for v in info.versions]) == (
            True,
            2,
            [1, 2],
        )
        assert info.options == KeyOptions()
        assert [store.key_material("old", v) for v in (1, 2)] == [b"\x01" * 16, b"\x02" * 16]
        assert store.create_key("siv", "aes256-siv").key_type == "aes256-siv"
        assert len(store.key_material("siv", 1)) == 64
        with raw_connection(store) as conn:
            conn.execute("PRAGMA foreign_keys = ON")
            # key_versions still refers to keys: deleting a key deletes its versions
            assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
            conn.execute("DELETE FROM keys WHERE name = 'siv'")
            assert conn.execute("SELECT count(*) FROM key_versions WHERE key_name = 'siv'").fetchone()[0] == 0
            with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
                conn.execute("UPDATE keys SET convergent_encryption = 1 WHERE name = 'old'")  # not derived
            with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
                conn.execute("UPDATE keys SET key_type = 'aes512' WHERE name = 'old'")
