"""Keys of scheme ``gcm``: format=sealed streams and batches use Tink's AesGcmHkdfStreaming, end to end.

An imported key gives Tink the same material, so the service's ciphertexts are checked against Tink itself.
"""

from __future__ import annotations

import base64
import io
import os
from collections.abc import AsyncIterator, Callable

import pytest
import tink
from tink import streaming_aead

from app.api.streaming import StreamAbortedError
from app.core.config import Settings
from app.formats.sealed import GCM_TAG_SIZE, ciphertext_length, header_length
from tests.app.api.conftest import Api, running_api
from tests.app.formats.conftest import tink_keyset_handle

SEGMENT = 4096
FIRST = SEGMENT - header_length("aes256") - GCM_TAG_SIZE
LATER = SEGMENT - GCM_TAG_SIZE
SIZES = [0, 1, FIRST - 1, FIRST, FIRST + 1, FIRST + LATER, FIRST + LATER + 1, 5 * LATER + 17]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.mark.parametrize("size", SIZES)
async def test_gcm_key_round_trip_at_segment_boundaries(api: Api, size: int) -> None:
    await api.create_key("g", segment_size=SEGMENT, scheme="gcm")
    plaintext = os.urandom(size)
    encrypted = await api.encrypt("g", plaintext)
    assert encrypted.status_code == 200, encrypted.text
    assert len(encrypted.content) == ciphertext_length(size, "aes256", SEGMENT, "gcm")
    decrypted = await api.decrypt("g", encrypted.content)
    assert decrypted.status_code == 200, decrypted.text
    assert decrypted.content == plaintext


async def test_imported_gcm_key_interoperates_with_tink_both_ways(
    settings_factory: Callable[..., Settings],
) -> None:
    streaming_aead.register()
    material = bytes(range(100, 132))
    tink_aead = tink_keyset_handle([(7, material)], 32, SEGMENT, "gcm").primitive(
        streaming_aead.StreamingAead
    )
    ad = b"tenant=7"
    plaintext = os.urandom(3 * SEGMENT + 5)
    async with running_api(settings_factory(allow_key_import=True)) as api:
        body = {"key": b64(material), "segment_size": SEGMENT, "scheme": "gcm"}
        imported = await api.client.post("/v1/keys/imp/import", json=body, headers=api.auth())
        assert imported.status_code == 201, imported.text
        assert imported.json()["scheme"] == "gcm"
        headers = {"Keystream-Associated-Data": b64(ad)}
        ours = (await api.encrypt("imp", plaintext, headers=headers)).content
        with tink_aead.new_decrypting_stream(io.BytesIO(ours), ad) as stream:
            assert stream.read() == plaintext
        theirs = io.BytesIO()
        theirs.close = lambda: None  # type: ignore[method-assign]  # keep the bytes when Tink closes it
        with tink_aead.new_encrypting_stream(theirs, ad) as stream:
            stream.write(plaintext)
        decrypted = await api.decrypt("imp", theirs.getvalue(), headers=headers)
        assert decrypted.status_code == 200 and decrypted.content == plaintext
        batch = await api.client.post(
            "/v1/keys/imp/encrypt/batch",
            json={"items": [{"plaintext": b64(plaintext), "associated_data": b64(ad)}]},
            headers=api.auth(),
        )
        sealed = base64.b64decode(batch.json()["results"][0]["ciphertext"])
        with tink_aead.new_decrypting_stream(io.BytesIO(sealed), ad) as stream:
            assert stream.read() == plaintext
    with pytest.raises(tink.TinkError):
        with tink_aead.new_decrypting_stream(io.BytesIO(ours), b"other") as stream:
            stream.read()


