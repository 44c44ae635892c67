"""The PostgreSQL keystore's schema: versioned migrations applied once under an advisory lock, newer schemas
refused, the master key checked against the database's check value."""

from __future__ import annotations

import secrets
import threading
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from app.keystore import KeyOptions, KeystoreSchemaError, MasterKeyError, Migration, TokenRecord
from app.keystore.generations import MasterRotation
from app.keystore.master import wrap_key_material
from app.keystore.postgres import MIGRATIONS, SCHEMA_VERSION, PostgresKeyStore
from tests.pg_cluster import PgCluster

Raw = psycopg.Connection[tuple[object, ...]]


def versions(raw: Raw) -> list[int]:
    return [int(row[0]) for row in raw.execute("SELECT version FROM schema_version ORDER BY version")]


def test_schema_version_is_recorded(pg_store: PostgresKeyStore, raw: Raw) -> None:
    assert SCHEMA_VERSION == MIGRATIONS[-1].version == 8
    assert pg_store.schema_version() == SCHEMA_VERSION
    assert versions(raw) == [1, 2, 3, 4, 5, 6, 7, 8]
    tables = {
        row[0] for row in raw.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
    }
    assert {"keys", "key_versions", "tokens", "meta", "key_changes", "schema_version"} <= tables


def test_replicas_starting_together_migrate_once(pg_url: str, master_key: bytes, raw: Raw) -> None:
    count = 6
    barrier = threading.Barrier(count)
    stores: list[PostgresKeyStore] = []
    errors: list[BaseException] = []

    def start() -> None:
        try:
            barrier.wait(timeout=10)
            stores.append(PostgresKeyStore(pg_url, master_key, pool_size=2))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    try:
        assert errors == [] and len(stores) == count
        assert versions(raw) == [1, 2, 3, 4, 5, 6, 7, 8]
        assert raw.execute("SELECT count(*) FROM meta").fetchone() == (1,)
        stores[0].create_key("orders")
        assert stores[-1].get_key("orders").latest_version == 1
    finally:
        for store in stores:
            store.close()


def test_a_whole_new_database_works_too(pg_cluster: PgCluster, master_key: bytes) -> None:
    url = pg_cluster.new_database()
    store = PostgresKeyStore(url, master_key)
    try:
        assert store.create_key("orders").latest_version == 1
        assert store.schema_version() == SCHEMA_VERSION
    finally:
        store.close()


def test_a_new_migration_is_applied_once_and_an_old_release_refuses_it(
    pg_url: str, master_key: bytes, raw: Raw
) -> None:
    PostgresKeyStore(pg_url, master_key).close()
    step = Migration(9, "key labels", ("ALTER TABLE keys ADD COLUMN label text NOT NULL DEFAULT ''",))
    for _ in range(2):
        upgraded = PostgresKeyStore(pg_url, master_key, migrations=(*MIGRATIONS, step))
        try:
            assert upgraded.schema_version() == 9
            upgraded.create_key(f"k{secrets.token_hex(4)}")
        finally:
            upgraded.close()
    assert versions(raw) == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert {row[0] for row in raw.execute("SELECT label FROM keys")} == {""}
    with pytest.raises(
        KeystoreSchemaError, match="schema version 9, newer than this release supports \\(8\\)"
    ) as caught:
        PostgresKeyStore(pg_url, master_key)
    assert "upgrade Keystream" in str(caught.value) and "database 'postgres' on 127.0.0.1:" in str(
        caught.value
    )


def test_migration_3_gives_existing_keys_the_ctr_hmac_scheme(
    pg_cluster: PgCluster, master_key: bytes
) -> None:
    url = pg_cluster.new_database()
    PostgresKeyStore(url, master_key, migrations=MIGRATIONS[:2]).close()
    with psycopg.connect(url, autocommit=True) as conn:  # version 2 has no scheme column: as that release did
        conn.execute(
            "INSERT INTO keys (name, key_type, segment_size, deletion_allowed, min_decryption_version, "
            "latest_version, imported, created_at, updated_at) "
            "VALUES ('old', 'aes128', 4096, false, 1, 1, false, now(), now())"
        )
        conn.execute(
            "INSERT INTO key_versions (key_name, version, wrapped, created_at) "
            "VALUES ('old', 1, '\\x00', now())"
        )
    store = PostgresKeyStore(url, master_key)
    try:
        assert store.schema_version() == SCHEMA_VERSION
        assert store.get_key("old").scheme == "ctr-hmac"
        assert store.create_key("new", scheme="gcm").scheme == "gcm"
        assert [info.scheme for info in store.list_keys()] == ["gcm", "ctr-hmac"]
        with psycopg.connect(url, autocommit=True) as conn, pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("UPDATE keys SET scheme = 'rot13' WHERE name = 'old'")
    finally:
        store.close()


