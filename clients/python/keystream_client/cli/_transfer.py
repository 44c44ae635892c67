"""The ``encrypt`` and ``decrypt`` commands: stream IN through the service into OUT with a progress bar."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from keystream_client._sources import file_remaining
from keystream_client.cli._codes import EXIT_OK, UsageError
from keystream_client.cli._commands import make_client
from keystream_client.cli._progress import ProgressBar


def _crypto_options(args: argparse.Namespace) -> dict[str, Any]:
    options: dict[str, Any] = {"format": args.format, "offset": args.offset}
    if args.iv is not None:
        options["iv"] = args.iv
    if args.key_version is not None:
        options["key_version"] = args.key_version
    if args.backend is not None:
        options["backend"] = args.backend
    if args.associated_data is not None:
        options["associated_data"] = args.associated_data.encode()
    elif args.associated_data_file is not None:
        options["associated_data"] = args.associated_data_file.read_bytes()
    return options


def _check_paths(args: argparse.Namespace) -> None:
    if args.input != "-" and not Path(args.input).exists():
        raise UsageError(f"input not found: {args.input}")
    if args.output == "-":
        return
    out = Path(args.output)
    if args.input != "-" and out.exists() and out.resolve() == Path(args.input).resolve():
        raise UsageError("IN and OUT are the same file")
    if out.exists() and not args.force:
        raise UsageError(f"output exists: {args.output} (use --force to overwrite)")


def cmd_crypto(args: argparse.Namespace) -> int:
    """``encrypt`` / ``decrypt``: stream IN through the service into OUT with a progress bar."""
    _check_paths(args)
    options = _crypto_options(args)
    with make_client(args) as client, _open_input(args.input) as source:
        bar = ProgressBar.for_stream(args.operation, file_remaining(source), sys.stderr, args.quiet)
        transfer = client.encrypt_file if args.operation == "encrypt" else client.decrypt_file
        destination: str | IO[bytes] = sys.stdout.buffer if args.output == "-" else args.output
        try:
            result = transfer(args.key, source, destination, on_progress=bar.update, **options)
        except BaseException:
            bar.close(success=False)
            if args.output == "-":
                print("keystream: the output written to stdout is incomplete: discard it", file=sys.stderr)
            raise
        bar.close()
        if args.output == "-":
            sys.stdout.buffer.flush()
    if args.operation == "encrypt" and args.format == "raw":
        iv = result.iv.hex() if result.iv else "?"
        print(
            f"keystream: raw: iv={iv} key_version={result.key_version} (both needed to decrypt)",
            file=sys.stderr,
        )
    return EXIT_OK


@contextlib.contextmanager
def _open_input(path: str) -> Iterator[IO[bytes]]:
    """IN as a binary file ('-' = stdin, left open)."""
    if path == "-":
        # Unbuffered, and not sys.stdin.buffer: a read blocked in the client's reader thread must not hold the
        # buffer lock that interpreter shutdown takes (a fatal error when Ctrl-C ends the transfer).
        with open(sys.stdin.fileno(), "rb", buffering=0, closefd=False) as stdin:
            yield stdin
        return
    with open(path, "rb") as file:
        yield file
