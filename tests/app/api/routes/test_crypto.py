"""Streaming encrypt/decrypt in process: sealed and raw, associated data, versions, backends, errors."""

from __future__ import annotations

import base64
import os
from collections.abc import AsyncIterator

import pytest

from app.api.streaming import StreamAbortedError
from app.formats.sealed import ciphertext_length, header_length
from tests.app.api.conftest import Api

SEGMENT = 4096


async def _sealed_sizes() -> list[int]:
    first = SEGMENT - header_length("aes256") - 32
    later = SEGMENT - 32
    return [0, 1, first - 1, first, first + 1, first + later, first + later + 1, 5 * later + 17]


@pytest.mark.parametrize("size_index", range(8))
async def test_sealed_round_trip_at_segment_boundaries(api: Api, size_index: int) -> None:
    size = (await _sealed_sizes())[size_index]
    await api.create_key("s", segment_size=SEGMENT)
    plaintext = os.urandom(size)
    encrypted = await api.encrypt("s", plaintext)
    assert encrypted.status_code == 200, encrypted.text
    assert encrypted.headers["content-type"] == "application/octet-stream"
    assert len(encrypted.content) == ciphertext_length(size, "aes256", SEGMENT)
    decrypted = await api.decrypt("s", encrypted.content)
    assert decrypted.status_code == 200, decrypted.text
    assert decrypted.content == plaintext


async def test_chunked_upload(api: Api) -> None:
    await api.create_key("c", segment_size=SEGMENT)
    plaintext = os.urandom(50_000)

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(plaintext), 7001):
            yield plaintext[start : start + 7001]

    encrypted = await api.client.post("/v1/keys/c/encrypt", content=chunks(), headers=api.auth())
    assert encrypted.status_code == 200
    assert (await api.decrypt("c", encrypted.content)).content == plaintext


async def test_associated_data_is_bound(api: Api) -> None:
    await api.create_key("ad", segment_size=SEGMENT)
    ad = {"Keystream-Associated-Data": base64.b64encode(b"tenant=7").decode()}
    encrypted = await api.encrypt("ad", b"payload", headers=ad)
    assert (await api.decrypt("ad", encrypted.content, headers=ad)).content == b"payload"
    wrong = {"Keystream-Associated-Data": base64.b64encode(b"tenant=8").decode()}
    refused = await api.decrypt("ad", encrypted.content, headers=wrong)
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "decryption_failed"
    assert (await api.decrypt("ad", encrypted.content)).status_code == 400


async def test_bad_associated_data(api: Api) -> None:
    await api.create_key("ad")
    bad = await api.encrypt("ad", b"x", headers={"Keystream-Associated-Data": "***"})
    assert bad.status_code == 400
    big = base64.b64encode(bytes(64 * 1024 + 1)).decode()
    too_big = await api.encrypt("ad", b"x", headers={"Keystream-Associated-Data": big})
    assert too_big.status_code == 413
    assert too_big.json()["error"]["code"] == "payload_too_large"


async def test_tampered_first_segment_is_400_json(api: Api) -> None:
    await api.create_key("t", segment_size=SEGMENT)
    encrypted = bytearray((await api.encrypt("t", os.urandom(10_000))).content)
    encrypted[100] ^= 1
    response = await api.decrypt("t", bytes(encrypted))
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]["code"] == "decryption_failed"


async def test_garbage_and_empty_ciphertext_are_400(api: Api) -> None:
    await api.create_key("g")
    for body in (b"", b"\x00", os.urandom(100)):
        response = await api.decrypt("g", body)
        assert response.status_code == 400, body
        assert response.json()["error"]["code"] == "decryption_failed"


def _in_segments(data: bytes) -> AsyncIterator[bytes]:
    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(data), SEGMENT):
            yield data[start : start + SEGMENT]

    return chunks()


async def test_tampered_later_segment_aborts_the_stream(api: Api) -> None:
    await api.create_key("t", segment_size=SEGMENT)
    encrypted = bytearray((await api.encrypt("t", os.urandom(5 * SEGMENT))).content)
    encrypted[3 * SEGMENT + 10] ^= 1
    with pytest.raises(StreamAbortedError, match="decryption_failed"):
        await api.client.post(
            "/v1/keys/t/decrypt", content=_in_segments(bytes(encrypted)), headers=api.auth()
        )


