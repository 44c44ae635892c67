"""Fixtures for the keystore tests: a fresh data directory, a master key and an open SQLite keystore."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.keystore import SqliteKeyStore, open_keystore


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A data directory that does not exist yet (the code under test creates it)."""
    return tmp_path / "data"


@pytest.fixture
def master_key() -> bytes:
    return secrets.token_bytes(32)


@pytest.fixture
def store(data_dir: Path, master_key: bytes) -> Iterator[SqliteKeyStore]:
    keystore = open_keystore(data_dir, master_key)
    assert isinstance(keystore, SqliteKeyStore)
    yield keystore
    keystore.close()
