"""The full-duplex client the streaming users need: a 20 MiB sealed round trip through a real Keystream
(a half-duplex client deadlocks there, see loadtests/duplex.py), early error answers, a refused connection."""

from __future__ import annotations

import os
from collections.abc import Iterator

import httpx
import pytest

from loadtests.duplex import DuplexError, duplex_post
from loadtests.service import Service, free_port, keystream_service

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def service() -> Iterator[Service]:
    with keystream_service(enabled_backends="python,aesni") as running:
        response = httpx.post(
            f"{running.url}/v1/keys",
            json={"name": "duplex"},
            headers={"Authorization": f"Bearer {running.token}"},
            timeout=10,
        )
        assert response.status_code == 201, response.text
        yield running


def post(service: Service, target: str, body: bytes) -> tuple[int, bytes]:
    port = int(service.url.rsplit(":", 1)[1])
    headers = {"Authorization": f"Bearer {service.token}", "Content-Type": "application/octet-stream"}
    response = duplex_post("127.0.0.1", port, target, body, headers, timeout=60)
    return response.status, response.content


def test_20_mib_sealed_round_trip(service: Service) -> None:
    plaintext = os.urandom(20 * 1024 * 1024 + 3)
    status, sealed = post(service, "/v1/keys/duplex/encrypt?backend=aesni", plaintext)
    assert status == 200
    assert len(sealed) > len(plaintext)
    status, opened = post(service, "/v1/keys/duplex/decrypt?backend=aesni", sealed)
    assert status == 200
    assert opened == plaintext


def test_empty_body(service: Service) -> None:
    status, sealed = post(service, "/v1/keys/duplex/encrypt", b"")
    assert status == 200 and sealed
    assert post(service, "/v1/keys/duplex/decrypt", sealed) == (200, b"")


def test_an_early_error_answer_is_returned_not_raised(service: Service) -> None:
    # The service refuses an unknown key before reading the 8 MiB body.
    status, body = post(service, "/v1/keys/no-such-key/encrypt", b"\0" * (8 * 1024 * 1024))
    assert status == 404
    assert b"key_not_found" in body


def test_refused_connection_raises() -> None:
    with pytest.raises(DuplexError, match="connect"):
        duplex_post("127.0.0.1", free_port(), "/", b"x", {}, timeout=5)
