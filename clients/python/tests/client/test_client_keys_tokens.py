"""Key and token management through the sync and async clients against a real server."""

from __future__ import annotations

import base64
import os

import pytest

from keystream_client import (
    AsyncKeystreamClient,
    BatchItem,
    KeystreamAPIError,
    KeystreamClient,
    KeystreamConnectionError,
)
from keystream_client._calls import import_key_call
from keystream_server import RunningServer, free_port


def test_key_lifecycle(client: KeystreamClient, key_name: str) -> None:
    created = client.create_key(key_name, key_type="aes128", segment_size=4096)
    assert (created.name, created.type, created.segment_size) == (key_name, "aes128", 4096)
    assert created.latest_version == 1 and created.min_decryption_version == 1
    assert not created.deletion_allowed and not created.imported
    assert [v.version for v in created.versions] == [1]

    assert client.get_key(key_name) == created
    assert key_name in {key.name for key in client.list_keys()}

    rotated = client.rotate_key(key_name)
    assert rotated.latest_version == 2 and [v.version for v in rotated.versions] == [1, 2]

    configured = client.configure_key(key_name, min_decryption_version=2)
    assert configured.min_decryption_version == 2 and not configured.deletion_allowed

    with pytest.raises(KeystreamAPIError) as refused:
        client.delete_key(key_name)
    assert (refused.value.status, refused.value.code) == (409, "deletion_not_allowed")

    assert client.configure_key(key_name, deletion_allowed=True).deletion_allowed
    client.delete_key(key_name)
    with pytest.raises(KeystreamAPIError) as missing:
        client.get_key(key_name)
    assert (missing.value.status, missing.value.code) == (404, "key_not_found")
    assert key_name in missing.value.message


def test_import_key_round_trips_with_known_material(client: KeystreamClient, key_name: str) -> None:
    imported = client.import_key(key_name, os.urandom(24), segment_size=4096)
    assert (imported.type, imported.imported) == ("aes192", True)
    sealed = client.encrypt(key_name, b"imported material works")
    assert client.decrypt(key_name, sealed.data).data == b"imported material works"


def test_scheme_is_chosen_at_creation(client: KeystreamClient, key_name: str) -> None:
    default = client.create_key(key_name + "-ctr", segment_size=4096)
    gcm = client.create_key(key_name, segment_size=4096, scheme="gcm")
    assert (default.scheme, gcm.scheme) == ("ctr-hmac", "gcm")
    assert client.get_key(key_name).scheme == "gcm"
    assert {key.name: key.scheme for key in client.list_keys()}[key_name] == "gcm"
    plaintext = os.urandom(10_000)
    sealed_gcm = client.encrypt(key_name, plaintext).data
    sealed_ctr = client.encrypt(key_name + "-ctr", plaintext).data
    assert len(sealed_ctr) - len(sealed_gcm) == 3 * (32 - 16)  # three segments, 16-byte GCM tags
    assert client.decrypt(key_name, sealed_gcm).data == plaintext
    with pytest.raises(KeystreamAPIError) as other_scheme:
        client.decrypt(key_name + "-ctr", sealed_gcm)
    assert other_scheme.value.code == "decryption_failed"
    with pytest.raises(KeystreamAPIError) as unknown:
        client.create_key(key_name + "-x", scheme="rot13")
    assert unknown.value.status == 422
    assert client.import_key(key_name + "-imp", os.urandom(16), scheme="gcm").scheme == "gcm"
    assert client.get_key(key_name).to_json()["scheme"] == "gcm"


def test_auto_rotate_period_on_create_import_and_configure(client: KeystreamClient, key_name: str) -> None:
    daily = client.create_key(key_name, auto_rotate_period="24h")
    assert daily.auto_rotate_period == 86_400
    assert daily.to_json()["auto_rotate_period"] == 86_400
    assert client.get_key(key_name).auto_rotate_period == 86_400
    assert {key.name: key.auto_rotate_period for key in client.list_keys()}[key_name] == 86_400
    assert client.create_key(key_name + "-off").auto_rotate_period == 0
    assert (
        client.import_key(key_name + "-imp", os.urandom(16), auto_rotate_period=7200).auto_rotate_period
        == 7200
    )
    assert client.configure_key(key_name, auto_rotate_period=0).auto_rotate_period == 0
    with pytest.raises(KeystreamAPIError) as short:
        client.configure_key(key_name, auto_rotate_period="30m")
    assert (short.value.status, short.value.code) == (400, "bad_request")
    assert "at least 3600 seconds (1h), got 1800" in str(short.value)


