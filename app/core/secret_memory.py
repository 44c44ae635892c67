"""Memory for key material: locked in RAM, left out of core dumps, zeroed when freed; and no core dumps.

Python ``bytes`` are immutable and copied freely: a key that passed through them lingers in freed heap
memory, in swap and in core dumps long after its last use. Secrets that Keystream keeps (the file seal's
master key, every unwrapped key version in the key cache) live instead in a :class:`SecretBuffer`:

* a slot of a few pages mapped anonymously (``mmap``), locked with ``mlock`` (never swapped out) and
  marked ``MADV_DONTDUMP`` (left out of core dumps, including ``gcore``'s);
* zeroed when the last reference to it goes (CPython frees it at once: an evicted cache entry that no
  request still uses), when its holder wipes it (:meth:`SecretBuffer.wipe`: a seal, a key cache emptied on
  seal), and for every slot at interpreter exit.

Callers see a buffer (:meth:`SecretBuffer.view`), never ``bytes``: aescore, pycryptodome, ``hmac`` and
``hashlib`` read it in place. A ``memoryview`` of a buffer keeps it alive, so a slot is never reused while a
view of it exists.

Where ``mlock`` is refused (``RLIMIT_MEMLOCK`` too small, no ``CAP_IPC_LOCK``), the slots are used unlocked
(still left out of core dumps and zeroed): one WARNING, ``keystream_secret_memory_unlocked_bytes`` and
:func:`memory_locked` (reported by ``/readyz``) say so. Nothing here raises for want of locked memory.

:func:`disable_core_dumps` turns core dumps off for the whole process (``prctl(PR_SET_DUMPABLE, 0)``,
``RLIMIT_CORE`` 0): a crash or a debugger attached by a non-root user then gets no memory image at all.
"""

from __future__ import annotations

import atexit
import ctypes
import logging
import mmap
import threading
from functools import lru_cache
from typing import Any, TypeAlias

from app.core import memory_protection, metrics
from app.core.memory_protection import core_dumps_disabled, disable_core_dumps

__all__ = [
    "SLOT_SIZE",
    "KeyMaterial",
    "SecretBuffer",
    "core_dumps_disabled",
    "disable_core_dumps",
    "memory_locked",
    "note_unlocked",
    "random_secret",
    "secret_buffer",
    "secret_copy",
    "wipe_secret",
]

logger = logging.getLogger(__name__)

#: Key material as the layers pass it: a read-only view of a :class:`SecretBuffer` (or ``bytes`` in tests and
#: for material that came from outside, such as an import).
KeyMaterial: TypeAlias = bytes | memoryview

#: The most bytes one :class:`SecretBuffer` holds (AES keys and key versions are 16 to 32 bytes).
SLOT_SIZE = 64
#: Pages mapped, locked and left out of dumps at once; a chunk holds ``CHUNK_SIZE // SLOT_SIZE`` slots.
CHUNK_SIZE = 4 * mmap.PAGESIZE

_libc = ctypes.CDLL(None, use_errno=True)
_libc.getrandom.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint)
_libc.getrandom.restype = ctypes.c_ssize_t


