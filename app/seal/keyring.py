"""Master key generations: the keys an online rotation adds under a seal, and the keyring that picks one.

Generation 1 is the seal's own key (``data/master.key``, the key rebuilt from shamir shares, the token key
``KEYSTREAM_PKCS11_KEY_LABEL``). ``operator rotate-master`` adds generation 2, 3, ... under the **same** seal:

* the file and shamir seals make 32 random bytes in locked memory (:mod:`app.core.secret_memory`) and store
  them wrapped under generation 1 (:meth:`~app.seal.Seal.create_generation`); the generation's blobs are
  AES-256-GCM under those bytes (:mod:`app.seal.aead`);
* the pkcs11 seal generates another non-extractable AES-256 key in the token (its label is the master key's
  label plus ``.g<generation>``), so master key bytes still never exist in this process; what it stores is a
  check value made by that key.

Every generation >= 2 writes the ``0x02`` blob layout (:mod:`app.seal.blob`) naming the seal kind and its
generation, so :class:`Keyring` opens a blob with the generation its header names while new blobs are
wrapped under the newest. The keystore stores each generation's stored form and tells the keyring which
generations exist (:meth:`Keyring.install`); this module never reads the keystore itself, it is handed a
loader. No function here puts key bytes in an exception, a log line or a ``repr``.
"""

from __future__ import annotations

import abc
import os
import threading
from collections.abc import Callable, Sequence
from typing import NamedTuple

from app.core.secret_memory import wipe_secret

from .aead import open_blob, open_blob_secret, seal_blob
from .base import Seal, SealError, SealUnwrapError
from .blob import NONCE_SIZE, V2_HEADER_SIZE, blob_origin, v2_header

__all__ = [
    "GENERATION_KEY_SIZE",
    "GenerationKey",
    "Keyring",
    "KeyringState",
    "MemoryGenerationKey",
    "generation_associated_data",
]

#: Bytes of a generation's key for the seals whose master key is in memory (AES-256).
GENERATION_KEY_SIZE = 32


def generation_associated_data(generation: int) -> bytes:
    """The associated data that binds a generation's stored form to its number."""
    return f"keystream:master-key-generation:{generation}".encode()


class KeyringState(NamedTuple):
    """What the keystore holds: the generation new blobs are wrapped under, and each generation >= 2 with
    its stored form (oldest first)."""

    current: int
    generations: Sequence[tuple[int, bytes]]


class GenerationKey(abc.ABC):
    """One master key generation >= 2 of a seal: wraps and unwraps blobs whose header names it."""

    def __init__(self, kind: str, generation: int) -> None:
        self.kind = kind
        self.generation = generation
        self._header = v2_header(kind, generation)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} kind={self.kind} generation={self.generation}>"

    def _parts(self, blob: bytes) -> tuple[bytes, bytes]:
        """``(nonce, ciphertext || tag)`` of a blob of this kind and generation."""
        origin = blob_origin(blob)
        if origin is None or origin.kind != self.kind or origin.generation != self.generation:
            raise SealUnwrapError("not a blob of this master key generation")
        return blob[V2_HEADER_SIZE : V2_HEADER_SIZE + NONCE_SIZE], blob[V2_HEADER_SIZE + NONCE_SIZE :]

    @abc.abstractmethod
    def wrap(self, plaintext: bytes | memoryview, associated_data: bytes) -> bytes:
        """``header | nonce | ciphertext | tag`` of ``plaintext``; the header is part of the associated data.

        Raises:
            SealError: the key was closed, or its device fails.
        """

    @abc.abstractmethod
    def unwrap(self, blob: bytes, associated_data: bytes) -> bytes:
        """What :meth:`wrap` wrapped with the same ``associated_data``.

        Raises:
            SealUnwrapError: another generation's blob, other associated data, or corruption.
            SealError: the key was closed, or its device fails.
        """

    def unwrap_secret(self, blob: bytes, associated_data: bytes) -> memoryview:
        """:meth:`unwrap` into locked memory (a read-only view, zeroed when the last view goes)."""
        from app.core.secret_memory import secret_copy

        return secret_copy(self.unwrap(blob, associated_data)).readonly()

    def close(self) -> None:  # noqa: B027 - a key in a device holds nothing to zero here
        """Forget the key (zero it, when it is in memory); idempotent."""


