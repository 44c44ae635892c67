"""A server with the shamir seal, as a real process: it starts sealed, refuses everything but the seal routes
(the fast encrypt/decrypt and batch paths included) with 503 ``sealed``, unseals at the threshold, seals
again on an admin's request, and after each unseal and after a restart decrypts what it encrypted before.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.service_process import ROOT_TOKEN, Server, start_server, stop_server
from keystream_client import KeystreamClient, SealStatus
from tests.admin_process import run_admin

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def call(
    server: Server, method: str, path: str, token: str | None = ROOT_TOKEN, **kwargs: Any
) -> httpx.Response:
    """One request on a fresh connection (so every worker of a multi-worker server serves some)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    # verify: one context for every call (httpx would read its CA bundle again for each client)
    with httpx.Client(base_url=server.url, headers=headers, timeout=60, verify=server.verify) as client:
        return client.request(method, path, **kwargs)


def init(data: Path, threshold: int, shares: int, **env: str) -> list[str]:
    result = run_admin(
        "operator",
        "init",
        "--shares",
        str(shares),
        "--threshold",
        str(threshold),
        "--json",
        env={
            "KEYSTREAM_SEAL": "shamir",
            "KEYSTREAM_DATA_DIR": str(data),
            "KEYSTREAM_ROOT_TOKEN": ROOT_TOKEN,
            **env,
        },
    )
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    assert printed["root_token"] == ROOT_TOKEN
    shares_made: list[str] = printed["shares"]
    return shares_made


def assert_sealed_everywhere(server: Server) -> None:
    """Every route but the seal routes, /healthz and /metrics answers 503 sealed with Retry-After."""
    assert call(server, "GET", "/healthz").status_code == 200
    for method, path, kwargs in (
        ("GET", "/readyz", {}),
        ("POST", "/v1/keys", {"json": {"name": "other"}}),
        ("GET", "/v1/keys", {}),
        ("POST", "/v1/keys/orders/encrypt", {"content": b"x" * 100}),
        ("POST", "/v1/keys/orders/decrypt", {"content": b"x" * 100}),
        ("POST", "/v1/keys/orders/encrypt/batch", {"json": {"items": [{"plaintext": "eA=="}]}}),
        ("POST", "/v1/keys/orders/rewrap/batch", {"json": {"items": []}}),
        ("POST", "/v1/keys/orders/datakey", {"json": {}}),
        ("GET", "/v1/tokens", {}),
        ("POST", "/v1/sys/seal", {}),
        ("GET", "/docs", {}),
        ("GET", "/openapi.json", {}),
        ("GET", "/no/such/path", {}),
    ):
        response = call(server, method, path, **kwargs)
        assert response.status_code == 503, (path, response.status_code, response.text)
        assert response.json()["error"]["code"] == "sealed", (path, response.text)
        assert response.headers["Retry-After"].isdigit()
    metrics = call(server, "GET", "/metrics", token=None)
    assert metrics.status_code == 200
    sealed = [
        line
        for line in metrics.text.splitlines()
        if line.startswith(("keystream_sealed ", "keystream_sealed{"))
    ]
    assert sealed and all(line.endswith(" 1.0") for line in sealed), sealed


def unseal(server: Server, shares: list[str]) -> dict[str, Any]:
    status: dict[str, Any] = {}
    for share in shares:
        response = call(server, "POST", "/v1/sys/unseal", token=None, json={"key": share})
        assert response.status_code == 200, response.text
        status = response.json()
    return status


