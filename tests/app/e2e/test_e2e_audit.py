"""The audit log against a real server: records per /v1 request, no secret in them, the chain verified and
broken on purpose, rotation, one file per worker, fail closed, and /v1/audit/hash."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import httpx
import pytest

from app.admin import main as admin_main
from app.audit import rotated_paths
from bench.duplex_client import IncompleteResponseError, duplex_request
from bench.service_process import MASTER_KEY, REPO, ROOT_TOKEN, Server, start_server, stop_server
from tests.tmpfs import PAGE, fill, small_tmpfs

KEEP = 1000
#: Material of the imported key ``imported``: it must never reach the log.
MATERIAL = bytes(range(7, 39))
PLAINTEXT = b"PLAINTEXT-MARKER-" + b"q" * 2000
ASSOCIATED = b"associated-data-marker-7f3a"


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    """A server writing its audit log to ``logs/audit.log``, rotated at 16 KiB; keys ``imported`` (known
    material) and ``small`` (4 KiB segments)."""
    base = tmp_path_factory.mktemp("audit")
    (base / "logs").mkdir()
    log = base / "logs" / "audit.log"
    running = start_server(
        base / "data",
        base / "server.log",
        KEYSTREAM_AUDIT_LOG=str(log),
        KEYSTREAM_AUDIT_LOG_MAX_BYTES=str(16 * 1024),
        KEYSTREAM_AUDIT_LOG_KEEP=str(KEEP),
        KEYSTREAM_ALLOW_KEY_IMPORT="true",
    )
    try:
        with running.client() as client:
            imported = client.post(
                "/v1/keys/imported/import", json={"key": base64.b64encode(MATERIAL).decode()}
            )
            assert imported.status_code == 201, imported.text
            small = client.post("/v1/keys", json={"name": "small", "segment_size": 4096})
            assert small.status_code == 201, small.text
        yield running, log
    finally:
        stop_server(running)


def files_of(log: Path) -> list[Path]:
    return [Path(name) for name in rotated_paths(str(log), KEEP) if os.path.exists(name)]


def records(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for path in files_of(log) for line in path.read_text().splitlines()]


def response_record(log: Path, request_id: str, timeout: float = 10.0) -> dict[str, Any]:
    """The ``response`` record of ``request_id`` (a stream's is written when it ends: wait for it)."""
    deadline = time.monotonic() + timeout
    while True:
        found = [r for r in records(log) if r["request_id"] == request_id and r["type"] == "response"]
        if found:
            assert len(found) == 1
            return found[0]
        if time.monotonic() > deadline:
            raise AssertionError(f"no response record for {request_id}")
        time.sleep(0.05)


def verify(
    *paths: Path, heads: tuple[str, ...] = (), subprocess_: bool = False
) -> subprocess.CompletedProcess[str]:
    """``keystream-server audit verify PATHS`` with the servers' master key: in this process (fast), or as
    the real command with ``subprocess_``."""
    arguments = ["audit", "verify", *map(str, paths)]
    for head in heads:
        arguments += ["--expect-head", head]
    if subprocess_:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KEYSTREAM_")}
        env["KEYSTREAM_MASTER_KEY"] = MASTER_KEY
        command = [sys.executable, "-m", "app.admin", *arguments]
        return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    out, err = io.StringIO(), io.StringIO()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("KEYSTREAM_")}
    with (
        mock.patch.dict(os.environ, {**clean, "KEYSTREAM_MASTER_KEY": MASTER_KEY}, clear=True),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        code = admin_main(arguments)
    return subprocess.CompletedProcess(arguments, code, out.getvalue(), err.getvalue())


def test_encrypt_decrypt_and_errors_are_recorded(audited: tuple[Server, Path]) -> None:
    server, log = audited
    ad = {"Keystream-Associated-Data": base64.b64encode(ASSOCIATED).decode()}
    with server.client() as client:
        sealed = client.post("/v1/keys/imported/encrypt", content=PLAINTEXT, headers=ad)
        assert sealed.status_code == 200
        opened = client.post("/v1/keys/imported/decrypt", content=sealed.content, headers=ad)
        assert opened.content == PLAINTEXT
        bad = client.post("/v1/keys/imported/decrypt", content=b"\x00" * 200)
        assert bad.status_code == 400
        hashed = client.post("/v1/audit/hash", json={"input": base64.b64encode(ASSOCIATED).decode()})
        assert hashed.status_code == 200
    anonymous = httpx.post(f"{server.url}/v1/keys/imported/encrypt", content=b"x")
    assert anonymous.status_code == 401

    encrypt = response_record(log, sealed.headers["Keystream-Request-Id"])
    assert {k: encrypt[k] for k in ("route", "key_name", "key_version", "format", "scheme", "backend")} == {
        "route": "/v1/keys/{name}/encrypt",
        "key_name": "imported",
        "key_version": 1,
        "format": "sealed",
        "scheme": "ctr-hmac",
        "backend": sealed.headers["Keystream-Backend"],
    }
    assert (encrypt["bytes_in"], encrypt["bytes_out"]) == (len(PLAINTEXT), len(sealed.content))
    assert (encrypt["status"], encrypt["error_code"], encrypt["outcome"]) == (200, None, "completed")
    assert encrypt["token_id"] == ROOT_TOKEN.split("_")[1]
    assert encrypt["remote_address"] == "127.0.0.1"
    assert encrypt["associated_data"] == hashed.json()["hash"]  # what an operator searches for
    lines_of_encrypt = [r for r in records(log) if r["request_id"] == encrypt["request_id"]]
    assert lines_of_encrypt == [encrypt]  # side-effect free: one line, written before the answer left

    with server.client() as client:
        created = client.post("/v1/keys", json={"name": "changes-state"})
        assert created.status_code == 201
    created_id = created.headers["Keystream-Request-Id"]
    kinds = [(r["type"], r["seq"]) for r in records(log) if r["request_id"] == created_id]
    assert [kind for kind, _ in kinds] == ["request", "response"]  # the request line before the route ran
    assert kinds[0][1] < kinds[1][1]

    decrypt = response_record(log, opened.headers["Keystream-Request-Id"])
    assert (decrypt["route"], decrypt["bytes_out"], decrypt["associated_data"]) == (
        "/v1/keys/{name}/decrypt",
        len(PLAINTEXT),
        encrypt["associated_data"],
    )
    failed = response_record(log, bad.headers["Keystream-Request-Id"])
    assert (failed["status"], failed["error_code"], failed["outcome"]) == (400, "decryption_failed", "failed")
    refused = response_record(log, anonymous.headers["Keystream-Request-Id"])
    assert (refused["status"], refused["error_code"], refused["token_id"]) == (401, "unauthorized", None)


def _upload_and_reset(server: Server, path: str) -> None:
    sock = socket.create_connection((server.host, server.port))
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: {server.auth['Authorization']}\r\n"
        f"Content-Type: application/octet-stream\r\nContent-Length: {64 << 20}\r\n\r\n"
    )
    sock.sendall(head.encode() + b"z" * (1 << 20))
    sock.settimeout(10)
    assert sock.recv(65536).startswith(b"HTTP/1.1 200")  # the stream started
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    sock.close()