class MemoryGenerationKey(GenerationKey):
    """A generation's 32 bytes in locked memory, for the seals whose master key is in memory too.

    Args:
        kind: the seal kind written in blob headers.
        generation: 2 or more.
        key: the key, a read-only view of a :class:`~app.core.secret_memory.SecretBuffer` this object owns
            (zeroed by :meth:`close`).
    """

    def __init__(self, kind: str, generation: int, key: memoryview) -> None:
        super().__init__(kind, generation)
        if len(key) != GENERATION_KEY_SIZE:
            raise SealError(f"a master key generation must be {GENERATION_KEY_SIZE} bytes, got {len(key)}")
        self._key: memoryview | None = key

    def _material(self) -> memoryview:
        key = self._key
        if key is None:
            raise SealError(f"master key generation {self.generation} is closed")
        return key

    def wrap(self, plaintext: bytes | memoryview, associated_data: bytes) -> bytes:
        """AES-256-GCM under the generation's key, a random 12-byte nonce (see :class:`GenerationKey`)."""
        nonce = os.urandom(NONCE_SIZE)
        sealed = seal_blob(self._material(), nonce, plaintext, self._header + associated_data)
        return self._header + nonce + sealed

    def unwrap(self, blob: bytes, associated_data: bytes) -> bytes:
        """See :meth:`GenerationKey.unwrap`."""
        nonce, sealed = self._parts(bytes(blob))
        return open_blob(self._material(), nonce, sealed, self._header + associated_data)

    def unwrap_secret(self, blob: bytes, associated_data: bytes) -> memoryview:
        """:meth:`unwrap` straight into locked memory: no ``bytes`` object holds the plaintext."""
        nonce, sealed = self._parts(bytes(blob))
        return open_blob_secret(self._material(), nonce, sealed, self._header + associated_data)

    def close(self) -> None:
        """Zero the key's memory."""
        key, self._key = self._key, None
        if key is not None:
            wipe_secret(key)


