"""Key-version resolution for encrypt and decrypt (app.services.keys), shared by streaming and batch."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

import aescore
from app.errors import BadRequestError, KeyNotFoundError, KeyVersionNotFoundError
from app.formats.sealed import SealedDecryptionError
from app.keycache import CacheMissError, KeyCache
from app.keystore import KeyStore, open_keystore
from app.services.keys import (
    cached_decryption_keys,
    cached_encryption_key,
    decryption_keys,
    encryption_key,
    sealed_encryptor,
)

BACKEND = aescore.get_backend("python")


@pytest.fixture
def keystore(tmp_path: Path) -> Iterator[KeyStore]:
    store = open_keystore(tmp_path / "data", secrets.token_bytes(32))
    store.create_key("k", "aes128", segment_size=4096)
    store.rotate_key("k")
    store.rotate_key("k")  # versions 1..3
    yield store
    store.close()


@pytest.fixture
def cache(keystore: KeyStore) -> KeyCache:
    return KeyCache(keystore, metadata_ttl=60.0)


async def test_encrypt_uses_the_latest_version_or_the_one_asked_for(cache: KeyCache) -> None:
    assert (await encryption_key(cache, "k", BACKEND, None)).version == 3
    assert (await encryption_key(cache, "k", BACKEND, 2)).version == 2


async def test_encrypt_refuses_a_version_nobody_may_decrypt(keystore: KeyStore, cache: KeyCache) -> None:
    keystore.update_key("k", min_decryption_version=2)
    cache.invalidate("k")
    with pytest.raises(BadRequestError, match="below its min_decryption_version"):
        await encryption_key(cache, "k", BACKEND, 1)
    with pytest.raises(KeyVersionNotFoundError):
        await encryption_key(cache, "k", BACKEND, 4)
    with pytest.raises(KeyNotFoundError):
        await encryption_key(cache, "missing", BACKEND, None)


async def test_decrypt_tries_newest_first_down_to_min_decryption_version(
    keystore: KeyStore, cache: KeyCache
) -> None:
    keys = await decryption_keys(cache, "k", BACKEND, None)
    assert [key.version for key in keys.candidates] == [3, 2, 1]
    assert keys.more is not None  # no explicit version: a stale cache gets one fresh look
    keystore.update_key("k", min_decryption_version=2)
    cache.invalidate("k")
    assert [key.version for key in (await decryption_keys(cache, "k", BACKEND, None)).candidates] == [3, 2]
    explicit = await decryption_keys(cache, "k", BACKEND, 2)
    assert [key.version for key in explicit.candidates] == [2] and explicit.more is None
    assert explicit.first.version == 2


async def test_a_ciphertext_of_a_version_added_elsewhere_is_found_by_the_fresh_look(
    keystore: KeyStore, cache: KeyCache
) -> None:
    keys = await decryption_keys(cache, "k", BACKEND, None)  # cached: versions 3, 2, 1
    keystore.rotate_key("k")  # "another worker" adds version 4; this cache's metadata is still fresh
    newest = (await decryption_keys(KeyCache(keystore), "k", BACKEND, None)).first
    assert newest.version == 4
    encryptor = sealed_encryptor(newest, b"ad", BACKEND)
    ciphertext = encryptor.update(b"hello") + encryptor.finalize()
    on_loop = keys.sealed_decryptor(b"ad", BACKEND)
    with pytest.raises(CacheMissError):  # the fresh look is a keystore read: never on the event loop
        on_loop.update(ciphertext)
        on_loop.finalize()
    decryptor = keys.sealed_decryptor(b"ad", BACKEND)
    opened = await anyio.to_thread.run_sync(lambda: decryptor.update(ciphertext) + decryptor.finalize())
    assert opened == b"hello"
    assert decryptor.version == 4
    pinned = (await decryption_keys(cache, "k", BACKEND, 3)).sealed_decryptor(b"ad", BACKEND)
    with pytest.raises(SealedDecryptionError):
        pinned.update(ciphertext)
        pinned.finalize()


async def test_the_cached_lookups_answer_only_from_the_cache(keystore: KeyStore, cache: KeyCache) -> None:
    """cached_encryption_key and cached_decryption_keys (the streaming routes' lookups without a coroutine)
    answer only what the key cache holds: a key or version never read, or invalidated, is ``None``, and the
    awaited lookup reads it (or says it does not exist)."""
    assert cached_encryption_key(cache, "k", BACKEND, None) is None  # nothing read yet
    assert cached_decryption_keys(cache, "k", BACKEND, None) is None
    latest = await encryption_key(cache, "k", BACKEND, None)
    assert cached_encryption_key(cache, "k", BACKEND, None) is latest
    assert cached_decryption_keys(cache, "k", BACKEND, None) is None  # versions 2 and 1 not resolved yet
    keys = await decryption_keys(cache, "k", BACKEND, None)
    cached = cached_decryption_keys(cache, "k", BACKEND, None)
    assert cached is not None and cached.candidates == keys.candidates and cached.more is not None
    explicit = cached_decryption_keys(cache, "k", BACKEND, 2)
    assert explicit is not None and [key.version for key in explicit.candidates] == [2]
    assert explicit.more is None
    keystore.rotate_key("k")
    cache.invalidate("k")  # what the change log does after a rotation elsewhere
    assert cached_encryption_key(cache, "k", BACKEND, None) is None
    assert cached_decryption_keys(cache, "k", BACKEND, None) is None
    assert (await encryption_key(cache, "k", BACKEND, None)).version == 4
    assert cached_encryption_key(cache, "k", BACKEND, 5) is None  # newer than the cached metadata: a read
    with pytest.raises(KeyVersionNotFoundError):
        await encryption_key(cache, "k", BACKEND, 5)
    assert cached_encryption_key(cache, "missing", BACKEND, None) is None  # unknown to the cache
    with pytest.raises(KeyNotFoundError):
        await encryption_key(cache, "missing", BACKEND, None)
    with pytest.raises(KeyNotFoundError):
        await decryption_keys(cache, "missing", BACKEND, None)


async def test_the_cached_lookups_check_a_context_as_the_awaited_ones(cache: KeyCache) -> None:
    await encryption_key(cache, "k", BACKEND, None)
    with pytest.raises(BadRequestError, match="is not derived"):
        cached_encryption_key(cache, "k", BACKEND, None, b"context")
    assert cached_encryption_key(cache, "k", BACKEND, None, b"context", raw=True) is not None