async def test_gcm_batch_round_trip_and_streaming_interop(api: Api) -> None:
    await api.create_key("b", segment_size=SEGMENT, scheme="gcm")
    items = [
        {"plaintext": b64(b"one"), "reference": "r1"},
        {"plaintext": b64(b"")},
        {"plaintext": b64(bytes(10_000)), "associated_data": b64(b"ctx")},
    ]
    encrypted = await api.client.post("/v1/keys/b/encrypt/batch", json={"items": items}, headers=api.auth())
    assert encrypted.status_code == 200, encrypted.text
    results = encrypted.json()["results"]
    ciphertexts = [base64.b64decode(r["ciphertext"]) for r in results]
    assert [len(c) for c in ciphertexts] == [
        ciphertext_length(n, "aes256", SEGMENT, "gcm") for n in (3, 0, 10_000)
    ]
    streamed = await api.decrypt("b", ciphertexts[2], headers={"Keystream-Associated-Data": b64(b"ctx")})
    assert streamed.content == bytes(10_000)
    by_stream = (await api.encrypt("b", b"streamed")).content
    decrypted = await api.client.post(
        "/v1/keys/b/decrypt/batch",
        json={
            "items": [
                {"ciphertext": b64(ciphertexts[0])},
                {"ciphertext": b64(by_stream)},
                {"ciphertext": b64(ciphertexts[2])},  # without its associated data: an item error
            ]
        },
        headers=api.auth(),
    )
    answer = decrypted.json()["results"]
    assert [base64.b64decode(r["plaintext"]) for r in answer[:2]] == [b"one", b"streamed"]
    assert answer[2]["error"]["code"] == "decryption_failed"


async def test_ciphertexts_of_one_scheme_do_not_open_under_the_other(api: Api) -> None:
    await api.create_key("g", segment_size=SEGMENT, scheme="gcm")
    await api.create_key("c", segment_size=SEGMENT)
    from_gcm = (await api.encrypt("g", b"payload")).content
    from_ctr = (await api.encrypt("c", b"payload")).content
    assert len(from_ctr) - len(from_gcm) == 32 - GCM_TAG_SIZE
    for name, ciphertext in (("c", from_gcm), ("g", from_ctr)):
        refused = await api.decrypt(name, ciphertext)
        assert refused.status_code == 400
        assert refused.json()["error"]["code"] == "decryption_failed"


async def test_gcm_rotation_decrypts_old_versions(api: Api) -> None:
    await api.create_key("r", segment_size=SEGMENT, scheme="gcm")
    old = (await api.encrypt("r", b"old")).content
    rotated = await api.client.post("/v1/keys/r/rotate", headers=api.auth())
    assert rotated.json()["scheme"] == "gcm"
    decrypted = await api.decrypt("r", old)
    assert decrypted.content == b"old" and decrypted.headers["Keystream-Key-Version"] == "1"


async def test_tampered_gcm_segments(api: Api) -> None:
    await api.create_key("t", segment_size=SEGMENT, scheme="gcm")
    encrypted = bytearray((await api.encrypt("t", os.urandom(5 * SEGMENT))).content)
    first = bytearray(encrypted)
    first[100] ^= 1
    response = await api.decrypt("t", bytes(first))
    assert response.status_code == 400 and response.json()["error"]["code"] == "decryption_failed"
    encrypted[3 * SEGMENT + 10] ^= 1

    async def in_segments() -> AsyncIterator[bytes]:
        for start in range(0, len(encrypted), SEGMENT):
            yield bytes(encrypted[start : start + SEGMENT])

    with pytest.raises(StreamAbortedError, match="decryption_failed"):
        await api.client.post("/v1/keys/t/decrypt", content=in_segments(), headers=api.auth())


@pytest.mark.parametrize("backend", ["python", "hwsim"])
async def test_other_backends_write_the_same_format(api: Api, backend: str) -> None:
    await api.create_key("o", segment_size=SEGMENT, scheme="gcm")
    plaintext = os.urandom(2 * SEGMENT)
    encrypted = await api.encrypt("o", plaintext, backend=backend)
    assert encrypted.status_code == 200, encrypted.text
    assert (await api.decrypt("o", encrypted.content)).content == plaintext
