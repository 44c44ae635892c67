"""The ``keys``, ``tokens`` and ``backends`` commands: one function per command, returning the exit code."""

from __future__ import annotations

import argparse
import base64
import binascii
import os
import sys
from pathlib import Path

from keystream_client import KeystreamClient
from keystream_client._autologin import JWT_FILE_ENV, ROLE_ENV
from keystream_client._base import TOKEN_ENV, TlsFilesError
from keystream_client._models import time_text
from keystream_client.cli._codes import EXIT_AUTH, EXIT_OK, EXIT_USAGE, CommandError, UsageError
from keystream_client.cli._output import duration_text, print_json, print_key, print_tokens, table

#: Key material lengths the service takes (aes128, aes192, aes256; 64 bytes for aes256-siv).
MATERIAL_SIZES = (16, 24, 32, 64)


def make_client(
    args: argparse.Namespace, stream_timeout: float = 120.0, *, need_token: bool = True
) -> KeystreamClient:
    """A client from ``--url``/``--token``/``--timeout``/``--insecure``/``--cacert``/``--client-cert``/
    ``--client-key``; the client itself falls back to ``KEYSTREAM_URL`` (then its default URL),
    ``KEYSTREAM_TOKEN``, ``KEYSTREAM_CACERT`` and ``KEYSTREAM_CLIENT_CERT``/``KEYSTREAM_CLIENT_KEY``.
    Without ``--token``, ``KEYSTREAM_ROLE`` and ``KEYSTREAM_JWT_FILE`` make the client log in by itself.

    ``need_token=False`` is for the commands that present another credential (a login).

    Raises:
        CommandError: no token at all (exit code 5, as a 401 would give), or a CA bundle or client
            certificate that cannot be loaded (exit code 2, one line).
        UsageError: a URL that is not http(s), ``--client-key`` without ``--client-cert``, or a role
            without a JWT file (or the other way round, or with ``KEYSTREAM_TOKEN``).
    """
    token = args.token or None
    logs_in = bool(os.environ.get(ROLE_ENV) or os.environ.get(JWT_FILE_ENV))
    if not (token or os.environ.get(TOKEN_ENV) or logs_in) and need_token:
        raise CommandError(
            f"no token: pass --token, or set {TOKEN_ENV}, or {ROLE_ENV} and {JWT_FILE_ENV}", EXIT_AUTH
        )
    client_cert: str | None = args.client_cert
    client_key: str | None = args.client_key
    if client_key and not client_cert:
        raise UsageError("--client-key needs --client-cert")
    try:
        return KeystreamClient(
            args.url or None,
            token,
            timeout=args.timeout if args.timeout is not None else 30.0,
            stream_timeout=stream_timeout,
            verify=False if args.insecure else (args.cacert or None),
            cert=(client_cert, client_key) if client_cert and client_key else (client_cert or None),
        )
    except TlsFilesError as exc:  # an unreadable CA bundle or client certificate: a runtime error
        raise CommandError(str(exc), EXIT_USAGE) from exc
    except ValueError as exc:  # a URL that is not http(s)
        raise UsageError(str(exc)) from exc


def cmd_keys_create(args: argparse.Namespace) -> int:
    """``keys create``."""
    with make_client(args) as client:
        key = client.create_key(
            args.name,
            key_type=args.key_type,
            segment_size=args.segment_size,
            deletion_allowed=args.deletion_allowed,
            scheme=args.scheme,
            auto_rotate_period=args.auto_rotate_period,
            derived=args.derived,
            convergent_encryption=args.convergent_encryption,
            exportable=args.exportable,
            allow_plaintext_backup=args.allow_plaintext_backup,
        )
    print_key(key, args.json)
    return EXIT_OK


def _read_material(path: str, encoding: str) -> bytes:
    raw = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    try:
        if encoding == "base64":
            return base64.b64decode(raw.strip(), validate=True)
        if encoding == "hex":
            return bytes.fromhex(raw.decode("ascii").strip())
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise CommandError(f"key file is not valid {encoding}", EXIT_USAGE) from None
    return raw


def cmd_keys_import(args: argparse.Namespace) -> int:
    """``keys import``: material from a file or stdin, never from argv."""
    material = _read_material(args.file, args.encoding)
    if len(material) not in MATERIAL_SIZES:
        raise CommandError(f"key material must be 16, 24, 32 or 64 bytes, got {len(material)}", EXIT_USAGE)
    with make_client(args) as client:
        key = client.import_key(
            args.name,
            material,
            segment_size=args.segment_size,
            deletion_allowed=args.deletion_allowed,
            scheme=args.scheme,
            auto_rotate_period=args.auto_rotate_period,
            key_type=args.key_type,
            wrapped=args.wrapped,
        )
    print_key(key, args.json)
    return EXIT_OK


def cmd_keys_import_version(args: argparse.Namespace) -> int:
    """``keys import-version``: material from a file or stdin, never from argv."""
    material = _read_material(args.file, args.encoding)
    if len(material) not in MATERIAL_SIZES:
        raise CommandError(f"key material must be 16, 24, 32 or 64 bytes, got {len(material)}", EXIT_USAGE)
    with make_client(args) as client:
        key = client.import_version(args.name, material, wrapped=args.wrapped)
    print_key(key, args.json)
    return EXIT_OK


def cmd_keys_trim(args: argparse.Namespace) -> int:
    """``keys trim``."""
    with make_client(args) as client:
        key = client.trim(args.name, args.min_available_version)
    print_key(key, args.json)
    return EXIT_OK


def cmd_keys_export(args: argparse.Namespace) -> int:
    """``keys export``: an exportable key's material as JSON ``{"<version>": "<base64>"}`` on stdout."""
    with make_client(args) as client:
        exported = client.export_key(args.name, args.version)
    print_json({str(version): base64.b64encode(material).decode() for version, material in exported.items()})
    return EXIT_OK


