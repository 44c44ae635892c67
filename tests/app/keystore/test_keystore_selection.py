"""open_keystore_for: the settings pick the keystore (SQLite unless a database URL is given) and where the
master key comes from (KEYSTREAM_MASTER_KEY, KEYSTREAM_MASTER_KEY_FILE or the generated master.key)."""

from __future__ import annotations

import base64
import os
import secrets
from pathlib import Path

import pytest

from app.core.config import Settings
from app.keystore import (
    KeyStore,
    MasterKeyError,
    SqliteKeyStore,
    check_master_key_source,
    open_keystore_for,
    read_master_key_file,
)
from app.keystore.postgres import PostgresKeyStore


def settings(**fields: object) -> Settings:
    return Settings(_env_file=None, **fields)  # type: ignore[arg-type]


def key_file(path: Path, key: bytes, mode: int = 0o600) -> Path:
    path.write_text(base64.b64encode(key).decode() + "\n")
    os.chmod(path, mode)
    return path


def test_sqlite_is_the_default_with_a_generated_master_key(data_dir: Path) -> None:
    store = open_keystore_for(settings(data_dir=data_dir))
    try:
        assert isinstance(store, SqliteKeyStore) and store.path == data_dir / "keystore.db"
        assert (data_dir / "master.key").exists()
    finally:
        store.close()


def test_sqlite_with_a_master_key_file(data_dir: Path, tmp_path: Path, master_key: bytes) -> None:
    path = key_file(tmp_path / "secret.key", master_key)
    store = open_keystore_for(settings(data_dir=data_dir, master_key_file=path))
    store.create_key("orders")
    store.close()
    assert not (data_dir / "master.key").exists()
    with pytest.raises(MasterKeyError, match="does not match"):  # the file's key is the one in use
        open_keystore_for(settings(data_dir=data_dir))


def test_a_database_url_selects_postgresql(
    pg_url: str, tmp_path: Path, data_dir: Path, master_key: bytes
) -> None:
    opened: list[KeyStore] = []
    try:
        env_key = base64.b64encode(master_key).decode()
        opened.append(open_keystore_for(settings(data_dir=data_dir, database_url=pg_url, master_key=env_key)))
        path = key_file(tmp_path / "secret.key", master_key)
        opened.append(
            open_keystore_for(settings(data_dir=data_dir, database_url=pg_url, master_key_file=path))
        )
        assert all(isinstance(store, PostgresKeyStore) for store in opened)
        opened[0].create_key("orders")
        assert opened[1].key_material("orders", 1) == opened[0].key_material("orders", 1)
        assert not data_dir.exists()  # PostgreSQL needs no data directory
        other = key_file(tmp_path / "other.key", secrets.token_bytes(32))
        with pytest.raises(MasterKeyError, match="does not match"):
            open_keystore_for(settings(data_dir=data_dir, database_url=pg_url, master_key_file=other))
    finally:
        for store in opened:
            store.close()


def test_master_key_source_rule() -> None:
    check_master_key_source(None, None, shared_database=False)
    check_master_key_source("key", None, shared_database=True)
    check_master_key_source(None, Path("k"), shared_database=True)
    with pytest.raises(MasterKeyError, match="must be given"):
        check_master_key_source(" ", None, shared_database=True)
    with pytest.raises(MasterKeyError, match="only one of"):
        check_master_key_source("key", Path("k"), shared_database=False)


def test_a_master_key_file_open_to_others_is_refused(tmp_path: Path, master_key: bytes) -> None:
    path = key_file(tmp_path / "secret.key", master_key, mode=0o644)
    with pytest.raises(MasterKeyError, match="accessible to other users"):
        read_master_key_file(path)
    os.chmod(path, 0o600)
    assert read_master_key_file(path) == master_key
    with pytest.raises(MasterKeyError, match="cannot open"):
        read_master_key_file(tmp_path / "missing.key")