class Keyring:
    """The generations of one seal's master key: wraps under the newest, unwraps under the blob's own.

    The keystore that owns the keyring gives it a ``loader`` that reads :class:`KeyringState` from the
    database; the keyring reloads when told the state changed (:meth:`invalidate`, from the change log),
    when a blob names a generation it has not opened, and after its seal was sealed and unsealed again.
    Thread-safe.

    Args:
        root: the seal (generation 1), which also opens the stored forms of later generations.
        loader: reads the keystore's keyring state (``None``: generation 1 only, until :meth:`set_loader`).
    """

    def __init__(self, root: Seal, loader: Callable[[], KeyringState] | None = None) -> None:
        self._root = root
        self._loader = loader
        self._lock = threading.RLock()
        self._keys: dict[int, GenerationKey] = {}
        self._pending: dict[int, GenerationKey] = {}
        self._current = 1
        self._stale = loader is not None

    def __repr__(self) -> str:
        return f"<Keyring kind={self._root.kind} current={self._current} open={sorted(self._keys)}>"

    @property
    def root(self) -> Seal:
        """The seal: generation 1."""
        return self._root

    @property
    def kind(self) -> str:
        """The seal's kind."""
        return self._root.kind

    def describe(self) -> str:
        """The seal's description (for messages)."""
        return self._root.describe()

    def set_loader(self, loader: Callable[[], KeyringState]) -> None:
        """Read the keystore's state with ``loader`` from now on (at the next use)."""
        with self._lock:
            self._loader = loader
            self._stale = True

    @property
    def generation(self) -> int:
        """The generation new blobs are wrapped under.

        Raises:
            SealError: the seal is sealed.
        """
        self._ready()
        return self._current

    def needs(self, current: int) -> bool:
        """True when the keystore's newest generation is ``current`` and this keyring must be installed
        again before wrapping (it wraps under another, or was told the keystore changed). Reads nothing."""
        return self._stale or self._current != current

    def refresh(self) -> None:
        """Reload now: open new generations and zero the keys of retired ones at once (the change log's
        follower calls it, so a process that stays idle does not keep a retired generation's key); a sealed
        seal's generations are zeroed.

        Raises:
            SealError: a stored generation does not open under the seal.
            ServiceUnavailableError: the keystore cannot be read (the keyring reloads at its next use).
        """
        if self._root.sealed:
            self.close()
            return
        if self._loader is not None:
            with self._lock:
                self._stale = True
                self.install(self._loader())

    def invalidate(self) -> None:
        """The keystore's keyring changed (a rotation began or finished): reload it at the next use."""
        self._stale = True

    def install(self, state: KeyringState) -> None:
        """Open the generations of ``state`` not opened yet, close those no longer in it, and wrap under
        ``state.current`` from now on.

        Raises:
            SealError: a stored generation does not open under the seal (another master key, corruption,
                a token key missing), or the seal is sealed. Nothing changes then.
        """
        with self._lock:
            opened: dict[int, GenerationKey] = {}
            try:
                for generation, stored in state.generations:
                    key = self._keys.get(generation) or self._pending.pop(generation, None)
                    opened[generation] = (
                        key if key is not None else self._root.open_generation(generation, bytes(stored))
                    )
                if state.current != 1 and state.current not in opened:
                    raise SealError(
                        f"the keystore names master key generation {state.current} but does not hold it"
                    )
            except BaseException:
                for generation, key in opened.items():
                    if generation not in self._keys:
                        key.close()
                raise
            for generation, key in self._keys.items():
                if generation not in opened:
                    key.close()
            self._keys = opened
            self._current = state.current
            self._stale = False

    def _ready(self) -> None:
        """Raise when the seal is sealed (wiping the generations), reload when stale."""
        if self._root.sealed:
            self.close()
            raise SealError(f"{self._root.describe()} is sealed")
        if self._stale and self._loader is not None:
            with self._lock:
                if self._stale:
                    self.install(self._loader())

    def _key_for(self, blob: bytes) -> GenerationKey | None:
        """The generation key of ``blob``, or ``None`` for a generation-1 (the seal's own) blob."""
        origin = blob_origin(blob)
        if origin is None or origin.generation == 1 or origin.kind != self._root.kind:
            return None
        key = self._keys.get(origin.generation)
        if key is None and self._loader is not None:
            with self._lock:
                self._stale = True
            self._ready()
            key = self._keys.get(origin.generation)
        if key is None:
            raise SealUnwrapError("the blob names a master key generation this keystore does not hold")
        return key

    def wrap(self, plaintext: bytes | memoryview, associated_data: bytes) -> bytes:
        """Wrap under the generation installed last (never reloading: a keystore's key write installs the
        newest generation from its own transaction first, :func:`app.keystore.generations.writing_keyring`).

        Raises:
            SealError: the seal is sealed, or its device fails.
        """
        if self._root.sealed:
            self.close()
            raise SealError(f"{self._root.describe()} is sealed")
        with self._lock:  # the generation and its key as one install left them
            current = self._current
            key = self._keys.get(current)
        if key is None:
            return self._root.wrap(plaintext, associated_data)
        return key.wrap(plaintext, associated_data)

    def unwrap(self, blob: bytes, associated_data: bytes) -> bytes:
        """Unwrap under the generation ``blob``'s header names.

        Raises:
            SealUnwrapError: the blob does not authenticate, or names a generation the keystore lacks.
            SealError: the seal is sealed, or its device fails.
        """
        self._ready()
        data = bytes(blob)
        key = self._key_for(data)
        return self._root.unwrap(data, associated_data) if key is None else key.unwrap(data, associated_data)

    def unwrap_secret(self, blob: bytes, associated_data: bytes) -> memoryview:
        """:meth:`unwrap` into locked memory (see :meth:`~app.seal.Seal.unwrap_secret`)."""
        self._ready()
        data = bytes(blob)
        key = self._key_for(data)
        if key is None:
            return self._root.unwrap_secret(data, associated_data)
        return key.unwrap_secret(data, associated_data)

    def create(self, generation: int) -> bytes:
        """Make generation ``generation`` (:meth:`~app.seal.Seal.create_generation`) and return its stored
        form, for the keystore to store; the keyring wraps under it only once the keystore installs a state
        naming it as current.

        Raises:
            SealError: the seal is sealed or cannot make a key.
        """
        self._ready()
        stored, key = self._root.create_generation(generation)
        with self._lock:
            replaced = self._pending.pop(generation, None)
            self._pending[generation] = key
        if replaced is not None:
            replaced.close()
        return stored

    def close(self) -> None:
        """Zero every generation key in memory; they are reloaded at the next use (after an unseal)."""
        with self._lock:
            keys, self._keys = [*self._keys.values(), *self._pending.values()], {}
            self._pending = {}
            self._current = 1
            self._stale = self._loader is not None
        for key in keys:
            key.close()
