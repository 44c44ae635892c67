"""``keystream-server operator migrate-seal --to SEAL``: every secret rewrapped in one transaction, or none.

Each test makes ciphertext-bearing keys under one seal, moves the keystore and checks that every version's
material is the same afterwards, under the new seal only; the audit log written before the move keeps
verifying after it. Moves go between the file, pkcs11 and shamir seals, on SQLite and on PostgreSQL: to
shamir the command prints new shares, from shamir it reads K shares on stdin. A version that does not unwrap,
or a share that is refused, refuses the move with nothing written, and a move killed with SIGKILL in the
middle of its transaction leaves the keystore wholly under the old seal.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import itertools
import json
import os
import pty
import secrets
import select
import signal
import sqlite3
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from app.audit import AuditLog, derive_audit_keys
from app.keystore import KeyStore, MasterKeyError
from app.keystore.master import SEAL_PARAMETERS_ROW
from app.seal import FileSeal, Seal
from app.seal.pkcs11 import Pkcs11Seal
from app.seal.shamir import ShamirSeal, new_master_key
from app.seal.shares import Share, decode_share, encode_share, split_master_key
from tests.admin_process import REPO, run_admin, start_admin
from tests.app.seal.conftest import materials, open_store
from tests.softhsm import SoftHsmToken

MASTER = bytes(range(7, 39))


def hsm_seal(token: SoftHsmToken) -> Pkcs11Seal:
    return Pkcs11Seal(str(token.library), token.label, token.pin, "keystream-master", create_key=True)


def settings_env(token: SoftHsmToken, data: Path, current: str, url: str | None) -> dict[str, str]:
    env = {
        **token.environment(),
        "KEYSTREAM_SEAL": current,
        "KEYSTREAM_DATA_DIR": str(data),
        "KEYSTREAM_MASTER_KEY": base64.b64encode(MASTER).decode(),
    }
    if url is not None:
        env["KEYSTREAM_DATABASE_URL"] = url
    return env


def seal_of(kind: str, token: SoftHsmToken) -> Seal:
    """A seal of ``kind`` as the test's settings make it; a shamir seal is sealed (see :func:`opened`)."""
    if kind == "pkcs11":
        return hsm_seal(token)
    if kind == "shamir":
        return ShamirSeal()
    return FileSeal(MASTER)


@contextlib.contextmanager
def opened(
    kind: str, token: SoftHsmToken, data: Path, url: str | None, shares: list[str] | None = None
) -> Iterator[KeyStore]:
    """The keystore opened under the seal of ``kind``; a shamir seal is unsealed with ``shares``."""
    seal = seal_of(kind, token)
    try:
        store = open_store(seal, data, url)
        try:
            for share in shares or []:
                if isinstance(seal, ShamirSeal) and seal.sealed:
                    seal.submit_share(share)
            yield store
        finally:
            store.close()
    finally:
        seal.close()


def make_keys(
    kind: str, token: SoftHsmToken, data: Path, url: str | None, keys: int = 2, versions: int = 2
) -> tuple[dict[tuple[str, int], bytes], list[str] | None]:
    """A keystore under the seal of ``kind`` (shamir: initialised as ``operator init`` does, 2 of 3 shares)
    with ``keys`` keys of ``versions`` versions; returns their materials and the shamir shares."""
    shares: list[str] | None = None
    if kind == "shamir":
        master_key = new_master_key()
        parameters, shares = split_master_key(master_key, 2, 3)
        seal: Seal = ShamirSeal(master_key, parameters, initialising=True)
    else:
        seal = seal_of(kind, token)
    try:
        store = open_store(seal, data, url)
        try:
            for index in range(keys):
                name = f"key-{index:02d}"
                store.create_key(name)
                for _ in range(versions - 1):
                    store.rotate_key(name)
            return materials(store), shares
        finally:
            store.close()
    finally:
        seal.close()


def assert_refused(kind: str, token: SoftHsmToken, data: Path, url: str | None, sealed_by: str) -> None:
    """Opening the keystore under the seal of ``kind`` is refused: it is sealed by ``sealed_by``."""
    seal = seal_of(kind, token)
    try:
        with pytest.raises(MasterKeyError, match=f"is sealed by the {sealed_by} seal"):
            open_store(seal, data, url)
    finally:
        seal.close()


def rows(data: Path, url: str | None) -> list[tuple[str, int, bytes]]:
    """Every stored version's wrapped material, as the database holds it."""
    query = "SELECT key_name, version, wrapped FROM key_versions ORDER BY 1, 2"
    if url is not None:
        with psycopg.connect(url, autocommit=True) as conn:
            return [(str(n), int(v), bytes(w)) for n, v, w in conn.execute(query).fetchall()]
    with sqlite3.connect(data / "keystore.db") as sqlite:
        return sqlite.execute(query).fetchall()


