"""The expanded-key cache: hit path, LRU bound, metrics, invalidation, metadata TTL, decryption candidates."""

from __future__ import annotations

import secrets
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

import aescore
from app.errors import (
    BadRequestError,
    KeyNotFoundError,
    KeyVersionNotFoundError,
    ServiceUnavailableError,
)
from app.formats.sealed import KeyParameters
from app.keycache import CacheMissError, KeyCache, ResolvedKey
from app.keystore import KeyStore, SqliteKeyStore, open_keystore


class SpyKeyStore:
    """Forwards every call to a real keystore and counts it by method name."""

    def __init__(self, inner: KeyStore) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()
        self.before_material: Callable[[str, int], None] | None = None

    def __getattr__(self, attribute: str) -> Any:
        target = getattr(self.inner, attribute)
        if not callable(target):
            return target

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[attribute] += 1
            if attribute == "key_material" and self.before_material is not None:
                self.before_material(*args)
            return target(*args, **kwargs)

        return counted


class SpyBackend:
    """The pure-Python aescore backend under another name, counting key expansions."""

    def __init__(self, name: str = "spy") -> None:
        self.name = name
        self.inner = aescore.get_backend("python")
        self.expansions = 0

    def expand_key(self, key: bytes) -> aescore.ExpandedKey:
        self.expansions += 1
        return self.inner.expand_key(key)

    def ctr_xor(self, *args: Any, **kwargs: Any) -> bytes | None:
        return self.inner.ctr_xor(*args, **kwargs)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def real_store(tmp_path: Path) -> Iterator[SqliteKeyStore]:
    store = open_keystore(tmp_path / "data", secrets.token_bytes(32))
    assert isinstance(store, SqliteKeyStore)
    yield store
    store.close()


