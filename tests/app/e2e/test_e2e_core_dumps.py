"""Core dumps: a served process turns them off for itself unless ``KEYSTREAM_ALLOW_CORE_DUMPS=true``."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import psutil
import pytest

from bench.service_process import Server, start_server, stop_server

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # core dumps of real servers (no timing)


def _core_limit(pid: int) -> tuple[str, str]:
    """The soft and hard ``Max core file size`` of ``pid`` as ``/proc/<pid>/limits`` prints them."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max core file size"):
            soft, hard = line.split()[4:6]
            return soft, hard
    raise AssertionError(f"no core limit in /proc/{pid}/limits")


def _memory_facts(server: Server) -> dict[str, str]:
    response = httpx.get(f"{server.url}/readyz", timeout=10)
    assert response.status_code == 200, response.text
    facts: dict[str, str] = response.json()["memory"]
    return facts


def test_a_served_process_cannot_be_dumped_and_its_core_limit_is_zero(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", tmp_path / "log")  # one worker: the served process itself
    try:
        assert _core_limit(server.process.pid) == ("0", "0")
        # prctl(PR_GET_DUMPABLE) answered by the served process itself
        assert _memory_facts(server) == {"core_dumps": "off", "key_material": "locked"}
    finally:
        stop_server(server)


def test_every_worker_and_the_supervisor_turn_core_dumps_off(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", tmp_path / "log", KEYSTREAM_WORKERS="2")
    try:
        processes = [
            server.process.pid,
            *(child.pid for child in psutil.Process(server.process.pid).children()),
        ]
        assert len(processes) >= 3
        assert {_core_limit(pid) for pid in processes} == {("0", "0")}
    finally:
        stop_server(server)


def test_allow_core_dumps_leaves_the_process_dumpable(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", tmp_path / "log", KEYSTREAM_ALLOW_CORE_DUMPS="true")
    try:
        assert _core_limit(server.process.pid) == _core_limit(os.getpid())  # inherited, left as it was
        assert _memory_facts(server)["core_dumps"] == "on"
    finally:
        stop_server(server)
