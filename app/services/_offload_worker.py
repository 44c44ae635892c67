"""Code that runs inside the python-backend worker processes (imported by ``spawn``; keep it light).

Key material reaches a worker only as an argument of :func:`ctr_xor` or :func:`gcm` through the process pool's
pipe; it is never logged, and expanded keys stay in a small per-process LRU.
"""

from __future__ import annotations

from collections import OrderedDict

import aescore

_MAX_KEYS = 64
_expanded: OrderedDict[bytes, aescore.ExpandedKey] = OrderedDict()


def ctr_xor(material: bytes, initial_counter: bytes, data: bytes, offset: int) -> bytes:
    """AES-CTR with the pure-Python backend in this process.

    Raises:
        aescore.AesCoreError: as :meth:`aescore.Backend.ctr_xor` does.
    """
    backend = aescore.get_backend("python")
    expanded = _expanded.get(material)
    if expanded is None:
        expanded = backend.expand_key(material)
        _expanded[material] = expanded
        if len(_expanded) > _MAX_KEYS:
            _expanded.popitem(last=False)
    else:
        _expanded.move_to_end(material)
    result = backend.ctr_xor(expanded, initial_counter, data, offset)
    assert result is not None
    return result


def gcm(encrypt: bool, material: bytes, nonce: bytes, data: bytes, associated_data: bytes | None) -> bytes:
    """AES-GCM encrypt (``encrypt``) or decrypt with the pure-Python backend in this process.

    Raises:
        aescore.InvalidTag: decrypt, and the tag does not verify.
        aescore.AesCoreError: as :class:`aescore.AesGcm` raises.
    """
    key = aescore.get_backend("python").gcm_key(material)
    if encrypt:
        return key.encrypt(nonce, data, associated_data)
    return key.decrypt(nonce, data, associated_data)


def ping() -> int:
    """Returns 0; used to start the pool's processes ahead of the first request."""
    return 0
