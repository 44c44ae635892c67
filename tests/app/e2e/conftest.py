"""A real server (uvicorn, uvloop, httptools) in a subprocess on 127.0.0.1 and a free port."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench.service_process import Server, start_server, stop_server


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for the e2e session with every available backend; keys ``stream`` (1 MiB segments),
    ``small`` (4 KiB segments) and ``stream-gcm`` (scheme gcm, 1 MiB segments)."""
    base = tmp_path_factory.mktemp("e2e")
    running = start_server(base / "data", base / "server.log")
    try:
        with running.client() as client:
            for name, segment in (("stream", 1 << 20), ("small", 4096)):
                response = client.post("/v1/keys", json={"name": name, "segment_size": segment})
                assert response.status_code == 201, response.text
            gcm = client.post("/v1/keys", json={"name": "stream-gcm", "scheme": "gcm"})
            assert gcm.status_code == 201, gcm.text
        yield running
    finally:
        stop_server(running)