def meta(data: Path, url: str | None) -> dict[str, bytes]:
    """The keystore's ``meta`` rows (check value, audit keys, seal parameters, schema version...)."""
    query = "SELECT name, value FROM meta ORDER BY 1"
    if url is not None:
        with psycopg.connect(url, autocommit=True) as conn:
            return {str(name): bytes(value) for name, value in conn.execute(query).fetchall()}
    with sqlite3.connect(data / "keystore.db") as sqlite:
        return {name: bytes(value) for name, value in sqlite.execute(query).fetchall()}


def move(
    token: SoftHsmToken,
    data: Path,
    url: str | None,
    current: str,
    target: str,
    shares: list[str] | None,
    *,
    as_json: bool = True,
    **extra_env: str,
) -> list[str] | None:
    """``migrate-seal --to target`` from ``current`` (its shares on stdin); returns the new shares."""
    args = ["operator", "migrate-seal", "--to", target]
    if target == "shamir":
        args += ["--shares", "3", "--threshold", "2"] + (["--json"] if as_json else [])
    env = {**settings_env(token, data, current, url), **extra_env}
    moved = run_admin(*args, env=env, stdin="".join(f"{share}\n" for share in shares or []))
    assert moved.returncode == 0, moved.stderr
    assert "Traceback" not in moved.stderr
    for share in shares or []:
        assert share[5:] not in moved.stdout + moved.stderr
    if target != "shamir":
        assert "rewrapped" in moved.stdout and f"KEYSTREAM_SEAL={target}" in moved.stdout
        return None
    if as_json:
        printed = json.loads(moved.stdout)  # stdout holds the JSON alone; progress went to stderr
        assert set(printed) == {"shares", "threshold"} and printed["threshold"] == 2
        assert "rewrapping" in moved.stderr
        new_shares: list[str] = printed["shares"]
    else:
        new_shares = [line.split(": ", 1)[1] for line in moved.stdout.splitlines() if "  share " in line]
        assert "unseal each with 2 shares" in moved.stdout.splitlines()[-1]
    assert len(set(new_shares)) == 3
    return new_shares


ROUTES = {
    "file-pkcs11-file": ("file", "pkcs11", "file"),
    "file-shamir-pkcs11-shamir-file": ("file", "shamir", "pkcs11", "shamir", "file"),
}


@pytest.mark.slow
@pytest.mark.parametrize("route", list(ROUTES))
def test_moves_between_seals_lose_nothing(
    token: SoftHsmToken, tmp_path: Path, backing: str | None, route: str
) -> None:
    seals = ROUTES[route]
    data = tmp_path / "data"
    before, _ = make_keys("file", token, data, backing)
    log = tmp_path / "audit.log"
    old = AuditLog(str(log), derive_audit_keys(MASTER).chain_key)  # a log written before seals existed
    old.write({"type": "request", "route": "/v1/keys"})
    old.close()

    shares: list[str] | None = None
    for step, (current, target) in enumerate(itertools.pairwise(seals)):
        shares = move(
            token, data, backing, current, target, shares, as_json=step != 2, KEYSTREAM_AUDIT_LOG=str(log)
        )
        with opened(target, token, data, backing, shares) as store:
            assert materials(store) == before
        assert (SEAL_PARAMETERS_ROW in meta(data, backing)) == (target == "shamir")
        assert_refused(current, token, data, backing, target)
        verify_env = {**settings_env(token, data, target, backing)}
        stdin = "".join(f"{share}\n" for share in shares or [])
        verified = run_admin("audit", "verify", str(log), env=verify_env, stdin=stdin)
        assert verified.returncode == 0, verified.stderr + verified.stdout
    records = [json.loads(line) for line in log.read_text().splitlines()[1:]]
    assert [(r["operation"], r["from_seal"], r["to_seal"]) for r in records] == [
        ("migrate_seal", current, target) for current, target in itertools.pairwise(seals)
    ]
    assert all(r["key_versions"] == 4 for r in records)
    assert [(r.get("threshold"), r.get("shares")) for r in records] == [
        (2, 3) if target == "shamir" else (None, None) for target in seals[1:]
    ]


