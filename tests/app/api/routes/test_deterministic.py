"""``aes256-siv`` keys: deterministic encryption through the JSON batch routes, Tink's output both ways,
rotation, and a clear 400 from every route that does not serve them."""

from __future__ import annotations

import base64
import json
import random
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from app.core.config import Settings
from tests.app.api.conftest import Api, running_api
from tests.app.formats.conftest import tink_deterministic_aead

SIV = "aes256-siv"
DATAKEY = {"type": "aes256", "plaintext": True}
ONLY_BATCH = "only the JSON batch routes encrypt/batch, decrypt/batch and rewrap/batch serve it"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture
async def api(settings_factory: Callable[..., Settings]) -> AsyncIterator[Api]:
    """An app that allows key import (a version of known material is what Tink is given here)."""
    async with running_api(settings_factory(allow_key_import=True)) as value:
        yield value


async def _post(api: Api, path: str, body: dict[str, Any]) -> Any:
    response = await api.client.post(path, json=body, headers=api.auth())
    assert response.status_code == 200, response.text
    return response.json()


async def batch(
    api: Api, name: str, operation: str, items: list[dict[str, str]], **params: Any
) -> list[dict[str, Any]]:
    """The results of a 200 ``/v1/keys/{name}/{operation}/batch``."""
    response = await api.client.post(
        f"/v1/keys/{name}/{operation}/batch", json={"items": items}, params=params, headers=api.auth()
    )
    assert response.status_code == 200, response.text
    results: list[dict[str, Any]] = response.json()["results"]
    return results


async def encrypt(api: Api, name: str, items: list[dict[str, str]], **params: Any) -> list[dict[str, Any]]:
    return await batch(api, name, "encrypt", items, **params)


async def decrypt(api: Api, name: str, items: list[dict[str, str]], **params: Any) -> list[dict[str, Any]]:
    return await batch(api, name, "decrypt", items, **params)


async def siv_key(api: Api, name: str, material: bytes | None = None) -> dict[str, Any]:
    """Create ``aes256-siv`` key ``name``; with ``material``, add it as version 2 (import_version)."""
    info = await api.create_key(name, type=SIV)
    if material is not None:
        info = await _post(api, f"/v1/keys/{name}/import_version", {"key": b64(material)})
    return info


async def test_a_created_siv_key_reads_as_its_type_and_rotates(api: Api) -> None:
    info = await siv_key(api, "emails")
    assert info["type"] == SIV and info["latest_version"] == 1
    rotated = await _post(api, "/v1/keys/emails/rotate", {})
    assert rotated["type"] == SIV and rotated["latest_version"] == 2


@pytest.mark.parametrize("length", [0, 1, 16, 33, 1000])
async def test_keystream_gives_tinks_bytes_and_opens_tinks_with_and_without_associated_data(
    api: Api, length: int
) -> None:
    material = random.Random(length).randbytes(64)
    await siv_key(api, "emails", material)
    tink = tink_deterministic_aead([(9, material)])
    plaintext = random.Random(length + 1).randbytes(length)
    ad = b"users.email"
    items = [{"plaintext": b64(plaintext)}, {"plaintext": b64(plaintext), "associated_data": b64(ad)}]
    ours = await encrypt(api, "emails", items)
    assert [r["key_version"] for r in ours] == [2, 2]
    assert base64.b64decode(ours[0]["ciphertext"]) == tink.encrypt_deterministically(plaintext, b"")
    assert base64.b64decode(ours[1]["ciphertext"]) == tink.encrypt_deterministically(plaintext, ad)
    assert tink.decrypt_deterministically(base64.b64decode(ours[1]["ciphertext"]), ad) == plaintext
    theirs = [
        {"ciphertext": b64(tink.encrypt_deterministically(plaintext, b"")), "reference": "plain"},
        {
            "ciphertext": b64(tink.encrypt_deterministically(plaintext, b"users.email")),
            "associated_data": b64(b"users.email"),
            "reference": "bound",
        },
    ]
    opened = await decrypt(api, "emails", theirs)
    assert [(base64.b64decode(r["plaintext"]), r["key_version"], r["reference"]) for r in opened] == [
        (plaintext, 2, "plain"),
        (plaintext, 2, "bound"),
    ]


async def test_equal_plaintexts_give_equal_ciphertexts_unless_the_associated_data_differs(api: Api) -> None:
    await siv_key(api, "emails")
    items = [
        {"plaintext": b64(b"alice@example.com"), "associated_data": b64(b"t1")},
        {"plaintext": b64(b"alice@example.com"), "associated_data": b64(b"t1")},
        {"plaintext": b64(b"alice@example.com"), "associated_data": b64(b"t2")},
        {"plaintext": b64(b"bob@example.com"), "associated_data": b64(b"t1")},
    ]
    first, second = await encrypt(api, "emails", items), await encrypt(api, "emails", items)
    texts = [r["ciphertext"] for r in first]
    assert texts == [r["ciphertext"] for r in second]
    assert texts[0] == texts[1] and len(set(texts)) == 3


