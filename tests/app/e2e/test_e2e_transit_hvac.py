"""hvac, unchanged, against a real two-worker server: every Transit call Keystream serves, its batches and
its errors as hvac's exceptions, and the migration of a Vault ciphertext (its key material imported)."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator

import httpx
import hvac
import hvac.exceptions
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from bench.service_process import ROOT_TOKEN, Server, start_server, stop_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Two workers (hvac's calls land on either), key import on for the migration test."""
    base = tmp_path_factory.mktemp("transit")
    running = start_server(
        base / "data", base / "server.log", KEYSTREAM_WORKERS="2", KEYSTREAM_ALLOW_KEY_IMPORT="true"
    )
    try:
        yield running
    finally:
        stop_server(running)


@pytest.fixture
def transit(server: Server) -> hvac.api.secrets_engines.Transit:
    return hvac.Client(url=server.url, token=ROOT_TOKEN).secrets.transit


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_key_lifecycle(transit: hvac.api.secrets_engines.Transit) -> None:
    transit.create_key(name="orders")
    transit.create_key(name="small", key_type="aes256-gcm96")  # hvac refuses aes128-gcm96 itself
    read = transit.read_key(name="orders")["data"]
    assert read["type"] == "aes256-gcm96" and read["latest_version"] == 1 and list(read["keys"]) == ["1"]
    assert read["exportable"] is False and read["supports_encryption"] is True
    assert {"orders", "small"} <= set(transit.list_keys()["data"]["keys"])  # the LIST method
    transit.rotate_key(name="orders")
    assert transit.read_key(name="orders")["data"]["latest_version"] == 2
    with pytest.raises(hvac.exceptions.InvalidRequest):
        transit.delete_key(name="orders")  # deletion_allowed is false
    transit.update_key_configuration(name="orders", deletion_allowed=True, min_decryption_version=2)
    assert transit.read_key(name="orders")["data"]["min_decryption_version"] == 2
    transit.trim_key(name="orders", min_version=2)
    assert list(transit.read_key(name="orders")["data"]["keys"]) == ["2"]
    with pytest.raises(hvac.exceptions.InvalidRequest):
        transit.trim_key(name="orders", min_version=3)  # above min_decryption_version
    transit.delete_key(name="orders")
    with pytest.raises(hvac.exceptions.InvalidPath):
        transit.read_key(name="orders")


def test_encrypt_decrypt_rewrap_single_and_batch(transit: hvac.api.secrets_engines.Transit) -> None:
    transit.create_key(name="data")
    made = transit.encrypt_data(name="data", plaintext=b64(b"hello"), associated_data=b64(b"row 1"))["data"]
    assert made["ciphertext"].startswith("vault:v1:")
    opened = transit.decrypt_data(name="data", ciphertext=made["ciphertext"], associated_data=b64(b"row 1"))
    assert opened["data"]["plaintext"] == b64(b"hello")
    batch = [{"plaintext": b64(b"a"), "reference": "1"}, {"plaintext": b64(b"b"), "reference": "2"}]
    results = transit.encrypt_data(name="data", batch_input=batch)["data"]["batch_results"]
    assert [item["reference"] for item in results] == ["1", "2"]
    back = transit.decrypt_data(
        name="data", batch_input=[{"ciphertext": item["ciphertext"]} for item in results]
    )["data"]["batch_results"]
    assert [item["plaintext"] for item in back] == [b64(b"a"), b64(b"b")]
    transit.rotate_key(name="data")
    rewrapped = transit.rewrap_data(name="data", ciphertext=results[0]["ciphertext"])["data"]
    assert rewrapped["ciphertext"].startswith("vault:v2:") and rewrapped["key_version"] == 2
    assert transit.decrypt_data(name="data", ciphertext=rewrapped["ciphertext"])["data"]["plaintext"] == b64(
        b"a"
    )


