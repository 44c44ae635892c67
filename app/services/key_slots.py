"""Key slots shared with the python backend's worker processes: key material that never travels in a pickle.

The pure-Python backend runs in a pool of worker processes (:mod:`app.services.offload`). A call used to
send its key with the arguments: the pickle, a ``bytes`` object holding the key, lay in the parent's and the
worker's heap, and freed heap is never zeroed. Here the parent keeps each key it hands to the pool in a slot
of one memory region that it shares with the workers, and a call sends only the slot's number and
generation:

* The region is a ``memfd`` (anonymous: it has no name in any file system) mapped ``MAP_SHARED`` in the
  parent and in each worker, which receives its descriptor when it is spawned. Each process marks its mapping
  ``MADV_DONTDUMP`` and locks it (:func:`app.core.memory_protection.protect`). It grows by segments of
  :data:`SEGMENT_SIZE` (the file is extended, a worker maps a new segment when a call first names a slot in
  it); it never shrinks while the pool runs.
* A slot (:data:`SLOT_SIZE` bytes) holds ``generation`` (8 bytes, little-endian; 0 = empty), the key's
  length (1 byte) at offset 8 and the key at offset 16. Generations come from one counter of this process and
  are never reused, so a slot that was released and taken again for another key is never used with the
  first key's number: a worker compares the generation a call names with the slot's before reading the key and
  again after expanding it (a wipe in between is caught: the parent clears generations before keys).
* A slot is zeroed when its :class:`KeyLease` is released (the expanded key holding it was freed: evicted from
  the key cache, or the message it served is done), when :meth:`KeySlots.wipe` runs (sealing, stopping) and
  when the region is closed or the process exits. A wiped slot stays reserved until its lease is released.

The worker reads a key in place through a ``memoryview`` of its mapping and expands it there; the pure-Python
core keeps round keys as Python ints, which cannot be zeroed (the pool is stopped when secrets are wiped).
This module imports only the standard library and :mod:`app.core.memory_protection`: workers start light.
"""

from __future__ import annotations

import itertools
import mmap
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

from app.core.memory_protection import protect

__all__ = [
    "MAX_KEY_SIZE",
    "SEGMENT_SIZE",
    "SLOT_SIZE",
    "KeyLease",
    "KeySlots",
    "SlotReader",
    "StaleKeyError",
]

#: Bytes per slot: generation (8), length (1), padding (7), key (up to 32), padding.
SLOT_SIZE = 64
#: The longest key a slot holds (AES-256).
MAX_KEY_SIZE = 32
#: The region grows by this much (256 slots).
SEGMENT_SIZE = 4 * mmap.PAGESIZE
SLOTS_PER_SEGMENT = SEGMENT_SIZE // SLOT_SIZE
_LENGTH_OFFSET = 8
_KEY_OFFSET = 16
_EMPTY = bytes(8)
#: Generations of every region of this process: (slot, generation) is never reused.
_generations = itertools.count(1)


class StaleKeyError(Exception):
    """The slot a call names no longer holds that key: it was wiped (sealing, stopping) or released."""


def _locate(index: int) -> tuple[int, int]:
    """(segment number, offset of the slot in that segment) of slot ``index``."""
    segment, slot = divmod(index, SLOTS_PER_SEGMENT)
    return segment, slot * SLOT_SIZE


def _close(segments: list[mmap.mmap], fd: int) -> None:
    """Zero and unmap every segment, close the descriptor (the region's finalizer: it holds no region)."""
    for segment in segments:
        segment[:] = bytes(SEGMENT_SIZE)
        segment.close()
    segments.clear()
    os.close(fd)


