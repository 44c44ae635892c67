"""Several workers (issue 14 item 2): connections spread over them, and a dead worker is replaced."""

from __future__ import annotations

import os
import signal
import socket
import time
from collections import Counter
from pathlib import Path

import httpx
import psutil
import pytest

from bench.service_process import Server, start_server, stop_server

pytestmark = [pytest.mark.e2e, pytest.mark.serial]  # bursts spread over workers by the kernel: alone


def _workers(server: Server) -> list[psutil.Process]:
    """The supervisor's worker processes (those listening on the port)."""
    found = []
    for child in psutil.Process(server.process.pid).children():
        try:
            if any(
                c.status == psutil.CONN_LISTEN and c.laddr.port == server.port
                for c in child.net_connections()
            ):
                found.append(child)
        except psutil.Error:
            continue
    return found


def _spread_of_a_burst(server: Server, workers: list[psutil.Process], size: int = 16) -> list[int]:
    """Open ``size`` connections at once (as wrk does), get one answer on each, count them per worker."""
    sockets = [socket.create_connection((server.host, server.port), timeout=10) for _ in range(size)]
    try:
        for sock in sockets:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        for sock in sockets:
            assert sock.recv(4096).startswith(b"HTTP/1.1 200 ")
        counts = Counter(
            worker.pid
            for worker in workers
            for c in worker.net_connections()
            if c.status == psutil.CONN_ESTABLISHED and c.laddr.port == server.port
        )
        return sorted((counts[worker.pid] for worker in workers), reverse=True)
    finally:
        for sock in sockets:
            sock.close()


def test_bursts_spread_over_workers_and_a_dead_worker_is_replaced(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", tmp_path / "log", KEYSTREAM_WORKERS="2")
    try:
        # The first worker's /healthz answer ended start_server's wait; the second may still be starting.
        deadline = time.monotonic() + 20
        while len(workers := _workers(server)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(workers) == 2
        # One shared socket: all 16 on one worker in 9 of 20 runs. One socket per worker: the kernel hashes
        # each connection (all 16 on one of two workers: 2 ** -15 per run).
        spreads = [_spread_of_a_burst(server, workers) for _ in range(10)]
        assert all(spread[0] < 16 for spread in spreads), spreads
        assert sum(spread[0] + spread[1] for spread in spreads) == 160, spreads

        killed = workers[0].pid
        os.kill(killed, signal.SIGKILL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            replaced = _workers(server)
            if len(replaced) == 2 and killed not in {worker.pid for worker in replaced}:
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"worker {killed} was not replaced: {[w.pid for w in _workers(server)]}")
        with httpx.Client(base_url=server.url, timeout=10) as client:
            for _ in range(8):
                response = client.get("/healthz", headers={"Connection": "close"})
                assert response.status_code == 200
            assert "keystream_inflight_requests" in client.get("/metrics").text
    finally:
        stop_server(server)
    assert server.process.returncode == 0
    assert not [w for w in workers if w.is_running() and w.status() != psutil.STATUS_ZOMBIE]
