"""Propagation of key and token changes across 3 replicas (issue 10, section 2), SQLite and PostgreSQL.

Starts ``replicas`` server processes (workers=1 each) on one keystore: one SQLite file, or a throwaway
PostgreSQL cluster (:mod:`tests.pg_cluster`). Then, with the client polling tightly:

* rotation: rotate through replica A; delay from A's 200 to the first encrypt through B whose
  ``Keystream-Key-Version`` is the new version (B had the key cached);
* revocation: revoke a token through A that B and C had cached; delay until both answer 401;
* data loss: a randomized sequence of rotate / delete + re-create across replicas; after each change a
  replica that had the key cached encrypts and another decrypts at once; undecryptable ciphertexts counted.

``python -m bench.bench_propagation`` writes bench/results/propagation.json (p50/p99 in ms per keystore).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
ROOT = "ks_b0b0b0b0cafe_propagation-bench-root-secret-0123"
MASTER = "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA="
RESULTS = REPO / "bench" / "results" / "propagation.json"
#: Give up on one propagation after this many seconds (counted as a failure of the target).
GIVE_UP = 5.0


@dataclass
class Replica:
    """One server process and a client for it."""

    process: subprocess.Popen[bytes]
    client: httpx.Client


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def replicas(
    count: int, data_dir: Path, database_url: str | None, env_extra: dict[str, str]
) -> Iterator[list[Replica]]:
    """Start ``count`` servers on one keystore; stop them afterwards.

    Raises:
        RuntimeError: a server did not answer ``/readyz`` within 30 s.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEYSTREAM_")}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    env.update(
        {
            "KEYSTREAM_ROOT_TOKEN": ROOT,
            "KEYSTREAM_MASTER_KEY": MASTER,
            "KEYSTREAM_WORKERS": "1",
            "KEYSTREAM_LOG_LEVEL": "warning",
            "KEYSTREAM_TIMEOUT_GRACEFUL_SHUTDOWN": "2",
            "PYTHONPATH": str(REPO),
            **env_extra,
        }
    )
    if database_url:
        env["KEYSTREAM_DATABASE_URL"] = database_url
    started: list[Replica] = []
    try:
        for index in range(count):
            port = _free_port()
            log_path = data_dir / f"replica{index}.log"
            command = [sys.executable, "-m", "app.admin", "serve", "--host", "127.0.0.1", "--port", str(port)]
            command += ["--data-dir", str(data_dir)]
            with log_path.open("wb") as log:
                process = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
            client = httpx.Client(
                base_url=f"http://127.0.0.1:{port}", timeout=10, headers={"Authorization": f"Bearer {ROOT}"}
            )
            started.append(Replica(process, client))
            deadline = time.monotonic() + 30
            while True:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"replica {index} did not start: {log_path.read_text()[-1500:]}")
                with contextlib.suppress(httpx.HTTPError):
                    if client.get("/readyz").status_code == 200:
                        break
                time.sleep(0.1)
        yield started
    finally:
        for replica in started:
            replica.process.terminate()
        for replica in started:
            try:
                replica.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                replica.process.kill()
            replica.client.close()


def _encrypt(replica: Replica, name: str, data: bytes) -> httpx.Response:
    return replica.client.post(f"/v1/keys/{name}/encrypt", content=data)


def measure_rotation(group: list[Replica], changes: int) -> list[float]:
    """Delay (s) from a rotation's 200 through A to the first encrypt through B with the new version."""
    name = f"rot-{secrets.token_hex(3)}"
    group[0].client.post("/v1/keys", json={"name": name}).raise_for_status()
    delays = []
    for index in range(changes):
        a, b = group[index % len(group)], group[(index + 1) % len(group)]
        _encrypt(b, name, b"warm").raise_for_status()  # B has the current version cached
        response = a.client.post(f"/v1/keys/{name}/rotate")
        response.raise_for_status()
        done = time.perf_counter()
        version = str(response.json()["latest_version"])
        while True:
            reply = _encrypt(b, name, b"x")
            reply.raise_for_status()
            if reply.headers["Keystream-Key-Version"] == version:
                break
            if time.perf_counter() - done > GIVE_UP:
                break
        delays.append(time.perf_counter() - done)
    return delays