async def test_rotation_keeps_old_items_opening_under_their_version_and_rewrap_moves_them(api: Api) -> None:
    await siv_key(api, "emails")
    item = {"plaintext": b64(b"alice"), "associated_data": b64(b"ad")}
    (old,) = await encrypt(api, "emails", [item])
    await _post(api, "/v1/keys/emails/rotate", {})
    (new,) = await encrypt(api, "emails", [item])
    assert old["key_version"] == 1 and new["key_version"] == 2 and old["ciphertext"] != new["ciphertext"]
    both = [{"ciphertext": r["ciphertext"], "associated_data": b64(b"ad")} for r in (old, new)]
    assert [r["key_version"] for r in await decrypt(api, "emails", both)] == [1, 2]
    (pinned,) = await encrypt(api, "emails", [item], key_version=1)
    assert pinned["ciphertext"] == old["ciphertext"] and pinned["key_version"] == 1
    only_v2 = await decrypt(api, "emails", both, key_version=2)
    assert only_v2[0]["error"]["code"] == "decryption_failed" and only_v2[1]["key_version"] == 2
    rewrapped = await batch(api, "emails", "rewrap", [both[0], {"ciphertext": b64(bytes(8))}])
    assert rewrapped[0]["ciphertext"] == new["ciphertext"] and rewrapped[0]["key_version"] == 2
    assert rewrapped[1]["error"]["code"] == "decryption_failed"
    await api.client.patch("/v1/keys/emails", json={"min_decryption_version": 2}, headers=api.auth())
    refused = await decrypt(api, "emails", both)
    assert refused[0]["error"]["code"] == "decryption_failed"
    assert "tried 2)" in refused[0]["error"]["message"]


async def test_bad_items_fail_alone_with_their_reason(api: Api) -> None:
    await siv_key(api, "emails")
    (good,) = await encrypt(api, "emails", [{"plaintext": b64(b"value")}])
    tampered = bytearray(base64.b64decode(good["ciphertext"]))
    tampered[0] ^= 1
    items = [
        {"ciphertext": good["ciphertext"], "reference": "good"},
        {"ciphertext": b64(bytes(tampered)), "reference": "tampered"},
        {"ciphertext": b64(bytes(15)), "reference": "short"},
        {"ciphertext": "%%%", "reference": "base64"},
        {"ciphertext": good["ciphertext"], "associated_data": b64(b"x"), "reference": "ad"},
    ]
    results = {r["reference"]: r for r in await decrypt(api, "emails", items)}
    assert base64.b64decode(results["good"]["plaintext"]) == b"value"
    for reference in ("tampered", "ad"):
        assert results[reference]["error"]["code"] == "decryption_failed"
        assert "wrong associated data" in results[reference]["error"]["message"]
    assert "shorter than the 16-byte synthetic IV" in results["short"]["error"]["message"]
    assert results["base64"]["error"]["code"] == "bad_request"


async def test_a_version_of_another_size_is_refused_with_the_size_it_needs(api: Api) -> None:
    await siv_key(api, "emails")
    response = await api.client.post(
        "/v1/keys/emails/import_version", json={"key": b64(bytes(32))}, headers=api.auth()
    )
    assert response.status_code == 400
    assert "must be 64 bytes long, got 32 bytes" in response.json()["error"]["message"]


async def test_routes_that_do_not_serve_an_siv_key_answer_400_naming_the_ones_that_do(api: Api) -> None:
    await siv_key(api, "emails")
    auth = api.auth()
    answers = [
        await api.encrypt("emails", b"x"),
        await api.decrypt("emails", bytes(64)),
        await api.encrypt("emails", b"x", format="raw"),
        await api.client.post("/v1/keys/emails/rewrap", content=bytes(64), headers=auth),
        await api.client.post("/v1/keys/emails/datakey", json=DATAKEY, headers=auth),
        await api.client.post("/v1/keys/emails/hmac", json={"input": b64(b"x")}, headers=auth),
    ]
    for response in answers:
        assert response.status_code == 400, (response.request.url, response.text)
        assert ONLY_BATCH in response.json()["error"]["message"]