def test_migration_4_adds_token_lifetimes_and_the_renewal_change(
    pg_cluster: PgCluster, master_key: bytes
) -> None:
    url = pg_cluster.new_database()
    PostgresKeyStore(url, master_key, migrations=MIGRATIONS[:3]).close()
    with psycopg.connect(url, autocommit=True) as conn:  # version 3 has no lifetime columns
        conn.execute(
            "INSERT INTO tokens (token_id, secret_hash, scopes, key_patterns, description, created_at) "
            "VALUES ('old', '\\x00', '{admin}', '{*}', '', now())"
        )
        conn.execute("INSERT INTO key_changes (kind, token_id, at) VALUES ('token_created', 'old', now())")
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("INSERT INTO key_changes (kind, token_id, at) VALUES ('token_renewed', 'x', now())")
    store = PostgresKeyStore(url, master_key)
    try:
        assert store.schema_version() == SCHEMA_VERSION
        record = store.get_token("old")
        assert (record.ttl_seconds, record.expires_at, record.max_expires_at) == (None, None, None)
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
        assert store.renew_token("new", now + timedelta(seconds=90)).expires_at == now + timedelta(seconds=90)
        assert [c.kind for c in store.changes_since(0).changes] == [
            "token_created",
            "token_created",
            "token_renewed",
        ]
        with psycopg.connect(url, autocommit=True) as conn, pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("INSERT INTO key_changes (kind, token_id, at) VALUES ('token_melted', 'x', now())")
    finally:
        store.close()


def test_migration_5_gives_existing_keys_no_automatic_rotation(
    pg_cluster: PgCluster, master_key: bytes
) -> None:
    url = pg_cluster.new_database()
    PostgresKeyStore(url, master_key, migrations=MIGRATIONS[:4]).close()
    with psycopg.connect(url, autocommit=True) as conn:  # version 4 has no auto_rotate_period: as it did
        conn.execute(
            "INSERT INTO keys (name, key_type, segment_size, deletion_allowed, min_decryption_version, "
            "latest_version, imported, created_at, updated_at) "
            "VALUES ('old', 'aes128', 4096, false, 1, 1, false, '2026-01-01Z', '2026-01-01Z')"
        )
        conn.execute(
            "INSERT INTO key_versions (key_name, version, wrapped, created_at) "
            "VALUES ('old', 1, '\\x00', '2026-01-01Z')"
        )
        columns = [
            r[0]
            for r in conn.execute(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_name = 'keys' AND table_schema = current_schema()"
            )
        ]
        assert "auto_rotate_period" not in columns
    store = PostgresKeyStore(url, master_key, auto_rotate_min_period=1)
    try:
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
        with psycopg.connect(url, autocommit=True) as conn, pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("UPDATE keys SET auto_rotate_period = -1 WHERE name = 'old'")
    finally:
        store.close()


def test_failed_migration_leaves_the_database_unchanged(pg_url: str, master_key: bytes, raw: Raw) -> None:
    PostgresKeyStore(pg_url, master_key).close()
    broken = Migration(9, "broken", ("ALTER TABLE keys ADD COLUMN x text", "THIS IS NOT SQL"))
    with pytest.raises(psycopg.errors.SyntaxError):
        PostgresKeyStore(pg_url, master_key, migrations=(*MIGRATIONS, broken))
    assert versions(raw) == [1, 2, 3, 4, 5, 6, 7, 8]
    columns = {
        row[0]
        for row in raw.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_name = 'keys' AND table_schema = current_schema()"
        )
    }
    assert "x" not in columns and "name" in columns


def test_a_replica_with_another_master_key_refuses_to_start(pg_url: str, master_key: bytes, raw: Raw) -> None:
    store = PostgresKeyStore(pg_url, master_key)
    store.create_key("orders")
    store.close()
    before = raw.execute("SELECT value FROM meta").fetchall()
    with pytest.raises(MasterKeyError, match="KEYSTREAM_MASTER_KEY_FILE") as caught:
        PostgresKeyStore(pg_url, secrets.token_bytes(32))
    assert "database 'postgres' on 127.0.0.1:" in str(caught.value)
    assert raw.execute("SELECT value FROM meta").fetchall() == before  # the check value was not replaced