def test_a_shamir_server_starts_sealed_unseals_seals_and_loses_nothing(tmp_path: Path) -> None:
    data, log = tmp_path / "data", tmp_path / "audit.log"
    shares = init(data, 3, 5, KEYSTREAM_AUDIT_LOG=str(log))
    foreign = init(tmp_path / "other", 3, 5)
    env = {"KEYSTREAM_SEAL": "shamir", "KEYSTREAM_AUDIT_LOG": str(log)}
    server = start_server(data, tmp_path / "server-1.log", **env)
    made: dict[bytes, bytes] = {}
    try:
        status = call(server, "GET", "/v1/sys/seal-status", token=None).json()
        assert status == {"sealed": True, "type": "shamir", "threshold": 3, "shares": 5, "progress": 0}
        assert_sealed_everywhere(server)

        assert unseal(server, [shares[0]])["progress"] == 1
        typo = shares[1][:20] + ("a" if shares[1][20] != "a" else "b") + shares[1][21:]
        for body, code, status_code, wanted in (
            ({"key": foreign[1]}, "invalid_share", 400, "foreign"),
            ({"key": shares[0]}, "invalid_share", 400, "duplicate"),
            ({"key": typo}, "invalid_share", 400, "mistyped"),
            ({"key": "hello"}, "invalid_share", 400, "not a share"),
            ({"key": 42}, "validation_error", 422, ""),
            ({"key": "k" * 5000}, "validation_error", 422, ""),
            ({}, "validation_error", 422, ""),
            ({"share": shares[1]}, "validation_error", 422, ""),
        ):
            response = call(server, "POST", "/v1/sys/unseal", token=None, json=body)
            assert response.status_code == status_code, response.text
            error = response.json()["error"]
            assert error["code"] == code and wanted in error["message"]
            for share in (*shares, *foreign):
                assert share[5:] not in response.text
        garbage = call(server, "POST", "/v1/sys/unseal", token=None, content=b"\xff{not json")
        assert garbage.status_code == 422
        assert call(server, "GET", "/v1/sys/seal-status", token=None).json()["progress"] == 1
        reset = call(server, "POST", "/v1/sys/unseal", token=None, json={"reset": True})
        assert reset.json()["progress"] == 0

        status = unseal(server, shares[2:5])
        assert status == {"sealed": False, "type": "shamir", "threshold": 3, "shares": 5, "progress": 0}
        assert call(server, "GET", "/readyz").status_code == 200
        assert call(server, "POST", "/v1/keys", json={"name": "orders"}).status_code == 201
        for index in range(4):
            plaintext = f"before seal {index} ".encode() * (index * 2000 + 1)
            response = call(server, "POST", "/v1/keys/orders/encrypt", content=plaintext)
            assert response.status_code == 200, response.text
            made[response.content] = plaintext

        assert call(server, "POST", "/v1/sys/seal", token=None).status_code == 401
        sealed = call(server, "POST", "/v1/sys/seal")
        assert sealed.status_code == 200, sealed.text
        assert sealed.json()["sealed"] is True
        assert_sealed_everywhere(server)
        unseal(server, [shares[1], shares[3], shares[0]])
        decrypt_all(server, made)

        # Unseal attempts are rate-limited per address: a burst, then 429 with Retry-After.
        answers = [
            call(server, "POST", "/v1/sys/unseal", token=None, json={"key": foreign[0]}) for _ in range(40)
        ]
        limited = [answer for answer in answers if answer.status_code == 429]
        assert limited and all(answer.status_code in (200, 429) for answer in answers)
        assert limited[0].json()["error"]["code"] == "too_many_requests"
        assert int(limited[0].headers["Retry-After"]) >= 1
        assert call(server, "GET", "/v1/sys/seal-status", token=None).json()["sealed"] is False
    finally:
        stop_server(server)

    server = start_server(data, tmp_path / "server-2.log", **env)
    try:
        assert_sealed_everywhere(server)
        unseal(server, shares[:3])
        decrypt_all(server, made)
    finally:
        stop_server(server)

    text = log.read_text()
    operations = [
        json.loads(line)["operation"] for line in text.splitlines() if json.loads(line)["type"] == "operator"
    ]
    assert operations == ["init", "unseal", "seal", "unseal", "unseal"]
    for share in (*shares, *foreign):
        assert share[5:] not in text
    for server_log in ("server-1.log", "server-2.log"):
        logged = (tmp_path / server_log).read_text()
        assert "Traceback" not in logged
        for share in shares:
            assert share[5:] not in logged
    verified = run_admin(
        "audit",
        "verify",
        str(log),
        env={"KEYSTREAM_SEAL": "shamir", "KEYSTREAM_DATA_DIR": str(data)},
        stdin="\n".join(shares[2:]),
    )
    assert verified.returncode == 0, verified.stderr