def test_datakey_hmac_verify_random_hash(transit: hvac.api.secrets_engines.Transit) -> None:
    transit.create_key(name="tools")
    plain = transit.generate_data_key(name="tools", key_type="plaintext", bits=256)["data"]
    assert len(base64.b64decode(plain["plaintext"])) == 32
    assert (
        transit.decrypt_data(name="tools", ciphertext=plain["ciphertext"])["data"]["plaintext"]
        == plain["plaintext"]
    )
    wrapped = transit.generate_data_key(name="tools", key_type="wrapped")["data"]
    assert "plaintext" not in wrapped
    tag = transit.generate_hmac(name="tools", hash_input=b64(b"msg"), algorithm="sha2-512")["data"]["hmac"]
    assert tag.startswith("vault:v1:") and len(base64.b64decode(tag.split(":")[2])) == 64
    good = transit.verify_signed_data(
        name="tools", hash_input=b64(b"msg"), hmac=tag, hash_algorithm="sha2-512"
    )
    assert good["data"]["valid"] is True
    bad = transit.verify_signed_data(
        name="tools", hash_input=b64(b"other"), hmac=tag, hash_algorithm="sha2-512"
    )
    assert bad["data"]["valid"] is False
    random = transit.generate_random_bytes(n_bytes=16, output_format="hex")["data"]["random_bytes"]
    assert len(bytes.fromhex(random)) == 16
    digest = transit.hash_data(hash_input=b64(b"abc"), algorithm="sha2-256")["data"]["sum"]
    assert digest == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_errors_are_hvacs_exceptions(server: Server, transit: hvac.api.secrets_engines.Transit) -> None:
    transit.create_key(name="errs")
    with pytest.raises(hvac.exceptions.InvalidRequest, match="plaintext must be base64"):
        transit.encrypt_data(name="errs", plaintext="not base64!")
    with pytest.raises(hvac.exceptions.InvalidRequest):
        transit.decrypt_data(name="errs", ciphertext="vault:v1:" + b64(bytes(40)))
    with pytest.raises(hvac.exceptions.InvalidRequest):
        transit.encrypt_data(name="missing", plaintext=b64(b"x"))
    with pytest.raises(hvac.exceptions.InvalidPath):
        transit.read_key(name="missing")
    token = httpx.post(f"{server.url}/v1/tokens", json={"scopes": ["encrypt"]}, headers=server.auth).json()[
        "token"
    ]
    limited = hvac.Client(url=server.url, token=token).secrets.transit
    assert limited.encrypt_data(name="errs", plaintext=b64(b"x"))["data"]["key_version"] == 1
    with pytest.raises(hvac.exceptions.Forbidden):
        limited.decrypt_data(name="errs", ciphertext="vault:v1:" + b64(bytes(40)))
    with pytest.raises(hvac.exceptions.Forbidden):
        hvac.Client(url=server.url, token="ks_0_wrong").secrets.transit.read_key(name="errs")


def test_a_vault_ciphertext_decrypts_after_its_material_is_imported(
    server: Server, transit: hvac.api.secrets_engines.Transit
) -> None:
    """The migration: key material exported from Vault, imported here, old ciphertexts decrypt."""
    material = os.urandom(32)
    nonce = os.urandom(12)
    from_vault = "vault:v1:" + b64(nonce + AESGCM(material).encrypt(nonce, b"written by vault", None))
    imported = httpx.post(
        f"{server.url}/v1/keys/migrated/import", json={"key": b64(material)}, headers=server.auth
    )
    assert imported.status_code == 201, imported.text
    opened = transit.decrypt_data(name="migrated", ciphertext=from_vault)["data"]["plaintext"]
    assert base64.b64decode(opened) == b"written by vault"


def test_the_list_method_reaches_the_app_only_as_list(server: Server) -> None:
    """llhttp refuses LIST; the protocol hands it to the app as LIST, which only the key list serves."""
    with httpx.Client(base_url=server.url, headers={"X-Vault-Token": ROOT_TOKEN}) as client:
        client.post("/v1/transit/keys/listed")
        listed = client.request("LIST", "/v1/transit/keys")
        assert listed.status_code == 200 and "listed" in listed.json()["data"]["keys"]
        native = client.request("LIST", "/v1/keys", headers=server.auth)
        assert native.status_code == 405  # not a GET in disguise
        again = client.get("/v1/transit/keys/listed")  # the same connection, the next request a GET
        assert again.status_code == 200


