"""Where whole sealed messages are sealed and opened (:mod:`app.services.sealing`): the one policy for the
streaming routes' small bodies, the batch routes and data keys."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

import aescore
from app.core.config import Settings
from app.formats.sealed import SealedDecryptionError, native_isa
from app.keycache import KeyCache
from app.keystore import open_keystore
from app.services.keys import DecryptionKeys, _FreshCandidates, decryption_keys
from app.services.sealing import (
    PYTHON_INLINE_MAX_BYTES,
    PYTHON_INLINE_MAX_ITEMS,
    Opening,
    _inline_max,
    seal_message,
)

PYTHON = aescore.get_backend("python")


class InlinePython(type(PYTHON)):  # type: ignore[misc]
    """The python backend claiming to be cheap enough for the event loop, without a native sealer."""

    name = "inline-python"
    runs_inline = True


SETTINGS = Settings(_env_file=None, inline_crypto_max_bytes=1000)  # type: ignore[call-arg]
#: The service's defaults: a trial over two versions of a small body stays on the loop.
DEFAULTS = Settings(_env_file=None)  # type: ignore[call-arg]


async def test_one_small_body_runs_inline_up_to_the_settings_limit(two_versions: KeyCache) -> None:
    """A streaming route's small body runs on the loop up to ``inline_crypto_max_bytes`` even without a
    native sealer (as a streaming segment would), and leaves it above: bytes, else an awaitable of them."""
    backend = InlinePython()
    key = two_versions.resolve("k", None, backend)
    sealed = seal_message(SETTINGS, backend, key, b"", bytes(1000))
    assert isinstance(sealed, bytes)
    above = seal_message(SETTINGS, backend, key, b"", bytes(1001))
    assert not isinstance(above, bytes)
    sealed_above = await above
    keys = await decryption_keys(two_versions, "k", backend, 2)  # one candidate: no trial to weigh
    # 1000 plaintext bytes make a longer sealed message: a limit of its length keeps it on the loop.
    roomy = Settings(_env_file=None, inline_crypto_max_bytes=len(sealed))  # type: ignore[call-arg]
    assert Opening(roomy, backend, keys, b"").whole(sealed) == bytes(1000)
    opened = Opening(roomy, backend, keys, b"").whole(sealed_above)
    assert not isinstance(opened, bytes)
    assert await opened == bytes(1001)


def test_without_a_native_sealer_only_a_handful_of_small_messages_stay_on_the_loop() -> None:
    few, many = PYTHON_INLINE_MAX_ITEMS, PYTHON_INLINE_MAX_ITEMS + 1
    assert _inline_max(SETTINGS, InlinePython(), "ctr-hmac", few) == PYTHON_INLINE_MAX_BYTES
    assert _inline_max(SETTINGS, InlinePython(), "ctr-hmac", many) == -1
    assert _inline_max(SETTINGS, InlinePython(), "ctr-hmac", 1) == PYTHON_INLINE_MAX_BYTES


def test_a_native_sealer_runs_batches_inline_up_to_the_settings_limit() -> None:
    if aescore.available_backends().get("aesni") is not None:
        pytest.skip("no AES-NI on this CPU: no native sealer to ask about")
    aesni = aescore.get_backend("aesni")
    if native_isa(aesni, "ctr-hmac") is None:
        pytest.skip("the aesni backend offers no native sealer here")
    assert _inline_max(SETTINGS, aesni, "ctr-hmac", 100) == 1000


@pytest.fixture
def two_versions(tmp_path: Path) -> Iterator[KeyCache]:
    store = open_keystore(tmp_path / "data", secrets.token_bytes(32))
    store.create_key("k", "aes256")
    store.rotate_key("k")
    yield KeyCache(store, metadata_ttl=60.0)
    store.close()


def _aesni() -> aescore.Backend:
    if aescore.available_backends().get("aesni") is not None:
        pytest.skip("no AES-NI on this CPU: no native sealer")
    return aescore.get_backend("aesni")


async def test_a_small_body_is_sealed_and_opened_at_once_on_the_loop(two_versions: KeyCache) -> None:
    """seal_message and Opening.whole answer with the bytes themselves when the crypto runs on the event
    loop (a native sealer: no coroutine), and with an awaitable of them when it leaves the loop."""
    aesni = _aesni()
    key = two_versions.resolve("k", None, aesni)
    sealed = seal_message(DEFAULTS, aesni, key, b"ad", b"hello")
    assert isinstance(sealed, bytes)
    opening = Opening(DEFAULTS, aesni, await decryption_keys(two_versions, "k", aesni, None), b"ad")
    assert opening.whole(sealed) == b"hello" and opening.key_version() == 2
    off_loop = seal_message(DEFAULTS, PYTHON, two_versions.resolve("k", None, PYTHON), b"ad", b"hello")
    assert not isinstance(off_loop, bytes)  # the python backend never runs on the loop
    python_opening = Opening(DEFAULTS, PYTHON, await decryption_keys(two_versions, "k", PYTHON, None), b"ad")
    opened = python_opening.whole(await off_loop)
    assert not isinstance(opened, bytes)
    assert await opened == b"hello" and python_opening.key_version() == 2


async def test_a_body_no_cached_version_opens_is_opened_again_off_the_loop(two_versions: KeyCache) -> None:
    """A ciphertext of a version the decrypt's candidates lack (rotated elsewhere, the cache not told yet)
    raises CacheMissError on the loop (the key's versions must be read): Opening.whole then answers with an
    awaitable that opens it in a worker thread after the read. A wrong ciphertext is refused either way."""
    aesni = _aesni()
    newest = two_versions.resolve("k", 2, aesni)
    oldest = two_versions.resolve("k", 1, aesni)
    sealed = seal_message(DEFAULTS, aesni, newest, b"", b"rotated")
    assert isinstance(sealed, bytes)
    stale = DecryptionKeys([oldest], _FreshCandidates(two_versions, "k", aesni, None))
    opening = Opening(DEFAULTS, aesni, stale, b"")
    opened = opening.whole(sealed)
    assert not isinstance(opened, bytes)
    assert await opened == b"rotated" and opening.key_version() == 2
    with pytest.raises(SealedDecryptionError):  # the fresh look is made once: now on the loop
        Opening(DEFAULTS, aesni, stale, b"other associated data").whole(sealed)
    again = DecryptionKeys([oldest], _FreshCandidates(two_versions, "k", aesni, None))
    refused = Opening(DEFAULTS, aesni, again, b"other associated data").whole(sealed)
    assert not isinstance(refused, bytes)
    with pytest.raises(SealedDecryptionError):
        await refused