def decrypt_all(server: Server, made: dict[bytes, bytes]) -> None:
    for ciphertext, plaintext in made.items():
        response = call(server, "POST", "/v1/keys/orders/decrypt", content=ciphertext)
        assert response.status_code == 200, response.text
        assert response.content == plaintext


def sealed_by_worker(server: Server) -> dict[str, float]:
    """``keystream_sealed`` per worker pid, from the multiprocess metrics."""
    text = call(server, "GET", "/metrics", token=None).text
    found = {}
    for line in text.splitlines():
        if line.startswith("keystream_sealed{"):
            pid = line.split('pid="', 1)[1].split('"', 1)[0]
            found[pid] = float(line.rsplit(" ", 1)[1])
    return found


def wait_for_workers(
    server: Server, count: int, sealed: float, exclude: Collection[str] = ()
) -> dict[str, float]:
    """Wait (<= 30 s) until ``count`` workers (not those in ``exclude``) all report ``keystream_sealed ==
    sealed``; meanwhile no worker may listen (all killed, replacements starting), or a connection the kernel
    queued for a worker killed before accepting it is reset (ReadError): both mean not yet."""
    deadline = time.monotonic() + 30
    while True:
        try:
            reported = sealed_by_worker(server)
        except (httpx.ConnectError, httpx.ReadError):
            reported = {}
        workers = {pid: value for pid, value in reported.items() if pid not in exclude}
        if len(workers) == count and all(value == sealed for value in workers.values()):
            return workers
        assert time.monotonic() < deadline, workers
        time.sleep(0.2)


def test_every_worker_unseals_together_and_a_restarted_worker_comes_back_unsealed(tmp_path: Path) -> None:
    data, log = tmp_path / "data", tmp_path / "audit.log"
    shares = init(data, 3, 5, KEYSTREAM_AUDIT_LOG=str(log))
    env = {"KEYSTREAM_SEAL": "shamir", "KEYSTREAM_AUDIT_LOG": str(log), "KEYSTREAM_WORKERS": "3"}
    server = start_server(data, tmp_path / "server.log", **env)
    made: dict[bytes, bytes] = {}
    try:
        wait_for_workers(server, 3, 1.0)
        # Each share on a fresh connection: the kernel spreads them over the workers, which count together.
        for given, share in enumerate(shares[:2], start=1):
            assert unseal(server, [share])["progress"] == given
            time.sleep(0.3)  # the supervisor passes the share on
            for _ in range(6):
                assert call(server, "GET", "/v1/sys/seal-status", token=None).json()["progress"] == given
        duplicate = call(server, "POST", "/v1/sys/unseal", token=None, json={"key": shares[0]})
        assert duplicate.status_code == 400 and "duplicate" in duplicate.json()["error"]["message"]
        unseal(server, [shares[4]])
        workers = wait_for_workers(server, 3, 0.0)
        assert call(server, "POST", "/v1/keys", json={"name": "orders"}).status_code == 201
        for index in range(12):  # fresh connections: every worker encrypts some
            plaintext = f"workers {index} ".encode() * (index * 500 + 1)
            response = call(server, "POST", "/v1/keys/orders/encrypt", content=plaintext)
            assert response.status_code == 200, response.text
            made[response.content] = plaintext

        victim = sorted(workers)[0]
        os.kill(int(victim), signal.SIGKILL)
        workers = wait_for_workers(server, 3, 0.0, exclude=[victim])
        assert victim not in workers
        decrypt_all(server, made)

        assert call(server, "POST", "/v1/sys/seal").status_code == 200
        wait_for_workers(server, 3, 1.0)
        for _ in range(9):
            response = call(server, "POST", "/v1/keys/orders/decrypt", content=next(iter(made)))
            assert response.status_code == 503 and response.json()["error"]["code"] == "sealed"
        unseal(server, shares[1:4])
        wait_for_workers(server, 3, 0.0)
        decrypt_all(server, made)
    finally:
        stop_server(server)
    assert "Traceback" not in (tmp_path / "server.log").read_text()
    records = [
        json.loads(line)
        for path in sorted(tmp_path.glob("audit.log*"))
        for line in path.read_text().splitlines()
    ]
    operations = sorted(record["operation"] for record in records if record["type"] == "operator")
    # init; 3 workers unsealed twice and the replacement once; 3 workers sealed.
    assert operations.count("unseal") == 7 and operations.count("seal") == 3, operations
    for share in shares:
        assert all(share[5:] not in path.read_text() for path in tmp_path.glob("*.log*"))


