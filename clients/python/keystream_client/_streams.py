"""What the sync and async streaming responses share: response metadata, the raw length check, and the
private ``.partial`` file that a path destination is written to before it is renamed into place."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import IO

from keystream_client import _transport as transport
from keystream_client._errors import KeystreamStreamError
from keystream_client._models import TransferResult
from keystream_client._options import CryptoOptions

#: Where a transfer writes: a path (written via a ``.partial`` file) or a binary file object.
Destination = str | os.PathLike[str] | IO[bytes]


def check_lengths(options: CryptoOptions, sent: int, received: int) -> None:
    """Raw output has exactly as many bytes as the input.

    Raises:
        KeystreamStreamError: the raw response is shorter or longer than what was sent.
    """
    if options.format == "raw" and sent != received:
        raise KeystreamStreamError(
            f"raw response has {received} bytes for {sent} bytes sent; output is incomplete"
        )


def broken_stream_error(
    exc: transport.StreamBrokenError, operation: str, options: CryptoOptions, received: int
) -> KeystreamStreamError:
    """The error for a response body that ended without its terminator after ``received`` bytes.

    A sealed decrypt or rewrap releases only what verified, and the service stops such a stream (it closes
    the connection) when a later segment fails authentication: the message says so rather than repeat the
    socket's words ("Connection reset by peer"), which read like a network fault.
    """
    if exc.how == transport.CLOSED and options.format == "sealed" and operation in ("decrypt", "rewrap"):
        output = "verified plaintext" if operation == "decrypt" else "output (rewrapped verified plaintext)"
        return KeystreamStreamError(
            f"the service stopped the stream after {received} bytes of {output}: the usual cause is a later "
            "segment of the ciphertext that failed authentication (tampered with, reordered or truncated); "
            "the service log names the segment"
        )
    return KeystreamStreamError(f"the response stream was cut short after {received} bytes: {exc}")


#: ``os.open`` flags of the ``.partial`` file: a new file only (``O_EXCL`` also refuses an existing symlink).
PARTIAL_FLAGS = (
    os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
)


def open_partial(destination: Path) -> tuple[Path, IO[bytes]]:
    """Create the hidden file that output goes to before it is renamed to ``destination``.

    The name is unpredictable (``.<name>.<random>.partial`` in the destination's directory) and the file is
    created exclusively with mode 0600 from the start, so in a shared directory nobody can plant a symlink to
    redirect the plaintext or open the file before it is private.

    Returns:
        The file's path and the file opened for binary writing.

    Raises:
        OSError: the directory does not exist or is not writable.
    """
    while True:
        path = destination.with_name(f".{destination.name}.{secrets.token_hex(8)}.partial")
        try:
            descriptor = os.open(path, PARTIAL_FLAGS, 0o600)
        except FileExistsError:
            continue  # 64 random bits collided with a file already there: pick another name
        return path, os.fdopen(descriptor, "wb")


class StreamBase:
    """What a streaming response tells before and after its body: headers, key version, IV, byte counts."""

    def __init__(
        self,
        head: transport.ResponseHead,
        options: CryptoOptions,
        sent: Callable[[], int],
        operation: str = "",
    ) -> None:
        self._options = options
        self._operation = operation
        self._sent = sent
        self.status = head.status
        self.headers = head.headers
        self.bytes_received = 0

    @property
    def key_version(self) -> int | None:
        """Key version that encrypted (``Keystream-Key-Version``), when the service sent it."""
        value = self.headers.get("keystream-key-version")
        return int(value) if value and value.isdigit() else None

    @property
    def iv(self) -> bytes | None:
        """The raw format's IV (``Keystream-IV``), or the one given."""
        value = self.headers.get("keystream-iv")
        return bytes.fromhex(value) if value else self._options.iv

    @property
    def bytes_sent(self) -> int:
        """Request-body bytes sent so far."""
        return self._sent()

    def result(self) -> TransferResult:
        """Summary of the finished transfer."""
        return TransferResult(
            self._options.format, self.key_version, self.iv, self.bytes_sent, self.bytes_received
        )