@pytest.fixture
def sqlite_uses(real_store: SqliteKeyStore, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts every SQLite connection the real keystore hands out."""
    uses: Counter[str] = Counter()
    original = real_store._connection

    def counting(*args: Any, **kwargs: Any) -> Any:
        uses["connections"] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(real_store, "_connection", counting)
    return uses


@pytest.fixture
def spy(real_store: SqliteKeyStore) -> SpyKeyStore:
    return SpyKeyStore(real_store)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def cache(spy: SpyKeyStore, clock: FakeClock) -> KeyCache:
    return KeyCache(spy, max_entries=4, metadata_ttl=1.0, clock=clock)  # type: ignore[arg-type]


@pytest.fixture
def backend() -> SpyBackend:
    return SpyBackend()


def sample(name: str, labels: dict[str, str] | None = None) -> float:
    return REGISTRY.get_sample_value(name, labels or {}) or 0.0


def metric_values() -> dict[str, float]:
    return {
        "hit": sample("keystream_key_cache_requests_total", {"result": "hit"}),
        "miss": sample("keystream_key_cache_requests_total", {"result": "miss"}),
        "evictions": sample("keystream_key_cache_evictions_total"),
        "entries": sample("keystream_key_cache_entries"),
    }


def metric_delta(before: dict[str, float]) -> dict[str, float]:
    after = metric_values()
    return {name: after[name] - before[name] for name in after}


# -- resolving ---------------------------------------------------------------------------------------------


def test_resolve_returns_material_and_an_expanded_key(
    real_store: SqliteKeyStore, cache: KeyCache, backend: SpyBackend
) -> None:
    real_store.create_key("orders", "aes128", segment_size=4096)
    resolved = cache.resolve("orders", None, backend)  # type: ignore[arg-type]
    assert (resolved.name, resolved.version, resolved.parameters) == (
        "orders",
        1,
        KeyParameters("aes128", 4096),
    )
    material = real_store.key_material("orders", 1)
    assert resolved.material == material
    counter, data = secrets.token_bytes(16), b"cached keys encrypt like fresh ones"
    python = aescore.get_backend("python")
    assert backend.ctr_xor(resolved.expanded, counter, data) == python.ctr_xor(
        python.expand_key(material), counter, data
    )


def test_hot_path_touches_neither_sqlite_nor_key_expansion(
    real_store: SqliteKeyStore,
    spy: SpyKeyStore,
    sqlite_uses: Counter[str],
    cache: KeyCache,
    backend: SpyBackend,
) -> None:
    real_store.create_key("orders")
    real_store.rotate_key("orders")
    first = cache.resolve("orders", None, backend)  # type: ignore[arg-type]
    old = cache.resolve("orders", 1, backend)  # type: ignore[arg-type]
    keystore_calls, connections, expansions = sum(spy.calls.values()), sqlite_uses["connections"], 2
    assert backend.expansions == expansions and connections > 0 and keystore_calls > 0
    before = metric_values()
    for _ in range(50):
        assert cache.resolve("orders", None, backend) is first  # type: ignore[arg-type]
        assert cache.resolve("orders", 1, backend) is old  # type: ignore[arg-type]
        assert cache.resolve("orders", 2, backend) is first  # type: ignore[arg-type]
        assert [c.version for c in cache.decryption_candidates("orders", backend)] == [2, 1]  # type: ignore[arg-type]
    assert sum(spy.calls.values()) == keystore_calls
    assert sqlite_uses["connections"] == connections
    assert backend.expansions == expansions
    assert (cache.hits, cache.misses) == (200 + 50, 2)
    assert metric_delta(before) == {"hit": 250.0, "miss": 0.0, "evictions": 0.0, "entries": 0.0}


def test_misses_are_counted(real_store: SqliteKeyStore, cache: KeyCache, backend: SpyBackend) -> None:
    real_store.create_key("a")
    real_store.create_key("b")
    before = metric_values()
    cache.resolve("a", None, backend)  # type: ignore[arg-type]
    cache.resolve("b", None, backend)  # type: ignore[arg-type]
    cache.resolve("a", None, backend)  # type: ignore[arg-type]
    assert (cache.hits, cache.misses, cache.evictions, len(cache)) == (1, 2, 0, 2)
    assert metric_delta(before) == {"hit": 1.0, "miss": 2.0, "evictions": 0.0, "entries": 2.0}


def test_each_backend_gets_its_own_entry(real_store: SqliteKeyStore, cache: KeyCache) -> None:
    real_store.create_key("orders")
    one, two = SpyBackend("one"), SpyBackend("two")
    a = cache.resolve("orders", 1, one)  # type: ignore[arg-type]
    b = cache.resolve("orders", 1, two)  # type: ignore[arg-type]
    assert a is not b and a.material == b.material
    assert (one.expansions, two.expansions, len(cache)) == (1, 1, 2)


def test_version_errors(real_store: SqliteKeyStore, cache: KeyCache, backend: SpyBackend) -> None:
    real_store.create_key("orders")
    for version in (0, -1, 2):
        with pytest.raises(KeyVersionNotFoundError, match=f"no version {version}"):
            cache.resolve("orders", version, backend)  # type: ignore[arg-type]
    with pytest.raises(BadRequestError, match="must be an integer"):
        cache.resolve("orders", True, backend)  # type: ignore[arg-type]
    with pytest.raises(KeyNotFoundError):
        cache.resolve("nothing", None, backend)  # type: ignore[arg-type]
    with pytest.raises(BadRequestError, match="invalid key name"):
        cache.resolve("no such/key", None, backend)  # type: ignore[arg-type]
    assert len(cache) == 0


def test_a_missing_version_of_a_trimmed_key_names_the_versions_left(
    real_store: SqliteKeyStore, cache: KeyCache, backend: SpyBackend
) -> None:
    real_store.create_key("orders")
    for _ in range(4):
        real_store.rotate_key("orders")
    real_store.update_key("orders", min_decryption_version=3)
    real_store.trim_key("orders", 3)
    with pytest.raises(KeyVersionNotFoundError, match=r"no version 7 \(versions 3 to 5\)"):
        cache.resolve("orders", 7, backend)  # type: ignore[arg-type]


def test_material_never_in_repr(real_store: SqliteKeyStore, cache: KeyCache, backend: SpyBackend) -> None:
    real_store.import_key("imp", bytes.fromhex("00112233445566778899aabbccddeeff"))
    resolved = cache.resolve("imp", 1, backend)  # type: ignore[arg-type]
    for text in (repr(resolved), str(resolved), repr(cache), repr([resolved])):
        assert "00112233" not in text and "\\x00\\x11" not in text and "material" not in text
    assert "imp" in repr(resolved) and "key_size=128" in repr(resolved)


def test_resolved_key_is_frozen() -> None:
    resolved = ResolvedKey(
        "k", 1, KeyParameters("aes128", 4096), bytes(16), aescore.get_backend("python").expand_key(bytes(16))
    )
    with pytest.raises(AttributeError):
        resolved.material = b"other"  # type: ignore[misc]


# -- LRU ---------------------------------------------------------------------------------------------------


def test_lru_bound_and_eviction_order(
    real_store: SqliteKeyStore, spy: SpyKeyStore, backend: SpyBackend
) -> None:
    real_store.create_key("orders")
    for _ in range(3):
        real_store.rotate_key("orders")
    cache = KeyCache(spy, max_entries=2, metadata_ttl=60)  # type: ignore[arg-type]
    before = metric_values()
    cache.resolve("orders", 1, backend)  # type: ignore[arg-type]
    cache.resolve("orders", 2, backend)  # type: ignore[arg-type]
    cache.resolve("orders", 1, backend)  # type: ignore[arg-type]  # 1 is now the most recently used
    cache.resolve("orders", 3, backend)  # type: ignore[arg-type]  # evicts 2
    assert (len(cache), cache.evictions) == (2, 1)
    expansions = backend.expansions
    cache.resolve("orders", 1, backend)  # type: ignore[arg-type]
    cache.resolve("orders", 3, backend)  # type: ignore[arg-type]
    assert backend.expansions == expansions  # 1 and 3 stayed
    cache.resolve("orders", 2, backend)  # type: ignore[arg-type]  # evicts 1, the least recently used
    assert backend.expansions == expansions + 1 and cache.evictions == 2
    cache.resolve("orders", 3, backend)  # type: ignore[arg-type]
    assert backend.expansions == expansions + 1
    assert (cache.hits, cache.misses, len(cache)) == (4, 4, 2)
    assert metric_delta(before) == {"hit": 4.0, "miss": 4.0, "evictions": 2.0, "entries": 2.0}


def test_bounds_are_validated(spy: SpyKeyStore) -> None:
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="max_entries"):
            KeyCache(spy, max_entries=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="metadata_ttl"):
        KeyCache(spy, metadata_ttl=-0.1)  # type: ignore[arg-type]


# -- invalidation ------------------------------------------------------------------------------------------


def test_invalidate_drops_every_entry_and_the_metadata_of_one_key(
    real_store: SqliteKeyStore, spy: SpyKeyStore, cache: KeyCache
) -> None:
    real_store.create_key("orders")
    real_store.rotate_key("orders")
    real_store.create_key("other")
    one, two = SpyBackend("one"), SpyBackend("two")
    for backend in (one, two):
        cache.resolve("orders", 1, backend)  # type: ignore[arg-type]
    cache.resolve("orders", 2, one)  # type: ignore[arg-type]
    kept = cache.resolve("other", 1, one)  # type: ignore[arg-type]
    assert len(cache) == 4
    before = metric_values()
    gets = spy.calls["get_key"]
    cache.invalidate("orders")
    assert len(cache) == 1 and metric_delta(before)["entries"] == -3.0
    assert cache.resolve("other", 1, one) is kept  # type: ignore[arg-type]
    cache.key_info("orders")
    assert spy.calls["get_key"] == gets + 1  # metadata was dropped too
    cache.invalidate("never-cached")  # harmless


def test_invalidate_after_rotation_shows_the_new_version_at_once(
    real_store: SqliteKeyStore, cache: KeyCache, backend: SpyBackend
) -> None:
    real_store.create_key("orders")
    assert cache.resolve("orders", None, backend).version == 1  # type: ignore[arg-type]
    real_store.rotate_key("orders")
    assert cache.resolve("orders", None, backend).version == 1  # type: ignore[arg-type]  # within TTL
    cache.invalidate("orders")
    assert cache.resolve("orders", None, backend).version == 2  # type: ignore[arg-type]


def test_clear(real_store: SqliteKeyStore, cache: KeyCache, backend: SpyBackend) -> None:
    real_store.create_key("a")
    real_store.create_key("b")
    cache.resolve("a", 1, backend)  # type: ignore[arg-type]
    cache.resolve("b", 1, backend)  # type: ignore[arg-type]
    before = metric_values()
    cache.clear()
    assert len(cache) == 0 and metric_delta(before)["entries"] == -2.0
    cache.resolve("a", 1, backend)  # type: ignore[arg-type]
    assert cache.misses == 3


def test_a_load_racing_an_invalidate_is_not_cached(
    real_store: SqliteKeyStore, spy: SpyKeyStore, cache: KeyCache, backend: SpyBackend
) -> None:
    real_store.create_key("orders", deletion_allowed=True)
    spy.before_material = lambda name, version: cache.invalidate(name)  # e.g. DELETE in another thread
    resolved = cache.resolve("orders", 1, backend)  # type: ignore[arg-type]
    assert resolved.version == 1  # the request that was already running is served...
    assert len(cache) == 0  # ...but nothing loaded before the invalidation stays cached
    spy.before_material = lambda name, version: cache.clear()
    cache.resolve("orders", 1, backend)  # type: ignore[arg-type]
    assert len(cache) == 0
    spy.before_material = None
    cache.resolve("orders", 1, backend)  # type: ignore[arg-type]
    assert len(cache) == 1


# -- metadata TTL (several workers) ------------------------------------------------------------------------


def test_metadata_is_cached_for_the_ttl(
    real_store: SqliteKeyStore, spy: SpyKeyStore, cache: KeyCache, clock: FakeClock
) -> None:
    real_store.create_key("orders")
    info = cache.key_info("orders")
    assert spy.calls["get_key"] == 1
    clock.advance(0.99)
    assert cache.key_info("orders") is info and spy.calls["get_key"] == 1
    clock.advance(0.02)
    assert cache.key_info("orders") == info and spy.calls["get_key"] == 2
    zero_ttl = KeyCache(spy, metadata_ttl=0, clock=clock)  # type: ignore[arg-type]
    zero_ttl.key_info("orders")
    zero_ttl.key_info("orders")
    assert spy.calls["get_key"] == 4


def test_rotation_by_another_worker_is_seen_after_the_ttl(
    real_store: SqliteKeyStore, cache: KeyCache, clock: FakeClock, backend: SpyBackend
) -> None:
    real_store.create_key("orders")
    assert cache.resolve("orders", None, backend).version == 1  # type: ignore[arg-type]
    real_store.rotate_key("orders")  # another worker: no invalidate() here
    clock.advance(0.5)
    assert cache.resolve("orders", None, backend).version == 1  # type: ignore[arg-type]
    clock.advance(0.6)
    assert cache.resolve("orders", None, backend).version == 2  # type: ignore[arg-type]


def test_an_explicit_newer_version_refreshes_stale_metadata_at_once(
    real_store: SqliteKeyStore, spy: SpyKeyStore, cache: KeyCache, backend: SpyBackend
) -> None:
    real_store.create_key("orders")
    cache.key_info("orders")
    real_store.rotate_key("orders")  # another worker encrypted with version 2 already
    assert cache.resolve("orders", 2, backend).version == 2  # type: ignore[arg-type]
    assert cache.key_info("orders").latest_version == 2
    assert [c.version for c in cache.decryption_candidates("orders", backend, 2)] == [2]  # type: ignore[arg-type]


def test_deletion_by_another_worker_is_seen_after_the_ttl(
    real_store: SqliteKeyStore, cache: KeyCache, clock: FakeClock, backend: SpyBackend
) -> None:
    real_store.create_key("orders", deletion_allowed=True)
    cache.resolve("orders", 1, backend)  # type: ignore[arg-type]
    real_store.delete_key("orders")
    assert cache.resolve("orders", 1, backend).version == 1  # type: ignore[arg-type]  # within TTL
    clock.advance(1.5)
    with pytest.raises(KeyNotFoundError):
        cache.resolve("orders", 1, backend)  # type: ignore[arg-type]
    assert len(cache) == 0


def test_a_key_recreated_by_another_worker_gets_its_new_material(
    real_store: SqliteKeyStore, cache: KeyCache, clock: FakeClock, backend: SpyBackend
) -> None:
    real_store.create_key("orders", deletion_allowed=True)
    old = cache.resolve("orders", 1, backend)  # type: ignore[arg-type]
    real_store.delete_key("orders")
    real_store.create_key("orders", "aes128")
    clock.advance(1.5)
    new = cache.resolve("orders", 1, backend)  # type: ignore[arg-type]
    assert new.material == real_store.key_material("orders", 1) != old.material
    assert new.parameters.key_type == "aes128"


# -- decryption candidates ---------------------------------------------------------------------------------


def test_decryption_candidates(real_store: SqliteKeyStore, cache: KeyCache, backend: SpyBackend) -> None:
    real_store.create_key("orders")
    for _ in range(3):
        real_store.rotate_key("orders")
    real_store.update_key("orders", min_decryption_version=2)
    candidates = cache.decryption_candidates("orders", backend)  # type: ignore[arg-type]
    assert [c.version for c in candidates] == [4, 3, 2]
    assert [c.material for c in candidates] == [real_store.key_material("orders", v) for v in (4, 3, 2)]
    assert [c.version for c in cache.decryption_candidates("orders", backend, 3)] == [3]  # type: ignore[arg-type]
    with pytest.raises(BadRequestError, match="below its min_decryption_version \\(2\\)"):
        cache.decryption_candidates("orders", backend, 1)  # type: ignore[arg-type]
    with pytest.raises(KeyVersionNotFoundError):
        cache.decryption_candidates("orders", backend, 5)  # type: ignore[arg-type]
    assert cache.resolve("orders", 1, backend).version == 1  # type: ignore[arg-type]  # encrypt-side lookup


def test_decryption_candidates_follow_a_policy_change_after_invalidate(
    real_store: SqliteKeyStore, cache: KeyCache, backend: SpyBackend
) -> None:
    real_store.create_key("orders")
    real_store.rotate_key("orders")
    assert len(cache.decryption_candidates("orders", backend)) == 2  # type: ignore[arg-type]
    real_store.update_key("orders", min_decryption_version=2)
    cache.invalidate("orders")
    assert [c.version for c in cache.decryption_candidates("orders", backend)] == [2]  # type: ignore[arg-type]


def test_decryption_candidates_are_bounded_to_the_newest_versions(
    real_store: SqliteKeyStore, spy: SpyKeyStore, backend: SpyBackend
) -> None:
    """Each candidate costs a trial decryption of the first segment: at most max_decrypt_versions are offered
    (issue 11 item 4); an older version is reachable only by asking for it."""
    real_store.create_key("orders")
    for _ in range(4):
        real_store.rotate_key("orders")
    cache = KeyCache(spy, metadata_ttl=60, max_decrypt_versions=2)  # type: ignore[arg-type]
    assert [c.version for c in cache.decryption_candidates("orders", backend)] == [5, 4]  # type: ignore[arg-type]
    assert [v for v, _ in cache.refreshed_candidates("orders", backend)] == [5, 4]  # type: ignore[arg-type]
    assert [c.version for c in cache.decryption_candidates("orders", backend, 1)] == [1]  # type: ignore[arg-type]
    real_store.update_key("orders", min_decryption_version=5)
    cache.invalidate("orders")
    assert [c.version for c in cache.decryption_candidates("orders", backend)] == [5]  # type: ignore[arg-type]
    unbounded = KeyCache(spy, metadata_ttl=60)  # type: ignore[arg-type]
    real_store.update_key("orders", min_decryption_version=1)
    assert len(unbounded.decryption_candidates("orders", backend)) == 5  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_decrypt_versions"):
        KeyCache(spy, max_decrypt_versions=0)  # type: ignore[arg-type]


# -- threads -----------------------------------------------------------------------------------------------


def test_concurrent_use_keeps_the_bound_and_the_counts(real_store: SqliteKeyStore, spy: SpyKeyStore) -> None:
    real_store.create_key("orders")
    for _ in range(5):
        real_store.rotate_key("orders")
    cache = KeyCache(spy, max_entries=3, metadata_ttl=0.001)  # type: ignore[arg-type]
    backends = [SpyBackend("one"), SpyBackend("two")]
    errors: list[BaseException] = []
    calls_per_thread = 150
    barrier = threading.Barrier(6)

    def work(index: int) -> None:
        try:
            barrier.wait(timeout=10)
            for call in range(calls_per_thread):
                version = (index * 7 + call) % 6 + 1
                resolved = cache.resolve("orders", version, backends[call % 2])  # type: ignore[arg-type]
                assert resolved.version == version
                if call % 50 == 0:
                    cache.invalidate("orders")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert len(cache) <= 3
    assert cache.hits + cache.misses == 6 * calls_per_thread


def test_a_busy_keystore_does_not_empty_the_cache(
    real_store: SqliteKeyStore, spy: SpyKeyStore, cache: KeyCache, clock: FakeClock, backend: SpyBackend
) -> None:
    real_store.create_key("orders")
    cached = cache.resolve("orders", 1, backend)  # type: ignore[arg-type]

    def busy(name: str) -> None:
        raise ServiceUnavailableError("keystore database error: database is locked")

    spy.inner = type("Busy", (), {"get_key": staticmethod(busy)})()  # type: ignore[assignment]
    clock.advance(1.5)
    with pytest.raises(ServiceUnavailableError):
        cache.resolve("orders", 1, backend)  # type: ignore[arg-type]
    spy.inner = real_store
    assert len(cache) == 1
    assert cache.resolve("orders", 1, backend) is cached  # type: ignore[arg-type]


def test_refreshed_candidates_read_a_rotation_by_another_worker_at_once(
    real_store: SqliteKeyStore, spy: SpyKeyStore, cache: KeyCache, backend: SpyBackend
) -> None:
    real_store.create_key("orders")
    assert [c.version for c in cache.decryption_candidates("orders", backend)] == [1]  # type: ignore[arg-type]
    real_store.rotate_key("orders")  # another worker: no invalidate() here, and the ttl has not passed
    assert [c.version for c in cache.decryption_candidates("orders", backend)] == [1]  # type: ignore[arg-type]
    loads = spy.calls["key_material"]
    refreshed = cache.refreshed_candidates("orders", backend)  # type: ignore[arg-type]
    assert [version for version, _ in refreshed] == [2, 1]
    assert refreshed[0][1] == real_store.key_material("orders", 2)
    assert spy.calls["key_material"] == loads + 1  # version 1 stayed cached
    assert cache.key_info("orders").latest_version == 2


def test_cached_only_lookups_raise_instead_of_reading_the_keystore(
    real_store: SqliteKeyStore, spy: SpyKeyStore, cache: KeyCache, clock: FakeClock, backend: SpyBackend
) -> None:
    real_store.create_key("orders")
    before = dict(spy.calls)
    with pytest.raises(CacheMissError):
        cache.resolve("orders", None, backend, cached_only=True)  # type: ignore[arg-type]
    with pytest.raises(CacheMissError):
        cache.key_info("orders", cached_only=True)
    assert dict(spy.calls) == before and cache.misses == 0
    cache.key_info("orders")
    with pytest.raises(CacheMissError):  # metadata cached, material not
        cache.decryption_candidates("orders", backend, cached_only=True)  # type: ignore[arg-type]
    assert cache.misses == 0
    cache.resolve("orders", None, backend)  # type: ignore[arg-type]
    reads = dict(spy.calls)
    hits = cache.hits
    assert cache.resolve("orders", None, backend, cached_only=True).version == 1  # type: ignore[arg-type]
    assert [c.version for c in cache.decryption_candidates("orders", backend, 1, cached_only=True)] == [1]  # type: ignore[arg-type]
    assert dict(spy.calls) == reads and cache.hits == hits + 2
    with pytest.raises(CacheMissError):  # a version newer than the cached metadata needs a fresh read
        cache.resolve("orders", 2, backend, cached_only=True)  # type: ignore[arg-type]
    clock.advance(1.1)
    with pytest.raises(CacheMissError):  # expired metadata
        cache.resolve("orders", None, backend, cached_only=True)  # type: ignore[arg-type]


def test_cached_only_decryption_candidates_match_a_read(
    real_store: SqliteKeyStore, spy: SpyKeyStore, cache: KeyCache, backend: SpyBackend
) -> None:
    """On the event loop (cached_only) the candidates are those a read finds: the latest alone only when no
    older version may decrypt, else every version down to min_decryption_version; each counted as a hit."""
    real_store.create_key("orders")
    cache.decryption_candidates("orders", backend)  # type: ignore[arg-type]
    hits = cache.hits
    assert [c.version for c in cache.decryption_candidates("orders", backend, cached_only=True)] == [1]  # type: ignore[arg-type]
    assert cache.hits == hits + 1
    real_store.rotate_key("orders")
    real_store.rotate_key("orders")
    cache.invalidate("orders")
    read = cache.decryption_candidates("orders", backend)  # type: ignore[arg-type]
    reads = dict(spy.calls)
    hits = cache.hits
    on_loop = cache.decryption_candidates("orders", backend, cached_only=True)  # type: ignore[arg-type]
    assert [c.version for c in on_loop] == [c.version for c in read] == [3, 2, 1]
    assert [c.material for c in on_loop] == [real_store.key_material("orders", v) for v in (3, 2, 1)]
    assert cache.hits == hits + 3 and dict(spy.calls) == reads
    real_store.update_key("orders", min_decryption_version=3)
    cache.invalidate("orders")
    cache.decryption_candidates("orders", backend)  # type: ignore[arg-type]
    only = cache.decryption_candidates("orders", backend, cached_only=True)  # type: ignore[arg-type]
    assert [c.version for c in only] == [3] and only[0].material == real_store.key_material("orders", 3)
    real_store.rotate_key("orders")
    real_store.update_key("orders", min_decryption_version=4)
    cache.invalidate("orders")
    cache.key_info("orders")
    with pytest.raises(CacheMissError):  # version 4 was never resolved: a read, off the loop
        cache.decryption_candidates("orders", backend, cached_only=True)  # type: ignore[arg-type]


def _slot_of(material: Any) -> memoryview:
    """The chunk memory under a cached version's material: it does not keep the secret alive."""
    secret = material.obj
    start = secret._slot * 64
    return memoryview(secret._chunk.memory)[start : start + len(material)]


def test_versions_live_in_secret_memory_zeroed_on_eviction_and_by_wipe(real_store: SqliteKeyStore) -> None:
    real_store.create_key("orders")
    for _ in range(2):
        real_store.rotate_key("orders")
    python_backend = aescore.get_backend("python")
    cache = KeyCache(real_store, max_entries=2)
    first = cache.resolve("orders", 1, python_backend)
    known = bytes(first.material)
    assert isinstance(first.material, memoryview) and first.material.readonly
    raw = _slot_of(first.material)
    del first
    cache.resolve("orders", 2, python_backend)
    assert bytes(raw) == known  # still cached
    cache.resolve("orders", 3, python_backend)  # evicts version 1: nobody uses it, so it is zeroed at once
    assert bytes(raw) == bytes(len(raw))

    in_use = cache.resolve("orders", 3, python_backend)
    known = bytes(in_use.material)
    cache.wipe()  # sealing: zeroed now, though a request still holds it
    assert len(cache) == 0
    assert bytes(in_use.material) == bytes(len(known)) != known


# -- aes256-siv keys -----------------------------------------------------------------------------------------


def test_siv_versions_are_cached_apart_from_backends_and_refused_where_aes_keys_are_asked(
    real_store: SqliteKeyStore, spy: SpyKeyStore, cache: KeyCache, backend: SpyBackend
) -> None:
    material = secrets.token_bytes(64)
    real_store.import_key("det", material, key_type="aes256-siv")
    real_store.rotate_key("det")
    real_store.create_key("aes")
    latest = cache.deterministic_key("det")
    assert latest.version == 2 and len(latest.material) == 64 and backend.expansions == 0
    assert [(k.version, bytes(k.material)) for k in cache.deterministic_candidates("det")][1] == (1, material)
    reads = spy.calls["key_material"]
    assert cache.deterministic_key("det", cached_only=True) is latest  # a hit: no keystore read
    assert spy.calls["key_material"] == reads and "material" not in repr(latest)
    with pytest.raises(BadRequestError, match="only the JSON batch routes"):
        cache.resolve("det", None, backend)  # type: ignore[arg-type]
    with pytest.raises(BadRequestError, match="only the JSON batch routes"):
        cache.decryption_candidates("det", backend)  # type: ignore[arg-type]
    with pytest.raises(BadRequestError, match="key 'aes' is aes256, not aes256-siv"):
        cache.deterministic_key("aes")
    real_store.update_key("det", min_decryption_version=2)
    cache.invalidate("det")
    assert [k.version for k in cache.deterministic_candidates("det")] == [2]
    with pytest.raises(BadRequestError, match="below its min_decryption_version"):
        cache.deterministic_candidates("det", 1)


def test_wipe_zeroes_siv_versions_too(real_store: SqliteKeyStore, cache: KeyCache) -> None:
    real_store.create_key("det", "aes256-siv")
    material = cache.deterministic_key("det").material
    assert any(material)
    cache.wipe()
    assert not any(material) and len(cache) == 0
