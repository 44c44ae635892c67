"""``keystream login jwt`` and ``keystream login cert``: trade a JWT (a Kubernetes projected service-account
token, an OIDC issuer's token) or the client certificate given for mTLS (``--client-cert``) for a Keystream
token through a role; the new token goes to stdout, as ``tokens create`` prints one."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from keystream_client import NewToken
from keystream_client.cli._codes import EXIT_OK, EXIT_USAGE, CommandError
from keystream_client.cli._commands import make_client
from keystream_client.cli._output import print_json


def cmd_login_jwt(args: argparse.Namespace) -> int:
    """``login jwt --role R --jwt-file F``: the token on stdout (alone, unless ``--json``); the JWT is read
    from the file (``-`` for stdin) and never printed."""
    try:
        jwt = (sys.stdin.read() if args.jwt_file == "-" else Path(args.jwt_file).read_text()).strip()
    except OSError as exc:
        raise CommandError(f"cannot read the JWT file {args.jwt_file}: {exc.strerror}", EXIT_USAGE) from exc
    with make_client(args, need_token=False) as client:
        return _print_login(args, client.login_jwt(args.role, jwt))


def cmd_login_cert(args: argparse.Namespace) -> int:
    """``login cert --role R``: the token on stdout (alone, unless ``--json``), for the client certificate
    given with ``--client-cert`` (or ``KEYSTREAM_CLIENT_CERT``)."""
    with make_client(args, need_token=False) as client:
        return _print_login(args, client.login_cert(args.role))


def _print_login(args: argparse.Namespace, token: NewToken) -> int:
    """Print a login's token: alone on stdout (its id, role and subject on stderr), or all of it as JSON."""
    if args.json:
        print_json({**token.to_json(), "token": token.token})
    else:
        print(token.token)
        subject = token.metadata.get("subject", "?")
        print(f"token id {token.token_id}; role {args.role}; subject {subject}", file=sys.stderr)
    return EXIT_OK