async def test_failure_within_the_first_read_is_still_a_clean_400(api: Api) -> None:
    await api.create_key("t", segment_size=SEGMENT)
    encrypted = bytearray((await api.encrypt("t", os.urandom(5 * SEGMENT))).content)
    encrypted[3 * SEGMENT + 10] ^= 1
    response = await api.decrypt("t", bytes(encrypted))  # one body message: nothing was sent yet
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "decryption_failed"


async def test_truncated_ciphertext_aborts_the_stream(api: Api) -> None:
    await api.create_key("t", segment_size=SEGMENT)
    encrypted = (await api.encrypt("t", os.urandom(5 * SEGMENT))).content
    with pytest.raises(StreamAbortedError):
        await api.client.post(
            "/v1/keys/t/decrypt", content=_in_segments(encrypted[: 3 * SEGMENT]), headers=api.auth()
        )


async def test_decrypt_with_explicit_key_version(api: Api) -> None:
    await api.create_key("v", segment_size=SEGMENT)
    first = (await api.encrypt("v", b"one")).content
    await api.client.post("/v1/keys/v/rotate", headers=api.auth())
    assert (await api.decrypt("v", first, key_version=1)).content == b"one"
    assert (await api.decrypt("v", first, key_version=2)).status_code == 400
    assert (await api.decrypt("v", first, key_version=9)).status_code == 404
    assert (await api.encrypt("v", b"x", key_version=1)).headers["Keystream-Key-Version"] == "1"


async def test_raw_round_trip_and_generated_iv(api: Api) -> None:
    await api.create_key("r")
    plaintext = os.urandom(70_000)
    encrypted = await api.encrypt("r", plaintext, format="raw")
    iv = encrypted.headers["Keystream-IV"]
    assert len(bytes.fromhex(iv)) == 16
    assert len(encrypted.content) == len(plaintext)
    version = encrypted.headers["Keystream-Key-Version"]
    decrypted = await api.decrypt("r", encrypted.content, format="raw", iv=iv, key_version=version)
    assert decrypted.content == plaintext
    by_header = await api.decrypt(
        "r", encrypted.content, format="raw", headers={"Keystream-IV": iv, "Keystream-Key-Version": version}
    )
    assert by_header.content == plaintext


async def test_raw_random_access_by_offset(api: Api) -> None:
    await api.create_key("r")
    plaintext = os.urandom(10_000)
    encrypted = await api.encrypt("r", plaintext, format="raw")
    iv = encrypted.headers["Keystream-IV"]
    for start, end in ((0, 10), (15, 4000), (4097, 10_000)):
        part = await api.decrypt(
            "r", encrypted.content[start:end], format="raw", iv=iv, key_version=1, offset=start
        )
        assert part.content == plaintext[start:end]
    again = await api.encrypt("r", plaintext[333:999], format="raw", iv=iv, offset=333)
    assert again.content == encrypted.content[333:999]


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"format": "raw", "key_version": 1}, "needs iv"),
        ({"format": "raw", "iv": "00" * 16}, "needs key_version"),
        ({"format": "raw", "iv": "zz", "key_version": 1}, "iv"),
        ({"iv": "00" * 16}, "format=raw only"),
        ({"offset": 5}, "format=raw only"),
    ],
)
async def test_raw_parameter_errors(api: Api, params: dict[str, object], fragment: str) -> None:
    await api.create_key("r")
    response = await api.decrypt("r", b"abc", **params)
    assert response.status_code == 400, response.text
    assert fragment in response.json()["error"]["message"]


async def test_raw_rejects_associated_data(api: Api) -> None:
    await api.create_key("r")
    ad = {"Keystream-Associated-Data": base64.b64encode(b"x").decode()}
    assert (await api.encrypt("r", b"abc", format="raw", headers=ad)).status_code == 400


