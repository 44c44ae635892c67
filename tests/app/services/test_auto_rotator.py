"""The per-worker auto-rotator: rotates what is due, lets the keystore decide between workers, counts and
invalidates what it rotated, and survives a keystore error."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import aescore
from app.core.metrics import KEY_AUTO_ROTATIONS
from app.errors import ServiceUnavailableError
from app.keycache import KeyCache
from app.keystore import KeyInfo, KeyStore, open_keystore
from app.services.auto_rotate import AutoRotator


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[KeyStore, KeyStore]]:
    """Two stores on one SQLite file: two workers' worth, with the 1-second test floor."""
    key = secrets.token_bytes(32)
    first = open_keystore(tmp_path, key, auto_rotate_min_period=1)
    second = open_keystore(tmp_path, key, auto_rotate_min_period=1)
    yield first, second
    first.close()
    second.close()


def counted() -> float:
    return KEY_AUTO_ROTATIONS._value.get()  # type: ignore[attr-defined]


def wait_until_due(store: KeyStore, name: str) -> None:
    deadline = time.monotonic() + 10
    while name not in store.due_for_rotation():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_two_workers_checking_together_rotate_a_due_key_once(stores: tuple[KeyStore, KeyStore]) -> None:
    first, second = stores
    caches = [KeyCache(store, metadata_ttl=3600) for store in stores]
    rotators = [AutoRotator(store, cache, interval=3600) for store, cache in zip(stores, caches, strict=True)]
    first.create_key("fast", auto_rotate_period=1, segment_size=4096)
    first.create_key("slow", auto_rotate_period=3600)
    backend = aescore.get_backend("python")
    assert caches[0].resolve("fast", None, backend).version == 1  # cached before the rotation
    assert [r.check() for r in rotators] == [[], []]  # nothing is a second old yet
    wait_until_due(second, "fast")
    before = counted()
    done: list[KeyInfo] = rotators[0].check() + rotators[1].check()
    assert [(info.name, info.latest_version) for info in done] == [("fast", 2)]
    assert counted() == before + 1
    assert sum(r.rotations for r in rotators) == 1 and [r.checks for r in rotators] == [2, 2]
    assert caches[0].resolve("fast", None, backend).version == 2  # the rotating worker dropped its entry
    assert second.get_key("slow").latest_version == 1


def test_a_keystore_error_is_logged_and_the_thread_keeps_checking(
    stores: tuple[KeyStore, KeyStore], caplog: pytest.LogCaptureFixture
) -> None:
    first, _ = stores
    calls: list[int] = []

    class Flaky:
        def due_for_rotation(self) -> list[str]:
            calls.append(1)
            if len(calls) == 1:
                raise ServiceUnavailableError("keystore unavailable")
            return []

    rotator = AutoRotator(Flaky(), KeyCache(first), interval=0.05)  # type: ignore[arg-type]
    rotator.start()
    try:
        deadline = time.monotonic() + 10
        while len(calls) < 3:
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        rotator.stop()
    rotator.stop()  # idempotent
    assert "automatic rotation check failed: ServiceUnavailableError" in caplog.text
    assert rotator.checks >= 2