def test_a_move_whose_audit_line_fails_says_it_moved(token: SoftHsmToken, tmp_path: Path) -> None:
    """The audit line is written after the commit: when it cannot be, the command exits 1 but says the
    keystore moved (and to keep the shares), rather than a failure that reads as if nothing happened."""
    data = tmp_path / "data"
    before, _ = make_keys("file", token, data, None)
    args = ["operator", "migrate-seal", "--to", "shamir", "--shares", "3", "--threshold", "2", "--json"]
    env = {**settings_env(token, data, "file", None), "KEYSTREAM_AUDIT_LOG": str(tmp_path / "gone" / "a.log")}
    moved = run_admin(*args, env=env)
    assert moved.returncode == 1, moved.stderr
    assert "the keystore moved to the shamir seal" in moved.stderr and "keep the shares" in moved.stderr
    assert "audit line was not written" in moved.stderr and "Traceback" not in moved.stderr
    shares = json.loads(moved.stdout)["shares"]
    with opened("shamir", token, data, None, shares[:2]) as store:
        assert materials(store) == before


def corrupt_one_version(data: Path, url: str | None) -> None:
    """Replace key-01's first version with a blob of another master key: it cannot unwrap."""
    foreign = FileSeal(bytes(32)).wrap(b"x", b"")
    query = "UPDATE key_versions SET wrapped = {0} WHERE key_name = 'key-01' AND version = 1"
    if url is not None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(query.format("%s").encode(), (foreign,))
        return
    with sqlite3.connect(data / "keystore.db") as sqlite:
        sqlite.execute(query.format("?"), (foreign,))


@pytest.mark.parametrize(("source", "target"), [("file", "pkcs11"), ("file", "shamir"), ("shamir", "file")])
def test_a_version_that_does_not_unwrap_refuses_the_move(
    token: SoftHsmToken, tmp_path: Path, backing: str | None, source: str, target: str
) -> None:
    data = tmp_path / "data"
    _, shares = make_keys(source, token, data, backing)
    corrupt_one_version(data, backing)
    before_rows, before_meta = rows(data, backing), meta(data, backing)
    args = ["operator", "migrate-seal", "--to", target]
    if target == "shamir":
        args += ["--shares", "3", "--threshold", "2", "--json"]
    moved = run_admin(
        *args,
        env=settings_env(token, data, source, backing),
        stdin="".join(f"{share}\n" for share in shares or []),
    )
    assert moved.returncode == 1, moved.stderr
    assert "version 1 of key 'key-01'" in moved.stderr and "nothing was written" in moved.stderr
    assert "Traceback" not in moved.stderr
    assert "kss1-" not in moved.stdout  # new shares are shown only once every secret is rewrapped
    assert rows(data, backing) == before_rows and meta(data, backing) == before_meta


def test_refused_or_missing_shares_refuse_a_move_from_shamir(token: SoftHsmToken, tmp_path: Path) -> None:
    data = tmp_path / "data"
    before, shares = make_keys("shamir", token, data, None)
    assert shares is not None
    foreign = split_master_key(new_master_key(), 2, 3)[1]
    genuine = decode_share(shares[1])
    wrong = encode_share(
        Share(genuine.parameters, genuine.index, (secrets.token_bytes(16), genuine.halves[1]))
    )
    typo = shares[1][:30] + ("a" if shares[1][30] != "a" else "b") + shares[1][31:]
    before_rows, before_meta = rows(data, None), meta(data, None)
    env = settings_env(token, data, "shamir", None)
    del env["KEYSTREAM_MASTER_KEY"]  # a move to the file seal would create data/master.key
    for given, wanted in (
        ([], "give 2 shares on stdin, one a line (0 read)"),
        ([shares[0]], "give 2 shares on stdin, one a line (1 read)"),
        ([shares[0], "hello"], "share 2 refused: not a share"),
        ([typo], "share 1 refused: invalid share"),
        ([shares[0], shares[0]], "share 2 refused: duplicate share"),
        ([foreign[0]], "share 1 refused: foreign share"),
        ([shares[0], wrong], "share 2 refused: the shares given do not rebuild"),
    ):
        moved = run_admin("operator", "migrate-seal", "--to", "file", env=env, stdin="\n".join(given))
        assert moved.returncode == 1, (given, moved.stderr)
        assert wanted in moved.stderr and "nothing was written" in moved.stderr, moved.stderr
        assert len(moved.stderr.strip().splitlines()) == 1 and "Traceback" not in moved.stderr
        for share in (*shares, *foreign, wrong, typo):
            assert share[5:] not in moved.stdout + moved.stderr
        assert rows(data, None) == before_rows and meta(data, None) == before_meta
        assert not (data / "master.key").exists()
    for args, wanted in (
        (["--to", "shamir", "--shares", "3"], "--to shamir needs --shares N and --threshold K"),
        (["--to", "shamir", "--shares", "2", "--threshold", "3"], "threshold must be in 1 .. shares"),
        (["--to", "pkcs11", "--json"], "--shares, --threshold and --json are for --to shamir"),
        (["--to", "pkcs11", "--threshold", "2"], "--shares, --threshold and --json are for --to shamir"),
    ):
        refused = run_admin("operator", "migrate-seal", *args, env=settings_env(token, data, "file", None))
        assert refused.returncode == 2 and wanted in refused.stderr, refused.stderr
    with opened("shamir", token, data, None, shares[1:]) as store:
        assert materials(store) == before


