"""Whose address the audit log records: X-Forwarded-For is believed from configured proxies only.

uvicorn believes X-Forwarded-For from 127.0.0.1 by default, and the documented HAProxy, which runs there,
passed the client's own header on: any client chose the ``remote_address`` of its audit records. Now a server
believes the header only from ``KEYSTREAM_FORWARDED_ALLOW_IPS`` (default: nobody), and HAProxy replaces it
with the address it saw.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.haproxy_process import start_haproxy, stop_haproxy
from bench.service_process import ROOT_TOKEN, Server, start_server, stop_server

pytestmark = pytest.mark.e2e
FORGED = "203.0.113.9"  # a documentation address (RFC 5737) no test client has
#: Another loopback address: the client's own, as HAProxy (on 127.0.0.1) sees it.
CLIENT = "127.0.0.2"


def _remote_address(audit_log: Path, request_id: str) -> Any:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for line in audit_log.read_text().splitlines():
            record = json.loads(line)
            if record["request_id"] == request_id and record["type"] == "response":
                return record["remote_address"]
        time.sleep(0.05)
    raise AssertionError(f"no response record for {request_id}")


def _list_keys(base_url: str, source: str = CLIENT, **headers: str) -> str:
    transport = httpx.HTTPTransport(local_address=source)
    with httpx.Client(base_url=base_url, transport=transport, timeout=30) as client:
        response = client.get("/v1/keys", headers={"Authorization": f"Bearer {ROOT_TOKEN}", **headers})
    assert response.status_code == 200, response.text
    return response.headers["keystream-request-id"]


@pytest.fixture
def audited(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Server, Path]]:
    log = tmp_path / "audit.log"
    env: dict[str, str] = getattr(request, "param", {})
    server = start_server(tmp_path / "data", tmp_path / "server.log", KEYSTREAM_AUDIT_LOG=str(log), **env)
    try:
        yield server, log
    finally:
        stop_server(server)


def test_a_client_cannot_choose_its_recorded_address(audited: tuple[Server, Path]) -> None:
    """A client on 127.0.0.1 (where uvicorn's default believed the header) or elsewhere."""
    server, log = audited
    for source in ("127.0.0.1", CLIENT):
        request_id = _list_keys(server.url, source, **{"X-Forwarded-For": FORGED})
        assert _remote_address(log, request_id) == source  # before, from 127.0.0.1: 203.0.113.9


@pytest.mark.parametrize("audited", [{"KEYSTREAM_FORWARDED_ALLOW_IPS": "127.0.0.1"}], indirect=True)
def test_haproxy_replaces_the_header_and_a_trusting_replica_records_the_client(
    audited: tuple[Server, Path], tmp_path: Path
) -> None:
    server, log = audited
    haproxy = start_haproxy(tmp_path, [(server.host, server.port)])
    try:
        request_id = _list_keys(haproxy.url, **{"X-Forwarded-For": FORGED})
        assert _remote_address(log, request_id) == CLIENT  # before: 203.0.113.9 (HAProxy passed it on)
        direct = _list_keys(server.url, **{"X-Forwarded-For": FORGED})
        assert _remote_address(log, direct) == CLIENT  # a client, not the proxy: its header is ignored
    finally:
        stop_haproxy(haproxy)
