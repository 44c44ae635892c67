"""The ``encrypt``, ``decrypt`` and ``rewrap`` commands: stream IN through the service into OUT with a
progress bar, or transform one small ``--value`` and print it (base64 ciphertext, UTF-8 plaintext, or
JSON)."""

from __future__ import annotations

import argparse
import base64
import binascii
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from keystream_client import KeystreamAPIError, KeystreamConnectionError, KeystreamStreamError
from keystream_client._models import b64
from keystream_client._sources import file_remaining
from keystream_client.cli._codes import EXIT_IO, EXIT_OK, CommandError, UsageError
from keystream_client.cli._commands import make_client
from keystream_client.cli._output import print_json
from keystream_client.cli._progress import ProgressBar


def _crypto_options(args: argparse.Namespace) -> dict[str, Any]:
    options: dict[str, Any] = (
        {} if args.operation == "rewrap" else {"format": args.format, "offset": args.offset}
    )
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
    if args.input is None or args.output is None:
        raise UsageError("give IN and OUT, or --value")
    if args.json:
        raise UsageError("--json goes with --value")
    if args.input != "-" and not Path(args.input).exists():
        raise CommandError(f"input not found: {args.input}", EXIT_IO)
    if args.output == "-":
        return
    out = Path(args.output)
    if args.input != "-" and out.exists() and out.resolve() == Path(args.input).resolve():
        raise UsageError("IN and OUT are the same file")
    if out.exists() and not args.force:
        raise CommandError(f"output exists: {args.output} (use --force to overwrite)", EXIT_IO)


def cmd_crypto(args: argparse.Namespace) -> int:
    """``encrypt`` / ``decrypt`` / ``rewrap``: stream IN through the service into OUT with a progress bar (or
    :func:`cmd_value` for ``--value``)."""
    if args.operation == "decrypt" and args.format == "raw" and (args.iv is None or args.key_version is None):
        raise UsageError("decrypting the raw format needs --iv and --key-version (encrypt printed them)")
    if args.value is not None:
        return cmd_value(args)
    _check_paths(args)
    options = _crypto_options(args)
    with make_client(args) as client, _open_input(args.input) as source:
        bar = ProgressBar.for_stream(args.operation, file_remaining(source), sys.stderr, args.quiet)
        transfer = getattr(client, f"{args.operation}_file")
        destination: str | IO[bytes] = sys.stdout.buffer if args.output == "-" else args.output
        try:
            result = transfer(args.key, source, destination, on_progress=bar.update, **options)
        except BaseException as exc:
            bar.close(success=False)
            # An error answer, and a connection error (the connection failed or was refused before the
            # answer), come before any output; a stream error's message already says this.
            if args.output == "-" and not isinstance(
                exc, KeystreamAPIError | KeystreamStreamError | KeystreamConnectionError
            ):
                exc.add_note("the output written to stdout is incomplete: discard it")
            raise
        bar.close()
        if args.output == "-":
            sys.stdout.buffer.flush()
    if args.operation == "encrypt" and args.format == "raw":
        _print_raw_parameters(result.iv, result.key_version)
    return EXIT_OK


def _print_raw_parameters(iv: bytes | None, key_version: int | None) -> None:
    shown = iv.hex() if iv else "?"
    print(f"keystream: raw: iv={shown} key_version={key_version} (both needed to decrypt)", file=sys.stderr)


def cmd_value(args: argparse.Namespace) -> int:
    """``encrypt --value TEXT`` prints base64 ciphertext; ``decrypt --value BASE64`` prints the plaintext as
    UTF-8 text; ``rewrap --value BASE64`` prints the new base64 ciphertext. ``--json`` prints
    ``{key, key_version, ciphertext|plaintext}`` with base64 inside (and the ``iv`` for raw encrypt). One
    in-memory request to the streaming route.

    Raises:
        UsageError: IN or OUT given too, or a decrypt value that is not base64.
        CommandError: the plaintext is not UTF-8 text and ``--json`` was not given (exit code 8).
    """
    if args.input is not None or args.output is not None:
        raise UsageError("--value replaces IN and OUT: give one or the other")
    if args.operation == "encrypt":
        data = args.value.encode("utf-8")
    else:
        try:
            data = base64.b64decode(args.value, validate=True)
        except (binascii.Error, ValueError):
            raise UsageError("--value must be base64 ciphertext (what encrypt --value printed)") from None
    options = _crypto_options(args)
    with make_client(args) as client:
        result = getattr(client, args.operation)(args.key, data, **options)
    field = "plaintext" if args.operation == "decrypt" else "ciphertext"
    if args.json:
        output = {"key": args.key, "key_version": result.key_version, field: b64(result.data)}
        if result.iv is not None:
            output["iv"] = result.iv.hex()
        print_json(output)
    elif args.operation != "decrypt":
        print(b64(result.data))
        if result.iv is not None:
            _print_raw_parameters(result.iv, result.key_version)
    else:
        try:
            text = result.data.decode("utf-8")
        except UnicodeDecodeError:
            raise CommandError(
                "the plaintext is binary (not UTF-8 text): use --json for it as base64", EXIT_IO
            ) from None
        print(text)
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