class _Chunk:
    """``CHUNK_SIZE`` bytes of anonymous memory, locked if the kernel allows, left out of core dumps."""

    __slots__ = ("free", "locked", "memory")

    def __init__(self) -> None:
        self.memory = mmap.mmap(-1, CHUNK_SIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.locked = memory_protection.protect(self.memory)
        self.free = list(range(CHUNK_SIZE // SLOT_SIZE - 1, -1, -1))

    def zero(self, slot: int) -> None:
        start = slot * SLOT_SIZE
        self.memory[start : start + SLOT_SIZE] = bytes(SLOT_SIZE)

    def zero_all(self) -> None:
        self.memory[:] = bytes(CHUNK_SIZE)


class _Arena:
    """Every chunk of this process, and which slots are free; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._chunks: list[_Chunk] = []
        self._warned = False
        self.all_locked = True

    def take(self) -> tuple[_Chunk, int]:
        with self._lock:
            for chunk in self._chunks:
                if chunk.free:
                    return chunk, chunk.free.pop()
            chunk = _Chunk()
            self._chunks.append(chunk)
            if not chunk.locked:
                self.note_unlocked(CHUNK_SIZE)
            return chunk, chunk.free.pop()

    def note_unlocked(self, nbytes: int) -> None:
        """Count ``nbytes`` of key memory that ``mlock`` refused, and warn the first time."""
        self.all_locked = False
        metrics.SECRET_MEMORY_UNLOCKED.inc(nbytes)
        if not self._warned:
            self._warned = True
            logger.warning(
                "cannot lock memory for key material (mlock refused: RLIMIT_MEMLOCK too small or "
                "no CAP_IPC_LOCK); it may be swapped to disk. It is still left out of core dumps "
                "and zeroed when freed. Raise the limit (ulimit -l, LimitMEMLOCK=, "
                "--ulimit memlock=) to lock it"
            )

    def give_back(self, chunk: _Chunk, slot: int) -> None:
        chunk.zero(slot)
        with self._lock:
            chunk.free.append(slot)

    def zero_everything(self) -> None:
        with self._lock:
            for chunk in self._chunks:
                chunk.zero_all()


_ARENA = _Arena()
atexit.register(_ARENA.zero_everything)


def note_unlocked(nbytes: int) -> None:
    """Report ``nbytes`` of key material memory mapped elsewhere (the python backend's key slots) that
    :func:`app.core.memory_protection.protect` could not lock: the same WARNING (once), metric and
    :func:`memory_locked` as this module's own memory."""
    _ARENA.note_unlocked(nbytes)


def memory_locked() -> bool:
    """False once a chunk of secret memory could not be locked (``mlock`` refused); True before any."""
    return _ARENA.all_locked


class _SlotMixin:
    """What every :class:`SecretBuffer` (a ctypes byte array over one slot) adds to the array."""

    _chunk: _Chunk
    _slot: int

    def view(self) -> memoryview:
        """A writable flat view of the secret's bytes; it keeps this buffer (and its slot) alive."""
        return memoryview(self).cast("B")  # type: ignore[arg-type]  # a ctypes array exports a buffer

    def readonly(self) -> memoryview:
        """A read-only flat view, for holders that must not change the secret."""
        return self.view().toreadonly()

    def wipe(self) -> None:
        """Zero the secret now, though views of it may remain (they read zeros). The slot is reused only
        once the last view is gone."""
        self._chunk.zero(self._slot)

    def __del__(self) -> None:
        chunk = getattr(self, "_chunk", None)
        if chunk is not None:
            try:
                _ARENA.give_back(chunk, self._slot)
            except (AttributeError, TypeError):  # interpreter shutdown: the exit handler zeroed every chunk
                pass

    #: By identity, so that read-only views of a secret can be hashed (by content) as views of ``bytes`` are.
    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"<SecretBuffer {len(self)} bytes>"  # type: ignore[arg-type]  # the array has a length

    def __reduce__(self) -> Any:
        raise TypeError("secret buffers cannot be pickled")


#: The type of a secret of any length (each length has its own ctypes array class under it).
SecretBuffer = _SlotMixin


@lru_cache(maxsize=SLOT_SIZE)
def _array_type(length: int) -> type[Any]:
    return type(
        f"SecretBuffer{length}", (_SlotMixin, ctypes.Array), {"_type_": ctypes.c_ubyte, "_length_": length}
    )


def secret_buffer(length: int) -> SecretBuffer:
    """A zeroed :class:`SecretBuffer` of ``length`` bytes to fill in place (e.g. ``unwrap(..., output=)``).

    Raises:
        ValueError: ``length`` is not in 1 .. :data:`SLOT_SIZE`.
    """
    if not 1 <= length <= SLOT_SIZE:
        raise ValueError(f"a secret buffer holds 1 to {SLOT_SIZE} bytes, got {length}")
    chunk, slot = _ARENA.take()
    try:
        array = _array_type(length).from_buffer(chunk.memory, slot * SLOT_SIZE)
    except BaseException:
        _ARENA.give_back(chunk, slot)
        raise
    array._chunk = chunk
    array._slot = slot
    buffer: SecretBuffer = array
    return buffer


def secret_copy(data: bytes | bytearray | memoryview) -> SecretBuffer:
    """A :class:`SecretBuffer` holding a copy of ``data`` (which the caller then wipes or drops).

    Raises:
        ValueError: ``data`` is empty or longer than :data:`SLOT_SIZE`.
    """
    source = memoryview(data).cast("B")
    buffer = secret_buffer(len(source))
    buffer.view()[:] = source
    return buffer


def wipe_secret(material: object) -> bool:
    """Zero now the :class:`SecretBuffer` behind ``material`` (one of its views); False for anything else
    (``bytes`` cannot be wiped). Views of it that remain read zeros."""
    owner = material.obj if isinstance(material, memoryview) else material
    if isinstance(owner, SecretBuffer):
        owner.wipe()
        return True
    return False


def random_secret(length: int) -> SecretBuffer:
    """A :class:`SecretBuffer` of ``length`` bytes from the kernel's CSPRNG (``getrandom``), written in place:
    no ``bytes`` object ever holds them (``secrets.token_bytes`` would leave one in freed memory).

    Raises:
        ValueError: ``length`` is not in 1 .. :data:`SLOT_SIZE`.
        OSError: ``getrandom`` failed.
    """
    buffer = secret_buffer(length)
    if _libc.getrandom(ctypes.addressof(buffer), length, 0) != length:  # type: ignore[arg-type]
        error = ctypes.get_errno()
        raise OSError(error, "getrandom failed")
    return buffer
