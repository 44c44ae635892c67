"""``keystream batch encrypt|decrypt|rewrap``: a JSON-lines file through the service's batch routes.

Input: one JSON object per line with base64 ``plaintext`` (encrypt) or ``ciphertext`` (decrypt, rewrap) and
optional base64 ``associated_data``; ``reference`` (any JSON value) is copied to the output; other fields are
ignored, so encrypt's (and rewrap's) output feeds decrypt and rewrap. Blank lines are skipped.

Output: one JSON object per input line, in order, with its 1-based ``line`` number: ``ciphertext`` or
``plaintext`` (base64) and ``key_version``, or ``error`` (``code``, ``message``); ``associated_data`` and
``reference`` are copied from the input. A line that fails (not JSON, not base64, does not verify) gets its
error and the batch goes on; the exit code is then :data:`EXIT_ITEMS_FAILED`.

Requests: lines go in requests of at most :data:`REQUEST_MAX_ITEMS` items and about
:data:`REQUEST_MAX_BYTES` of JSON. The service's own limits are its settings (``batch_max_items``,
``batch_max_bytes``), which a client cannot read: a request it refuses with 413 is split in half and sent
again, and the smaller size is kept for the rest of the input. An item refused with 413 on its own fails
alone. A 503 ``overloaded`` (the service's batch buffer stayed full) is retried after 1, 2 and 4 s. Any other
error of a whole request (auth, unknown key, connection) stops the command.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from keystream_client import BatchItem, BatchResult, KeystreamAPIError, KeystreamClient
from keystream_client._models import b64
from keystream_client._streams import open_partial
from keystream_client.cli._codes import EXIT_IO, EXIT_ITEMS_FAILED, EXIT_OK, CommandError
from keystream_client.cli._commands import make_client

#: Most items per request. The service's own limit (``batch_max_items``) is its setting; see the module doc.
REQUEST_MAX_ITEMS = 256
#: Most JSON bytes of items per request (under the service's default ``batch_max_bytes``; see the module doc).
REQUEST_MAX_BYTES = 4 * 1024 * 1024
#: Per batch operation: the base64 field each input line carries, and the one each output line gets.
BATCH_FIELDS: dict[str, tuple[str, str]] = {
    "encrypt": ("plaintext", "ciphertext"),
    "decrypt": ("ciphertext", "plaintext"),
    "rewrap": ("ciphertext", "ciphertext"),
}
#: JSON bytes per item besides its base64 fields (names, quotes, punctuation).
_ITEM_OVERHEAD = 64
#: Pauses before sending a request again that the service refused as overloaded (503 ``overloaded``).
OVERLOADED_RETRY_SECONDS = (1.0, 2.0, 4.0)
#: Line numbers named in the one-line failure summary.
_LINES_NAMED = 10


@dataclass
class _Line:
    """One input line: the item to send, or the error found locally; what its output line copies."""

    number: int
    item: BatchItem | None = None
    error: dict[str, str] | None = None
    copied: dict[str, Any] = field(default_factory=dict)

    @property
    def size(self) -> int:
        """About how many JSON bytes this item adds to a request."""
        if self.item is None:
            return 0
        encoded = len(self.item.data) + len(self.item.associated_data or b"")
        return 4 * (encoded + 2) // 3 + _ITEM_OVERHEAD


def _base64(value: object, name: str) -> bytes:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be base64 text")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{name} must be base64") from None


def parse_line(number: int, text: bytes, input_field: str) -> _Line:
    """The item of one input line, or the reason it cannot be sent (code ``invalid_line``)."""
    line = _Line(number)
    try:
        record = json.loads(text)
    except ValueError:
        line.error = {"code": "invalid_line", "message": "not a JSON object"}
        return line
    if not isinstance(record, dict):
        line.error = {"code": "invalid_line", "message": "not a JSON object"}
        return line
    line.copied = {name: record[name] for name in ("associated_data", "reference") if name in record}
    try:
        if input_field not in record:
            raise ValueError(f"no {input_field}")
        data = _base64(record[input_field], input_field)
        ad_text = record.get("associated_data")
        associated_data = None if ad_text is None else _base64(ad_text, "associated_data")
    except ValueError as exc:
        line.error = {"code": "invalid_line", "message": str(exc)}
        return line
    line.item = BatchItem(data, associated_data)
    return line


class _Sender:
    """Sends chunks of items, halving a chunk the service refuses with 413 and keeping the smaller size."""

    def __init__(self, client: KeystreamClient, args: argparse.Namespace) -> None:
        self.max_items = REQUEST_MAX_ITEMS
        self.max_bytes = REQUEST_MAX_BYTES
        # encrypt_batch, decrypt_batch or rewrap_batch
        self._call: Callable[..., list[BatchResult]] = getattr(client, f"{args.operation}_batch")
        self._key = args.key
        self._options = {"key_version": args.key_version, "backend": args.backend}
        self._output_field = BATCH_FIELDS[args.operation][1]

    def fits(self, count: int, size: int) -> bool:
        """True when a chunk of ``count`` items and ``size`` bytes may take one more."""
        return count < self.max_items and size <= self.max_bytes

    def send(self, lines: list[_Line]) -> None:
        """Fill each sendable line's outcome (``error`` or ``copied`` output fields) from the service.

        Raises:
            KeystreamAPIError: the service refused the whole request (other than 413).
            KeystreamConnectionError: the service is unreachable.
        """
        items = [line.item for line in lines if line.item is not None]
        try:
            results = self._call_retrying(items)
        except KeystreamAPIError as exc:
            if exc.status != 413:
                raise
            if len(items) == 1:
                lines[0].error = {"code": exc.code, "message": exc.message}
                return
            half = len(lines) // 2
            self.max_items = min(self.max_items, half)
            self.max_bytes = min(self.max_bytes, max(1, sum(line.size for line in lines) // 2))
            self.send(lines[:half])
            self.send(lines[half:])
            return
        for line, result in zip(lines, results, strict=True):
            if result.error is not None:
                line.error = {"code": result.error.code, "message": result.error.message}
            else:
                line.copied = {
                    self._output_field: b64(result.data or b""),
                    "key_version": result.key_version,
                    **line.copied,
                }

    def _call_retrying(self, items: list[BatchItem]) -> list[BatchResult]:
        """One batch call; a 503 ``overloaded`` (the service's batch buffer stayed full) is retried after
        1, 2 and 4 s before it counts."""
        for delay in OVERLOADED_RETRY_SECONDS:
            try:
                return self._call(self._key, items, **self._options)
            except KeystreamAPIError as exc:
                if exc.status != 503 or exc.code != "overloaded":
                    raise
            time.sleep(delay)
        return self._call(self._key, items, **self._options)


def _output_record(line: _Line) -> dict[str, Any]:
    if line.error is not None:
        return {"line": line.number, "error": line.error, **line.copied}
    return {"line": line.number, **line.copied}


@contextlib.contextmanager
def _input_lines(path: str) -> Iterator[Iterator[bytes]]:
    if path == "-":
        yield iter(sys.stdin.buffer)
        return
    if not Path(path).exists():
        raise CommandError(f"input not found: {path}", EXIT_IO)
    with open(path, "rb") as file:
        yield iter(file)


@contextlib.contextmanager
def _output_file(args: argparse.Namespace) -> Iterator[IO[bytes]]:
    """OUTPUT as a binary file: stdout, or a hidden partial file renamed into place when the command ends
    (with or without failed items) and removed when it stops early."""
    if args.output == "-":
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    final = Path(args.output)
    if final.exists() and not args.force:
        raise CommandError(f"output exists: {args.output} (use --force to overwrite)", EXIT_IO)
    partial, out = open_partial(final)
    try:
        with out:
            yield out
        os.replace(partial, final)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def cmd_batch(args: argparse.Namespace) -> int:
    """``batch encrypt|decrypt|rewrap``: every line of INPUT through the batch route, one output line each.

    Raises:
        CommandError: INPUT missing or OUTPUT exists (exit code 8); some items failed
            (:data:`EXIT_ITEMS_FAILED`, after the whole output was written).
        KeystreamAPIError, KeystreamConnectionError: a whole request failed; a file OUTPUT is removed.
    """
    input_field = BATCH_FIELDS[args.operation][0]
    failed: list[int] = []
    total = 0
    with make_client(args) as client, _input_lines(args.input) as source, _output_file(args) as out:
        sender = _Sender(client, args)
        try:
            chunk: list[_Line] = []
            count = size = 0

            def flush() -> None:
                nonlocal count, size
                sendable = [line for line in chunk if line.item is not None]
                if sendable:
                    sender.send(sendable)
                for line in chunk:
                    if line.error is not None:
                        failed.append(line.number)
                    out.write(json.dumps(_output_record(line)).encode() + b"\n")
                chunk.clear()
                count = size = 0

            for number, text in enumerate(source, start=1):
                if not text.strip():
                    continue
                total += 1
                line = parse_line(number, text, input_field)
                if line.item is not None and count and not sender.fits(count, size + line.size):
                    flush()
                chunk.append(line)
                if line.item is not None:
                    count, size = count + 1, size + line.size
            flush()
        except BaseException as exc:
            if args.output == "-" and total:
                exc.add_note("the output written to stdout is incomplete: discard it")
            raise
    if failed:
        named = ", ".join(map(str, failed[:_LINES_NAMED])) + (", ..." if len(failed) > _LINES_NAMED else "")
        raise CommandError(
            f"{len(failed)} of {total} items failed (lines {named}): each has an error object in the output",
            EXIT_ITEMS_FAILED,
        )
    return EXIT_OK
