"""A streamed sealed answer declares its length when the request declared its own.

The body is streamed here (``small_body_max_bytes=0``), so every length goes through the streaming pump, and
the test compares the declared length with the bytes the app actually sent (the ASGI transport does not
check them; uvicorn does, and aborts a stream that ends short of it).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, MutableMapping
from typing import Any

import pytest

from app.core.config import Settings
from app.formats.sealed import header_length
from tests.app.api.conftest import ROOT_TOKEN, Api, running_api

SEGMENT = 4096
TAG_SIZES = {"ctr-hmac": 32, "gcm": 16}


def _sizes(scheme: str) -> list[int]:
    """Plaintext lengths around the segment edges: the first segment is shorter by the header."""
    later = SEGMENT - TAG_SIZES[scheme]
    first = later - header_length("aes256")
    edges = [0, 1, first - 1, first, first + 1, first + later - 1, first + later, first + later + 1]
    return [*edges, first + 3 * later, first + 3 * later + 17, 70_000]


@pytest.fixture
async def streaming(settings_factory: Callable[..., Settings]) -> AsyncIterator[Api]:
    """An app that streams every body (none is small)."""
    async with running_api(settings_factory(small_body_max_bytes=0)) as api:
        yield api


@pytest.mark.parametrize("scheme", ["ctr-hmac", "gcm"])
async def test_the_declared_length_is_what_is_sent_for_encrypt_and_decrypt(
    streaming: Api, scheme: str
) -> None:
    await streaming.create_key("k", segment_size=SEGMENT, scheme=scheme)
    for size in _sizes(scheme):
        plaintext = os.urandom(size)
        encrypted = await streaming.encrypt("k", plaintext)
        assert encrypted.status_code == 200, encrypted.text
        assert int(encrypted.headers["content-length"]) == len(encrypted.content), size
        decrypted = await streaming.decrypt("k", encrypted.content)
        assert decrypted.status_code == 200, decrypted.text
        assert int(decrypted.headers["content-length"]) == len(decrypted.content) == size
        assert decrypted.content == plaintext


async def _chunks(data: bytes, size: int = 7001) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


@pytest.mark.parametrize("scheme", ["ctr-hmac", "gcm"])
async def test_a_chunked_request_gets_a_chunked_answer(streaming: Api, scheme: str) -> None:
    await streaming.create_key("k", segment_size=SEGMENT, scheme=scheme)
    plaintext = os.urandom(50_000)
    encrypted = await streaming.client.post(
        "/v1/keys/k/encrypt", content=_chunks(plaintext), headers=Api.auth()
    )
    assert encrypted.status_code == 200
    assert "content-length" not in encrypted.headers
    decrypted = await streaming.client.post(
        "/v1/keys/k/decrypt", content=_chunks(encrypted.content), headers=Api.auth()
    )
    assert decrypted.status_code == 200
    assert "content-length" not in decrypted.headers
    assert decrypted.content == plaintext


@pytest.mark.parametrize(
    ("length", "fragment"),
    [
        (39, "shorter than the 40-byte header"),
        (40, "segment 0 is missing"),
        (SEGMENT + 20, "segment 1 is truncated: 20 bytes, shorter than its 32-byte tag"),
    ],
)
async def test_a_ciphertext_of_an_impossible_length_is_a_400_before_any_output(
    streaming: Api, length: int, fragment: str
) -> None:
    await streaming.create_key("k", segment_size=SEGMENT)
    response = await streaming.decrypt("k", os.urandom(length))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "decryption_failed"
    assert fragment in response.json()["error"]["message"]


def _scope(path: str, length: int) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 50000),
        "scheme": "http",
        "method": "POST",
        "root_path": "",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [
            (b"host", b"test"),
            (b"content-length", str(length).encode()),
            (b"authorization", f"Bearer {ROOT_TOKEN}".encode()),
            (b"content-type", b"application/octet-stream"),
        ],
        "state": {},
    }


@pytest.mark.parametrize("scheme", ["ctr-hmac", "gcm"])
async def test_a_client_gone_before_its_declared_length_ends_the_stream_quietly(
    streaming: Api, scheme: str
) -> None:
    """As before the answer declared a length: the pump stops on the disconnect and ends the body (the
    server, seeing the connection gone, writes nothing more); no error."""
    await streaming.create_key("k", segment_size=SEGMENT, scheme=scheme)
    declared = 10 * SEGMENT
    messages: list[MutableMapping[str, Any]] = [
        {"type": "http.request", "body": os.urandom(3 * SEGMENT + 5), "more_body": True},
        {"type": "http.disconnect"},
    ]
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> MutableMapping[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    await streaming.app(_scope("/v1/keys/k/encrypt", declared), receive, send)
    start, *body = sent
    assert start["status"] == 200
    headers = dict(start["headers"])
    assert int(headers[b"content-length"]) > declared
    assert body[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
    assert 0 < sum(len(message["body"]) for message in body) < int(headers[b"content-length"])
