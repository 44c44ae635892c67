"""``keystream operator unseal``, ``operator seal-status``, ``operator seal`` and ``operator rotate-master``:
a replica's seal, and the master key's rotation.

``unseal`` gives shares to the server at ``--url`` (one replica: replicas are unsealed one by one). On a
terminal it prompts for each share without echo until the server is unsealed (an empty answer stops); with
stdin not a terminal it reads one share a line. A refused share (mistyped, foreign, duplicate) is reported
and the next one asked for; the progress is unchanged. No token is needed (none is sent unless given).
Exit code 0 once the server is unsealed, 1 when the shares ran out first.

``rotate-master`` (admin token) has the server begin a rotation of the master key (or resume an unfinished
one) and prints the new generation; with ``--wait`` it follows the rotation until every stored secret is
rewrapped. Exit code 1 (``master_rotation_running``) while another rotation holds its lease.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
import time
from collections.abc import Iterator

from keystream_client import KeystreamAPIError, KeystreamClient, MasterRotation, SealStatus
from keystream_client._base import TOKEN_ENV, TlsFilesError
from keystream_client.cli._codes import EXIT_API_ERROR, EXIT_OK, EXIT_USAGE, CommandError, UsageError
from keystream_client.cli._commands import make_client
from keystream_client.cli._output import print_json

__all__ = [
    "cmd_operator_rotate_master",
    "cmd_operator_seal",
    "cmd_operator_seal_status",
    "cmd_operator_unseal",
]

#: Seconds between two looks at a rotation followed with ``--wait``.
ROTATION_POLL_SECONDS = 0.5


def _tokenless_client(args: argparse.Namespace) -> KeystreamClient:
    """A client from the connection flags whose token is optional (the seal-status and unseal routes need
    none).

    Raises:
        CommandError: a CA bundle or client certificate that cannot be loaded (exit code 2).
        UsageError: a URL that is not http(s), or ``--client-key`` without ``--client-cert``.
    """
    client_cert: str | None = args.client_cert
    client_key: str | None = args.client_key
    if client_key and not client_cert:
        raise UsageError("--client-key needs --client-cert")
    try:
        return KeystreamClient(
            args.url or None,
            args.token or os.environ.get(TOKEN_ENV) or "",
            timeout=args.timeout if args.timeout is not None else 30.0,
            verify=False if args.insecure else (args.cacert or None),
            cert=(client_cert, client_key) if client_cert and client_key else (client_cert or None),
        )
    except TlsFilesError as exc:
        raise CommandError(str(exc), EXIT_USAGE) from exc
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def _status_text(status: SealStatus) -> str:
    if not status.sealed:
        return "unsealed"
    return f"sealed: {status.progress} of {status.threshold} shares given ({status.shares} exist)"


def _shares(status: SealStatus) -> Iterator[str]:
    """Shares from a no-echo prompt on a terminal, else one a line from stdin (blank lines skipped)."""
    if sys.stdin.isatty():
        while True:
            share = getpass.getpass(f"unseal share ({status.progress + 1} of {status.threshold}): ").strip()
            if not share:
                return
            yield share
    else:
        for line in sys.stdin:
            if line.strip():
                yield line.strip()


def cmd_operator_unseal(args: argparse.Namespace) -> int:
    """``operator unseal``."""
    with _tokenless_client(args) as client:
        status = client.unseal_reset() if args.reset else client.seal_status()
        if not status.sealed:
            print(_status_text(status))
            return EXIT_OK
        for share in _shares(status):
            try:
                status = client.unseal(share)
            except KeystreamAPIError as exc:
                if exc.code != "invalid_share":
                    raise
                print(f"keystream: share refused: {exc.message}", file=sys.stderr)
                continue
            print(_status_text(status), flush=True)
            if not status.sealed:
                return EXIT_OK
    raise CommandError(f"still {_status_text(status)}", EXIT_API_ERROR)


def cmd_operator_seal_status(args: argparse.Namespace) -> int:
    """``operator seal-status``."""
    with _tokenless_client(args) as client:
        status = client.seal_status()
    if args.json:
        print_json(
            {
                "sealed": status.sealed,
                "threshold": status.threshold,
                "shares": status.shares,
                "progress": status.progress,
            }
        )
    else:
        print(_status_text(status))
    return EXIT_OK


def cmd_operator_seal(args: argparse.Namespace) -> int:
    """``operator seal`` (admin token)."""
    with make_client(args) as client:
        status = client.seal()
    print(_status_text(status))
    return EXIT_OK


def _rotation_json(rotation: MasterRotation) -> dict[str, object]:
    return {
        "generation": rotation.generation,
        "rotating": rotation.rotating,
        "rewrapped": rotation.rewrapped,
        "started_at": rotation.started_at,
        "finished_at": rotation.finished_at,
        "resumed": rotation.resumed,
    }


def cmd_operator_rotate_master(args: argparse.Namespace) -> int:
    """``operator rotate-master`` (admin token)."""
    with make_client(args) as client:
        started = client.rotate_master(args.batch_size)
        if not args.json:
            doing = "resumed the rotation" if started.resumed else "rotating"
            print(f"{doing} to master key generation {started.generation}", flush=True)
        rotation = started
        while args.wait and rotation.rotating and rotation.generation == started.generation:
            time.sleep(ROTATION_POLL_SECONDS)
            rotation = client.master_rotation()
    if args.json:
        print_json(_rotation_json(rotation))
    elif args.wait:
        print(
            f"master key generation {rotation.generation}: {rotation.rewrapped} key versions rewrapped, the "
            "older generations retired"
        )
    return EXIT_OK
