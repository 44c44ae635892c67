"""The private channel over which a server's workers share a rebuilt master key through their supervisor.

A multi-worker server (:class:`app.serving.Supervisor`) unseals as one, whichever worker the kernel hands
each ``POST /v1/sys/unseal`` connection to:

* a worker that accepts a share below the threshold passes it on (:meth:`Handover.announce_share`), and the
  supervisor gives it to every other worker, so all count the same progress (and refuse it as a duplicate
  if it comes again); a reset is passed on the same way (:meth:`Handover.announce_reset`);
* the worker that receives the threshold-th share tells the supervisor the rebuilt key
  (:meth:`Handover.announce_unsealed`); the supervisor keeps it in memory and hands it to every other worker,
  and to each worker it starts later (a replacement after a crash comes back unsealed);
* a worker sealed by ``POST /v1/sys/seal`` tells the supervisor (:meth:`Handover.announce_sealed`), which
  overwrites its copy of the key and seals the others.

Shares and the key cross process boundaries only here, never through a log, a file, argv or the
environment; the supervisor keeps no share.

The channel is a :func:`multiprocessing.Pipe` the supervisor creates per worker: its worker end reaches the
spawned process as an inherited file descriptor, never through argv, the environment or a file, and no
other process holds it. Messages are one kind byte, then the 32 key bytes (``U``) or the share's text
(``P``); ``R`` (reset) and ``S`` (sealed) carry nothing. Messages pass through buffers zeroed after use; a
received key is kept in locked memory (:mod:`app.core.secret_memory`).
"""

from __future__ import annotations

import threading
from multiprocessing import BufferTooShort
from multiprocessing.connection import Connection

from app.core.secret_memory import secret_copy

__all__ = [
    "MAX_MESSAGE_SIZE",
    "RESET",
    "SEALED",
    "SHARE",
    "UNSEALED",
    "Handover",
    "install",
    "installed",
    "parse_message",
    "read_message",
    "send_message",
]

UNSEALED = b"U"
SEALED = b"S"
SHARE = b"P"
RESET = b"R"
#: The longest message: a kind byte and a share's text (at most 512 characters, as the unseal route takes).
MAX_MESSAGE_SIZE = 1 + 512
_KEY_SIZE = 32
_installed: list[Handover] = []


def parse_message(message: bytes | memoryview) -> tuple[bytes, bytes | memoryview | None]:
    """The kind (:data:`UNSEALED`, :data:`SEALED`, :data:`SHARE`, :data:`RESET`) and payload of a message:
    for ``U`` the key copied into locked memory (:func:`~app.core.secret_memory.secret_copy`), for ``P`` the
    share.

    Raises:
        ValueError: not a message of this channel (its content is not quoted).
    """
    view = memoryview(message).cast("B")
    kind = bytes(view[:1])
    if kind == UNSEALED and len(view) == 1 + _KEY_SIZE:
        return kind, secret_copy(view[1:]).readonly()
    if kind == SHARE and 1 < len(view) <= MAX_MESSAGE_SIZE and bytes(view[1:]).isascii():
        return kind, bytes(view[1:])
    if kind in (SEALED, RESET) and len(view) == 1:
        return kind, None
    raise ValueError(f"not a handover message ({len(view)} bytes)")


def read_message(connection: Connection) -> tuple[bytes, bytes | memoryview | None]:
    """Receive one message into a buffer that is zeroed afterwards (the key is kept only in locked memory).

    Raises:
        EOFError: the other end closed the channel.
        ValueError: a message not of this channel.
    """
    buffer = bytearray(MAX_MESSAGE_SIZE)
    try:
        try:
            size = connection.recv_bytes_into(buffer)
        except BufferTooShort:
            raise ValueError("a handover message that is too long") from None
        except OSError as exc:
            raise EOFError("the handover channel closed") from exc
        return parse_message(memoryview(buffer)[:size])
    finally:
        buffer[:] = bytes(len(buffer))


def send_message(connection: Connection, kind: bytes, payload: bytes | memoryview = b"") -> None:
    """Send one message from a buffer that is zeroed afterwards.

    Raises:
        OSError: the other end is gone.
    """
    message = bytearray(kind) + payload
    try:
        connection.send_bytes(message)
    finally:
        message[:] = bytes(len(message))


class Handover:
    """One worker's end of its channel to the supervisor (sends from any thread; one thread receives)."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._sending = threading.Lock()

    def announce_share(self, share: str) -> None:
        """Pass on a share this worker accepted below the threshold (the others count it too)."""
        self._send(SHARE, share.strip().encode("ascii", "replace")[: MAX_MESSAGE_SIZE - 1])

    def announce_reset(self) -> None:
        """Pass on a reset of the unseal progress."""
        self._send(RESET)

    def announce_unsealed(self, key: bytes | memoryview) -> None:
        """Tell the supervisor this worker rebuilt ``key`` (it hands it to the other workers)."""
        self._send(UNSEALED, key)

    def announce_sealed(self) -> None:
        """Tell the supervisor this worker sealed (it seals the other workers and forgets the key)."""
        self._send(SEALED)

    def _send(self, kind: bytes, payload: bytes | memoryview = b"") -> None:
        with self._sending:
            try:
                send_message(self._connection, kind, payload)
            except OSError:
                pass  # the supervisor is gone: the worker is about to be stopped anyway

    def waiting(self) -> bool:
        """Whether a message is already waiting in the channel (or it closed): :meth:`receive` won't block."""
        try:
            return self._connection.poll(0)
        except OSError:
            return True  # closed: receive() raises EOFError at once

    def receive(self) -> tuple[bytes, bytes | memoryview | None]:
        """Block until the supervisor passes on a message of another worker (see :func:`parse_message`).

        Raises:
            EOFError: the supervisor closed the channel (it is stopping).
            ValueError: a message not of this channel.
        """
        return read_message(self._connection)


def install(connection: Connection) -> None:
    """Make ``connection`` this worker's channel (the supervisor's worker entry point calls this)."""
    _installed[:] = [Handover(connection)]


def installed() -> Handover | None:
    """This process's channel to its supervisor, or ``None`` (a single-worker server has none)."""
    return _installed[0] if _installed else None
