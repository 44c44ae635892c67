"""glibc malloc's two thresholds, fixed for a streaming server: freed buffers of a few hundred KiB are reused
from the heap instead of being handed back to the kernel and faulted in again.

glibc serves a request above ``M_MMAP_THRESHOLD`` (128 KiB at start) with fresh mmap'ed pages, and gives the
top of its heap back to the kernel once more than ``M_TRIM_THRESHOLD`` of it is free. Its dynamic rule raises
both after a mapped block is freed, but only to that block's size (the trim threshold to twice it). A stream
whose buffers come and go at about one size (uvicorn's ~256 KiB body chunks and what a route makes of them)
then keeps trimming the heap's top and faulting the same pages back in: about 128 page faults per chunk,
**+0.5 ms of server CPU per MiB on every streaming route, echo included** (Zen 4, 2026-11-28), as soon as
nothing in the process allocates bigger blocks that push the thresholds further up (a sealed encrypt that
gathered 1 MiB segments used to; a ``gcm`` encrypt of declared length seals chunk by chunk and does not).

Fixed values turn the dynamic rule off: blocks up to :data:`MMAP_THRESHOLD_BYTES` come from the heap, and up
to :data:`TRIM_THRESHOLD_BYTES` of free heap top is kept for reuse (per process; RSS stays within that of
what the process used). An operator's own glibc settings (``MALLOC_MMAP_THRESHOLD_``,
``MALLOC_TRIM_THRESHOLD_``, ``GLIBC_TUNABLES``) win: then nothing is changed. Other C libraries: nothing.
"""

from __future__ import annotations

import ctypes
import os
import platform

__all__ = ["MMAP_THRESHOLD_BYTES", "TRIM_THRESHOLD_BYTES", "fix_malloc_thresholds"]

#: Blocks up to this size come from the heap (a 4 MiB segment's output included).
MMAP_THRESHOLD_BYTES = 4 << 20
#: Free heap top kept before glibc gives it back to the kernel.
TRIM_THRESHOLD_BYTES = 8 << 20
#: mallopt's parameter numbers (glibc's malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: glibc's own ways of setting them, which an operator may have used.
_OPERATOR_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")


def fix_malloc_thresholds() -> bool:
    """Fix this process's malloc thresholds (see the module); each served process calls it once at start.

    Returns:
        True when they were set; False on a C library other than glibc, or when the environment already
        sets glibc's malloc tunables (the operator's choice stands).
    """
    if platform.libc_ver()[0] != "glibc" or any(name in os.environ for name in _OPERATOR_SETTINGS):
        return False
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    # mallopt answers 1 on success; both are plain integers glibc accepts on every version that has them.
    return bool(
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )
