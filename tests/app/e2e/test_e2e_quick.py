from __future__ import annotations

import hashlib
import os

from bench.duplex_client import duplex_request
from tests.app.e2e.conftest import Server


async def test_quick(server: Server) -> None:
    data = os.urandom(8 << 20)
    enc = await duplex_request(
        server.host, server.port, "POST", "/v1/keys/stream/encrypt", server.auth, data, keep_body=True
    )
    assert enc.status == 200
    dec = await duplex_request(
        server.host, server.port, "POST", "/v1/keys/stream/decrypt", server.auth, enc.body, keep_body=True
    )
    assert dec.status == 200
    assert hashlib.sha256(dec.body).digest() == hashlib.sha256(data).digest()
