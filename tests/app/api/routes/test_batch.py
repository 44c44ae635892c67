"""Batch JSON: per-item results and errors, key versions, limits (413), malformed bodies (415/422)."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable

from app.core.config import Settings
from tests.app.api.conftest import Api, running_api


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def test_encrypt_and_decrypt_batch(api: Api) -> None:
    await api.create_key("b", segment_size=4096)
    items = [
        {"plaintext": b64(b"one"), "reference": "r1"},
        {"plaintext": b64(b""), "reference": "r2"},
        {"plaintext": b64(bytes(10_000)), "associated_data": b64(b"ctx")},
    ]
    encrypted = await api.client.post("/v1/keys/b/encrypt/batch", json={"items": items}, headers=api.auth())
    assert encrypted.status_code == 200, encrypted.text
    results = encrypted.json()["results"]
    assert [r["reference"] for r in results] == ["r1", "r2", None]
    assert all(r["key_version"] == 1 for r in results)
    ciphertexts = [
        {
            "ciphertext": r["ciphertext"],
            "reference": r["reference"],
            **({"associated_data": b64(b"ctx")} if i == 2 else {}),
        }
        for i, r in enumerate(results)
    ]
    decrypted = await api.client.post(
        "/v1/keys/b/decrypt/batch", json={"items": ciphertexts}, headers=api.auth()
    )
    assert decrypted.status_code == 200
    plain = [base64.b64decode(r["plaintext"]) for r in decrypted.json()["results"]]
    assert plain == [b"one", b"", bytes(10_000)]


async def test_batch_ciphertext_decrypts_with_streaming_endpoint(api: Api) -> None:
    await api.create_key("b")
    result = (
        await api.client.post(
            "/v1/keys/b/encrypt/batch", json={"items": [{"plaintext": b64(b"hello")}]}, headers=api.auth()
        )
    ).json()["results"][0]
    assert (await api.decrypt("b", base64.b64decode(result["ciphertext"]))).content == b"hello"


async def test_item_errors_do_not_fail_the_batch(api: Api) -> None:
    await api.create_key("b")
    good = (
        await api.client.post(
            "/v1/keys/b/encrypt/batch", json={"items": [{"plaintext": b64(b"ok")}]}, headers=api.auth()
        )
    ).json()["results"][0]["ciphertext"]
    tampered = bytearray(base64.b64decode(good))
    tampered[-1] ^= 1
    items = [
        {"ciphertext": good, "reference": "good"},
        {"ciphertext": "!!not base64!!", "reference": "bad-b64"},
        {"ciphertext": b64(bytes(tampered)), "reference": "tampered"},
        {"ciphertext": good, "associated_data": b64(b"wrong"), "reference": "wrong-ad"},
    ]
    response = await api.client.post("/v1/keys/b/decrypt/batch", json={"items": items}, headers=api.auth())
    assert response.status_code == 200
    results = {r["reference"]: r for r in response.json()["results"]}
    assert base64.b64decode(results["good"]["plaintext"]) == b"ok"
    assert results["bad-b64"]["error"]["code"] == "bad_request"
    assert results["tampered"]["error"]["code"] == "decryption_failed"
    assert results["wrong-ad"]["error"]["code"] == "decryption_failed"
    bad_plain = await api.client.post(
        "/v1/keys/b/encrypt/batch",
        json={"items": [{"plaintext": "%%%"}, {"plaintext": "aGk="}]},
        headers=api.auth(),
    )
    out = bad_plain.json()["results"]
    assert "error" in out[0] and "ciphertext" in out[1]


async def test_batch_after_rotation_reports_versions(api: Api) -> None:
    await api.create_key("b")
    first = (
        await api.client.post(
            "/v1/keys/b/encrypt/batch", json={"items": [{"plaintext": "aGk="}]}, headers=api.auth()
        )
    ).json()["results"][0]
    await api.client.post("/v1/keys/b/rotate", headers=api.auth())
    second = (
        await api.client.post(
            "/v1/keys/b/encrypt/batch", json={"items": [{"plaintext": "aGk="}]}, headers=api.auth()
        )
    ).json()["results"][0]
    assert (first["key_version"], second["key_version"]) == (1, 2)
    items = [{"ciphertext": first["ciphertext"]}, {"ciphertext": second["ciphertext"]}]
    decrypted = (
        await api.client.post("/v1/keys/b/decrypt/batch", json={"items": items}, headers=api.auth())
    ).json()
    assert [r["key_version"] for r in decrypted["results"]] == [1, 2]


async def test_limits_are_413(settings_factory: Callable[..., Settings]) -> None:
    async with running_api(settings_factory(batch_max_items=3, batch_max_bytes=2048)) as api:
        await api.create_key("b")
        too_many = {"items": [{"plaintext": "aGk="}] * 4}
        response = await api.client.post("/v1/keys/b/encrypt/batch", json=too_many, headers=api.auth())
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "payload_too_large"
        too_big = {"items": [{"plaintext": b64(bytes(3000))}]}
        response = await api.client.post("/v1/keys/b/encrypt/batch", json=too_big, headers=api.auth())
        assert response.status_code == 413

        async def chunked() -> object:
            yield json.dumps(too_big).encode()

        response = await api.client.post(
            "/v1/keys/b/encrypt/batch",
            content=chunked(),  # type: ignore[arg-type]
            headers={**api.auth(), "Content-Type": "application/json"},
        )
        assert response.status_code == 413


async def test_malformed_bodies(api: Api) -> None:
    await api.create_key("b")
    headers = {**api.auth(), "Content-Type": "application/json"}
    for body in (b"{", b"[]", b'{"items": [{"plaintext": 5}]}', b'{"items": [{"nope": "x"}]}'):
        response = await api.client.post("/v1/keys/b/encrypt/batch", content=body, headers=headers)
        assert response.status_code == 422, body
        assert response.json()["error"]["code"] == "validation_error"
    response = await api.client.post(
        "/v1/keys/b/encrypt/batch", content=b"{}", headers={**api.auth(), "Content-Type": "text/csv"}
    )
    assert response.status_code == 415


async def test_unknown_key_fails_whole_batch(api: Api) -> None:
    response = await api.client.post("/v1/keys/nope/encrypt/batch", json={"items": []}, headers=api.auth())
    assert response.status_code == 404


async def test_key_cache_misses_are_loaded_off_the_event_loop(api: Api) -> None:
    """A cache miss reads SQLite and unwraps material (~0.5 ms): batch and streaming routes must not do that
    on the event loop thread (batch once did, while the streaming routes already used ``from_cache``)."""
    await api.create_key("b", segment_size=4096)
    state = api.app.state.keystream
    keystore = state.keystore
    loop_thread = threading.get_ident()
    threads: list[int] = []
    real_material = keystore.key_material

    def spy_material(name: str, version: int) -> bytes:
        threads.append(threading.get_ident())
        return real_material(name, version)

    keystore.key_material = spy_material
    try:
        state.keycache.clear()
        encrypted = await api.client.post(
            "/v1/keys/b/encrypt/batch", json={"items": [{"plaintext": b64(b"x")}]}, headers=api.auth()
        )
        assert encrypted.status_code == 200, encrypted.text
        state.keycache.clear()
        items = [{"ciphertext": encrypted.json()["results"][0]["ciphertext"]}]
        decrypted = await api.client.post(
            "/v1/keys/b/decrypt/batch", json={"items": items}, headers=api.auth()
        )
        assert decrypted.status_code == 200, decrypted.text
        state.keycache.clear()
        assert (await api.encrypt("b", b"stream")).status_code == 200
    finally:
        del keystore.key_material
    assert len(threads) == 3, threads
    assert loop_thread not in threads