def test_stream_outcomes_completed_failed_aborted(audited: tuple[Server, Path]) -> None:
    server, log = audited
    data = os.urandom(300 * 1024)  # above small_body_max_bytes: streamed
    with server.client() as client:
        sealed = client.post("/v1/keys/small/encrypt", content=data)
        assert sealed.status_code == 200
    completed = response_record(log, sealed.headers["Keystream-Request-Id"])
    assert (completed["outcome"], completed["bytes_in"], completed["bytes_out"]) == (
        "completed",
        len(data),
        len(sealed.content),
    )
    started = [
        r for r in records(log) if r["request_id"] == completed["request_id"] and r["type"] == "stream"
    ]
    assert len(started) == 1 and started[0]["outcome"] == "started" and started[0]["seq"] < completed["seq"]

    tampered = bytearray(sealed.content)
    tampered[-10_000] ^= 1
    headers = {**server.auth, "Content-Type": "application/octet-stream"}
    before = {r["request_id"] for r in records(log)}
    with pytest.raises(IncompleteResponseError):
        asyncio.run(
            duplex_request(
                server.host, server.port, "POST", "/v1/keys/small/decrypt", headers, bytes(tampered)
            )
        )
    failed = _new_response(log, before, "/v1/keys/{name}/decrypt")
    assert (failed["status"], failed["outcome"], failed["error_code"]) == (200, "failed", "decryption_failed")
    assert 0 < failed["bytes_out"] < len(data)

    before = {r["request_id"] for r in records(log)}
    _upload_and_reset(server, "/v1/keys/small/encrypt")
    aborted = _new_response(log, before, "/v1/keys/{name}/encrypt")
    assert aborted["outcome"] == "aborted"
    assert 0 < aborted["bytes_in"] < 64 << 20