def test_derived_and_convergent_keys_with_contexts(transit: hvac.api.secrets_engines.Transit) -> None:
    transit.create_key(name="tenants", derived=True)
    transit.create_key(name="dedup", derived=True, convergent_encryption=True)
    assert transit.read_key(name="dedup")["data"]["convergent_encryption_version"] == 3
    context = b64(b"tenant-1")
    made = transit.encrypt_data(name="tenants", plaintext=b64(b"row"), context=context)["data"]["ciphertext"]
    opened = transit.decrypt_data(name="tenants", ciphertext=made, context=context)["data"]["plaintext"]
    assert base64.b64decode(opened) == b"row"
    with pytest.raises(hvac.exceptions.InvalidRequest, match="missing 'context' for key derivation"):
        transit.encrypt_data(name="tenants", plaintext=b64(b"row"))
    same = [
        transit.encrypt_data(name="dedup", plaintext=b64(b"a@example.com"), context=context)["data"][
            "ciphertext"
        ]
        for _ in range(2)
    ]
    assert same[0] == same[1]
    items = [{"plaintext": b64(b"x"), "context": b64(b"t1")}, {"plaintext": b64(b"y"), "context": b64(b"t2")}]
    results = transit.encrypt_data(name="tenants", batch_input=items)["data"]["batch_results"]
    back = [
        {"ciphertext": r["ciphertext"], "context": i["context"]} for r, i in zip(results, items, strict=True)
    ]
    plain = transit.decrypt_data(name="tenants", batch_input=back)["data"]["batch_results"]
    assert [base64.b64decode(r["plaintext"]) for r in plain] == [b"x", b"y"]
    transit.update_key_configuration(name="tenants", exportable=True)
    assert transit.read_key(name="tenants")["data"]["exportable"] is True
    with pytest.raises(hvac.exceptions.InvalidRequest, match="cannot be turned off"):
        transit.update_key_configuration(name="tenants", exportable=False)


def test_export_of_an_exportable_key(transit: hvac.api.secrets_engines.Transit) -> None:
    transit.create_key(name="leaving", exportable=True)
    transit.rotate_key(name="leaving")
    exported = transit.export_key(name="leaving", key_type="encryption-key")["data"]
    assert exported["name"] == "leaving" and exported["type"] == "aes256-gcm96"
    assert sorted(exported["keys"]) == ["1", "2"]
    material = base64.b64decode(exported["keys"]["2"])
    made = transit.encrypt_data(name="leaving", plaintext=b64(b"out"))["data"]["ciphertext"]
    raw = base64.b64decode(made.removeprefix("vault:v2:"))
    assert AESGCM(material).decrypt(raw[:12], raw[12:], None) == b"out"  # what Vault would do with it
    latest = transit.export_key(name="leaving", key_type="encryption-key", version="latest")["data"]["keys"]
    assert latest == {"2": exported["keys"]["2"]}
    transit.create_key(name="staying")
    with pytest.raises(hvac.exceptions.InvalidRequest, match="not exportable"):
        transit.export_key(name="staying", key_type="encryption-key")


def test_backup_and_restore(transit: hvac.api.secrets_engines.Transit) -> None:
    transit.create_key(name="kept-safe", exportable=True, allow_plaintext_backup=True)
    made = transit.encrypt_data(name="kept-safe", plaintext=b64(b"before"))["data"]["ciphertext"]
    backup = transit.backup_key(name="kept-safe")["data"]["backup"]
    transit.rotate_key(name="kept-safe")
    with pytest.raises(hvac.exceptions.InvalidRequest, match="already exists"):
        transit.restore_key(backup=backup)
    transit.restore_key(backup=backup, name="kept-safe", force=True)
    assert transit.read_key(name="kept-safe")["data"]["latest_version"] == 1
    opened = transit.decrypt_data(name="kept-safe", ciphertext=made)["data"]["plaintext"]
    assert base64.b64decode(opened) == b"before"
    with pytest.raises(hvac.exceptions.InvalidRequest, match="made for key 'kept-safe'"):
        transit.restore_key(backup=backup, name="elsewhere")
    transit.create_key(name="not-backed", exportable=True)
    with pytest.raises(hvac.exceptions.InvalidRequest, match="allow_plaintext_backup is false"):
        transit.backup_key(name="not-backed")