def keystream_cli(
    server: Server, *args: str, stdin: str = "", token: str | None = None
) -> subprocess.CompletedProcess[str]:
    """The client's ``keystream`` command against ``server`` (no token unless given)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("KEYSTREAM_")}
    if token is not None:
        environment["KEYSTREAM_TOKEN"] = token
    return subprocess.run(
        [sys.executable, "-m", "keystream_client.cli", *args, "--url", server.url],
        input=stdin,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_client_cli_unseals_and_seals_a_two_worker_server(tmp_path: Path) -> None:
    data = tmp_path / "data"
    shares = init(data, 2, 3)
    server = start_server(data, tmp_path / "server.log", KEYSTREAM_SEAL="shamir", KEYSTREAM_WORKERS="2")
    try:
        with KeystreamClient(server.url, None) as client:
            assert client.seal_status() == SealStatus(
                sealed=True, threshold=2, shares=3, progress=0, type="shamir"
            )
        typo = shares[0][:30] + ("a" if shares[0][30] != "a" else "b") + shares[0][31:]
        result = keystream_cli(server, "operator", "unseal", stdin=f"{typo}\n{shares[0]}\n\n{shares[2]}\n")
        assert result.returncode == 0, result.stderr
        assert "share refused" in result.stderr and "mistyped" in result.stderr
        assert result.stdout.splitlines()[-1] == "unsealed"
        assert shares[0][5:] not in result.stdout + result.stderr
        wait_for_workers(server, 2, 0.0)
        assert call(server, "POST", "/v1/keys", json={"name": "orders"}).status_code == 201
        made = {}
        for index in range(6):
            response = call(server, "POST", "/v1/keys/orders/encrypt", content=b"cli %d" % index)
            made[response.content] = b"cli %d" % index

        assert keystream_cli(server, "operator", "seal").returncode != 0  # no token
        sealed = keystream_cli(server, "operator", "seal", token=ROOT_TOKEN)
        assert sealed.returncode == 0 and "sealed" in sealed.stdout, sealed.stderr
        wait_for_workers(server, 2, 1.0)
        short = keystream_cli(server, "operator", "unseal", stdin=shares[1] + "\n")
        assert short.returncode == 1 and "still sealed: 1 of 2 shares given" in short.stderr
        status = keystream_cli(server, "operator", "seal-status", "--json")
        assert json.loads(status.stdout)["progress"] == 1
        done = keystream_cli(server, "operator", "unseal", "--reset", stdin=f"{shares[2]}\n{shares[0]}\n")
        assert done.returncode == 0, done.stderr
        wait_for_workers(server, 2, 0.0)
        decrypt_all(server, made)
    finally:
        stop_server(server)


def encrypt_some(server: Server, made: dict[bytes, bytes], label: str, count: int) -> None:
    """``count`` messages encrypted with key ``orders`` into ``made`` (ciphertext: plaintext), each on a fresh
    connection: the label repeated 900 times more per message, so longer labels reach the streaming path's
    sizes (over 64 KiB) too."""
    for index in range(count):
        plaintext = f"{label} {index} ".encode() * (index * 900 + 1)
        response = call(server, "POST", "/v1/keys/orders/encrypt", content=plaintext)
        assert response.status_code == 200, response.text
        made[response.content] = plaintext


def worker_pids(server: Server) -> set[int]:
    """The supervisor's worker processes (its spawned children), read from /proc."""
    supervisor = server.process.pid
    children = Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split()
    pids = set()
    for child in children:
        with contextlib.suppress(OSError):  # a worker that just exited
            if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                pids.add(int(child))
    return pids