def cmd_keys_backup(args: argparse.Namespace) -> int:
    """``keys backup``: the key's backup blob on stdout (one line)."""
    with make_client(args) as client:
        print(client.backup_key(args.name))
    return EXIT_OK


def cmd_keys_restore(args: argparse.Namespace) -> int:
    """``keys restore``: a backup blob from a file or stdin, never from argv."""
    blob = _read_material(args.file, "raw").decode("ascii", errors="replace").strip()
    if not blob:
        raise UsageError("the backup file is empty")
    with make_client(args) as client:
        key = client.restore_key(blob, args.name, force=args.force)
    print_key(key, args.json)
    return EXIT_OK


def cmd_keys_list(args: argparse.Namespace) -> int:
    """``keys list``."""
    with make_client(args) as client:
        keys = client.list_keys()
    if args.json:
        print_json([key.to_json() for key in keys])
    elif keys:
        rows = [["NAME", "TYPE", "SCHEME", "SEGMENT", "LATEST", "MIN_DECRYPT", "DELETABLE", "AUTO_ROTATE"]]
        rows += [
            [
                k.name,
                k.type,
                k.scheme,
                str(k.segment_size),
                str(k.latest_version),
                str(k.min_decryption_version),
                "yes" if k.deletion_allowed else "no",
                duration_text(k.auto_rotate_period),
            ]
            for k in keys
        ]
        table(rows)
    return EXIT_OK


def cmd_keys_show(args: argparse.Namespace) -> int:
    """``keys show``."""
    with make_client(args) as client:
        print_key(client.get_key(args.name), args.json)
    return EXIT_OK


def cmd_keys_rotate(args: argparse.Namespace) -> int:
    """``keys rotate``."""
    with make_client(args) as client:
        print_key(client.rotate_key(args.name), args.json)
    return EXIT_OK


def cmd_keys_config(args: argparse.Namespace) -> int:
    """``keys config``."""
    if (
        args.min_decryption_version is None
        and args.deletion_allowed is None
        and args.auto_rotate_period is None
        and not args.exportable
        and not args.allow_plaintext_backup
    ):
        raise UsageError(
            "nothing to change: give --min-decryption-version, --[no-]deletion-allowed, "
            "--auto-rotate-period, --exportable and/or --allow-plaintext-backup"
        )
    with make_client(args) as client:
        key = client.configure_key(
            args.name,
            min_decryption_version=args.min_decryption_version,
            deletion_allowed=args.deletion_allowed,
            auto_rotate_period=args.auto_rotate_period,
            exportable=True if args.exportable else None,
            allow_plaintext_backup=True if args.allow_plaintext_backup else None,
        )
    print_key(key, args.json)
    return EXIT_OK


def cmd_keys_delete(args: argparse.Namespace) -> int:
    """``keys delete``."""
    with make_client(args) as client:
        client.delete_key(args.name)
    if args.json:
        print_json({"deleted": args.name})
    return EXIT_OK


def cmd_tokens_create(args: argparse.Namespace) -> int:
    """``tokens create``: the secret goes to stdout (alone, unless --json)."""
    if args.max_ttl is not None and args.ttl is None:
        raise UsageError("--max-ttl needs --ttl")
    with make_client(args) as client:
        token = client.create_token(
            args.scopes, args.key_patterns or ["*"], args.description, ttl=args.ttl, max_ttl=args.max_ttl
        )
    if args.json:
        print_json({**token.to_json(), "token": token.token})
    else:
        print(token.token)
        print(f"token id {token.token_id}; scopes {','.join(token.scopes)}; shown only once", file=sys.stderr)
    return EXIT_OK


def cmd_tokens_list(args: argparse.Namespace) -> int:
    """``tokens list``."""
    with make_client(args) as client:
        print_tokens(client.list_tokens(), args.json)
    return EXIT_OK


def cmd_tokens_self(args: argparse.Namespace) -> int:
    """``tokens self``: the token in use, as one table row or JSON."""
    with make_client(args) as client:
        print_tokens([client.token_self()], args.json, one=True)
    return EXIT_OK


def cmd_tokens_renew(args: argparse.Namespace) -> int:
    """``tokens renew``: the new expiry on stdout; a note on stderr when it was capped at the limit."""
    with make_client(args) as client:
        renewed = client.renew_token_self(args.ttl)
    if args.json:
        print_json(renewed.to_json())
        return EXIT_OK
    assert renewed.expires_at is not None  # a token without ttl gets 400 instead
    print(time_text(renewed.expires_at))
    if renewed.capped:
        print(
            f"token {renewed.token_id}: capped at its max_expires_at; it cannot be renewed further",
            file=sys.stderr,
        )
    return EXIT_OK


def cmd_tokens_delete(args: argparse.Namespace) -> int:
    """``tokens delete``."""
    with make_client(args) as client:
        client.delete_token(args.token_id)
    return EXIT_OK


def cmd_backends(args: argparse.Namespace) -> int:
    """``backends``: what ``GET /v1/backends`` reports, as a table or JSON."""
    with make_client(args) as client:
        listing = client.backends()
    if args.json:
        print_json(listing)
        return EXIT_OK
    rows = [["NAME", "AVAILABLE", "ENABLED", "DEFAULT", "DETAIL"]]
    for backend in listing.get("backends", []):
        detail = backend.get("isa") or backend.get("preset") or backend.get("reason") or ""
        flags = [("yes" if backend.get(flag) else "no") for flag in ("available", "enabled", "default")]
        rows.append([str(backend.get("name", "?")), *flags, str(detail)])
    table(rows)
    return EXIT_OK
