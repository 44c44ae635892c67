"""Code that runs inside the python-backend worker processes (imported by ``spawn``; keep it light).

Key material never reaches a worker through the pool's pipe: a call names a slot of the shared region and the
key's generation (:mod:`app.services.key_slots`), and the worker reads the key there in place, expanding it
without a ``bytes`` copy. Expanded keys stay in a small per-process LRU keyed by slot and generation; an
entry whose slot no longer holds that generation (released or wiped) is dropped at the next call, and a call
whose key is gone raises :class:`~app.services.key_slots.StaleKeyError`.
"""

from __future__ import annotations

from collections import OrderedDict

import aescore
from app.core.memory_protection import disable_core_dumps
from app.services.key_slots import SlotReader, StaleKeyError

_MAX_KEYS = 64
_expanded: OrderedDict[tuple[int, int], aescore.ExpandedKey] = OrderedDict()
_reader: SlotReader | None = None


def attach(fd: int, undumpable: bool) -> None:
    """The pool's initializer: turn core dumps off as the parent did (``undumpable``: a spawned process
    starts dumpable again, so ptrace and ``/proc/<pid>/mem`` would be open to its user), then map the key
    slots region whose descriptor this process received at spawn."""
    global _reader
    if undumpable:
        disable_core_dumps()
    _reader = SlotReader(fd)


def _slots() -> SlotReader:
    if _reader is None:
        raise RuntimeError("this worker was started without the key slots region (attach was not run)")
    return _reader


def _drop_stale(reader: SlotReader) -> None:
    """Forget the expanded keys whose slots were released or wiped since they were expanded."""
    for index, generation in list(_expanded):
        try:
            reader.check(index, generation)
        except StaleKeyError:
            del _expanded[index, generation]


def _expand(index: int, generation: int) -> aescore.ExpandedKey:
    """The expanded key of slot ``index`` at ``generation``, from the LRU or read in place and expanded."""
    reader = _slots()
    _drop_stale(reader)
    cache_key = (index, generation)
    expanded = _expanded.get(cache_key)
    if expanded is not None:
        _expanded.move_to_end(cache_key)
        return expanded
    material = reader.key(index, generation)
    try:
        expanded = aescore.get_backend("python").expand_key(material)
    finally:
        material.release()
    reader.check(index, generation)  # not wiped while it was read
    _expanded[cache_key] = expanded
    if len(_expanded) > _MAX_KEYS:
        _expanded.popitem(last=False)
    return expanded


def ctr_xor(index: int, generation: int, initial_counter: bytes, data: bytes, offset: int) -> bytes:
    """AES-CTR with the pure-Python backend in this process, under the key in slot ``index``.

    Raises:
        StaleKeyError: the slot no longer holds the key of ``generation``.
        aescore.AesCoreError: as :meth:`aescore.Backend.ctr_xor` does.
    """
    result = aescore.get_backend("python").ctr_xor(_expand(index, generation), initial_counter, data, offset)
    assert result is not None
    return result


def gcm(
    encrypt: bool, index: int, generation: int, nonce: bytes, data: bytes, associated_data: bytes | None
) -> bytes:
    """AES-GCM encrypt (``encrypt``) or decrypt with the pure-Python backend in this process, under the key in
    slot ``index``.

    Raises:
        StaleKeyError: the slot no longer holds the key of ``generation``.
        aescore.InvalidTag: decrypt, and the tag does not verify.
        aescore.AesCoreError: as :class:`aescore.AesGcm` raises.
    """
    reader = _slots()
    material = reader.key(index, generation)
    try:
        key = aescore.get_backend("python").gcm_key(material)
    finally:
        material.release()
    reader.check(index, generation)
    if encrypt:
        return key.encrypt(nonce, data, associated_data)
    return key.decrypt(nonce, data, associated_data)


def ping() -> int:
    """Returns 0; used to start the pool's processes ahead of the first request."""
    return 0
