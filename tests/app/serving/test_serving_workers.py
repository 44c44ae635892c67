"""Worker defaults and the supervisor's port reservation (the e2e tests run the workers themselves)."""

from __future__ import annotations

import os
import socket

import pytest

from app.core.config import Settings
from app.serving import reserve_port


def test_default_workers_are_the_cpus_this_process_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KEYSTREAM_WORKERS", raising=False)
    assert Settings(_env_file=None).workers == min(64, len(os.sched_getaffinity(0)))  # type: ignore[call-arg]
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
    assert Settings(_env_file=None).workers == 3  # type: ignore[call-arg]


def test_reserved_port_is_bound_but_takes_no_connections() -> None:
    with reserve_port("127.0.0.1", 0) as reserved:
        port = reserved.getsockname()[1]
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        listener.bind(("127.0.0.1", port))  # a worker joins the reservation's SO_REUSEPORT group
        listener.close()


def test_a_port_held_by_another_reuseport_listener_is_refused() -> None:
    """Another instance's SO_REUSEPORT group must not be joined silently (it would share the traffic)."""
    other = socket.socket()
    other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    other.bind(("127.0.0.1", 0))
    other.listen()
    try:
        with pytest.raises(OSError):
            reserve_port("127.0.0.1", other.getsockname()[1]).close()
    finally:
        other.close()