async def test_async_auto_rotate_period(server: RunningServer, key_name: str) -> None:
    async with AsyncKeystreamClient(server.url, server.token) as ks:
        assert (await ks.create_key(key_name, auto_rotate_period=3600)).auto_rotate_period == 3600
        assert (await ks.configure_key(key_name, auto_rotate_period="2h")).auto_rotate_period == 7200
        imported = await ks.import_key(key_name + "-imp", os.urandom(16), auto_rotate_period="1d")
        assert imported.auto_rotate_period == 86_400


def test_api_errors_carry_status_code_and_message(client: KeystreamClient, key_name: str) -> None:
    client.create_key(key_name)
    with pytest.raises(KeystreamAPIError) as exists:
        client.create_key(key_name)
    assert (exists.value.status, exists.value.code) == (409, "key_exists")
    with pytest.raises(KeystreamAPIError) as bad_name:
        client.create_key("no spaces allowed")
    assert bad_name.value.status in (400, 422)
    with pytest.raises(KeystreamAPIError) as bad_min:
        client.configure_key(key_name, min_decryption_version=5)
    assert bad_min.value.status == 400
    assert str(bad_min.value).startswith("HTTP 400 ")


def test_tokens_scope_what_a_client_may_do(
    server: RunningServer, client: KeystreamClient, key_name: str
) -> None:
    client.create_key(key_name)
    new = client.create_token(["encrypt"], [key_name], description="encrypt only")
    assert new.token.startswith("ks_") and new.token_id in new.token
    assert new.token not in repr(new)
    assert (new.scopes, new.key_patterns, new.description) == (("encrypt",), (key_name,), "encrypt only")
    assert new.token_id in {token.token_id for token in client.list_tokens()}

    with KeystreamClient(server.url, new.token) as limited:
        assert limited.encrypt(key_name, b"x").key_version == 1
        with pytest.raises(KeystreamAPIError) as forbidden:
            limited.decrypt(key_name, b"x" * 100)
        assert forbidden.value.status == 403
        with pytest.raises(KeystreamAPIError) as admin_only:
            limited.create_key(key_name + "-other")
        assert admin_only.value.status == 403

    client.delete_token(new.token_id)
    with KeystreamClient(server.url, new.token) as revoked, pytest.raises(KeystreamAPIError) as unauthorized:
        revoked.encrypt(key_name, b"x")
    assert (unauthorized.value.status, unauthorized.value.code) == (401, "unauthorized")
    with pytest.raises(KeystreamAPIError) as gone:
        client.delete_token(new.token_id)
    assert gone.value.status == 404


def test_token_ttl_self_and_renew(server: RunningServer, client: KeystreamClient) -> None:
    new = client.create_token(["encrypt"], ttl=600, max_ttl=900)
    assert new.ttl == 600 and new.expires_at is not None and new.max_expires_at is not None
    assert (new.max_expires_at - new.created_at).total_seconds() == 900
    listed = next(token for token in client.list_tokens() if token.token_id == new.token_id)
    assert listed.expires_at == new.expires_at
    with KeystreamClient(server.url, new.token) as own:
        assert own.token_self().expires_at == new.expires_at
        renewed = own.renew_token_self(700)
        assert renewed.expires_at is not None and renewed.expires_at > new.expires_at and not renewed.capped
        capped = own.renew_token_self(5000)
        assert capped.capped and capped.expires_at == new.max_expires_at
        assert not own.renew_token_self().capped  # now + the ttl (600 s) is within max_ttl (900 s)
    root_self = client.token_self()
    assert root_self.ttl is None and root_self.expires_at is None
    with pytest.raises(KeystreamAPIError) as nothing:
        client.renew_token_self()
    assert (nothing.value.status, nothing.value.code) == (400, "bad_request")
    with pytest.raises(KeystreamAPIError) as invalid:
        client.create_token(["encrypt"], max_ttl=60)
    assert invalid.value.status == 422