def _new_response(log: Path, before: set[str], route: str) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = [
            r
            for r in records(log)
            if r["request_id"] not in before and r["type"] == "response" and r["route"] == route
        ]
        if found:
            return found[-1]
        time.sleep(0.05)
    raise AssertionError(f"no new response record for {route}")


def test_no_secret_reaches_the_log(audited: tuple[Server, Path]) -> None:
    server, log = audited
    with server.client() as client:
        sealed = client.post("/v1/keys/imported/encrypt", content=PLAINTEXT)
        raw = client.post("/v1/keys/imported/encrypt?format=raw", content=PLAINTEXT)
        token = client.post("/v1/tokens", json={"scopes": ["encrypt"]}).json()["token"]
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}) as client:
        assert client.post("/v1/keys/imported/encrypt", content=b"x").status_code == 200
    text = "".join(path.read_text() for path in files_of(log))
    secrets_ = [
        ROOT_TOKEN,
        ROOT_TOKEN.split("_", 2)[2],
        token,
        token.split("_", 2)[2],
        MASTER_KEY,
        base64.b64encode(MATERIAL).decode(),
        MATERIAL.hex(),
        "PLAINTEXT-MARKER",
        base64.b64encode(PLAINTEXT[:30]).decode()[:32],
        ASSOCIATED.decode(),
        base64.b64encode(ASSOCIATED).decode(),
        raw.headers["Keystream-IV"],
    ]
    for ciphertext in (sealed.content, raw.content):
        secrets_ += [ciphertext[40:72].hex(), base64.b64encode(ciphertext[40:70]).decode()]
    leaked = [value[:12] for value in secrets_ if value in text]
    assert leaked == []


def test_audit_hash_is_admin_only(audited: tuple[Server, Path]) -> None:
    server, _ = audited
    body = {"input": base64.b64encode(b"x").decode()}
    with server.client() as client:
        token = client.post("/v1/tokens", json={"scopes": ["encrypt", "decrypt"]}).json()["token"]
        assert client.post("/v1/audit/hash", json={"input": "not base64!"}).status_code == 400
    assert httpx.post(f"{server.url}/v1/audit/hash", json=body).status_code == 401
    denied = httpx.post(
        f"{server.url}/v1/audit/hash", json=body, headers={"Authorization": f"Bearer {token}"}
    )
    assert denied.status_code == 403


def _fill_until_rotated(server: Server, log: Path, files: int) -> None:
    with server.client() as client:
        while len(files_of(log)) < files:
            assert client.post("/v1/keys/small/encrypt", content=b"r" * 64).status_code == 200