def measure_revocation(group: list[Replica], changes: int) -> list[float]:
    """Delay (s) from a revocation's 204 through A until every other replica answers 401."""
    name = f"rev-{secrets.token_hex(3)}"
    group[0].client.post("/v1/keys", json={"name": name}).raise_for_status()
    delays = []
    for index in range(changes):
        a = group[index % len(group)]
        created = a.client.post("/v1/tokens", json={"scopes": ["encrypt"], "key_patterns": [name]})
        created.raise_for_status()
        token, token_id = created.json()["token"], created.json()["id"]
        headers = {"Authorization": f"Bearer {token}"}
        others = [replica for replica in group if replica is not a]
        for replica in others:  # cached everywhere
            replica.client.post(f"/v1/keys/{name}/encrypt", content=b"x", headers=headers).raise_for_status()
        a.client.delete(f"/v1/tokens/{token_id}").raise_for_status()
        done = time.perf_counter()
        pending = list(others)
        while pending and time.perf_counter() - done < GIVE_UP:
            pending = [
                r
                for r in pending
                if r.client.post(f"/v1/keys/{name}/encrypt", content=b"x", headers=headers).status_code != 401
            ]
        delays.append(time.perf_counter() - done)
    return delays


def measure_data_loss(group: list[Replica], changes: int, seed: int) -> dict[str, int]:
    """Random rotate / delete + re-create across replicas; every ciphertext decrypted at once elsewhere."""
    rng = random.Random(seed)
    name = f"dl-{secrets.token_hex(3)}"
    group[0].client.post("/v1/keys", json={"name": name, "deletion_allowed": True}).raise_for_status()
    made = ciphertexts = undecryptable = recreate_refusals = deletes = 0
    while made < changes:
        for replica in group:  # every replica has the current key cached
            _encrypt(replica, name, b"warm").raise_for_status()
        a, b, c = rng.sample(group, 3)
        if rng.random() < 0.6:
            a.client.post(f"/v1/keys/{name}/rotate").raise_for_status()
            made += 1
        else:
            a.client.delete(f"/v1/keys/{name}").raise_for_status()
            deletes += 1
            while True:  # re-create through another replica as soon as the tombstone allows
                reply = b.client.post("/v1/keys", json={"name": name, "deletion_allowed": True})
                if reply.status_code == 201:
                    break
                assert reply.status_code == 409 and reply.json()["error"]["code"] == "key_recently_deleted", (
                    reply.text
                )
                recreate_refusals += 1
                time.sleep(0.05)
            made += 2
        for encryptor, decryptor in ((b, c), (c, a), (a, b)):
            plaintext = secrets.token_bytes(64)
            sealed = _encrypt(encryptor, name, plaintext)
            sealed.raise_for_status()
            ciphertexts += 1
            opened = decryptor.client.post(f"/v1/keys/{name}/decrypt", content=sealed.content)
            if opened.status_code != 200 or opened.content != plaintext:
                undecryptable += 1
    return {
        "changes": made,
        "deletes": deletes,
        "ciphertexts": ciphertexts,
        "undecryptable": undecryptable,
        "recreate_refusals_409": recreate_refusals,
    }


def delay_summary(delays: list[float]) -> dict[str, Any]:
    """count, p50, p99 and max (ms) of delays given in seconds."""
    ms = sorted(delay * 1000 for delay in delays)
    p99 = ms[min(len(ms) - 1, max(0, round(0.99 * len(ms)) - 1))]
    return {
        "count": len(ms),
        "p50_ms": round(statistics.median(ms), 2),
        "p99_ms": round(p99, 2),
        "max_ms": round(ms[-1], 2),
    }


@dataclass
class Run:
    """Results of one keystore's run."""

    keystore: str
    rotation: dict[str, Any] = field(default_factory=dict)
    revocation: dict[str, Any] = field(default_factory=dict)
    data_loss: dict[str, int] = field(default_factory=dict)


def run(
    keystore: str,
    changes: int,
    data_dir: Path,
    database_url: str | None,
    env_extra: dict[str, str] | None = None,
    count: int = 3,
    data_loss_changes: int | None = None,
) -> Run:
    """Start ``count`` replicas on the keystore and measure everything with ``changes`` changes each."""
    with replicas(count, data_dir, database_url, env_extra or {}) as group:
        result = Run(keystore)
        result.rotation = delay_summary(measure_rotation(group, changes))
        result.revocation = delay_summary(measure_revocation(group, changes))
        loss_changes = data_loss_changes if data_loss_changes is not None else max(changes // 4, 6)
        result.data_loss = measure_data_loss(group, loss_changes, seed=changes)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=200)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from tests.pg_cluster import remove_cluster, start_cluster

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        results.append(run("sqlite", args.changes, Path(tmp), None, data_loss_changes=args.changes))
        cluster = start_cluster()
        try:
            with tempfile.TemporaryDirectory() as tmp_pg:
                results.append(
                    run(
                        "postgres",
                        args.changes,
                        Path(tmp_pg),
                        cluster.new_schema(),
                        data_loss_changes=args.changes,
                    )
                )
        finally:
            remove_cluster(cluster)
    payload = {
        "replicas": 3,
        "changes": args.changes,
        "load_average_at_end": os.getloadavg(),
        "results": [vars(result) for result in results],
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(payload, indent=2) + "\n")
    print(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