async def test_the_transit_api_neither_shows_nor_changes_nor_uses_an_siv_key(api: Api) -> None:
    await siv_key(api, "emails")
    auth = api.auth()
    read = await api.client.get("/v1/transit/keys/emails", headers=auth)
    rotate = await api.client.post("/v1/transit/keys/emails/rotate", headers=auth)
    for response in (read, rotate):
        assert response.status_code == 400, response.text
        (message,) = response.json()["errors"]
        assert "is aes256-siv (deterministic AES-SIV), which has no Transit type" in message
    body = {"plaintext": b64(b"x")}
    encrypt_ = await api.client.post("/v1/transit/encrypt/emails", json=body, headers=auth)
    assert encrypt_.status_code == 400 and ONLY_BATCH in encrypt_.json()["errors"][0]
    created = await api.client.post("/v1/transit/keys/other", json={"type": SIV}, headers=auth)
    assert created.status_code == 400
    info = (await api.client.get("/v1/keys/emails", headers=auth)).json()
    assert info["latest_version"] == 1  # the refused rotation changed nothing


async def test_imported_siv_material_is_the_key_tink_holds_and_its_type_must_be_asked_for(api: Api) -> None:
    material = random.Random(5).randbytes(64)
    auth = api.auth()
    guessed = await api.client.post("/v1/keys/guessed/import", json={"key": b64(material)}, headers=auth)
    assert guessed.status_code == 400 and "got 64 bytes" in guessed.json()["error"]["message"]
    short = await api.client.post(
        "/v1/keys/short/import", json={"key": b64(material[:32]), "type": SIV}, headers=auth
    )
    assert short.status_code == 400
    assert (
        "an imported aes256-siv key must be 64 bytes long, got 32 bytes" in short.json()["error"]["message"]
    )
    imported = await api.client.post(
        "/v1/keys/moved/import", json={"key": b64(material), "type": SIV}, headers=auth
    )
    assert imported.status_code == 201 and imported.json()["type"] == SIV
    ciphertext = tink_deterministic_aead([(1, material)]).encrypt_deterministically(b"kept", b"ad")
    (opened,) = await decrypt(api, "moved", [{"ciphertext": b64(ciphertext), "associated_data": b64(b"ad")}])
    assert (base64.b64decode(opened["plaintext"]), opened["key_version"]) == (b"kept", 1)


@pytest.mark.parametrize("field", [{"scheme": "gcm"}, {"segment_size": 4096}])
async def test_the_sealed_formats_fields_are_refused_for_an_siv_key(api: Api, field: dict[str, Any]) -> None:
    (name,) = field
    created = await api.client.post("/v1/keys", json={"name": "e", "type": SIV, **field}, headers=api.auth())
    imported = await api.client.post(
        "/v1/keys/e/import", json={"key": b64(bytes(64)), "type": SIV, **field}, headers=api.auth()
    )
    for response in (created, imported):
        assert response.status_code == 400
        assert (
            f"takes no scheme or segment_size, the sealed format's settings; got {name}"
            in (response.json()["error"]["message"])
        )


async def test_the_material_the_service_generates_is_a_key_tink_uses_as_is(api: Api) -> None:
    await siv_key(api, "generated")
    await _post(api, "/v1/keys/generated/rotate", {})
    keystore = api.app.state.keystream.keystore  # no export route yet: the keystore's own read
    tink = tink_deterministic_aead([(2, bytes(keystore.key_material("generated", 2)))])
    (ours,) = await encrypt(api, "generated", [{"plaintext": b64(b"v"), "associated_data": b64(b"c")}])
    assert ours["key_version"] == 2
    assert tink.decrypt_deterministically(base64.b64decode(ours["ciphertext"]), b"c") == b"v"
    theirs = tink.encrypt_deterministically(b"w", b"c")
    (opened,) = await decrypt(api, "generated", [{"ciphertext": b64(theirs), "associated_data": b64(b"c")}])
    assert (base64.b64decode(opened["plaintext"]), opened["key_version"]) == (b"w", 2)


async def test_audit_records_name_the_siv_format_and_version_and_hold_no_value(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    path = tmp_path / "audit.log"
    async with running_api(settings_factory(audit_log=str(path))) as audited:
        await siv_key(audited, "emails")
        await _post(audited, "/v1/keys/emails/rotate", {})
        (sealed,) = await encrypt(audited, "emails", [{"plaintext": b64(b"carol@example.com")}])
        await decrypt(audited, "emails", [{"ciphertext": sealed["ciphertext"]}])
    records = {
        line["route"]: line
        for line in map(json.loads, path.read_text().splitlines())
        if line["type"] == "response" and "batch" in str(line["route"])
    }
    encrypted = records["/v1/keys/{name}/encrypt/batch"]
    assert (encrypted["format"], encrypted["backend"], encrypted["key_version"]) == ("siv", "openssl", 2)
    assert records["/v1/keys/{name}/decrypt/batch"]["format"] == "siv"
    assert b"carol" not in path.read_bytes() and b64(b"carol@example.com").encode() not in path.read_bytes()