def test_migration_6_starts_at_generation_1_and_lets_the_log_record_rotations(
    pg_cluster: PgCluster, master_key: bytes
) -> None:
    url = pg_cluster.new_database()
    PostgresKeyStore(url, master_key, migrations=MIGRATIONS[:5]).close()
    material = secrets.token_bytes(32)
    with psycopg.connect(url, autocommit=True) as conn:  # as a release before schema version 6 stored a key
        conn.execute(
            "INSERT INTO keys (name, key_type, segment_size, deletion_allowed, min_decryption_version, "
            "latest_version, imported, created_at, updated_at) "
            "VALUES ('old', 'aes256', 4096, false, 1, 1, true, now(), now())"
        )
        conn.execute(
            "INSERT INTO key_versions (key_name, version, wrapped, created_at) VALUES ('old', 1, %s, now())",
            (wrap_key_material(master_key, "old", 1, material),),
        )
        with pytest.raises(psycopg.errors.CheckViolation):  # version 5 has no master_key_rotated kind
            conn.execute("INSERT INTO key_changes (kind, at) VALUES ('master_key_rotated', now())")
    store = PostgresKeyStore(url, master_key)
    try:
        assert store.schema_version() == SCHEMA_VERSION == 8
        status = store.master_rotation_status()
        assert (status.generation, status.rotating, status.rewrapped) == (1, False, 0)
        start = store.changes_since(1 << 62).latest
        rotation = MasterRotation(store)
        rotation.begin()
        rotation.run()
        changes = store.changes_since(start).changes
        assert [(c.kind, c.key_name, c.token_id) for c in changes] == [("master_key_rotated", None, None)] * 2
        assert bytes(store.key_material("old", 1)) == material
        with psycopg.connect(url, autocommit=True) as conn, pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("INSERT INTO key_changes (kind, at) VALUES ('key_created', now())")  # names nothing
    finally:
        store.close()


def test_migration_7_keeps_tokens_and_the_change_log_and_adds_roles(
    pg_cluster: PgCluster, master_key: bytes
) -> None:
    url = pg_cluster.new_database()
    PostgresKeyStore(url, master_key, migrations=MIGRATIONS[:6]).close()
    with psycopg.connect(url, autocommit=True) as conn:  # as a release at schema version 6 stored a token
        conn.execute(
            "INSERT INTO tokens (token_id, secret_hash, scopes, key_patterns, description, created_at) "
            "VALUES ('old1', '\\x00', '{admin}', '{*}', '', now())"
        )
        conn.execute("INSERT INTO key_changes (kind, token_id, at) VALUES ('token_created', 'old1', now())")
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("INSERT INTO key_changes (kind, at) VALUES ('auth_config_written', now())")
    store = PostgresKeyStore(url, master_key)
    try:
        assert store.schema_version() == SCHEMA_VERSION == 8
        assert store.get_token("old1").metadata == {}
        assert [(c.seq, c.kind, c.token_id) for c in store.changes_since(0).changes] == [
            (1, "token_created", "old1")
        ]
        store.write_auth_config("jwt", {"leeway": 60})
        assert [c.kind for c in store.changes_since(1).changes] == ["auth_config_written"]
        with psycopg.connect(url, autocommit=True) as conn, pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("INSERT INTO key_changes (kind, at) VALUES ('role_written', now())")  # names nothing
    finally:
        store.close()


def test_migration_8_keeps_keys_and_adds_options_and_siv(pg_cluster: PgCluster, master_key: bytes) -> None:
    url = pg_cluster.new_database()
    old = PostgresKeyStore(url, master_key, migrations=MIGRATIONS[:7])
    blobs = [wrap_key_material(old.keyring, "old", version, bytes([version]) * 16) for version in (1, 2)]
    old.close()
    with psycopg.connect(url, autocommit=True) as conn:  # as a release at schema version 7 stored a key
        conn.execute(
            "INSERT INTO keys (name, key_type, segment_size, deletion_allowed, min_decryption_version, "
            "latest_version, imported, created_at, updated_at, scheme, auto_rotate_period) "
            "VALUES ('old', 'aes128', 4096, true, 2, 2, false, '2026-01-01Z', '2026-01-01Z', 'gcm', 7200)"
        )
        for version, blob in zip((1, 2), blobs, strict=True):
            conn.execute(
                "INSERT INTO key_versions (key_name, version, wrapped, created_at) "
                "VALUES ('old', %s, %s, '2026-01-01Z')",
                (version, blob),
            )
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute(
                "INSERT INTO keys (name, key_type, segment_size, deletion_allowed, min_decryption_version, "
                "latest_version, imported, created_at, updated_at) "
                "VALUES ('siv', 'aes256-siv', 4096, false, 1, 1, false, now(), now())"
            )
    store = PostgresKeyStore(url, master_key)
    try:
        assert store.schema_version() == SCHEMA_VERSION == 8
        info = store.get_key("old")
        assert (info.key_type, info.scheme, info.auto_rotate_period, info.min_decryption_version) == (
            "aes128",
            "gcm",
            7200,
            2,
        )
        assert info.options == KeyOptions()
        assert [store.key_material("old", v) for v in (1, 2)] == [b"\x01" * 16, b"\x02" * 16]
        assert store.create_key("siv", "aes256-siv").key_type == "aes256-siv"
        assert len(store.key_material("siv", 1)) == 64
        with psycopg.connect(url, autocommit=True) as conn:
            with pytest.raises(psycopg.errors.CheckViolation):
                conn.execute("UPDATE keys SET convergent_encryption = true WHERE name = 'old'")  # not derived
            with pytest.raises(psycopg.errors.CheckViolation):
                conn.execute("UPDATE keys SET key_type = 'aes512' WHERE name = 'old'")
    finally:
        store.close()