def test_the_chain_verifies_across_rotated_files_and_breaks_on_purpose(
    audited: tuple[Server, Path], tmp_path: Path
) -> None:
    server, log = audited
    _fill_until_rotated(server, log, 3)
    files = files_of(log)
    assert all(path.stat().st_size <= 16 * 1024 for path in files)
    good = verify(*files, subprocess_=True)  # the real command once
    assert good.returncode == 0, good.stderr
    head = next(line.split()[1] for line in good.stdout.splitlines() if line.startswith("head "))
    assert "--expect-head" in good.stdout

    wrong_order = verify(*reversed(files))
    assert wrong_order.returncode == 1

    copies = []
    for path in files:
        shutil.copy(path, tmp_path / path.name)
        copies.append(tmp_path / path.name)
    middle = copies[1]
    original = middle.read_text().splitlines(keepends=True)

    def broken(lines: list[str]) -> str:
        middle.write_text("".join(lines))
        result = verify(*copies)
        middle.write_text("".join(original))
        assert result.returncode == 1, result.stdout
        return result.stderr

    changed = original.copy()
    changed[4] = changed[4].replace('"status":200', '"status":201').replace('"POST"', '"GET"')
    assert f"{middle}:5: changed" in broken(changed)
    removed = original[:4] + original[5:]
    assert f"{middle}:5: removed" in broken(removed)
    swapped = original.copy()
    swapped[3], swapped[4] = swapped[4], swapped[3]
    assert f"{middle}:4: removed or reordered" in broken(swapped)

    # Tail truncation: invisible alone, caught against the remembered head.
    last = copies[-1]
    lines = last.read_text().splitlines(keepends=True)
    last.write_text("".join(lines[:-2]))
    assert verify(*copies).returncode == 0
    truncated = verify(*copies, heads=(head,))
    assert truncated.returncode == 1 and "truncated" in truncated.stderr
    assert verify(*files, heads=(head,)).returncode == 0  # the live log, grown since: still holds it