async def test_query_validation_is_422(api: Api) -> None:
    await api.create_key("r")
    assert (await api.encrypt("r", b"x", format="zip")).status_code == 422
    assert (await api.encrypt("r", b"x", format="raw", offset=-1)).status_code == 422
    assert (await api.decrypt("r", b"x", key_version=0)).status_code == 422


async def test_python_backend_interoperates_with_default(api: Api) -> None:
    await api.create_key("b", segment_size=SEGMENT)
    plaintext = os.urandom(9000)
    encrypted = await api.encrypt("b", plaintext, backend="python")
    assert encrypted.status_code == 200, encrypted.text
    assert encrypted.headers["Keystream-Backend"] == "python"
    assert (await api.decrypt("b", encrypted.content)).content == plaintext
    raw = await api.encrypt("b", plaintext, format="raw", backend="python", iv="11" * 16)
    default_raw = await api.encrypt("b", plaintext, format="raw", iv="11" * 16)
    assert raw.content == default_raw.content


async def test_unknown_and_disabled_backends(api: Api) -> None:
    await api.create_key("b")
    unknown = await api.encrypt("b", b"x", backend="quantum")
    assert unknown.status_code == 400
    assert "enabled" in unknown.json()["error"]["message"]


async def test_wrong_content_type_is_415(api: Api) -> None:
    await api.create_key("b")
    response = await api.encrypt("b", b"x", headers={"Content-Type": "text/plain"})
    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported_media_type"


@pytest.mark.parametrize(
    ("content_type", "status"),
    [
        ("application/octet-stream", 200),
        ("Application/Octet-Stream", 200),
        ("application/octet-stream; charset=binary", 200),
        (" application/octet-stream ", 200),
        ("", 200),
        ("application/octet-streams", 415),
        ("text/plain; application/octet-stream", 415),
    ],
)
async def test_the_body_type_is_read_by_its_media_type(api: Api, content_type: str, status: int) -> None:
    await api.create_key("b")
    response = await api.encrypt("b", b"x", headers={"Content-Type": content_type})
    assert response.status_code == status


async def test_unknown_key_is_404(api: Api) -> None:
    response = await api.encrypt("missing", b"x")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "key_not_found"


async def test_openapi_documents_the_streaming_routes(api: Api) -> None:
    schema = (await api.client.get("/openapi.json")).json()
    for operation in ("encrypt", "decrypt"):
        post = schema["paths"][f"/v1/keys/{{name}}/{operation}"]["post"]
        names = {parameter["name"] for parameter in post["parameters"]}
        assert {
            "name",
            "format",
            "backend",
            "key_version",
            "iv",
            "offset",
            "Keystream-Associated-Data",
        } <= names
        assert "application/octet-stream" in post["requestBody"]["content"]


@pytest.mark.parametrize("operation", ["encrypt", "decrypt"])
async def test_raw_body_past_the_end_of_the_keystream_is_400_up_front(api: Api, operation: str) -> None:
    """A streamed body (over the small-body limit) whose Content-Length runs past byte 2**64 used to get a 200
    header and then a reset connection; the length is known, so it is refused before any response."""
    await api.create_key("r")
    body = bytes(200 * 1024)
    offset = 2**64 - 1000
    params: dict[str, object] = {"format": "raw", "iv": "00" * 16, "offset": offset}
    if operation == "decrypt":
        params["key_version"] = 1
    call = api.encrypt if operation == "encrypt" else api.decrypt
    response = await call("r", body, **params)
    assert response.status_code == 400, response.text
    assert "2**64" in response.json()["error"]["message"]
    fits = await call("r", body[:1000], **params)
    assert fits.status_code == 200


def test_the_streaming_routes_are_matched_first() -> None:
    """The hot encrypt/decrypt routes come before every other route (matching an included router costs)."""
    from app.api.routes import crypto
    from app.core.config import Settings
    from app.main import create_app

    app = create_app(Settings(data_dir="/nonexistent-not-opened"))
    routes = app.router.routes
    first = routes.index(crypto.routes[0])
    assert routes[first : first + len(crypto.routes)] == crypto.routes
    assert [getattr(route, "path", None) for route in routes[:first]] == [app.openapi_url] * first
