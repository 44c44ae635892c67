"""The expanded-key cache: resolved key versions, ready for a backend, without touching the keystore.

Two layers, one lock:

* **Metadata** (:class:`~app.keystore.KeyInfo`) per key name. Coherence across workers and replicas comes
  from the keystore's change log: :class:`app.services.coherence.ChangeFollower` calls
  :meth:`KeyCache.invalidate` for exactly the keys that changed (or :meth:`KeyCache.clear`), and after each
  successful read of the log :meth:`KeyCache.trust_until` extends how long cached metadata may be used: a
  process that cannot read the log stops trusting its cache after that bound. ``metadata_ttl`` is only a
  last-resort bound on top.
* **Resolved keys** (:class:`ResolvedKey`: material plus the backend's expanded key) per
  ``(name, version, backend name)`` in a bounded LRU. A hit costs a dict lookup: no SQLite, no key expansion.
  Versions of an ``aes256-siv`` key (:class:`DeterministicKey`: AES-SIV's 64 bytes, no AES schedule, no
  sealed format) share the LRU under ``(name, version, "aes-siv")``; :meth:`KeyCache.resolve` and
  :meth:`KeyCache.decryption_candidates` refuse such a key with a 400 naming the routes that serve it, so
  every route of the sealed, raw, HMAC or Transit formats refuses it the same way.

Misses load outside the lock (SQLite read, unwrap, ``expand_key``) so one slow load never blocks hits. A
generation number per key name keeps a load that raced with :meth:`KeyCache.invalidate` from putting stale
material back. If a refresh of the metadata shows the key was re-created (another ``created_at``), its
cached versions are dropped: same name and version no longer mean same material.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from app.core import metrics
from app.core.metric_buffer import BufferedCounter
from app.core.secret_memory import KeyMaterial, wipe_secret
from app.errors import BadRequestError, KeyNotFoundError, KeyVersionNotFoundError
from app.formats.sealed import KeyParameters
from app.formats.siv import KEY_TYPE as DETERMINISTIC_KEY_TYPE
from app.keystore import KeyInfo, KeyOptions, KeyStore

if TYPE_CHECKING:
    import aescore

__all__ = [
    "DETERMINISTIC_KEY_TYPE",
    "CacheKey",
    "CacheMissError",
    "DeterministicKey",
    "KeyCache",
    "ResolvedKey",
]

#: ``(key name, version, backend name)``; :data:`DETERMINISTIC_SLOT` instead of a backend for a version of an
#: ``aes256-siv`` key, whose material no backend expands.
CacheKey = tuple[str, int, str]
#: The third part of a :data:`CacheKey` for a :class:`DeterministicKey` (no backend is named so).
DETERMINISTIC_SLOT = "aes-siv"

# Label children bound once: ``labels()`` on every lookup would cost more than the hit itself.
_HITS = BufferedCounter(metrics.KEY_CACHE_REQUESTS.labels(result="hit"))  # one per request: batched
_MISSES = BufferedCounter(metrics.KEY_CACHE_REQUESTS.labels(result="miss"))


def _oldest_version(info: KeyInfo) -> int:
    """The oldest version still stored (1 unless the key was trimmed)."""
    return min((entry.version for entry in info.versions), default=1)


@dataclass(frozen=True)
class ResolvedKey:
    """One key version, ready to use: its metadata, material (IKM of the sealed format) and expanded key.

    ``material`` is a read-only view of locked memory left out of core dumps (from
    :meth:`~app.keystore.KeyStore.key_material`), zeroed once the cache and every request using it let go;
    it is left out of ``repr``/``str``. The expanded key's own ``repr`` shows no bytes either, and aescore
    zeroes its schedule when it is freed.
    """

    name: str
    version: int
    #: The key's type, segment size and scheme, as the sealed format takes them (one object per version,
    #: built and checked when the version is loaded, not per request).
    parameters: KeyParameters
    material: KeyMaterial = field(repr=False)
    expanded: aescore.ExpandedKey
    #: The key's options (fixed ones such as ``derived`` never change under a cached version).
    options: KeyOptions = field(default_factory=KeyOptions)


@dataclass(frozen=True)
class DeterministicKey:
    """One version of an ``aes256-siv`` key, ready for :mod:`app.formats.siv`: its 64 bytes of material.

    ``material`` is a read-only view of locked memory left out of core dumps, zeroed once the cache and every
    request using it let go, as a :class:`ResolvedKey`'s; it is left out of ``repr``/``str``.
    """

    name: str
    version: int
    material: KeyMaterial = field(repr=False)


def _deterministic_refused(info: KeyInfo) -> BadRequestError:
    """The refusal of ``aes256-siv`` key ``info`` by the sealed, raw, HMAC and Transit formats (the message
    names the routes that serve it); the callers test ``info.key_type`` themselves, so every lookup of
    another key spares the call."""
    return BadRequestError(
        f"key {info.name!r} is {DETERMINISTIC_KEY_TYPE} (deterministic AES-SIV): only the JSON batch "
        "routes encrypt/batch, decrypt/batch and rewrap/batch serve it"
    )


def _require_deterministic(info: KeyInfo) -> None:
    """Raise unless key ``info`` is an ``aes256-siv`` key.

    Raises:
        BadRequestError: it is not (the message names its type).
    """
    if info.key_type != DETERMINISTIC_KEY_TYPE:
        raise BadRequestError(f"key {info.name!r} is {info.key_type}, not {DETERMINISTIC_KEY_TYPE}")


#: What the LRU holds: a version resolved for a backend, or one of an ``aes256-siv`` key.
Entry = TypeVar("Entry", ResolvedKey, DeterministicKey)


class CacheMissError(Exception):
    """A ``cached_only`` lookup needs the keystore (stale or missing metadata, or an unresolved version).

    Lets an async caller try the cache on the event loop and take only misses (SQLite read, unwrap, key
    expansion: about half a millisecond) to a worker thread.
    """


@dataclass
class _Metadata:
    info: KeyInfo
    expires_at: float


class KeyCache:
    """A bounded LRU of :class:`ResolvedKey` per ``(name, version, backend)`` in front of a keystore.

    Thread-safe. Counts hits, misses and evictions both in Prometheus (``keystream_key_cache_*``) and in the
    plain attributes :attr:`hits`, :attr:`misses` and :attr:`evictions`.

    Args:
        keystore: where metadata and material come from.
        max_entries: the LRU bound (at least 1).
        metadata_ttl: seconds a key's metadata is trusted before it is read again (0: every lookup reads it).
        max_decrypt_versions: most versions :meth:`decryption_candidates` offers without an explicit
            version (the newest ones); ``None``: every version down to ``min_decryption_version``.
        clock: monotonic seconds; tests inject a fake one.

    Raises:
        ValueError: ``max_entries`` < 1, ``metadata_ttl`` < 0 or ``max_decrypt_versions`` < 1.
    """

    def __init__(
        self,
        keystore: KeyStore,
        max_entries: int = 1024,
        metadata_ttl: float = 1.0,
        *,
        max_decrypt_versions: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(f"max_entries must be an integer >= 1, got {max_entries!r}")
        if max_decrypt_versions is not None and max_decrypt_versions < 1:
            raise ValueError(f"max_decrypt_versions must be >= 1, got {max_decrypt_versions!r}")
        self.max_decrypt_versions = max_decrypt_versions
        if metadata_ttl < 0:
            raise ValueError(f"metadata_ttl must be >= 0 seconds, got {metadata_ttl!r}")
        self._keystore = keystore
        self.max_entries = max_entries
        self.metadata_ttl = float(metadata_ttl)
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[CacheKey, ResolvedKey | DeterministicKey] = OrderedDict()
        self._metadata: dict[str, _Metadata] = {}
        self._generations: dict[str, int] = {}
        self._epoch = 0  # bumped by clear(): outdates every load in flight, whatever its key
        self._trusted_until = math.inf  # set by the change-log follower: cached metadata is used until then
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        size = f"{len(self._entries)}/{self.max_entries}"
        return f"<KeyCache entries={size} hits={self.hits} misses={self.misses} evictions={self.evictions}>"

    # -- metadata -----------------------------------------------------------------------------------------

    def key_info(self, name: str, *, cached_only: bool = False) -> KeyInfo:
        """Return key ``name``'s metadata, from the cache while it is younger than ``metadata_ttl``.

        Raises:
            BadRequestError: invalid key name.
            KeyNotFoundError: no such key (deleted keys are noticed at the next refresh).
            CacheMissError: ``cached_only`` and the metadata would have to be read.
        """
        now = self._clock()
        # Without the lock: each read is one atomic step under the GIL, and the lock would not make the answer
        # fresher (an invalidation right after it returns is missed either way); it guards the writers'
        # read-modify-write steps (the generations, the metadata with its entries), which this does not do.
        cached = self._metadata.get(name)
        if cached is not None and now < cached.expires_at and now < self._trusted_until:
            return cached.info
        if cached_only:
            raise CacheMissError(name)
        return self._refresh(name)

    def refresh(self, name: str) -> KeyInfo:
        """Re-read key ``name``'s metadata from the keystore now, whatever its age; resolved versions stay.

        For a caller that has evidence its cached metadata is stale, e.g. a ciphertext that verifies under
        none of the cached versions: another worker process may have rotated the key less than
        ``metadata_ttl`` ago.

        Raises:
            BadRequestError: invalid key name.
            KeyNotFoundError: no such key (any cached versions of it are dropped).
        """
        return self._refresh(name)

    def _refresh(self, name: str) -> KeyInfo:
        """Read key ``name``'s metadata from the keystore and cache it."""
        with self._lock:
            generation = self._generation(name)
        try:
            info = self._keystore.get_key(name)
        except KeyNotFoundError:
            with self._lock:  # deleted (maybe by another worker): its versions must stop working here too
                self._metadata.pop(name, None)
                self._drop_entries(name)
            raise
        expires_at = self._clock() + self.metadata_ttl
        with self._lock:
            if self._generation(name) != generation:
                return info  # invalidated while we read: use the fresh value, cache nothing older than it
            previous = self._metadata.get(name)
            if previous is not None and previous.info.created_at != info.created_at:
                self._drop_entries(name)  # the key was deleted and re-created by another worker
            self._metadata[name] = _Metadata(info, expires_at)
        return info

    # -- resolved keys ------------------------------------------------------------------------------------

    def resolve(
        self, name: str, version: int | None, backend: aescore.Backend, *, cached_only: bool = False
    ) -> ResolvedKey:
        """Return key ``name`` at ``version`` (``None``: the latest) expanded for ``backend``.

        Does not check ``min_decryption_version``: decryption goes through :meth:`decryption_candidates`.

        Raises:
            BadRequestError: invalid name or version type, or an ``aes256-siv`` key.
            KeyNotFoundError: no such key.
            KeyVersionNotFoundError: the key has no such version.
            KeyUnwrapError: the stored material does not unwrap under the master key.
            CacheMissError: ``cached_only`` and the answer needs the keystore (nothing was counted).
        """
        info = self.key_info(name, cached_only=cached_only)
        if info.key_type == DETERMINISTIC_KEY_TYPE:
            raise _deterministic_refused(info)
        if version is None:
            version = info.latest_version
        else:
            info = self._check_version(info, version, cached_only)
        if cached_only:
            return self._cached_one(name, version, backend.name, ResolvedKey)
        return self._resolve(info, version, backend)

    def decryption_candidates(
        self,
        name: str,
        backend: aescore.Backend,
        version: int | None = None,
        *,
        cached_only: bool = False,
    ) -> list[ResolvedKey]:
        """Return the key versions a ciphertext of key ``name`` may be decrypted with, newest first.

        With ``version``: just that version. Without: ``latest_version`` down to ``min_decryption_version``,
        at most ``max_decrypt_versions`` of them (each costs a trial decryption of the first segment; a
        ciphertext of an older version needs its ``version``).

        Raises:
            BadRequestError: invalid name or version type, ``version`` below ``min_decryption_version``, or an
                ``aes256-siv`` key.
            KeyNotFoundError: no such key.
            KeyVersionNotFoundError: ``version`` does not exist.
            KeyUnwrapError: stored material does not unwrap under the master key.
            CacheMissError: ``cached_only`` and the answer needs the keystore (nothing was counted).
        """
        info = self.key_info(name, cached_only=cached_only)
        if info.key_type == DETERMINISTIC_KEY_TYPE:
            raise _deterministic_refused(info)
        if cached_only and version is None and info.latest_version == info.min_decryption_version:
            # Only the latest version may decrypt (a key never rotated, or whose older versions may not):
            # _decryption_versions would find it alone, whatever max_decrypt_versions says.
            return [self._cached_one(name, info.latest_version, backend.name, ResolvedKey)]
        info, versions = self._decryption_versions(info, version, cached_only)
        if cached_only:
            if len(versions) == 1:  # a key with one version that may decrypt, or an explicit version
                return [self._cached_one(name, versions[0], backend.name, ResolvedKey)]
            return self._cached(name, versions, backend.name, ResolvedKey)
        return self._resolve_each(info, versions, backend)

    def _resolve_each(
        self, info: KeyInfo, versions: Sequence[int], backend: aescore.Backend
    ) -> list[ResolvedKey]:
        """:meth:`_resolve` of each of ``versions`` (a method of its own: a comprehension in
        :meth:`decryption_candidates` would make cells of its locals on every call, hits included)."""
        return [self._resolve(info, number, backend) for number in versions]

    def deterministic_candidates(
        self, name: str, version: int | None = None, *, cached_only: bool = False
    ) -> list[DeterministicKey]:
        """Return the versions of ``aes256-siv`` key ``name`` a ciphertext may be opened with, newest first,
        chosen as :meth:`decryption_candidates` chooses them (so ``[0]`` of an explicit ``version`` is the one
        an encrypt under it uses: not below ``min_decryption_version``).

        Raises:
            BadRequestError: invalid name or version type, ``version`` below ``min_decryption_version``, or
                not an ``aes256-siv`` key.
            KeyNotFoundError: no such key.
            KeyVersionNotFoundError: ``version`` does not exist.
            KeyUnwrapError: stored material does not unwrap under the master key.
            CacheMissError: ``cached_only`` and the answer needs the keystore (nothing was counted).
        """
        info = self.key_info(name, cached_only=cached_only)
        _require_deterministic(info)
        info, versions = self._decryption_versions(info, version, cached_only)
        if cached_only:
            return self._cached(name, versions, DETERMINISTIC_SLOT, DeterministicKey)
        return [self._resolve_deterministic(info, number) for number in versions]

    def deterministic_key(self, name: str, *, cached_only: bool = False) -> DeterministicKey:
        """Return the latest version of ``aes256-siv`` key ``name`` (what an encrypt uses by default).

        Raises:
            BadRequestError: invalid name, or not an ``aes256-siv`` key.
            KeyNotFoundError: no such key.
            KeyUnwrapError: the stored material does not unwrap under the master key.
            CacheMissError: ``cached_only`` and the answer needs the keystore (nothing was counted).
        """
        info = self.key_info(name, cached_only=cached_only)
        _require_deterministic(info)
        if cached_only:
            return self._cached_one(name, info.latest_version, DETERMINISTIC_SLOT, DeterministicKey)
        return self._resolve_deterministic(info, info.latest_version)

    def refreshed_deterministic_candidates(self, name: str) -> list[tuple[int, KeyMaterial]]:
        """``(version, material)`` of every version of ``aes256-siv`` key ``name`` that may decrypt, after
        re-reading the metadata now (as :meth:`refreshed_candidates`, for :func:`app.formats.siv.open_all`).

        Raises:
            BadRequestError: the key is no longer an ``aes256-siv`` key (deleted and re-created meanwhile).
            KeyNotFoundError: the key was deleted meanwhile.
            KeyUnwrapError: stored material does not unwrap under the master key.
        """
        self.refresh(name)
        return [(key.version, key.material) for key in self.deterministic_candidates(name)]

    def _decryption_versions(
        self, info: KeyInfo, version: int | None, cached_only: bool
    ) -> tuple[KeyInfo, Sequence[int]]:
        """The versions a decrypt of key ``info`` tries, newest first (see :meth:`decryption_candidates`),
        and the metadata they were checked against (re-read once if ``version`` is newer than it)."""
        name = info.name
        if version is None:
            oldest = info.min_decryption_version
            if self.max_decrypt_versions is not None:
                oldest = max(oldest, info.latest_version - self.max_decrypt_versions + 1)
            versions: Sequence[int] = range(info.latest_version, oldest - 1, -1)
        else:
            info = self._check_version(info, version, cached_only)
            if version < info.min_decryption_version:
                raise BadRequestError(
                    f"version {version} of key {name!r} is below its min_decryption_version "
                    f"({info.min_decryption_version}) and may not decrypt"
                )
            versions = (version,)
        return info, versions

    def refreshed_candidates(self, name: str, backend: aescore.Backend) -> list[tuple[int, KeyMaterial]]:
        """``(version, material)`` of every version that may decrypt, after re-reading the metadata now.

        The ``more_candidates`` of a :class:`~app.formats.sealed.SealedDecryptor` whose candidates came from
        this cache: a ciphertext that verifies under none of them may be of a version another worker added
        less than ``metadata_ttl`` ago. Versions already resolved come from the cache; new ones are loaded.

        Raises:
            KeyNotFoundError: the key was deleted meanwhile.
            KeyUnwrapError: stored material does not unwrap under the master key.
        """
        self.refresh(name)
        return [(key.version, key.material) for key in self.decryption_candidates(name, backend)]

    def _cached(self, name: str, versions: Sequence[int], slot: str, kind: type[Entry]) -> list[Entry]:
        """The entries of ``versions`` of ``name`` resolved for ``slot`` (a backend's name, or
        :data:`DETERMINISTIC_SLOT`), each counted as a hit, when every one of them is cached.

        The event loop's way in (``cached_only``): one pass under the lock, instead of a check that all are
        cached followed by a :meth:`_load` per version.

        Raises:
            CacheMissError: one of them is not cached (nothing was counted).
        """
        entries = self._entries
        found: list[Entry] = []
        with self._lock:
            for number in versions:
                entry = entries.get((name, number, slot))
                if not isinstance(entry, kind):  # a slot holds one kind: a backend's or a DeterministicKey
                    raise CacheMissError(name)
                found.append(entry)
            for number in versions:
                entries.move_to_end((name, number, slot))
            self.hits += len(found)
        _HITS.inc(len(found))
        return found

    def _cached_one(self, name: str, version: int, slot: str, kind: type[Entry]) -> Entry:
        """:meth:`_cached` of one version (what every encrypt and most decrypts ask), without its lists and
        loops: about a quarter of a cache hit's cost.

        Raises:
            CacheMissError: it is not cached (nothing was counted).
        """
        entries = self._entries
        cache_key = (name, version, slot)
        with self._lock:
            entry = entries.get(cache_key)
            if not isinstance(entry, kind):  # a slot holds one kind: a backend's or a DeterministicKey
                raise CacheMissError(name)
            entries.move_to_end(cache_key)
            self.hits += 1
        _HITS.inc(1)
        return entry

    def _check_version(self, info: KeyInfo, version: int, cached_only: bool = False) -> KeyInfo:
        """Validate ``version`` against ``info``, re-reading metadata once if it may be stale."""
        if isinstance(version, bool) or not isinstance(version, int):
            raise BadRequestError(f"key version must be an integer, got {type(version).__name__}")
        if version > info.latest_version:
            if cached_only:
                raise CacheMissError(info.name)
            info = self._refresh(info.name)  # another worker may have rotated since we cached the metadata
        if not 1 <= version <= info.latest_version:
            raise KeyVersionNotFoundError(
                f"key {info.name!r} has no version {version} "
                f"(versions {_oldest_version(info)} to {info.latest_version})"
            )
        return info

    def _resolve(self, info: KeyInfo, version: int, backend: aescore.Backend) -> ResolvedKey:
        def build(material: KeyMaterial) -> ResolvedKey:
            return ResolvedKey(
                name=info.name,
                version=version,
                parameters=KeyParameters(info.key_type, info.segment_size, info.scheme),
                material=material,
                expanded=backend.expand_key(material),
                options=info.options,
            )

        return self._load(info, version, backend.name, ResolvedKey, build)

    def _resolve_deterministic(self, info: KeyInfo, version: int) -> DeterministicKey:
        def build(material: KeyMaterial) -> DeterministicKey:
            return DeterministicKey(name=info.name, version=version, material=material)

        return self._load(info, version, DETERMINISTIC_SLOT, DeterministicKey, build)

    def _load(
        self, info: KeyInfo, version: int, slot: str, kind: type[Entry], build: Callable[[KeyMaterial], Entry]
    ) -> Entry:
        """The cached entry of ``(info.name, version, slot)``, else ``build`` over the version's material read
        from the keystore, cached unless the key was invalidated during the load."""
        cache_key: CacheKey = (info.name, version, slot)
        with self._lock:
            entry = self._entries.get(cache_key)
            if isinstance(
                entry, kind
            ):  # a slot holds one kind: a backend's ResolvedKey or a DeterministicKey
                self._entries.move_to_end(cache_key)
                self.hits += 1
                _HITS.inc()
                return entry
            self.misses += 1
            generation = self._generation(info.name)
        _MISSES.inc()
        resolved = build(self._keystore.key_material(info.name, version))
        with self._lock:
            if self._generation(info.name) != generation:
                return resolved  # invalidated during the load: serve this request, cache nothing
            if cache_key not in self._entries:
                metrics.KEY_CACHE_ENTRIES.inc()
            self._entries[cache_key] = resolved
            self._entries.move_to_end(cache_key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
                self.evictions += 1
                metrics.KEY_CACHE_EVICTIONS.inc()
                metrics.KEY_CACHE_ENTRIES.dec()
        return resolved

    # -- invalidation -------------------------------------------------------------------------------------

    def _generation(self, name: str) -> tuple[int, int]:
        """What a load must still see when it stores its result (lock held)."""
        return self._epoch, self._generations.get(name, 0)

    def _drop_entries(self, name: str) -> None:
        """Drop every resolved version of ``name`` (lock held)."""
        stale = [cache_key for cache_key in self._entries if cache_key[0] == name]
        for cache_key in stale:
            del self._entries[cache_key]
        if stale:
            metrics.KEY_CACHE_ENTRIES.dec(len(stale))

    def invalidate(self, name: str) -> None:
        """Forget everything about key ``name``: its metadata and every resolved version, for every backend.

        Call it after rotate, import, update (PATCH) and delete, in the process that made the change; other
        processes call it when they read the change from the keystore's change log.
        """
        with self._lock:
            self._generations[name] = self._generations.get(name, 0) + 1
            self._metadata.pop(name, None)
            self._drop_entries(name)

    def trust_until(self, deadline: float) -> None:
        """Use cached metadata until ``deadline`` (this cache's clock); later lookups read the keystore.

        Called by the change-log follower after each successful read of the log, with the read's start plus
        the trust bound: if the log cannot be read (the database is unreachable from here), the cache stops
        answering from memory within that bound instead of serving keys deleted elsewhere.
        """
        with self._lock:
            self._trusted_until = deadline

    def wipe(self) -> None:
        """Forget every key as :meth:`clear` does, and zero every cached version's material now.

        For sealing and shutdown: a request still using a wiped version reads zeros, so stop serving first.
        Evicted and invalidated versions need no wipe: their memory is zeroed as soon as the last request
        using them lets go.
        """
        with self._lock:
            entries = list(self._entries.values())
        self.clear()
        for entry in entries:
            wipe_secret(entry.material)

    def clear(self) -> None:
        """Forget every key. Counters are kept."""
        with self._lock:
            self._epoch += 1
            if self._entries:
                metrics.KEY_CACHE_ENTRIES.dec(len(self._entries))
            self._entries.clear()
            self._metadata.clear()
