"""``keystream roles``: the login roles an admin writes (``list``, ``show``, ``write``, ``delete``).

``roles write NAME`` builds the role's JSON body from flags (``--method``, ``--scope``, ``--key-pattern``,
``--ttl``, ``--max-ttl`` and the method's bindings) or takes it whole from ``--json-file`` (``-`` for stdin);
a file written by ``roles show NAME --json`` is taken back as it is (its ``name``, ``created_at`` and
``updated_at`` are dropped, the name must match). The service checks the body: what it refuses is its 400 or
422, exit code 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from keystream_client import Role
from keystream_client._models import time_text
from keystream_client.cli._codes import EXIT_OK, EXIT_USAGE, CommandError, UsageError
from keystream_client.cli._commands import make_client
from keystream_client.cli._output import print_json, table

#: The role methods the service knows.
METHODS = ("jwt", "cert")
SCOPES = ("admin", "encrypt", "decrypt", "rewrap")
#: Flags of each method's bindings: (flag, body field, repeatable, metavar, help).
_BINDING_FLAGS: dict[str, tuple[tuple[str, str, bool, str, str], ...]] = {
    "jwt": (
        ("--bound-audience", "bound_audiences", True, "AUDIENCE", "required, repeatable: an accepted aud"),
        ("--bound-subject", "bound_subject", False, "SUB", "the JWT's sub must be exactly this"),
        ("--user-claim", "user_claim", False, "CLAIM", "the claim naming the caller (default sub)"),
    ),
    "cert": (
        ("--allowed-common-name", "allowed_common_names", True, "GLOB", "repeatable"),
        ("--allowed-dns-san", "allowed_dns_sans", True, "GLOB", "repeatable"),
        ("--allowed-uri-san", "allowed_uri_sans", True, "GLOB", "repeatable (SPIFFE IDs)"),
        ("--allowed-organizational-unit", "allowed_organizational_units", True, "GLOB", "repeatable"),
    ),
}
#: ``CLAIM=VALUE`` flags of the jwt method: (flag, body field).
_PAIR_FLAGS = (("--bound-claim", "bound_claims"), ("--claim-mapping", "claim_mappings"))
#: Fields of ``roles show --json`` the service sets itself.
_READ_ONLY = ("created_at", "updated_at")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def add_role_commands(commands: Any, conn: argparse.ArgumentParser, as_json: argparse.ArgumentParser) -> None:
    """The ``roles`` command group and its actions."""
    roles = commands.add_parser("roles", help="list, show, write and delete login roles (admin)")
    roles.description = (
        "Manage the login roles workloads log in through (docs/identity.md); an admin token with the key "
        "pattern * is needed."
    )
    sub = roles.add_subparsers(dest="roles_command", metavar="ACTION", required=True)

    listing = sub.add_parser("list", parents=[conn, as_json], help="list roles")
    listing.description = "List the login roles."
    listing.set_defaults(handler=cmd_roles_list)

    show = sub.add_parser("show", parents=[conn, as_json], help="show one role")
    show.description = "Show one login role with its bindings."
    show.add_argument("name")
    show.set_defaults(handler=cmd_roles_show)

    write = sub.add_parser("write", parents=[conn, as_json], help="create or replace a role")
    write.description = (
        "Create or replace a login role, from flags or from --json-file (the body of POST "
        "/v1/auth/roles/NAME, or what `roles show NAME --json` printed)."
    )
    write.add_argument("name")
    write.add_argument(
        "--json-file", metavar="FILE", help="the role's JSON body (- for stdin); no other flags"
    )
    write.add_argument("--method", choices=METHODS, help="how a caller proves who it is")
    write.add_argument(
        "--scope",
        dest="scopes",
        action="append",
        choices=SCOPES,
        help="what issued tokens may do; repeatable",
    )
    write.add_argument(
        "--key-pattern", dest="key_patterns", action="append", metavar="GLOB", help="repeatable (default *)"
    )
    write.add_argument(
        "--ttl", type=_positive, metavar="SECONDS", help="how long an issued token lives (default 3600)"
    )
    write.add_argument(
        "--max-ttl",
        type=_positive,
        metavar="SECONDS",
        help="time after login beyond which no renewal goes (default 24 h)",
    )
    jwt = write.add_argument_group("--method jwt")
    for flag, field, repeatable, metavar, text in _BINDING_FLAGS["jwt"]:
        jwt.add_argument(
            flag, dest=field, action="append" if repeatable else "store", metavar=metavar, help=text
        )
    for flag, field in _PAIR_FLAGS:
        jwt.add_argument(
            flag,
            dest=field,
            action="append",
            metavar="CLAIM=VALUE" if field == "bound_claims" else "CLAIM=KEY",
            help="repeatable; a claim given twice matches either value"
            if field == "bound_claims"
            else "repeatable: the claim copied into the token's metadata under KEY",
        )
    cert = write.add_argument_group("--method cert")
    for flag, field, repeatable, metavar, text in _BINDING_FLAGS["cert"]:
        cert.add_argument(
            flag, dest=field, action="append" if repeatable else "store", metavar=metavar, help=text
        )
    write.set_defaults(handler=cmd_roles_write)

    delete = sub.add_parser("delete", parents=[conn, as_json], help="delete a role")
    delete.description = "Delete a login role; the tokens it issued live until they expire or are revoked."
    delete.add_argument("name")
    delete.set_defaults(handler=cmd_roles_delete)


def _flag_fields() -> list[tuple[str, str]]:
    """Every (flag, field) of ``roles write`` that goes into the body."""
    pairs = [("--method", "method"), ("--scope", "scopes"), ("--key-pattern", "key_patterns")]
    pairs += [("--ttl", "ttl"), ("--max-ttl", "max_ttl")]
    pairs += [(flag, field) for flags in _BINDING_FLAGS.values() for flag, field, *_ in flags]
    return pairs + list(_PAIR_FLAGS)


def _pairs(flag: str, values: list[str], repeated_as_list: bool) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for text in values:
        claim, sep, value = text.partition("=")
        if not sep or not claim or not value:
            raise UsageError(f"{flag} takes CLAIM=VALUE, got {text!r}")
        if claim in result and repeated_as_list:
            previous = result[claim]
            result[claim] = [*previous, value] if isinstance(previous, list) else [previous, value]
        elif claim in result:
            raise UsageError(f"{flag}: {claim} is given twice")
        else:
            result[claim] = value
    return result


def role_body(args: argparse.Namespace) -> dict[str, Any]:
    """The body of ``roles write`` from its flags or its ``--json-file``.

    Raises:
        UsageError: flags given with ``--json-file``, no ``--method``, a binding flag of the other method, a
            ``CLAIM=VALUE`` without ``=``, or a file naming another role.
        CommandError: the file cannot be read or is not a JSON object (exit code 2).
    """
    given = [(flag, field) for flag, field in _flag_fields() if getattr(args, field, None) is not None]
    if args.json_file is not None:
        if given:
            raise UsageError(f"--json-file takes the whole role: drop {', '.join(flag for flag, _ in given)}")
        return _body_from_file(args.json_file, args.name)
    if args.method is None:
        raise UsageError("give --method (jwt or cert) or --json-file")
    foreign = _BINDING_FLAGS["cert" if args.method == "jwt" else "jwt"]
    wrong = [flag for flag, field, *_ in foreign if getattr(args, field) is not None]
    if args.method == "cert":
        wrong += [flag for flag, field in _PAIR_FLAGS if getattr(args, field) is not None]
    if wrong:
        raise UsageError(f"{', '.join(wrong)} do not apply to --method {args.method}")
    body: dict[str, Any] = {}
    for flag, field in given:
        value = getattr(args, field)
        if field == "bound_claims":
            value = _pairs(flag, value, repeated_as_list=True)
        elif field == "claim_mappings":
            value = _pairs(flag, value, repeated_as_list=False)
        elif isinstance(value, list):
            value = list(dict.fromkeys(value))
        body[field] = value
    return body


def _body_from_file(path: str, name: str) -> dict[str, Any]:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8"
        raise CommandError(f"cannot read the role file {path}: {reason}", EXIT_USAGE) from None
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise CommandError(f"the role file {path} is not JSON: {exc}", EXIT_USAGE) from None
    if not isinstance(body, dict):
        raise CommandError(f"the role file {path} is not a JSON object", EXIT_USAGE)
    named = body.pop("name", name)
    if named != name:
        raise UsageError(f"the role file {path} is role {named!r}, not {name!r}")
    for field in _READ_ONLY:
        body.pop(field, None)
    return body


def print_role(role: Role, as_json: bool) -> None:
    """One role: JSON, or one ``field: value`` line each (bindings as compact JSON)."""
    if as_json:
        print_json(role.to_json())
        return
    lines = [
        ("name", role.name),
        ("method", role.method),
        ("scopes", ",".join(role.scopes)),
        ("key_patterns", ",".join(role.key_patterns)),
        ("ttl", str(role.ttl)),
        ("max_ttl", str(role.max_ttl)),
    ]
    lines += [(field, json.dumps(value, sort_keys=True)) for field, value in sorted(role.bindings.items())]
    lines += [("created_at", time_text(role.created_at)), ("updated_at", time_text(role.updated_at))]
    width = max(len(field) for field, _ in lines) + 1
    for field, value in lines:
        print(f"{field + ':':<{width}} {value}")


def cmd_roles_list(args: argparse.Namespace) -> int:
    """``roles list``: a table, or the roles as a JSON list."""
    with make_client(args) as client:
        roles = client.list_roles()
    if args.json:
        print_json([role.to_json() for role in roles])
    elif roles:
        rows = [["NAME", "METHOD", "SCOPES", "KEY PATTERNS", "TTL", "MAX TTL"]]
        rows += [
            [r.name, r.method, ",".join(r.scopes), ",".join(r.key_patterns), str(r.ttl), str(r.max_ttl)]
            for r in roles
        ]
        table(rows)
    return EXIT_OK


def cmd_roles_show(args: argparse.Namespace) -> int:
    """``roles show NAME``."""
    with make_client(args) as client:
        print_role(client.get_role(args.name), args.json)
    return EXIT_OK


def cmd_roles_write(args: argparse.Namespace) -> int:
    """``roles write NAME``: the role as the service stored it."""
    body = role_body(args)
    with make_client(args) as client:
        print_role(client.write_role(args.name, body), args.json)
    return EXIT_OK


def cmd_roles_delete(args: argparse.Namespace) -> int:
    """``roles delete NAME``."""
    with make_client(args) as client:
        client.delete_role(args.name)
    if args.json:
        print_json({"deleted": args.name})
    return EXIT_OK
