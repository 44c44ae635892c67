"""Two-worker servers sealed by a SoftHSM2 token, on SQLite and on PostgreSQL, through restarts and a copy.

The master key is generated in the token by ``operator init``; each server auto-unseals at start. Keys are
created, used and rotated through both workers (a new connection per request, so the kernel spreads them),
the server restarts, and every ciphertext made before still decrypts. ``keystore copy`` moves the SQLite
keystore into PostgreSQL under the same seal, and a PostgreSQL server decrypts everything again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.service_process import MASTER_KEY, ROOT_TOKEN, Server, start_server, stop_server
from tests.admin_process import run_admin
from tests.app.e2e.test_e2e_shamir import unseal, wait_for_workers
from tests.softhsm import make_token

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def call(server: Server, method: str, path: str, **kwargs: Any) -> httpx.Response:
    """One request on a fresh connection (so the two workers both serve)."""
    with httpx.Client(
        base_url=server.url,
        headers={"Authorization": f"Bearer {ROOT_TOKEN}"},
        timeout=60,
        verify=server.verify,  # made once: the CA bundle is not read again for every request
    ) as c:
        return c.request(method, path, **kwargs)


def encrypt_some(server: Server, made: dict[bytes, bytes], label: str) -> None:
    for index in range(6):
        plaintext = f"{label} {index} ".encode() * (index * 300 + 1)
        response = call(server, "POST", "/v1/keys/orders/encrypt", content=plaintext)
        assert response.status_code == 200, response.text
        made[response.content] = plaintext


def decrypt_all(server: Server, made: dict[bytes, bytes]) -> None:
    for ciphertext, plaintext in made.items():
        response = call(server, "POST", "/v1/keys/orders/decrypt", content=ciphertext)
        assert response.status_code == 200, response.text
        assert response.content == plaintext


def test_hsm_sealed_servers_on_sqlite_then_postgres(tmp_path: Path, pg_url: str) -> None:
    token = make_token(tmp_path / "hsm")
    seal_env = {**token.environment(), "KEYSTREAM_WORKERS": "2"}
    data = tmp_path / "data"
    init = run_admin("operator", "init", env={**seal_env, "KEYSTREAM_DATA_DIR": str(data)})
    assert init.returncode == 0, init.stderr
    made: dict[bytes, bytes] = {}

    server = start_server(data, tmp_path / "sqlite-1.log", **seal_env)
    try:
        assert call(server, "POST", "/v1/keys", json={"name": "orders"}).status_code == 201
        encrypt_some(server, made, "v1")
        assert call(server, "POST", "/v1/keys/orders/rotate").status_code == 200
        encrypt_some(server, made, "v2")
        decrypt_all(server, made)
    finally:
        stop_server(server)
    assert not (data / "master.key").exists()

    server = start_server(data, tmp_path / "sqlite-2.log", **seal_env)
    try:
        decrypt_all(server, made)  # cold key caches: every version unwraps in the token
        assert call(server, "POST", "/v1/keys/orders/rotate").status_code == 200
        encrypt_some(server, made, "v3")
        decrypt_all(server, made)
    finally:
        stop_server(server)

    for log in tmp_path.glob("*.log"):
        assert token.pin not in log.read_text(errors="replace")  # never in a server's log
    copied = run_admin("keystore", "copy", str(data), pg_url, env=seal_env)
    assert copied.returncode == 0, copied.stderr
    assert "copied 1 keys (3 versions)" in copied.stdout

    pg_env = {**seal_env, "KEYSTREAM_DATABASE_URL": pg_url}
    for run in (1, 2):
        server = start_server(tmp_path / "pg-data", tmp_path / f"pg-{run}.log", **pg_env)
        try:
            decrypt_all(server, made)
            assert call(server, "POST", "/v1/keys/orders/rotate").status_code == 200
            encrypt_some(server, made, f"pg{run}")
            decrypt_all(server, made)
        finally:
            stop_server(server)


#: Every move between two seals once: file -> pkcs11 -> shamir -> file -> shamir -> pkcs11 -> file.
SEAL_ROUTE = ("file", "pkcs11", "shamir", "file", "shamir", "pkcs11", "file")
#: On PostgreSQL, into and out of each seal with real servers (every pair of seals on PostgreSQL, killed
#: and refused moves included, is tests/app/seal/test_migrate_seal.py's; seven 2-worker servers took 114 s).
SHORT_ROUTE = ("file", "shamir", "pkcs11", "file")


@pytest.mark.parametrize(("backing", "route"), [("sqlite", SEAL_ROUTE), ("postgres", SHORT_ROUTE)])
def test_ciphertexts_survive_moves_between_seals(
    tmp_path: Path, backing: str, route: tuple[str, ...], request: pytest.FixtureRequest
) -> None:
    """A 2-worker service moved along ``route`` (on SQLite through every pair of seals): every ciphertext
    made under one seal decrypts under the next (a shamir server unsealed with the shares the move printed),
    and the audit log of all the runs verifies."""
    token = make_token(tmp_path / "hsm")
    data = tmp_path / "data"
    log = tmp_path / "audit.log"
    base_env = {
        **token.environment(),
        "KEYSTREAM_MASTER_KEY": MASTER_KEY,
        "KEYSTREAM_WORKERS": "2",
        "KEYSTREAM_DATA_DIR": str(data),
        "KEYSTREAM_AUDIT_LOG": str(log),
    }
    if backing == "postgres":
        base_env["KEYSTREAM_DATABASE_URL"] = request.getfixturevalue("pg_url")
    made: dict[bytes, bytes] = {}
    shares: list[str] = []
    for run, seal in enumerate(route):
        env = {**base_env, "KEYSTREAM_SEAL": seal}
        server = start_server(data, tmp_path / f"run-{run}.log", **env)
        try:
            if seal == "shamir":
                unseal(server, shares[1:])
                wait_for_workers(server, 2, 0.0)
            if run == 0:
                assert call(server, "POST", "/v1/keys", json={"name": "orders"}).status_code == 201
            decrypt_all(server, made)
            encrypt_some(server, made, f"run{run}")
            assert call(server, "POST", "/v1/keys/orders/rotate").status_code == 200
            encrypt_some(server, made, f"run{run}-rotated")
            decrypt_all(server, made)
        finally:
            stop_server(server)
        if run + 1 == len(route):
            break
        target = route[run + 1]
        args = ["operator", "migrate-seal", "--to", target]
        if target == "shamir":
            args += ["--shares", "3", "--threshold", "2", "--json"]
        moved = run_admin(*args, env=env, stdin="".join(f"{share}\n" for share in shares[:2]))
        assert moved.returncode == 0, moved.stderr
        assert f"rewrapped {run + 2} key versions" in moved.stdout or target == "shamir"
        if target == "shamir":
            shares = json.loads(moved.stdout)["shares"]
    verified = run_admin("audit", "verify", str(log), env={**base_env, "KEYSTREAM_SEAL": "file"})
    assert verified.returncode == 0, verified.stderr + verified.stdout
    text = "".join(path.read_text() for path in tmp_path.glob("*.log*"))
    assert text.count('"operation":"migrate_seal"') == len(route) - 1
    for share in shares:
        assert share[5:] not in text
