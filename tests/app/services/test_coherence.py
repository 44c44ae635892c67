"""The change-log follower: two processes' worth of caches on one keystore stay coherent."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import aescore
from app.errors import KeyNotFoundError, KeystreamError
from app.keycache import CacheMissError, KeyCache
from app.keystore import KeyStore, open_keystore
from app.keystore.generations import MasterRotation
from app.services.coherence import ChangeFollower
from app.services.security import TokenVerifier, new_token


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[KeyStore, KeyStore]]:
    key = secrets.token_bytes(32)
    writer, reader = open_keystore(tmp_path, key), open_keystore(tmp_path, key)
    yield writer, reader
    writer.close()
    reader.close()


def follower_for(
    store: KeyStore, clock: list[float] | None = None
) -> tuple[ChangeFollower, KeyCache, TokenVerifier]:
    now = (lambda: clock[0]) if clock is not None else time.monotonic
    cache = KeyCache(store, metadata_ttl=3600, clock=now)
    tokens = TokenVerifier(store, ttl=3600)
    return ChangeFollower(store, cache, tokens, interval=3600, trust_seconds=1.0, clock=now), cache, tokens


def test_poll_invalidates_exactly_what_changed(stores: tuple[KeyStore, KeyStore]) -> None:
    writer, reader = stores
    backend = aescore.get_backend("python")
    writer.create_key("a")
    writer.create_key("b")
    token, record = new_token(("encrypt",), ("*",))
    writer.create_token(record)
    follower, cache, tokens = follower_for(reader)
    follower.applied = reader.changes_since(1 << 62).latest
    assert cache.resolve("a", None, backend).version == 1
    cache.resolve("b", None, backend)
    tokens.verify(f"Bearer {token}")
    writer.rotate_key("a")
    writer.delete_token(record.token_id)
    assert cache.key_info("a").latest_version == 1  # stale until the change is applied
    assert follower.poll() == 2
    assert cache.key_info("b", cached_only=True).latest_version == 1  # untouched
    with pytest.raises(CacheMissError):
        cache.key_info("a", cached_only=True)
    assert cache.resolve("a", None, backend).version == 2
    with pytest.raises(KeystreamError, match="invalid token"):
        tokens.verify(f"Bearer {token}")
    assert follower.poll() == 0 and follower.lag()[0] == 0


def test_a_trimmed_log_drops_every_cache(stores: tuple[KeyStore, KeyStore]) -> None:
    writer, reader = stores
    writer.create_key("a")
    follower, cache, _ = follower_for(reader)
    follower.applied = reader.changes_since(1 << 62).latest
    cache.key_info("a")
    writer.create_key("b")
    writer.create_key("c")
    writer.trim_changes(1)
    follower.poll()
    assert follower.trims == 1 and follower.applied == writer.changes_since(1 << 62).latest
    with pytest.raises(CacheMissError):
        cache.key_info("a", cached_only=True)


def test_caches_stop_being_trusted_when_the_log_cannot_be_read(stores: tuple[KeyStore, KeyStore]) -> None:
    writer, reader = stores
    writer.create_key("a", deletion_allowed=True)
    clock = [100.0]
    follower, cache, _ = follower_for(reader, clock)
    follower.poll()
    cache.key_info("a")
    clock[0] += 0.5
    assert cache.key_info("a", cached_only=True).name == "a"
    clock[0] += 0.6  # 1.1 s after the last successful read: past trust_seconds
    with pytest.raises(CacheMissError):
        cache.key_info("a", cached_only=True)
    writer.delete_key("a")
    with pytest.raises(KeyNotFoundError):
        cache.key_info("a")  # read from the keystore, not served from memory


def test_the_thread_applies_changes_on_a_hint(stores: tuple[KeyStore, KeyStore]) -> None:
    writer, reader = stores
    writer.create_key("a")
    follower, cache, _ = follower_for(reader)
    follower.start()
    try:
        cache.key_info("a")
        time.sleep(0.05)
        writer.rotate_key("a")
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline and follower.lag()[0]:
            time.sleep(0.005)
        assert follower.lag()[0] == 0  # the data_version hint woke it long before the 3600 s poll
        assert cache.key_info("a").latest_version == 2
    finally:
        follower.stop()


def test_a_master_key_rotation_reloads_the_keyring_and_zeroes_retired_generations(
    stores: tuple[KeyStore, KeyStore],
) -> None:
    writer, reader = stores
    writer.create_key("a")
    follower, _, _ = follower_for(reader)
    follower.applied = reader.changes_since(1 << 62).latest
    for generation in (2, 3):
        rotation = MasterRotation(writer)
        rotation.begin()
        rotation.run()
        follower.poll()
        assert f"current={generation} open=[{generation}]" in repr(reader.keyring)
    # generation 2 was retired by the second rotation: its key left the reader's memory at the poll, without
    # the reader wrapping or unwrapping anything
    assert bytes(reader.key_material("a", 1)) == bytes(writer.key_material("a", 1))


def test_each_successful_read_reports_its_time(stores: tuple[KeyStore, KeyStore], tmp_path: Path) -> None:
    writer, reader = stores
    reads: list[float] = []
    cache = KeyCache(reader, metadata_ttl=3600)
    follower = ChangeFollower(
        reader, cache, TokenVerifier(reader, ttl=3600), interval=3600, trust_seconds=1.0, on_read=reads.append
    )
    before = time.time()
    follower.poll()
    writer.create_key("a")
    follower.poll()
    assert len(reads) == 2 and before <= reads[0] <= reads[1] <= time.time()
    reader.close()
    with pytest.raises(KeystreamError):
        follower.poll()  # a failed read reports nothing: the lag keeps growing
    assert len(reads) == 2
