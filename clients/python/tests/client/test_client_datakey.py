"""Data keys (``datakey``) through the sync and async clients against a real server: the plaintext key is what
decrypt returns for the ciphertext, for both schemes and with associated data; scopes; the model's repr."""

from __future__ import annotations

import base64

import pytest

from keystream_client import (
    AsyncKeystreamClient,
    BatchItem,
    DataKey,
    KeystreamAPIError,
    KeystreamClient,
)
from keystream_server import RunningServer


@pytest.mark.parametrize("scheme", ["ctr-hmac", "gcm"])
@pytest.mark.parametrize("associated_data", [None, b"bucket=photos;object=cat.jpg"])
def test_data_key_opens_with_decrypt(
    client: KeystreamClient, key_name: str, scheme: str, associated_data: bytes | None
) -> None:
    client.create_key(key_name, segment_size=4096, scheme=scheme)
    data_key = client.datakey(key_name, associated_data=associated_data)
    assert isinstance(data_key, DataKey)
    assert data_key.key_version == 1
    assert data_key.plaintext is not None and len(data_key.plaintext) == 32
    opened = client.decrypt(key_name, data_key.ciphertext, associated_data=associated_data)
    assert opened.data == data_key.plaintext
    (batch,) = client.decrypt_batch(key_name, [BatchItem(data_key.ciphertext, associated_data)])
    assert batch.ok and batch.data == data_key.plaintext


def test_type_version_and_wrapped_only(client: KeystreamClient, key_name: str) -> None:
    client.create_key(key_name, segment_size=4096)
    client.rotate_key(key_name)
    small = client.datakey(key_name, key_type="aes128")
    assert small.plaintext is not None and len(small.plaintext) == 16 and small.key_version == 2
    wrapped = client.datakey(key_name, plaintext=False)
    assert wrapped.plaintext is None and wrapped.key_version == 2
    assert len(client.decrypt(key_name, wrapped.ciphertext).data) == 32
    with pytest.raises(ValueError, match="aes128, aes256"):
        client.datakey(key_name, key_type="aes192")


def test_repr_never_shows_the_data_key(client: KeystreamClient, key_name: str) -> None:
    client.create_key(key_name, segment_size=4096)
    data_key = client.datakey(key_name)
    assert data_key.plaintext is not None
    shown = repr(data_key) + str(data_key)
    for form in (
        repr(data_key.plaintext),
        data_key.plaintext.hex(),
        base64.b64encode(data_key.plaintext).decode(),
    ):
        assert form not in shown
    assert "plaintext=<hidden>" in shown and "key_version=1" in shown
    assert "plaintext=None" in repr(client.datakey(key_name, plaintext=False))


def test_scopes(client: KeystreamClient, server: RunningServer, key_name: str) -> None:
    client.create_key(key_name, segment_size=4096)
    encrypt_only = client.create_token(["encrypt"], [key_name])
    with KeystreamClient(server.url, encrypt_only.token) as limited:
        wrapped = limited.datakey(key_name, plaintext=False)
        assert wrapped.plaintext is None
        with pytest.raises(KeystreamAPIError) as refused:
            limited.datakey(key_name, plaintext=True)
        assert (refused.value.status, refused.value.code) == (403, "forbidden")
        assert "'decrypt' scope" in refused.value.message
    # The wrapped key opens later for a token that may decrypt.
    assert len(client.decrypt(key_name, wrapped.ciphertext).data) == 32
    with pytest.raises(KeystreamAPIError) as missing:
        client.datakey(key_name + "-missing")
    assert missing.value.status == 404


def test_data_key_never_reaches_the_server_log(
    client: KeystreamClient, server: RunningServer, key_name: str
) -> None:
    client.create_key(key_name, segment_size=4096)
    data_key = client.datakey(key_name, associated_data=b"ctx")
    assert data_key.plaintext is not None
    log = server.log.read_text(errors="replace")
    assert base64.b64encode(data_key.plaintext).decode() not in log
    assert data_key.plaintext.hex() not in log


@pytest.mark.parametrize("scheme", ["ctr-hmac", "gcm"])
async def test_async_datakey(server: RunningServer, key_name: str, scheme: str) -> None:
    async with AsyncKeystreamClient(server.url, server.token) as ks:
        await ks.create_key(key_name, segment_size=4096, scheme=scheme)
        data_key = await ks.datakey(key_name, key_type="aes128", associated_data=b"ad")
        assert data_key.plaintext is not None and len(data_key.plaintext) == 16
        assert (
            await ks.decrypt(key_name, data_key.ciphertext, associated_data=b"ad")
        ).data == data_key.plaintext
        wrapped = await ks.datakey(key_name, plaintext=False)
        assert wrapped.plaintext is None
        assert len((await ks.decrypt(key_name, wrapped.ciphertext)).data) == 32
