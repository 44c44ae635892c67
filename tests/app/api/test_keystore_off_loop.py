"""No keystore read on the event loop: a ciphertext that none of the cached key versions opens makes the
decryptor re-read the key's versions (another worker may have rotated it a moment ago); that read must run in
a worker thread, whichever route and body size, so a slow or unreachable database never stalls the loop."""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator

import pytest

from app.keystore import KeyInfo
from tests.app.api.conftest import Api


class ReadThreads:
    """Wraps the keystore's ``get_key`` to note which threads read key metadata."""

    def __init__(self, api: Api) -> None:
        self.keystore = api.app.state.keystream.keystore
        self.real = self.keystore.get_key
        self.threads: list[int] = []

    def __enter__(self) -> ReadThreads:
        def get_key(name: str) -> KeyInfo:
            self.threads.append(threading.get_ident())
            return self.real(name)

        self.keystore.get_key = get_key
        return self

    def __exit__(self, *exc: object) -> None:
        del self.keystore.get_key


@pytest.fixture
def reads(api: Api) -> Iterator[ReadThreads]:
    with ReadThreads(api) as value:
        yield value


def tampered(ciphertext: bytes) -> bytes:
    """Flip a byte of the first segment's ciphertext: no version verifies it."""
    data = bytearray(ciphertext)
    data[60] ^= 1
    return bytes(data)


@pytest.mark.parametrize("size", [10, 200_000], ids=["read-whole", "streamed"])
@pytest.mark.parametrize("operation", ["decrypt", "rewrap"])
async def test_the_fresh_read_of_a_keys_versions_leaves_the_event_loop(
    api: Api, reads: ReadThreads, operation: str, size: int
) -> None:
    await api.create_key("k", segment_size=4096)
    sealed = (await api.encrypt("k", b"p" * size)).content
    loop_thread = threading.get_ident()
    reads.threads.clear()
    response = await api.client.post(f"/v1/keys/k/{operation}", content=tampered(sealed), headers=api.auth())
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "decryption_failed"
    assert reads.threads, "the key's versions were not read again"
    assert loop_thread not in reads.threads, "the keystore was read on the event loop"


@pytest.mark.parametrize("operation", ["decrypt", "rewrap"])
async def test_the_batch_routes_read_again_off_the_event_loop(
    api: Api, reads: ReadThreads, operation: str
) -> None:
    await api.create_key("k", segment_size=4096)
    sealed = (await api.encrypt("k", b"p" * 100)).content
    item = {"ciphertext": base64.b64encode(tampered(sealed)).decode()}
    loop_thread = threading.get_ident()
    reads.threads.clear()
    response = await api.client.post(
        f"/v1/keys/k/{operation}/batch", json={"items": [item]}, headers=api.auth()
    )
    assert response.status_code == 200, response.text
    assert response.json()["results"][0]["error"]["code"] == "decryption_failed"
    assert reads.threads, "the key's versions were not read again"
    assert loop_thread not in reads.threads, "the keystore was read on the event loop"
