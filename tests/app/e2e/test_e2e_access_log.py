"""The access log (``KEYSTREAM_ACCESS_LOG=true``) of a real server names route templates, never paths or
query strings: a token sent as ``?token=`` used to be written to the log as the client sent it."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bench.service_process import ROOT_TOKEN, Server, start_server, stop_server

pytestmark = pytest.mark.e2e
SECRET = "ks_0123456789abcdef_QuerySecretThatMustNotBeLogged"
#: uvicorn's access line: ``INFO:     127.0.0.1:PORT - "METHOD PATH HTTP/1.1" STATUS PHRASE``.
ACCESS_LINE = re.compile(r'^INFO: +\S+ - "(?P<method>[A-Z]+) (?P<path>\S+) HTTP/1\.1" (?P<status>\d{3})\b')


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("access-log")
    server = start_server(
        base / "data", base / "server.log", KEYSTREAM_ACCESS_LOG="true", KEYSTREAM_LOG_LEVEL="info"
    )
    try:
        yield server
    finally:
        stop_server(server)


def _access_lines(log: Path, count: int) -> list[tuple[str, str, str]]:
    deadline = time.monotonic() + 10
    while True:
        found = [m for line in log.read_text().splitlines() if (m := ACCESS_LINE.match(line))]
        if len(found) >= count or time.monotonic() > deadline:
            return [(m["method"], m["path"], m["status"]) for m in found]
        time.sleep(0.05)


def test_lines_name_route_templates_and_no_query_value(logged: Server) -> None:
    auth = {"Authorization": f"Bearer {ROOT_TOKEN}"}
    octets = {**auth, "Content-Type": "application/octet-stream"}
    with httpx.Client(base_url=logged.url, timeout=30) as client:
        before = len(_access_lines(logged.log, 0))
        assert client.post("/v1/keys", json={"name": "payroll-2026"}, headers=auth).status_code == 201
        sent = [
            client.get(f"/healthz?token={SECRET}"),
            client.post(f"/v1/keys/payroll-2026/encrypt?token={SECRET}", content=b"x", headers=octets),
            client.post(
                "/v1/keys/payroll-2026/encrypt?format=raw&iv=" + "ab" * 16, content=b"x", headers=octets
            ),
            client.post(f"/v1/keys/payroll-2026/encrypt?token={SECRET}", content=b"x"),  # 401 on the hot path
            client.get(f"/v1/keys/payroll-2026?token={SECRET}"),  # 401 before routing
            client.get(f"/no/such/{SECRET}?token={SECRET}"),  # 404
        ]
    statuses = [response.status_code for response in sent]
    lines = _access_lines(logged.log, before + 1 + len(sent))[before + 1 :]
    text = logged.log.read_text()
    assert SECRET not in text and "payroll-2026" not in text and "ab" * 16 not in text
    assert lines == [
        ("GET", "/healthz", str(statuses[0])),
        ("POST", "/v1/keys/{name}/encrypt", str(statuses[1])),
        ("POST", "/v1/keys/{name}/encrypt", str(statuses[2])),
        ("POST", "/v1/keys/{name}/encrypt", "401"),
        ("GET", "/v1/keys/{name}", "401"),
        ("GET", "unmatched", "404"),
    ]  # before: "/healthz?token=ks_...", "/v1/keys/payroll-2026/encrypt?format=raw&iv=abab..."