async def test_async_token_ttl_calls(server: RunningServer) -> None:
    async with AsyncKeystreamClient(server.url, server.token) as ks:
        new = await ks.create_token(["encrypt"], ttl=60, max_ttl=120)
        assert new.ttl == 60
    async with AsyncKeystreamClient(server.url, new.token) as own:
        assert (await own.token_self()).token_id == new.token_id
        assert (await own.renew_token_self(3600)).capped


def test_missing_token_is_401(server: RunningServer) -> None:
    with KeystreamClient(server.url) as anonymous, pytest.raises(KeystreamAPIError) as error:
        anonymous.list_keys()
    assert error.value.status == 401


def test_client_repr_hides_the_token(server: RunningServer) -> None:
    with KeystreamClient(server.url, server.token) as ks:
        assert server.token not in repr(ks) and server.url in repr(ks)


def test_unreachable_service_is_a_connection_error() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with KeystreamClient(url, "ks_0000_aaaaaaaaaaaaaaaaaaaa", timeout=2) as ks:
        with pytest.raises(KeystreamConnectionError):
            ks.list_keys()
        with pytest.raises(KeystreamConnectionError):
            ks.encrypt("k", b"data")


def test_bad_base_url_is_rejected() -> None:
    with pytest.raises(ValueError, match="http"):
        KeystreamClient("ftp://example.org")


async def test_async_key_and_token_calls(server: RunningServer, key_name: str) -> None:
    async with AsyncKeystreamClient(server.url, server.token) as ks:
        created = await ks.create_key(key_name, segment_size=4096, deletion_allowed=True, scheme="gcm")
        assert (await ks.get_key(key_name)) == created and created.scheme == "gcm"
        imported = await ks.import_key(key_name + "-imp", os.urandom(32), scheme="gcm")
        assert imported.scheme == "gcm"
        assert (await ks.rotate_key(key_name)).latest_version == 2
        assert key_name in {key.name for key in await ks.list_keys()}
        token = await ks.create_token(["decrypt"], [key_name])
        assert token.token_id in {t.token_id for t in await ks.list_tokens()}
        await ks.delete_token(token.token_id)
        await ks.delete_key(key_name)
        with pytest.raises(KeystreamAPIError) as missing:
            await ks.get_key(key_name)
        assert missing.value.code == "key_not_found"
        assert await ks.health()


def test_import_version_and_trim(client: KeystreamClient, key_name: str) -> None:
    client.create_key(key_name, key_type="aes128", segment_size=4096)
    old = client.encrypt(key_name, b"version 1").data
    added = client.import_version(key_name, os.urandom(16))
    assert (added.latest_version, added.imported) == (2, True)
    sealed = client.encrypt(key_name, b"version 2")
    assert sealed.key_version == 2
    with pytest.raises(KeystreamAPIError) as wrong_size:
        client.import_version(key_name, os.urandom(32))
    assert wrong_size.value.status == 400 and "16 bytes" in wrong_size.value.message
    with pytest.raises(KeystreamAPIError) as too_far:
        client.trim(key_name, 2)
    assert too_far.value.status == 400
    client.configure_key(key_name, min_decryption_version=2)
    trimmed = client.trim(key_name, 2)
    assert [v.version for v in trimmed.versions] == [2]
    assert client.trim(key_name, 2) == trimmed
    with pytest.raises(KeystreamAPIError) as gone:
        client.decrypt(key_name, old)
    assert gone.value.status == 400
    assert client.decrypt(key_name, sealed.data).data == b"version 2"


async def test_async_import_version_and_trim(server: RunningServer, key_name: str) -> None:
    async with AsyncKeystreamClient(server.url, server.token) as ks:
        await ks.create_key(key_name)
        assert (await ks.import_version(key_name, os.urandom(32))).latest_version == 2
        await ks.configure_key(key_name, min_decryption_version=2)
        assert [v.version for v in (await ks.trim(key_name, 2)).versions] == [2]


def test_key_options_and_export(client: KeystreamClient, key_name: str) -> None:
    made = client.create_key(key_name, derived=True)
    assert (made.derived, made.exportable, made.allow_plaintext_backup) == (True, False, False)
    with pytest.raises(KeystreamAPIError) as refused:
        client.export_key(key_name)
    assert refused.value.status == 400 and "not exportable" in refused.value.message
    assert client.configure_key(key_name, exportable=True).exportable is True
    client.rotate_key(key_name)
    exported = client.export_key(key_name)
    assert sorted(exported) == [1, 2] and all(len(material) == 32 for material in exported.values())
    assert client.export_key(key_name, "latest") == {2: exported[2]}
    assert client.export_key(key_name, 1) == {1: exported[1]}
    with pytest.raises(KeystreamAPIError) as off:
        client.configure_key(key_name, exportable=False)
    assert off.value.status == 400