class KeySlots:
    """The parent's side of a region: takes, releases and wipes slots; thread-safe.

    Args:
        report_unlocked: called with a segment's size when ``mlock`` refuses it (the memory is still left out
            of core dumps and zeroed).
    """

    def __init__(self, report_unlocked: Callable[[int], None]) -> None:
        self._fd = os.memfd_create("keystream-key-slots", os.MFD_CLOEXEC)
        self._report_unlocked = report_unlocked
        self._lock = threading.Lock()
        self._segments: list[mmap.mmap] = []
        self._free: list[int] = []
        #: slot -> the generation of the lease holding it (wiped slots stay held until released).
        self._held: dict[int, int] = {}
        self._finalizer = weakref.finalize(self, _close, self._segments, self._fd)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran: leases of this region can no longer be used."""
        return not self._finalizer.alive

    @property
    def fd(self) -> int:
        """The region's descriptor, for the pool to pass to each worker it spawns."""
        return self._fd

    def take(self, key: memoryview) -> KeyLease:
        """Copy ``key`` (16 to 32 bytes, already checked) into a free slot and return its lease.

        Raises:
            ValueError: the region is closed, or ``key`` is longer than :data:`MAX_KEY_SIZE`.
        """
        if len(key) > MAX_KEY_SIZE:
            raise ValueError(f"a key slot holds at most {MAX_KEY_SIZE} bytes, got {len(key)}")
        with self._lock:
            if self.closed:
                raise ValueError("the key slots are closed: the backend was shut down")
            if not self._free:
                self._grow()
            index = self._free.pop()
            generation = next(_generations)
            number, offset = _locate(index)
            segment = self._segments[number]
            segment[offset + _LENGTH_OFFSET] = len(key)
            segment[offset + _KEY_OFFSET : offset + _KEY_OFFSET + len(key)] = key
            segment[offset : offset + 8] = generation.to_bytes(8, "little")  # written last: now it is valid
            self._held[index] = generation
        return KeyLease(self, index, generation, len(key))

    def release(self, index: int, generation: int) -> None:
        """Zero slot ``index`` and make it free, if the lease of ``generation`` still holds it."""
        with self._lock:
            if self._held.get(index) != generation or self.closed:
                return
            del self._held[index]
            number, offset = _locate(index)
            segment = self._segments[number]
            segment[offset : offset + 8] = _EMPTY  # first: a worker reading it now sees it is gone
            segment[offset + 8 : offset + SLOT_SIZE] = bytes(SLOT_SIZE - 8)
            self._free.append(index)

    def wipe(self) -> None:
        """Zero every slot now; leases still held read as gone (:class:`StaleKeyError` in the worker), and
        their slots are reused only once they are released."""
        with self._lock:
            for segment in self._segments:
                for offset in range(0, SEGMENT_SIZE, SLOT_SIZE):
                    segment[offset : offset + 8] = _EMPTY
                segment[:] = bytes(SEGMENT_SIZE)

    def close(self) -> None:
        """Zero every slot, unmap the region and close its descriptor (workers still mapping it keep their
        mapping of zeros until they exit). Idempotent."""
        with self._lock:
            self._finalizer()

    def _grow(self) -> None:
        """Add one segment of free slots (lock held)."""
        number = len(self._segments)
        os.ftruncate(self._fd, (number + 1) * SEGMENT_SIZE)
        segment = mmap.mmap(self._fd, SEGMENT_SIZE, flags=mmap.MAP_SHARED, offset=number * SEGMENT_SIZE)
        if not protect(segment):
            self._report_unlocked(SEGMENT_SIZE)
        self._segments.append(segment)
        first = number * SLOTS_PER_SEGMENT
        self._free.extend(range(first + SLOTS_PER_SEGMENT - 1, first - 1, -1))


class KeyLease:
    """One key's slot, held while an expanded key of the pool uses it; released (zeroed) when freed.

    Its ``repr`` names the slot, never the key; it cannot be pickled (a call sends ``index`` and
    ``generation``).
    """

    __slots__ = ("generation", "index", "key_size", "slots")

    def __init__(self, slots: KeySlots, index: int, generation: int, key_size: int) -> None:
        self.slots = slots
        self.index = index
        self.generation = generation
        self.key_size = key_size

    def __del__(self) -> None:
        try:
            self.slots.release(self.index, self.generation)
        except (AttributeError, TypeError):  # interpreter shutdown: the finalizer zeroed the region
            pass

    def __repr__(self) -> str:
        return f"<KeyLease slot {self.index} generation {self.generation}, {self.key_size} bytes>"

    def __reduce__(self) -> Any:
        raise TypeError("a key lease cannot be pickled: send its index and generation")


class SlotReader:
    """A worker's side of a region: reads keys in place, maps new segments as calls first name them.

    Args:
        fd: the region's descriptor, as received at spawn (:attr:`KeySlots.fd`, passed by the pool).
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._segments: list[mmap.mmap] = []

    def _segment(self, number: int) -> mmap.mmap:
        while len(self._segments) <= number:
            start = len(self._segments) * SEGMENT_SIZE
            if os.fstat(self._fd).st_size < start + SEGMENT_SIZE:
                raise StaleKeyError("the key slot named is outside the shared region")
            # Writable only because ctypes needs a writable buffer to find the address mlock takes.
            segment = mmap.mmap(self._fd, SEGMENT_SIZE, flags=mmap.MAP_SHARED, offset=start)
            protect(
                segment
            )  # the parent's lock pins the shared pages already; this mapping is left out of dumps
            self._segments.append(segment)
        return self._segments[number]

    def check(self, index: int, generation: int) -> None:
        """Raise :class:`StaleKeyError` unless slot ``index`` holds the key of ``generation`` now."""
        number, offset = _locate(index)
        if generation == 0 or self._segment(number)[offset : offset + 8] != generation.to_bytes(8, "little"):
            raise StaleKeyError("the key was wiped or released before this call ran")

    def key(self, index: int, generation: int) -> memoryview:
        """A read-only view of the key in slot ``index`` (not a copy). Call :meth:`check` again after using
        it: a wipe may have zeroed it meanwhile.

        Raises:
            StaleKeyError: the slot does not hold the key of ``generation``.
        """
        self.check(index, generation)
        number, offset = _locate(index)
        segment = self._segment(number)
        length = segment[offset + _LENGTH_OFFSET]
        return memoryview(segment)[offset + _KEY_OFFSET : offset + _KEY_OFFSET + length].toreadonly()
