"""Automatic rotation against real servers (issue 12 §5): a key with a shortened ``auto_rotate_period`` (the
testing-only ``KEYSTREAM_AUTO_ROTATE_MIN_PERIOD``) rotates once per period, not once per worker or replica.

Two set-ups: one SQLite server with 2 workers, and 2 replicas of 2 workers each on one PostgreSQL
database (four rotators; the contract tests race six on both keystores). Each checks every 0.2 s. While the
key is watched, consecutive versions are at least a period apart (two rotators rotating one due key would
make two versions milliseconds apart), the number of versions fits the elapsed time,
``keystream_key_auto_rotations_total`` summed over the servers equals the rotations, an encrypt after a
rotation uses the new version at once, and every older ciphertext decrypts.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from bench.bench_propagation import replicas
from bench.service_process import start_server, stop_server

pytestmark = [pytest.mark.e2e, pytest.mark.serial]  # once per period, with a 2 s period: alone

PERIOD = 2
WATCH_SECONDS = 7.5
ENV = {
    "KEYSTREAM_AUTO_ROTATE_MIN_PERIOD": "1",
    "KEYSTREAM_AUTO_ROTATE_CHECK_INTERVAL": "0.2",
    "KEYSTREAM_WORKERS": "2",
}


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def auto_rotations(client: httpx.Client) -> float:
    text = client.get("/metrics").text
    found = re.search(r"^keystream_key_auto_rotations_total ([0-9.e+]+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


@contextlib.contextmanager
def sqlite_server(tmp_path: Path) -> Iterator[list[httpx.Client]]:
    server = start_server(tmp_path / "data", tmp_path / "server.log", **ENV)
    try:
        with server.client() as client:
            yield [client]
    finally:
        stop_server(server)


@contextlib.contextmanager
def postgres_replicas(tmp_path: Path, url: str) -> Iterator[list[httpx.Client]]:
    with replicas(2, tmp_path, url, ENV) as group:
        yield [replica.client for replica in group]


def watch_rotations(clients: list[httpx.Client]) -> None:
    first = clients[0]
    before = sum(auto_rotations(client) for client in clients)
    created = first.post(
        "/v1/keys", json={"name": "auto", "auto_rotate_period": PERIOD, "segment_size": 4096}
    )
    assert created.status_code == 201, created.text
    assert created.json()["auto_rotate_period"] == PERIOD
    started = time.monotonic()
    ciphertexts: dict[int, bytes] = {}
    turn = 0
    while time.monotonic() - started < WATCH_SECONDS:
        client = clients[turn % len(clients)]
        turn += 1
        sealed = client.post("/v1/keys/auto/encrypt", content=f"message {turn}".encode())
        assert sealed.status_code == 200, sealed.text
        ciphertexts.setdefault(int(sealed.headers["keystream-key-version"]), sealed.content)
        time.sleep(0.05)
    stopped = first.patch("/v1/keys/auto", json={"auto_rotate_period": 0})  # no more rotations from here
    assert stopped.status_code == 200, stopped.text
    elapsed = time.monotonic() - started
    info = first.get("/v1/keys/auto").json()
    versions = [(v["version"], _time(v["created_at"])) for v in info["versions"]]
    rotations = info["latest_version"] - 1
    gaps = [(later - earlier).total_seconds() for (_, earlier), (_, later) in itertools.pairwise(versions)]
    # once per period: never two versions less than a period apart (a second rotator would make one)
    assert all(gap >= PERIOD for gap in gaps), gaps
    assert 2 <= rotations <= elapsed / PERIOD + 1, (rotations, elapsed, gaps)
    # the metric counts each rotation once, wherever it happened (the scrape of each server sums its workers)
    deadline = time.monotonic() + 5
    while sum(auto_rotations(client) for client in clients) - before != rotations:
        assert time.monotonic() < deadline, (sum(auto_rotations(c) for c in clients) - before, rotations)
        time.sleep(0.1)
    # encrypting right after a rotation uses the new version, through every server
    assert len(ciphertexts) >= 2, sorted(ciphertexts)
    rotated = first.post("/v1/keys/auto/rotate")
    assert rotated.status_code == 200
    newest = rotated.json()["latest_version"]
    for client in clients:
        sealed = client.post("/v1/keys/auto/encrypt", content=b"after")
        assert sealed.headers["keystream-key-version"] == str(newest)
        ciphertexts[newest] = sealed.content
    # and every older ciphertext still decrypts, through every server
    for version, sealed_bytes in ciphertexts.items():
        for client in clients:
            opened = client.post("/v1/keys/auto/decrypt", content=sealed_bytes)
            assert opened.status_code == 200, (version, opened.text)
            assert opened.headers["keystream-key-version"] == str(version)


def test_two_workers_on_sqlite_rotate_a_due_key_once_per_period(tmp_path: Path) -> None:
    with sqlite_server(tmp_path) as clients:
        watch_rotations(clients)


def test_two_replicas_of_two_workers_on_postgresql_rotate_a_due_key_once_per_period(
    tmp_path: Path, pg_url: str
) -> None:
    with postgres_replicas(tmp_path, pg_url) as clients:
        watch_rotations(clients)
