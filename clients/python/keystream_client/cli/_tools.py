"""The ``hmac``, ``verify``, ``random`` and ``hash`` commands: small JSON calls on data given inline or read
from a file or stdin.

The data goes to the service in a JSON body, so it is bounded by the service's JSON body limit (64 KiB of
JSON by default: about 48 KiB of data); a larger input gets the service's 413. ``verify`` exits 0 when the tag
is valid and 4 (integrity) when it is not, so a shell can test it.
"""

from __future__ import annotations

import argparse
import base64
import sys
from pathlib import Path

from keystream_client.cli._codes import EXIT_INTEGRITY, EXIT_IO, EXIT_OK, CommandError
from keystream_client.cli._commands import make_client
from keystream_client.cli._output import print_json


def _input(args: argparse.Namespace) -> bytes:
    """``--value`` as UTF-8, or the bytes of INPUT (``-`` for stdin).

    Raises:
        CommandError: INPUT cannot be read (exit code 8).
    """
    if args.value is not None:
        return str(args.value).encode()
    if args.input == "-":
        return sys.stdin.buffer.read()
    try:
        return Path(args.input).read_bytes()
    except OSError as exc:
        raise CommandError(f"cannot read {args.input}: {exc.strerror or exc}", EXIT_IO) from None


def cmd_hmac(args: argparse.Namespace) -> int:
    """``hmac``: prints the tag (``ks:v<version>:<base64>``)."""
    data = _input(args)
    with make_client(args) as client:
        tag = client.hmac(args.key, data, algorithm=args.algorithm, key_version=args.key_version)
    if args.json:
        print_json({"hmac": tag, "key_version": int(tag.split(":", 2)[1][1:])})
    else:
        print(tag)
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    """``verify``: prints ``valid`` (exit 0) or ``invalid`` (exit 4)."""
    data = _input(args)
    with make_client(args) as client:
        valid = client.verify_hmac(args.key, data, args.hmac, algorithm=args.algorithm)
    if args.json:
        print_json({"valid": valid})
    else:
        print("valid" if valid else "invalid")
    return EXIT_OK if valid else EXIT_INTEGRITY


def cmd_random(args: argparse.Namespace) -> int:
    """``random``: prints ``--bytes`` random bytes as base64 (or hex)."""
    with make_client(args) as client:
        data = client.random_bytes(args.bytes)
    print(data.hex() if args.hex else base64.b64encode(data).decode())
    return EXIT_OK


def cmd_hash(args: argparse.Namespace) -> int:
    """``hash``: prints the digest as hex (or base64)."""
    data = _input(args)
    with make_client(args) as client:
        digest = client.hash(data, args.algorithm)
    print(base64.b64encode(digest).decode() if args.base64 else digest.hex())
    return EXIT_OK
