"""Work that must not wait: a thread's promise, and the exception that breaks it.

A request handler on the event loop may run blocking-looking code inline when that code will not wait
(no lock held by someone else, no network round trip, no ``fsync``): a thread hop costs a short request more
than the work itself (two wake-ups). Inside :func:`without_waiting` the layers that could wait check
:func:`refuse_waiting` first and raise :class:`WouldWait` instead of waiting; the caller then runs the same
work again in a worker thread, where waiting is fine. Whatever raised :class:`WouldWait` must have changed
nothing (a transaction rolled back, no fetch started), so running the work again is safe.

The promise is per thread (:class:`threading.local`): a worker thread started meanwhile may wait.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

__all__ = ["WouldWait", "refuse_waiting", "waiting_allowed", "without_waiting"]

_state = threading.local()


class WouldWait(Exception):
    """The work would have to wait (a lock, a round trip, a disk flush): run it again where it may.

    Never reaches a client: whoever enters :func:`without_waiting` catches it.
    """


@contextlib.contextmanager
def without_waiting() -> Iterator[None]:
    """Within the block, this thread promises not to wait (see the module doc). Nests."""
    before = getattr(_state, "refused", False)
    _state.refused = True
    try:
        yield
    finally:
        _state.refused = before


def waiting_allowed() -> bool:
    """False inside :func:`without_waiting` on this thread."""
    return not getattr(_state, "refused", False)


def refuse_waiting(what: str) -> None:
    """Raise :class:`WouldWait` naming ``what`` would wait, when this thread may not wait.

    Raises:
        WouldWait: inside :func:`without_waiting`.
    """
    if getattr(_state, "refused", False):
        raise WouldWait(what)