def move_in_progress(data: Path, url: str | None) -> bool:
    """True while the move's write transaction is open (it holds the keystore's write lock)."""
    if url is not None:
        with psycopg.connect(url, autocommit=True) as conn:
            held = conn.execute(
                "SELECT count(*) FROM pg_locks WHERE relation = 'key_versions'::regclass "
                "AND mode = 'ExclusiveLock' AND granted"
            ).fetchone()
            return held is not None and held[0] > 0
    sqlite = sqlite3.connect(data / "keystore.db", timeout=0)
    try:
        sqlite.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError:
        return True
    finally:
        sqlite.close()
    return False


@pytest.mark.slow
@pytest.mark.parametrize(
    ("source", "target"), [("file", "pkcs11"), ("pkcs11", "shamir"), ("shamir", "pkcs11")]
)
def test_a_move_killed_mid_transaction_loses_nothing(
    token: SoftHsmToken, tmp_path: Path, backing: str | None, source: str, target: str
) -> None:
    data = tmp_path / "data"
    before, shares = make_keys(source, token, data, backing, keys=40, versions=50)
    before_rows = rows(data, backing)
    env = settings_env(token, data, source, backing)
    args = ["operator", "migrate-seal", "--to", target]
    if target == "shamir":
        args += ["--shares", "3", "--threshold", "2"]
    process = start_admin(*args, env=env)
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write("".join(f"{share}\n" for share in shares or []))
    process.stdin.flush()  # left open: communicate() closes it
    announced = process.stdout.readline()  # printed once both seals and the keystore are open
    assert "rewrapping 2000 key versions" in announced, announced
    deadline = time.monotonic() + 60
    while not move_in_progress(data, backing):  # the move's own write transaction has begun
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline
    os.kill(process.pid, signal.SIGKILL)
    process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL
    assert rows(data, backing) == before_rows
    with opened(source, token, data, backing, shares) as store:
        assert materials(store) == before
    assert_refused(target, token, data, backing, source)
    new_shares = move(token, data, backing, source, target, shares)
    with opened(target, token, data, backing, new_shares) as store:
        assert materials(store) == before


def test_on_a_terminal_the_shares_are_prompted_without_echo(token: SoftHsmToken, tmp_path: Path) -> None:
    """From a shamir keystore on a terminal: one prompt per share, counting, and the typed share is never
    echoed; the move then completes."""
    data = tmp_path / "data"
    before, shares = make_keys("shamir", token, data, None)
    assert shares is not None
    primary, secondary = pty.openpty()

    def controlling_terminal() -> None:
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    environment = {k: v for k, v in os.environ.items() if not k.startswith("KEYSTREAM_")}
    process = subprocess.Popen(
        [sys.executable, "-m", "app.admin", "operator", "migrate-seal", "--to", "file"],
        cwd=REPO,
        env={**environment, **settings_env(token, data, "shamir", None)},
        stdin=secondary,
        stdout=secondary,
        stderr=secondary,
        preexec_fn=controlling_terminal,
    )
    os.close(secondary)
    seen = b""

    def read_until(wanted: bytes) -> None:
        nonlocal seen
        deadline = time.monotonic() + 60
        while wanted not in seen:
            assert time.monotonic() < deadline, seen
            if select.select([primary], [], [], 1)[0]:
                try:
                    seen += os.read(primary, 4096)
                except OSError:  # the command exited and closed the terminal
                    break
        assert wanted in seen, seen

    try:
        read_until(b"unseal share (1 of 2): ")
        os.write(primary, shares[0].encode() + b"\n")
        read_until(b"unseal share (2 of 2): ")
        os.write(primary, shares[2].encode() + b"\n")
        read_until(b"start the servers with KEYSTREAM_SEAL=file")
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
        os.close(primary)
    for share in shares:
        assert share[5:].encode() not in seen
    with opened("file", token, data, None) as store:
        assert materials(store) == before
