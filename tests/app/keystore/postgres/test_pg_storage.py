"""What the PostgreSQL keystore puts in the database (wrapped material, token hashes), where its URL never
goes (errors, logs, reprs), fork safety, and that the SQLite path never imports psycopg."""

from __future__ import annotations

import logging
import os
import secrets
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from app.keystore import KeystoreUnavailableError, KeyUnwrapError, TokenRecord
from app.keystore.postgres import PostgresKeyStore
from keystream_server import REPO, free_port
from tests.pg_cluster import SUPERUSER, PgCluster

Raw = psycopg.Connection[tuple[object, ...]]
PASSWORD = "s3cret-Pa55word"  # the cluster trusts local users: a password in the URL is accepted and ignored


def test_only_wrapped_material_is_stored(pg_store: PostgresKeyStore, raw: Raw) -> None:
    materials = [pg_store.key_material(pg_store.create_key(f"k{i}", "aes128").name, 1) for i in range(3)]
    imported = secrets.token_bytes(32)
    pg_store.import_key("imp", imported)
    pg_store.rotate_key("imp")
    materials += [imported, pg_store.key_material("imp", 2)]
    wrapped = [bytes(row[0]) for row in raw.execute("SELECT wrapped FROM key_versions")]  # type: ignore[arg-type]
    assert len(wrapped) == 5
    for material in materials:
        assert all(material not in blob for blob in wrapped)
    assert all(
        blob[0] == 1 and len(blob) == 1 + 12 + len(material) + 16
        for blob, material in zip(sorted(wrapped, key=len), sorted(materials, key=len), strict=True)
    )


def test_only_the_given_hash_is_stored(pg_store: PostgresKeyStore, raw: Raw) -> None:
    record = TokenRecord("tok1", secrets.token_bytes(32), ("admin",), ("*",), "root", datetime.now(UTC))
    pg_store.create_token(record)
    assert raw.execute("SELECT secret_hash FROM tokens").fetchone() == (record.secret_hash,)


def test_rows_moved_between_keys_do_not_unwrap(pg_store: PostgresKeyStore, raw: Raw) -> None:
    pg_store.create_key("a")
    pg_store.create_key("b")
    raw.execute(
        "UPDATE key_versions SET wrapped = (SELECT wrapped FROM key_versions WHERE key_name = 'b') "
        "WHERE key_name = 'a'"
    )
    with pytest.raises(KeyUnwrapError, match="version 1 of key 'a'") as caught:
        pg_store.key_material("a", 1)
    assert caught.value.code == "key_unwrap_failed"
    assert len(pg_store.key_material("b", 1)) == 32


def test_the_url_and_its_password_stay_out_of_reprs_errors_and_logs(
    pg_cluster: PgCluster, master_key: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    url = f"postgresql://{SUPERUSER}:{PASSWORD}@127.0.0.1:{pg_cluster.port}/postgres?application_name=ks"
    store = PostgresKeyStore(url, master_key)
    try:
        store.create_key("orders")
        for text in (repr(store), str(store), repr(store.__dict__)):
            assert PASSWORD not in text and url not in text
        assert repr(store) == f"<PostgresKeyStore database 'postgres' on 127.0.0.1:{pg_cluster.port}>"
    finally:
        store.close()
    nowhere = f"postgresql://{SUPERUSER}:{PASSWORD}@127.0.0.1:{free_port()}/postgres?password={PASSWORD}"
    with pytest.raises(KeystoreUnavailableError, match="cannot reach the database server") as caught:
        PostgresKeyStore(nowhere, master_key, connect_timeout=2)
    assert PASSWORD not in str(caught.value)
    assert "connection" in caplog.text.lower()  # libpq's reason is logged...
    assert PASSWORD not in caplog.text  # ...without the password


def test_a_store_opened_before_fork_works_in_parent_and_child(pg_store: PostgresKeyStore) -> None:
    pg_store.create_key("orders")
    pg_store.get_key("orders")  # leaves an idle pooled connection to be inherited
    pid = os.fork()
    if pid == 0:  # child: must open its own connections; exit without running pytest's teardown
        code = 1
        try:
            code = 0 if pg_store.rotate_key("orders").latest_version == 2 else 2
            pg_store.close()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert pg_store.get_key("orders").latest_version == 2  # the parent's connections were left alone
    assert pg_store.rotate_key("orders").latest_version == 3


def test_the_sqlite_keystore_never_imports_psycopg(tmp_path: Path) -> None:
    script = (
        "import sys, secrets\n"
        "from app.keystore import open_keystore\n"
        "import app.keystore.postgres\n"
        f"open_keystore({str(tmp_path / 'data')!r}, secrets.token_bytes(32)).create_key('orders')\n"
        "assert not [name for name in sys.modules if name.startswith('psycopg')], sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", script], cwd=REPO, check=True, timeout=60)


def test_a_missing_driver_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, master_key: bytes) -> None:
    monkeypatch.setitem(sys.modules, "psycopg_pool", None)  # as if the postgres extra were not installed
    with pytest.raises(KeystoreUnavailableError, match=r"pip install 'keystream\[postgres\]'"):
        PostgresKeyStore("postgresql://ks:pw@127.0.0.1:1/keys", master_key)