def test_several_workers_write_their_own_files(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    running = start_server(
        tmp_path / "data", tmp_path / "server.log", KEYSTREAM_AUDIT_LOG=str(log), KEYSTREAM_WORKERS="2"
    )
    try:
        with running.client() as client:
            for _ in range(20):
                assert client.get("/v1/keys").status_code == 200
        assert not log.exists()
        per_worker = [Path(f"{log}.w0"), Path(f"{log}.w1")]
        assert all(path.exists() for path in per_worker)
        assert sum(len(path.read_text().splitlines()) for path in per_worker) == 20  # one line per GET
        for path in per_worker:
            assert verify(path).returncode == 0
        configured = verify(log)  # the configured path: both worker files found beside it
        assert configured.returncode == 0, configured.stderr
        assert configured.stdout.count("lines intact") == sum(1 for path in per_worker if path.stat().st_size)
        assert f"ok: 20 lines in 2 file(s) ({per_worker[0]} {per_worker[1]})" in configured.stdout
    finally:
        stop_server(running)


def test_an_unwritable_log_fails_closed(tmp_path: Path) -> None:
    directory = tmp_path / "logs"
    directory.mkdir()
    running = start_server(
        tmp_path / "data", tmp_path / "server.log", KEYSTREAM_AUDIT_LOG=str(directory / "audit.log")
    )
    try:
        with running.client() as client:
            assert client.post("/v1/keys", json={"name": "k"}).status_code == 201
            assert client.get("/readyz").status_code == 200
            before = verify(directory / "audit.log")
            head = next(line.split()[1] for line in before.stdout.splitlines() if line.startswith("head "))
            shutil.rmtree(directory)  # the file and its directory removed
            not_ready = client.get("/readyz")  # a load balancer stops sending requests here
            assert not_ready.status_code == 503 and not_ready.json()["error"]["code"] == "audit_unavailable"
            refused = client.post("/v1/keys/k/encrypt", content=PLAINTEXT)
            assert refused.status_code == 503
            assert refused.json()["error"]["code"] == "audit_unavailable"
            assert int(refused.headers["Retry-After"]) > 0
            assert PLAINTEXT not in refused.content and len(refused.content) < 300  # no ciphertext
            assert client.get("/v1/keys").status_code == 503  # every /v1 route
            assert client.get("/healthz").status_code == 200  # not /v1: no record needed
            directory.mkdir()  # fixed: requests are served (and recorded) again
            assert client.get("/readyz").status_code == 200
            served = client.post("/v1/keys/k/encrypt", content=b"back")
            assert served.status_code == 200
        # The new file goes on with the chain, but its first records went with the old one: verify says so,
        # unless given the head remembered before (where the new file begins).
        alone = verify(directory / "audit.log")
        assert alone.returncode == 1 and ":1: removed: chain" in alone.stderr, alone.stderr
        assert verify(directory / "audit.log", heads=(head,)).returncode == 0
    finally:
        stop_server(running)


def test_a_full_disk_fails_closed_from_the_start(tmp_path: Path) -> None:
    running = start_server(tmp_path / "data", tmp_path / "server.log", KEYSTREAM_AUDIT_LOG="/dev/full")
    try:
        with running.client() as client:
            refused = client.post("/v1/keys", json={"name": "k"})
            assert refused.status_code == 503
            assert refused.json()["error"]["code"] == "audit_unavailable"
    finally:
        stop_server(running)


def _fresh_request(server: Server, method: str, path: str) -> int:
    """One request on a new connection (over many, both workers' `SO_REUSEPORT` sockets get some)."""
    response = httpx.request(method, f"{server.url}{path}", headers=server.auth, timeout=10)
    return response.status_code


def test_a_full_disk_refuses_requests_and_leaves_every_worker_file_verifiable(tmp_path: Path) -> None:
    """A line cut short by ``ENOSPC`` is taken back out: after the disk has room again, and after a restart,
    every worker's file verifies."""
    with small_tmpfs(tmp_path / "mnt", size="1m") as mount:
        log = mount / "audit.log"
        files = [Path(f"{log}.w0"), Path(f"{log}.w1")]
        env = {"KEYSTREAM_AUDIT_LOG": str(log), "KEYSTREAM_WORKERS": "2"}
        running = start_server(tmp_path / "data", tmp_path / "server.log", **env)
        try:
            deadline = time.monotonic() + 30
            # Both files hold lines and end inside a page: a long line is then torn at the page's end.
            while not all(path.exists() and path.stat().st_size % PAGE for path in files):
                assert time.monotonic() < deadline, "the two workers did not both answer"
                assert _fresh_request(running, "GET", "/v1/keys") == 200
            filler = fill(mount)
            sizes = [path.stat().st_size for path in files]
            long_path = "/v1/" + "x" * 5000  # its request line (written before routing) is longer than a page
            statuses = [_fresh_request(running, "POST", long_path) for _ in range(30)]
            assert statuses == [503] * 30
            assert [path.stat().st_size for path in files] == sizes  # no torn line left in either file
            assert [_fresh_request(running, "GET", "/readyz") for _ in range(10)] == [503] * 10
            filler.unlink()
            assert [_fresh_request(running, "GET", "/readyz") for _ in range(10)] == [200] * 10
            assert [_fresh_request(running, "POST", long_path) for _ in range(10)] == [404] * 10
        finally:
            stop_server(running)
        for path in files:
            result = verify(path)
            assert result.returncode == 0, result.stderr
        running = start_server(tmp_path / "data", tmp_path / "server2.log", **env)  # the chains resume
        try:
            for _ in range(10):
                assert _fresh_request(running, "GET", "/v1/keys") == 200
        finally:
            stop_server(running)
        for path in files:
            result = verify(path)
            assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_log_in_a_missing_directory_refuses_the_start(tmp_path: Path, workers: str) -> None:
    """The server used to start and answer every /v1 request with 503 while /readyz said ready."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEYSTREAM_")}
    env.update(
        KEYSTREAM_MASTER_KEY=MASTER_KEY,
        KEYSTREAM_DATA_DIR=str(tmp_path / "data"),
        KEYSTREAM_AUDIT_LOG=str(tmp_path / "missing" / "audit.log"),
        KEYSTREAM_PORT="0",
        KEYSTREAM_WORKERS=workers,
    )
    command = [sys.executable, "-m", "app.admin", "serve"]
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    worker_file = "audit.log" if workers == "1" else "audit.log.w0"
    assert lines[0] == (
        "keystream-server: error: cannot start: KEYSTREAM_AUDIT_LOG "
        f"{tmp_path / 'missing' / worker_file}: cannot be opened for appending: No such file or directory"
    )
    assert result.stdout == ""  # no first-start banner: nothing was bootstrapped
