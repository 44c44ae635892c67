"""The device's shared resources: the DMA engine and the key-slot store.

Both are driven by a :class:`~hwsim.engine.Simulator` and count what they do in a :class:`Counters`.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .engine import Simulator
from .params import DeviceParams

__all__ = ["Counters", "DmaEngine", "KeyRef", "KeySlotStore"]


@dataclass
class Counters:
    """Raw device counters (mutable; :mod:`hwsim.metrics` turns them into a frozen snapshot)."""

    jobs_submitted: int = 0
    jobs_completed: int = 0
    bytes_completed: int = 0
    rejects: int = 0
    doorbells: int = 0
    dma_transfers: int = 0
    dma_payload_bytes: int = 0
    dma_overhead_bytes: int = 0
    dma_wire_busy_ps: int = 0
    key_hits: int = 0
    key_misses: int = 0
    key_evictions: int = 0
    interrupts: int = 0
    polls: int = 0
    notified: int = 0
    core_busy_ns: int = 0
    occupancy_area_ns: int = 0
    occupancy_max: int = 0


@dataclass(frozen=True)
class KeyRef:
    """A key as the device sees it: an opaque handle, its size, and (optionally) the raw bytes to load.

    Model-only workloads pass no material; the backend passes the real key so slot zeroisation is observable.
    The material never appears in the repr.
    """

    handle: int
    key_size: int = 16
    material: bytes | None = None

    def __repr__(self) -> str:
        return f"KeyRef(handle={self.handle}, key_size={self.key_size})"


Callback = Callable[[Any], None]


class DmaEngine:
    """A DMA engine with one shared wire (reads and writes take turns), FIFO order, and an outstanding limit.

    A transfer of ``p`` payload bytes occupies the wire for ``(p + header) / bandwidth`` (kept in ps),
    starting when both a transfer slot and the wire are free, and completes ``dma_latency_ns`` after its
    bytes leave the wire (rounded up to the next ns). :meth:`operation` adds the per-operation setup cost and
    splits a buffer into bursts.
    """

    __slots__ = ("_ser_cache", "_waiting", "counters", "outstanding", "params", "sim", "wire_free_ps")

    def __init__(self, sim: Simulator, params: DeviceParams, counters: Counters) -> None:
        self.sim = sim
        self.params = params
        self.counters = counters
        self.wire_free_ps = 0
        self.outstanding = 0
        self._waiting: deque[tuple[int, bool, Callback, Any]] = deque()
        self._ser_cache: dict[int, int] = {}

    def wire_ps(self, payload: int) -> int:
        """Wire time of one transfer carrying ``payload`` bytes, in picoseconds (rounded up).

        The wire is tracked in picoseconds so that rounding to whole ns never changes the bandwidth of a
        long stream; completions land on the next whole ns.
        """
        cached = self._ser_cache.get(payload)
        if cached is None:
            cached = math.ceil((payload + self.params.dma_header_bytes) * 1e12 / self.params.dma_bandwidth)
            self._ser_cache[payload] = cached
        return cached

    def transfer(self, payload: int, is_payload: bool, callback: Callback, argument: Any) -> None:
        """Queue one transfer of at most one burst; ``callback(argument)`` runs when it completes."""
        if self.outstanding < self.params.dma_max_outstanding:
            self._start(payload, is_payload, callback, argument)
        else:
            self._waiting.append((payload, is_payload, callback, argument))

    def _start(self, payload: int, is_payload: bool, callback: Callback, argument: Any) -> None:
        self.outstanding += 1
        wire = self.wire_ps(payload)
        start = max(self.sim.now * 1000, self.wire_free_ps)
        self.wire_free_ps = start + wire
        counters = self.counters
        counters.dma_transfers += 1
        counters.dma_wire_busy_ps += wire
        if is_payload:
            counters.dma_payload_bytes += payload
        else:
            counters.dma_overhead_bytes += payload
        counters.dma_overhead_bytes += self.params.dma_header_bytes
        done = -(-self.wire_free_ps // 1000) + self.params.dma_latency_ns
        self.sim.at(done, self._done, callback, argument)

    def _done(self, callback: Callback, argument: Any) -> None:
        self.outstanding -= 1
        if self._waiting:
            self._start(*self._waiting.popleft())
        callback(argument)

    def operation(self, nbytes: int, callback: Callback, argument: Any) -> None:
        """Move ``nbytes`` of overhead (descriptor, key, completion): setup, then bursts; one callback."""
        burst = self.params.dma_burst_bytes
        sizes = [min(burst, nbytes - start) for start in range(0, nbytes, burst)] or [0]
        remaining = [len(sizes)]

        def one_done(_: Any) -> None:
            remaining[0] -= 1
            if remaining[0] == 0:
                callback(argument)

        def issue() -> None:
            for size in sizes:
                self.transfer(size, False, one_done, None)

        self.sim.after(self.params.dma_setup_ns, issue)


class KeySlotStore:
    """K key-schedule slots with LRU replacement; a slot in use by a running job is pinned.

    Each slot is a 32-byte buffer; loading copies the key into it, eviction overwrites it with zeros before
    the slot is reused (and :meth:`zeroise_all` clears every slot).
    """

    __slots__ = ("_free", "_lru", "_pins", "counters", "slots")

    def __init__(self, params: DeviceParams, counters: Counters) -> None:
        self.slots = [bytearray(32) for _ in range(params.key_slots)]
        self.counters = counters
        self._lru: OrderedDict[int, int] = OrderedDict()  # handle -> slot index, least recent first
        self._free = list(range(params.key_slots - 1, -1, -1))
        self._pins = [0] * params.key_slots

    def slot_of(self, handle: int) -> int | None:
        """The slot holding ``handle``, or ``None``."""
        return self._lru.get(handle)

    def acquire(self, key: KeyRef) -> tuple[int, bool] | None:
        """Pin a slot for ``key``.

        Returns:
            ``(slot, hit)``; on a miss the caller must load the key into the slot. ``None`` when every slot is
            pinned by running jobs (the caller retries when one is released).
        """
        slot = self._lru.get(key.handle)
        if slot is not None:
            self._lru.move_to_end(key.handle)
            self._pins[slot] += 1
            self.counters.key_hits += 1
            return slot, True
        if self._free:
            slot = self._free.pop()
        else:
            victim = next((h for h, s in self._lru.items() if self._pins[s] == 0), None)
            if victim is None:
                return None
            slot = self._lru.pop(victim)
            self._zeroise(slot)
            self.counters.key_evictions += 1
        self._lru[key.handle] = slot
        self._pins[slot] += 1
        self.counters.key_misses += 1
        return slot, False

    def fill(self, slot: int, key: KeyRef) -> None:
        """Copy the key's material (if any) into ``slot``."""
        if key.material is not None:
            self.slots[slot][: len(key.material)] = key.material

    def release(self, slot: int) -> None:
        """Unpin ``slot``."""
        self._pins[slot] -= 1

    def _zeroise(self, slot: int) -> None:
        buffer = self.slots[slot]
        buffer[:] = bytes(len(buffer))

    def zeroise_all(self) -> None:
        """Forget every key and overwrite every slot with zeros."""
        for slot in range(len(self.slots)):
            self._zeroise(slot)
        self._lru.clear()
        self._free = list(range(len(self.slots) - 1, -1, -1))
