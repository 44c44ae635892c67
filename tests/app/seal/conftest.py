"""A fresh SoftHSM2 token per test (:mod:`tests.softhsm`), with ``SOFTHSM2_CONF`` set for this process; the
keystore a seal test runs on (``backing``: SQLite, then PostgreSQL) and how to read all its material back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.keystore import KeyStore, SqliteKeyStore
from app.keystore.postgres import PostgresKeyStore
from app.seal import Seal
from tests.softhsm import SoftHsmToken, make_token, reload_module


@pytest.fixture
def token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SoftHsmToken:
    """An initialised, empty token; fails (never skips) when SoftHSM2 is missing."""
    made = make_token(tmp_path / "hsm")
    monkeypatch.setenv("SOFTHSM2_CONF", str(made.conf))
    reload_module()
    return made


@pytest.fixture(params=["sqlite", "postgres"])
def backing(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str | None]:
    """``None`` for SQLite in ``tmp_path/data``, else a PostgreSQL URL of a fresh schema."""
    yield None if request.param == "sqlite" else request.getfixturevalue("pg_url")


def open_store(seal: Seal, data: Path, url: str | None) -> KeyStore:
    if url is not None:
        return PostgresKeyStore(url, seal, pool_size=2)
    data.mkdir(mode=0o700, exist_ok=True)
    return SqliteKeyStore(data / "keystore.db", seal)


def materials(store: KeyStore) -> dict[tuple[str, int], bytes]:
    return {
        (key.name, version.version): store.key_material(key.name, version.version)
        for key in store.list_keys()
        for version in key.versions
    }
