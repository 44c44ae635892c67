"""The ``datakey`` command: a fresh data key for envelope encryption, sealed under ``--key``.

Prints the sealed data key (``ciphertext``, base64), the key version that sealed it and, unless
``--no-plaintext``, the data key itself (``plaintext``, base64) on stdout, as text lines or ``--json``. The
data key is printed only there: never in an error line.
"""

from __future__ import annotations

import argparse
from typing import Any

from keystream_client import DataKey
from keystream_client._models import b64
from keystream_client.cli._codes import EXIT_IO, EXIT_OK, CommandError
from keystream_client.cli._commands import make_client
from keystream_client.cli._output import print_json


def _associated_data(args: argparse.Namespace) -> bytes | None:
    """``--associated-data`` as UTF-8, or ``--associated-data-file``'s bytes, or None.

    Raises:
        CommandError: the file cannot be read (exit code 8).
    """
    if args.associated_data is not None:
        return str(args.associated_data).encode()
    if args.associated_data_file is None:
        return None
    try:
        return bytes(args.associated_data_file.read_bytes())
    except OSError as exc:
        raise CommandError(
            f"cannot read --associated-data-file {args.associated_data_file}: {exc.strerror or exc}", EXIT_IO
        ) from None


def datakey_json(result: DataKey) -> dict[str, Any]:
    """What ``--json`` prints: the service's answer (``plaintext`` only when it was asked for)."""
    data: dict[str, Any] = {"ciphertext": b64(result.ciphertext), "key_version": result.key_version}
    if result.plaintext is not None:
        data["plaintext"] = b64(result.plaintext)
    return data


def cmd_datakey(args: argparse.Namespace) -> int:
    """``datakey``."""
    associated = _associated_data(args)
    with make_client(args) as client:
        result = client.datakey(
            args.key, key_type=args.key_type, plaintext=not args.no_plaintext, associated_data=associated
        )
    data = datakey_json(result)
    if args.json:
        print_json(data)
        return EXIT_OK
    print(f"key_version: {data['key_version']}")
    print(f"ciphertext:  {data['ciphertext']}")
    if "plaintext" in data:
        print(f"plaintext:   {data['plaintext']}")
    return EXIT_OK