async def test_async_key_options_and_export(server: RunningServer, key_name: str) -> None:
    async with AsyncKeystreamClient(server.url, server.token) as ks:
        made = await ks.create_key(key_name, exportable=True, allow_plaintext_backup=True)
        assert (made.exportable, made.allow_plaintext_backup, made.derived) == (True, True, False)
        exported = await ks.export_key(key_name)
        assert list(exported) == [1] and len(exported[1]) == 32
        assert (await ks.configure_key(key_name, exportable=True)).exportable is True


def test_an_aes256_siv_key_made_or_imported_by_the_client_encrypts_deterministically(
    client: KeystreamClient, key_name: str
) -> None:
    assert client.create_key(key_name, key_type="aes256-siv").type == "aes256-siv"
    items = [
        BatchItem(b"alice", associated_data=b"users.email"),
        BatchItem(b"alice", associated_data=b"users.email"),
    ]
    first, second = client.encrypt_batch(key_name, items)
    assert first.data == second.data and first.key_version == 1
    opened = client.decrypt_batch(key_name, [BatchItem(first.data or b"", associated_data=b"users.email")])
    assert [(result.data, result.key_version) for result in opened] == [(b"alice", 1)]
    material = os.urandom(64)
    imported = client.import_key(key_name + "-imp", material, key_type="aes256-siv")
    assert (imported.type, imported.imported) == ("aes256-siv", True)
    with pytest.raises(KeystreamAPIError) as guessed:
        client.import_key(key_name + "-guessed", material)
    assert guessed.value.status == 400 and "got 64 bytes" in str(guessed.value)


def test_backup_and_restore(client: KeystreamClient, key_name: str) -> None:
    client.create_key(key_name, allow_plaintext_backup=True)
    blob = client.backup_key(key_name)
    client.rotate_key(key_name)
    with pytest.raises(KeystreamAPIError) as exists:
        client.restore_key(blob)
    assert exists.value.status == 409 and exists.value.code == "key_exists"
    assert client.restore_key(blob, key_name, force=True).latest_version == 1


async def test_async_backup_and_restore(server: RunningServer, key_name: str) -> None:
    async with AsyncKeystreamClient(server.url, server.token) as ks:
        await ks.create_key(key_name, exportable=True)
        blob = await ks.backup_key(key_name)
        await ks.rotate_key(key_name)
        assert (await ks.restore_key(blob, force=True)).latest_version == 1


def test_an_imported_key_takes_the_options(client: KeystreamClient, key_name: str) -> None:
    material = os.urandom(32)
    imported = client.import_key(key_name, material, derived=True, exportable=True)
    assert (imported.derived, imported.exportable, imported.imported) == (True, True, True)
    assert client.export_key(key_name) == {1: material}


def test_wrapped_import_sends_no_material_in_clear(client: KeystreamClient, key_name: str) -> None:
    pem = client.wrapping_key()
    assert pem.startswith("-----BEGIN PUBLIC KEY-----") and client.wrapping_key() == pem
    first, second = os.urandom(32), os.urandom(32)
    body = import_key_call(key_name, first, None, False, wrapping_key=pem).json
    assert isinstance(body, dict) and "key" not in body and "ciphertext" in body
    assert base64.b64encode(first).decode() not in str(body)
    made = client.import_key(key_name, first, exportable=True, wrapped=True)
    assert (made.imported, made.type) == (True, "aes256")
    assert client.import_version(key_name, second, wrapped=True).latest_version == 2
    assert client.export_key(key_name) == {1: first, 2: second}  # the service holds exactly this material


async def test_async_wrapped_import(server: RunningServer, key_name: str) -> None:
    material = os.urandom(16)
    async with AsyncKeystreamClient(server.url, server.token) as ks:
        pem = await ks.wrapping_key()
        assert pem.startswith("-----BEGIN PUBLIC KEY-----")
        await ks.import_key(key_name, material, exportable=True, wrapped=True)
        assert (await ks.import_version(key_name, material, wrapped=True)).latest_version == 2
        assert await ks.export_key(key_name) == {1: material, 2: material}