def worker_index(pid: int, log: Path) -> int:
    """Which worker ``pid`` is (0, 1, ...): the index of the audit file ``<log>.w<index>`` it holds open."""
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith(f"{log}.w"):
                return int(target.rsplit(".w", 1)[1])
    raise AssertionError(f"worker {pid} holds no {log}.w<index> open")


def wait_for_new_worker(server: Server, known: Collection[int]) -> int:
    """The pid of a worker the supervisor starts after ``known`` (<= 30 s)."""
    deadline = time.monotonic() + 30
    while not (started := worker_pids(server) - set(known)):
        assert time.monotonic() < deadline, "the supervisor started no new worker"
        time.sleep(0.01)
    return min(started)


def assert_stays_sealed(server: Server, made: dict[bytes, bytes], seconds: float) -> None:
    """For ``seconds``, every worker reports itself sealed and every request answers 503 ``sealed``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert set(sealed_by_worker(server).values()) == {1.0}
        response = call(server, "POST", "/v1/keys/orders/decrypt", content=next(iter(made)))
        assert response.status_code == 503 and response.json()["error"]["code"] == "sealed", response.text
        assert call(server, "GET", "/v1/sys/seal-status", token=None).json()["sealed"] is True
        time.sleep(0.1)


def test_a_seal_racing_worker_kills_leaves_every_replacement_sealed(tmp_path: Path) -> None:
    """``POST /v1/sys/seal`` answered 200 by a worker killed right after, while the supervisor paused before
    replacing another worker: both replacements start sealed, none is handed the key the seal retired.

    Worker 0 is killed, and its replacement too as soon as it starts, so the supervisor pauses (a worker that
    dies young is replaced after a second). Meanwhile worker 1, the only one listening, seals and is killed.
    A supervisor that closed worker 1's channel without reading its last message kept the key, handed it to
    both replacements, and the server answered 200 to the seal yet stayed unsealed.
    """
    data, log = tmp_path / "data", tmp_path / "audit.log"
    shares = init(data, 2, 3, KEYSTREAM_AUDIT_LOG=str(log))
    env = {
        "KEYSTREAM_SEAL": "shamir",
        "KEYSTREAM_AUDIT_LOG": str(log),
        "KEYSTREAM_WORKERS": "2",
        # Dumpable workers: their /proc/<pid>/fd (which audit file, so which index) is readable without root.
        "KEYSTREAM_ALLOW_CORE_DUMPS": "true",
    }
    server = start_server(data, tmp_path / "server.log", **env)
    made: dict[bytes, bytes] = {}
    try:
        wait_for_workers(server, 2, 1.0)
        unseal(server, shares[:2])
        wait_for_workers(server, 2, 0.0)
        assert call(server, "POST", "/v1/keys", json={"name": "orders"}).status_code == 201
        encrypt_some(server, made, "race", 8)
        first, second = sorted(worker_pids(server), key=lambda pid: worker_index(pid, log))
        assert (worker_index(first, log), worker_index(second, log)) == (0, 1)

        os.kill(first, signal.SIGKILL)
        young = wait_for_new_worker(server, {first, second})
        os.kill(young, signal.SIGKILL)  # dead within 5 s of its start: the supervisor pauses 1 s
        time.sleep(0.1)
        sealed = call(server, "POST", "/v1/sys/seal")  # only worker 1 listens
        os.kill(second, signal.SIGKILL)
        assert sealed.status_code == 200, sealed.text
        gone = {str(first), str(young), str(second)}
        wait_for_workers(server, 2, 1.0, exclude=gone)
        assert_stays_sealed(server, made, 3.0)

        unseal(server, shares[1:])
        wait_for_workers(server, 2, 0.0, exclude=gone)
        decrypt_all(server, made)
    finally:
        stop_server(server)
    assert "Traceback" not in (tmp_path / "server.log").read_text()


def test_a_server_killed_in_the_middle_of_an_unseal_restarts_sealed_and_loses_nothing(tmp_path: Path) -> None:
    """SIGKILL to a two-worker server (the supervisor and every worker) after 1 of 2 shares: restarted, it is
    sealed with progress 0 (no share outlives the processes), the same share counts again, and with the
    second one every ciphertext made before decrypts."""
    data, log = tmp_path / "data", tmp_path / "audit.log"
    shares = init(data, 2, 3, KEYSTREAM_AUDIT_LOG=str(log))
    env = {"KEYSTREAM_SEAL": "shamir", "KEYSTREAM_AUDIT_LOG": str(log), "KEYSTREAM_WORKERS": "2"}
    made: dict[bytes, bytes] = {}
    server = start_server(data, tmp_path / "server-1.log", **env)
    try:
        unseal(server, shares[:2])
        wait_for_workers(server, 2, 0.0)
        assert call(server, "POST", "/v1/keys", json={"name": "orders"}).status_code == 201
        encrypt_some(server, made, "before the kill", 6)
    finally:
        stop_server(server)

    server = start_server(data, tmp_path / "server-2.log", **env)
    try:
        wait_for_workers(server, 2, 1.0)
        assert unseal(server, [shares[2]])["progress"] == 1
        time.sleep(0.3)  # the supervisor passes the share on
        for _ in range(4):
            assert call(server, "GET", "/v1/sys/seal-status", token=None).json()["progress"] == 1
        workers = worker_pids(server)
        for pid in (server.process.pid, *workers):
            os.kill(pid, signal.SIGKILL)
        server.process.wait(timeout=30)
        deadline = time.monotonic() + 30
        while any(Path(f"/proc/{pid}").exists() for pid in workers):
            assert time.monotonic() < deadline, "a worker outlived its SIGKILL"
            time.sleep(0.05)
    finally:
        stop_server(server)

    server = start_server(data, tmp_path / "server-3.log", **env)
    try:
        wait_for_workers(server, 2, 1.0)
        for _ in range(6):
            status = call(server, "GET", "/v1/sys/seal-status", token=None).json()
            assert status == {"sealed": True, "type": "shamir", "threshold": 2, "shares": 3, "progress": 0}
        assert_sealed_everywhere(server)
        assert unseal(server, [shares[2]])["progress"] == 1  # counts again: not a duplicate
        unseal(server, [shares[0]])
        wait_for_workers(server, 2, 0.0)
        decrypt_all(server, made)
    finally:
        stop_server(server)
    for name in ("server-1.log", "server-2.log", "server-3.log"):
        assert "Traceback" not in (tmp_path / name).read_text()
    verified = run_admin(
        "audit",
        "verify",
        str(log),
        env={"KEYSTREAM_SEAL": "shamir", "KEYSTREAM_DATA_DIR": str(data)},
        stdin="\n".join(shares[:2]),
    )
    assert verified.returncode == 0, verified.stderr
