"""``keystream-server keystore copy SRC DST`` as a subprocess, against a real PostgreSQL.

A SQLite data directory is copied into PostgreSQL and back into a new ``.db`` file; the copy is checked
through the keystore and by real servers (encrypt through a SQLite one, decrypt through a PostgreSQL one with
the copied root token), the second run copies nothing, and every refusal is one line on stderr with the
documented exit code, no traceback, no URL password and no key material.
"""

from __future__ import annotations

import base64
import os
import secrets
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from app.admin import EXIT_OK, EXIT_USAGE
from app.admin._common import EXIT_FAILED
from app.keystore import SqliteKeyStore, load_or_create_master_key, open_keystore
from app.keystore.postgres import PostgresKeyStore
from keystream_server import MASTER_KEY, ROOT_TOKEN, start, stop

REPO = Path(__file__).resolve().parents[3]
TIMEOUT = 120
PASSWORD = "pw-never-printed-7f3a"


def _copy(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -m app.admin keystore copy ARGS`` with no ``KEYSTREAM_*`` settings but ``env``."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("KEYSTREAM_")}
    environment.update(env)
    return subprocess.run(
        [sys.executable, "-m", "app.admin", "keystore", "copy", *args],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def _one_line_error(result: subprocess.CompletedProcess[str], *secrets_: str) -> str:
    lines = [line for line in result.stderr.splitlines() if not line.startswith("usage:")]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("keystream-server: error: "), result.stderr
    assert "Traceback" not in result.stderr
    for secret in secrets_:
        assert secret not in result.stderr + result.stdout
    return lines[0]


@pytest.fixture
def key_b64() -> str:
    return base64.b64encode(secrets.token_bytes(32)).decode()


@pytest.fixture
def url_with_password(pg_url: str) -> str:
    """The test schema's URL with a password in it (the cluster trusts local connections and ignores it)."""
    return pg_url.replace("postgresql://ks@", f"postgresql://ks:{PASSWORD}@")


def test_sqlite_to_postgres_and_back(tmp_path: Path, url_with_password: str, key_b64: str) -> None:
    master_key = base64.b64decode(key_b64)
    data_dir = tmp_path / "data"
    source = open_keystore(data_dir, master_key)
    source.create_key("orders")
    source.rotate_key("orders")
    source.create_key("gcm", scheme="gcm")
    material = source.key_material("orders", 1)
    source.close()
    env = {"KEYSTREAM_MASTER_KEY": key_b64}

    forward = _copy(str(data_dir), url_with_password, env=env)
    assert forward.returncode == EXIT_OK, forward.stderr
    assert "copied 2 keys (3 versions), skipped 0 keys" in forward.stdout
    assert PASSWORD not in forward.stdout + forward.stderr
    assert key_b64 not in forward.stdout + forward.stderr

    again = _copy(str(data_dir), url_with_password, env=env)
    assert again.returncode == EXIT_OK, again.stderr
    assert "copied 0 keys (0 versions), skipped 2 keys already present" in again.stdout

    back_file = tmp_path / "back" / "copy.db"
    back_file.parent.mkdir()
    back = _copy(url_with_password, str(back_file), env=env)
    assert back.returncode == EXIT_OK, back.stderr
    assert "copied 2 keys (3 versions)" in back.stdout
    copied = SqliteKeyStore(back_file, master_key)
    try:
        assert copied.key_material("orders", 1) == material
        assert [key.name for key in copied.list_keys()] == ["gcm", "orders"]
    finally:
        copied.close()
    postgres = PostgresKeyStore(url_with_password, master_key)
    try:
        assert postgres.get_key("orders").latest_version == 2
    finally:
        postgres.close()


def test_conflicting_key_exit_1_names_it(tmp_path: Path, pg_url: str, key_b64: str) -> None:
    master_key = base64.b64decode(key_b64)
    source = open_keystore(tmp_path / "data", master_key)
    source.create_key("orders")
    source.create_key("other")
    source.close()
    target = PostgresKeyStore(pg_url, master_key)
    target.create_key("orders")
    target.close()
    result = _copy(str(tmp_path / "data"), pg_url, env={"KEYSTREAM_MASTER_KEY": key_b64})
    assert result.returncode == EXIT_FAILED
    line = _one_line_error(result, key_b64)
    assert "key 'orders' (its material differs)" in line
    assert "Nothing was copied" in line
    target = PostgresKeyStore(pg_url, master_key)
    try:
        assert [key.name for key in target.list_keys()] == ["orders"]  # 'other' was not copied either
    finally:
        target.close()


def test_wrong_master_key_is_refused(tmp_path: Path, url_with_password: str, key_b64: str) -> None:
    source = open_keystore(tmp_path / "data", base64.b64decode(key_b64))
    source.create_key("orders")
    source.close()
    other = PostgresKeyStore(url_with_password, secrets.token_bytes(32))  # DST made with another master key
    other.close()
    result = _copy(str(tmp_path / "data"), url_with_password, env={"KEYSTREAM_MASTER_KEY": key_b64})
    assert result.returncode == EXIT_USAGE
    line = _one_line_error(result, PASSWORD, key_b64)
    assert "master key does not match keystore database 'postgres' on 127.0.0.1" in line

    wrong = base64.b64encode(secrets.token_bytes(32)).decode()
    result = _copy(str(tmp_path / "data"), url_with_password, env={"KEYSTREAM_MASTER_KEY": wrong})
    assert result.returncode == EXIT_USAGE
    assert "master key does not match keystore" in _one_line_error(result, PASSWORD, wrong)


def test_usage_errors(tmp_path: Path, url_with_password: str, key_b64: str) -> None:
    env = {"KEYSTREAM_MASTER_KEY": key_b64}
    missing = _copy(str(tmp_path / "nothing-here"), url_with_password, env=env)
    assert missing.returncode == EXIT_USAGE
    assert "no SQLite keystore at" in _one_line_error(missing, PASSWORD)

    (tmp_path / "empty").mkdir()
    no_key = _copy(str(tmp_path / "empty"), url_with_password, env={})
    assert no_key.returncode == EXIT_USAGE
    assert "no master key" in _one_line_error(no_key, PASSWORD)

    unreachable = _copy(str(tmp_path / "empty"), f"postgresql://ks:{PASSWORD}@127.0.0.1:1/x", env=env)
    assert unreachable.returncode == EXIT_USAGE  # SRC is checked first: no keystore in 'empty'


def test_unreachable_database_exit_1(tmp_path: Path, key_b64: str) -> None:
    source = open_keystore(tmp_path / "data", base64.b64decode(key_b64))
    source.close()
    result = _copy(
        str(tmp_path / "data"),
        f"postgresql://ks:{PASSWORD}@127.0.0.1:1/x?connect_timeout=2",
        env={"KEYSTREAM_MASTER_KEY": key_b64},
    )
    assert result.returncode == EXIT_FAILED
    assert "unavailable" in _one_line_error(result, PASSWORD, key_b64)


def test_master_key_of_the_sqlite_data_dir_is_used(tmp_path: Path, pg_url: str) -> None:
    """As for serve, with no KEYSTREAM_MASTER_KEY the data directory's master.key is the master key."""
    source = open_keystore(tmp_path / "data", load_or_create_master_key(tmp_path / "data", None))
    source.create_key("orders")
    source.close()
    result = _copy(str(tmp_path / "data"), pg_url, env={})
    assert result.returncode == EXIT_OK, result.stderr
    assert "copied 1 keys (1 versions)" in result.stdout


def test_a_file_that_is_not_a_keystore_is_one_line(tmp_path: Path, key_b64: str) -> None:
    source = open_keystore(tmp_path / "data", base64.b64decode(key_b64))
    source.close()
    (tmp_path / "notes.db").write_text("not a database\n")
    for args in (
        (str(tmp_path / "data"), str(tmp_path / "notes.db")),
        (str(tmp_path / "notes.db"), str(tmp_path / "x.db")),
    ):
        result = _copy(*args, env={"KEYSTREAM_MASTER_KEY": key_b64})
        assert result.returncode == EXIT_FAILED
        assert "file is not a database" in _one_line_error(result, key_b64)


def test_real_servers_decrypt_after_the_copy(tmp_path: Path, pg_url: str) -> None:
    """Encrypt through a SQLite server, copy, decrypt through a PostgreSQL server with the copied token."""
    plaintext = secrets.token_bytes(200_000)
    sealed: dict[str, bytes] = {}
    first = start(tmp_path / "data", tmp_path / "sqlite.log")
    try:
        with httpx.Client(base_url=first.url, headers={"Authorization": f"Bearer {ROOT_TOKEN}"}) as client:
            for name, scheme in (("orders", "ctr-hmac"), ("ledger", "gcm")):
                assert client.post("/v1/keys", json={"name": name, "scheme": scheme}).status_code == 201
                sealed[f"{name}-v1"] = client.post(f"/v1/keys/{name}/encrypt", content=plaintext).content
                assert client.post(f"/v1/keys/{name}/rotate").status_code == 200
                sealed[f"{name}-v2"] = client.post(f"/v1/keys/{name}/encrypt", content=plaintext).content
    finally:
        stop(first.process)
    result = _copy(str(tmp_path / "data"), pg_url, env={"KEYSTREAM_MASTER_KEY": MASTER_KEY})
    assert result.returncode == EXIT_OK, result.stderr
    assert "copied 2 keys (4 versions)" in result.stdout
    assert "copied 1 tokens" in result.stdout  # the root token the first start created
    second = start(tmp_path / "unused", tmp_path / "pg.log", settings={"KEYSTREAM_DATABASE_URL": pg_url})
    try:
        with httpx.Client(base_url=second.url, headers={"Authorization": f"Bearer {ROOT_TOKEN}"}) as client:
            for label, ciphertext in sealed.items():
                name = label.rpartition("-")[0]
                opened = client.post(f"/v1/keys/{name}/decrypt", content=ciphertext)
                assert opened.status_code == 200, (label, opened.text)
                assert opened.content == plaintext, label
            assert client.get("/v1/keys/orders").json()["latest_version"] == 2
    finally:
        stop(second.process)
