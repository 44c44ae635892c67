"""The system calls that keep key material out of swap and core dumps, with the standard library alone.

:func:`protect` is the step :mod:`app.core.secret_memory` (this process's secrets) and the python backend's
key slots (memory shared with its worker processes) both take on each mapping they create;
:func:`disable_core_dumps` is what every served process, and each python-backend worker, does to itself.
This module imports nothing else of ``app``, so the pool's worker processes, which must start light, can use
it.
"""

from __future__ import annotations

import ctypes
import mmap
import resource

__all__ = ["core_dumps_disabled", "disable_core_dumps", "protect"]

_PR_GET_DUMPABLE = 3
_PR_SET_DUMPABLE = 4
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mlock.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_libc.prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)


def protect(mapping: mmap.mmap) -> bool:
    """Mark the whole of ``mapping`` ``MADV_DONTDUMP`` (out of kernel core dumps and ``gcore``'s images), then
    lock it with ``mlock`` (never written to swap).

    Both apply to this process's mapping only: a region shared with other processes is protected in each of
    them by its own call (locking, though, pins the shared pages for every process that maps them).

    Returns:
        True when the pages are locked; False when ``mlock`` was refused (``RLIMIT_MEMLOCK`` too small, no
        ``CAP_IPC_LOCK``): the pages are still left out of dumps, and the caller says so.

    Raises:
        OSError: ``madvise`` refused (never expected on Linux).
    """
    mapping.madvise(mmap.MADV_DONTDUMP)
    probe = ctypes.c_char.from_buffer(mapping)
    address = ctypes.addressof(probe)
    del probe  # its buffer export would keep the mapping from ever being closed
    return bool(_libc.mlock(address, len(mapping)) == 0)


def disable_core_dumps() -> None:
    """Make this process non-dumpable and set its core size limit (soft and hard) to 0.

    Non-dumpable: no core file on a crash, ``/proc/<pid>/mem`` and ptrace (``gcore``, ``gdb -p``) refused to
    anyone but root, and the limit cannot be raised again. ``KEYSTREAM_ALLOW_CORE_DUMPS=true`` skips the call.

    Raises:
        OSError: ``prctl`` refused (never expected on Linux).
    """
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if _libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        error = ctypes.get_errno()
        raise OSError(error, "prctl(PR_SET_DUMPABLE, 0) failed")


def core_dumps_disabled() -> bool:
    """True when this process is not dumpable (``prctl(PR_GET_DUMPABLE)`` is 0)."""
    return int(_libc.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0)) == 0
