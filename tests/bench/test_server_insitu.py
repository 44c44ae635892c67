"""bench/server_insitu.py times the floor's and Keystream's app per request inside a one-worker server, the
same Keystream app in a tight loop, and counts a whole server's instructions per request under callgrind."""

from __future__ import annotations

import shutil
import socket
import time
from pathlib import Path

import pytest

from bench import server_insitu


def test_the_timed_servers_report_every_request_once_and_refusals_fail(tmp_path: Path) -> None:
    env, sealed = server_insitu._prepare(tmp_path)
    assert len(sealed) > len(server_insitu.ONE_KIB)  # a sealed message: header, segment, tag
    started = {kind: server_insitu._start(kind, env, tmp_path, timed=True) for kind in ("floor", "keystream")}
    try:
        for kind, (process, port, report) in started.items():
            server_insitu._collect(process, report)  # whatever came before (nothing): cleared
            for route, body in (("encrypt", server_insitu.ONE_KIB), ("decrypt", sealed)):
                request = server_insitu._request(route, port, body)
                with socket.create_connection(("127.0.0.1", port)) as sock:
                    for _ in range(25):
                        server_insitu._exchange(sock, request)
            time.sleep(0.3)  # the app returns (and is timed) just after its answer has left
            figures = server_insitu._collect(process, report)
            assert figures["requests"] == 50, kind
            assert 0 < figures["cpu_median_us"] <= figures["cpu_mean_us"] * 50
            assert figures["wall_median_us"] > 0
            assert server_insitu._collect(process, report)["requests"] == 0  # the samples were cleared
        _, port, _ = started["keystream"]
        unknown_key = server_insitu._request("encrypt", port, b"x").replace(b"/bench/", b"/no-such-key/")
        with socket.create_connection(("127.0.0.1", port)) as sock, pytest.raises(RuntimeError, match="404"):
            server_insitu._exchange(sock, unknown_key)  # a benchmark never counts refused requests
    finally:
        for process, _, _ in started.values():
            process.terminate()
            process.wait(30)


def test_the_tight_loop_times_the_app_alone() -> None:
    per_request = server_insitu._tight_loop("encrypt", 200)
    assert 1 < per_request < 5000  # microseconds


@pytest.mark.slow
def test_callgrind_counts_a_whole_floor_server(tmp_path: Path) -> None:
    # valgrind comes from scripts/install-tools.sh (make test): missing, this fails, not skips.
    assert shutil.which("valgrind") and shutil.which("callgrind_control"), "valgrind is needed: make tools"
    env, _ = server_insitu._prepare(tmp_path)
    instructions = server_insitu._callgrind("floor", "encrypt", server_insitu.ONE_KIB, env, tmp_path, 20)
    assert 10_000 < instructions < 5_000_000
