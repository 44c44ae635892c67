"""``keystream``: run the service, manage keys and tokens, and encrypt/decrypt files from the shell.

Exit codes (stable; scripts may rely on them):

====  ===========================================================================================
 0    success
 1    the service answered with an error not listed below (400 bad request, 413, 5xx, ...)
 2    usage error: bad flags or arguments, missing token, output exists without ``--force``, bad settings
      or a start ``serve`` refuses (master key or keystore unusable)
 3    connection error: the service is unreachable, timed out, or TLS failed
 4    integrity error: decryption failed (wrong key/associated data, tampered or truncated
      ciphertext) or a stream was cut short; any partial output file has been removed
 5    authentication/authorization: 401 (no or bad token) or 403 (scope or key not allowed)
 6    not found: 404 (key, key version or token)
 7    conflict: 409 (key exists, deletion not allowed)
 8    local I/O error: reading the input or writing the output failed
130   interrupted (Ctrl-C); 143: terminated (SIGTERM). A partial output file is removed in both cases
====  ===========================================================================================

The URL and token come from ``--url``/``--token`` or ``KEYSTREAM_URL``/``KEYSTREAM_TOKEN`` (URL default
``http://127.0.0.1:8000``). ``-`` as IN or OUT means stdin or stdout.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import contextlib
import importlib.metadata
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from app._client_sources import file_remaining
from app.cli_progress import ProgressBar
from app.client import (
    Key,
    KeystreamAPIError,
    KeystreamClient,
    KeystreamClientError,
    KeystreamConnectionError,
    KeystreamStreamError,
    Token,
)

EXIT_OK = 0
EXIT_API_ERROR = 1
EXIT_USAGE = 2
EXIT_CONNECTION = 3
EXIT_INTEGRITY = 4
EXIT_AUTH = 5
EXIT_NOT_FOUND = 6
EXIT_CONFLICT = 7
EXIT_IO = 8
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143

DEFAULT_URL = "http://127.0.0.1:8000"
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([KMG]i?B?)?\s*$", re.IGNORECASE)


class UsageError(Exception):
    """The command line is wrong in a way argparse cannot see (exit code 2)."""


class TerminatedError(KeyboardInterrupt):
    """SIGTERM arrived: unwind like Ctrl-C so a partial output file is removed (exit code 143)."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise TerminatedError


def parse_size(text: str) -> int:
    """``4096``, ``4KiB``, ``1MiB``, ``1M`` -> bytes (binary units).

    Raises:
        argparse.ArgumentTypeError: not a size.
    """
    match = _SIZE_RE.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 4096, 64KiB, 1MiB)")
    number, unit = int(match.group(1)), (match.group(2) or "").upper()
    return number << {"": 0, "K": 10, "M": 20, "G": 30}[unit[:1]]


def _non_negative(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _positive(text: str) -> int:
    value = _non_negative(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


# -- parser ------------------------------------------------------------------------------------------------
def _client_options(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """Connection flags; on subcommands they default to SUPPRESS so a value given before the command stays."""
    common = parser if parser is not None else argparse.ArgumentParser(add_help=False)
    default = None if parser is not None else argparse.SUPPRESS
    group = common.add_argument_group("connection")
    group.add_argument(
        "--url", default=default, help=f"service URL (env KEYSTREAM_URL; default {DEFAULT_URL})"
    )
    group.add_argument(
        "--token",
        default=default,
        help="bearer token; prefer env KEYSTREAM_TOKEN (a command-line token is visible in ps)",
    )
    group.add_argument("--timeout", type=float, default=default, help="seconds for a JSON call (default 30)")
    group.add_argument(
        "--insecure", action="store_true", default=default, help="do not verify the TLS certificate"
    )
    return common


def _json_option() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--json", action="store_true", help="print JSON instead of text")
    return parent


def build_parser() -> argparse.ArgumentParser:
    """The ``keystream`` argument parser (every command has ``--help``)."""
    parser = argparse.ArgumentParser(
        prog="keystream",
        description="Keystream: AES-CTR encryption as a service. Run the server, manage keys and tokens, "
        "encrypt and decrypt files.",
        epilog="exit codes: 0 ok, 1 API error, 2 usage, 3 connection, 4 integrity/decryption failure, "
        "5 auth (401/403), 6 not found, 7 conflict, 8 local I/O, 130 interrupted, 143 terminated",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    _client_options(parser)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    conn, as_json = _client_options(), _json_option()

    serve = commands.add_parser("serve", help="run the service (what `make run` calls)")
    serve.description = "Run the Keystream service; flags override KEYSTREAM_* settings."
    serve.add_argument("--host", help="listen address (KEYSTREAM_HOST, default 127.0.0.1)")
    serve.add_argument("--port", type=_non_negative, help="listen port (KEYSTREAM_PORT, default 8000)")
    serve.add_argument("--workers", type=_positive, help="worker processes (KEYSTREAM_WORKERS, default 1)")
    serve.add_argument("--data-dir", help="keystore directory (KEYSTREAM_DATA_DIR, default ./data)")
    serve.add_argument(
        "--backend",
        help="default backend: aesni, python or hwsim (KEYSTREAM_DEFAULT_BACKEND). python is NOT "
        "constant-time (cache-timing exposure): disable it with KEYSTREAM_ENABLED_BACKENDS=aesni",
    )
    serve.set_defaults(handler=cmd_serve)

    _add_key_commands(commands, conn, as_json)
    _add_token_commands(commands, conn, as_json)
    for operation in ("encrypt", "decrypt"):
        _add_crypto_command(commands, conn, operation)

    backends = commands.add_parser("backends", parents=[conn, as_json], help="list the service's backends")
    backends.description = "List the service's AES backends (for --backend): availability, ISA path, preset."
    backends.set_defaults(handler=cmd_backends)

    bench = commands.add_parser("bench", help="run the benchmarks and write a Markdown report with plots")
    bench.description = (
        "Run bench/bench_aescore.py, bench/bench_service.py and hwsim.report, then write "
        "bench/results/report.md with PNG plots. Needs a source checkout."
    )
    bench.add_argument("--quick", action="store_true", help="short runs (a smoke test, not for numbers)")
    bench.add_argument("--report-only", action="store_true", help="do not run benchmarks; plot existing JSON")
    bench.add_argument("--results", type=Path, help="results directory (default bench/results)")
    bench.set_defaults(handler=cmd_bench)
    return parser


def _add_key_commands(commands: Any, conn: argparse.ArgumentParser, as_json: argparse.ArgumentParser) -> None:
    keys = commands.add_parser("keys", help="create, import, list, show, rotate, configure and delete keys")
    keys.description = "Manage keys (admin scope needed except for list/show)."
    sub = keys.add_subparsers(dest="keys_command", metavar="ACTION", required=True)

    create = sub.add_parser("create", parents=[conn, as_json], help="create a key")
    create.description = "Create a key with server-generated material."
    create.add_argument("name")
    create.add_argument("--type", dest="key_type", choices=("aes128", "aes192", "aes256"), default="aes256")
    create.add_argument(
        "--segment-size", type=parse_size, help="sealed segment size, e.g. 4KiB (default 1MiB)"
    )
    create.add_argument("--deletion-allowed", action="store_true", help="allow `keys delete` later")
    create.set_defaults(handler=cmd_keys_create)

    imp = sub.add_parser("import", parents=[conn, as_json], help="import key material from a file")
    imp.description = (
        "Import 16/24/32 bytes of key material from FILE ('-' = stdin); the service must run with "
        "KEYSTREAM_ALLOW_KEY_IMPORT=true. Material never goes on the command line."
    )
    imp.add_argument("name")
    imp.add_argument("file", help="file holding the key ('-' = stdin)")
    imp.add_argument("--encoding", choices=("raw", "base64", "hex"), default="raw", help="file format")
    imp.add_argument("--segment-size", type=parse_size)
    imp.add_argument("--deletion-allowed", action="store_true")
    imp.set_defaults(handler=cmd_keys_import)

    listing = sub.add_parser("list", parents=[conn, as_json], help="list keys")
    listing.description = "List the keys this token may see."
    listing.set_defaults(handler=cmd_keys_list)

    for action, text, handler in (
        ("show", "show a key's metadata", cmd_keys_show),
        ("rotate", "add a new key version", cmd_keys_rotate),
        ("delete", "delete a key (needs deletion allowed)", cmd_keys_delete),
    ):
        command = sub.add_parser(action, parents=[conn, as_json], help=text)
        command.description = text[0].upper() + text[1:] + "."
        command.add_argument("name")
        command.set_defaults(handler=handler)

    config = sub.add_parser(
        "config", parents=[conn, as_json], help="change min decryption version / deletion"
    )
    config.description = "Change a key's policy; options not given stay as they are."
    config.add_argument("name")
    config.add_argument("--min-decryption-version", type=_positive)
    config.add_argument(
        "--deletion-allowed",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="allow deleting the key",
    )
    config.set_defaults(handler=cmd_keys_config)


def _add_token_commands(
    commands: Any, conn: argparse.ArgumentParser, as_json: argparse.ArgumentParser
) -> None:
    tokens = commands.add_parser("tokens", help="create, list and delete API tokens (admin)")
    tokens.description = "Manage bearer tokens (admin scope needed)."
    sub = tokens.add_subparsers(dest="tokens_command", metavar="ACTION", required=True)

    create = sub.add_parser("create", parents=[conn, as_json], help="create a token (printed once)")
    create.description = "Create a token; the secret is printed once on stdout."
    create.add_argument(
        "--scope", dest="scopes", action="append", required=True, choices=("admin", "encrypt", "decrypt")
    )
    create.add_argument("--key-pattern", dest="key_patterns", action="append", help="glob (default *)")
    create.add_argument("--description", default="")
    create.set_defaults(handler=cmd_tokens_create)

    listing = sub.add_parser("list", parents=[conn, as_json], help="list tokens (never secrets)")
    listing.description = "List tokens."
    listing.set_defaults(handler=cmd_tokens_list)

    delete = sub.add_parser("delete", parents=[conn], help="revoke a token")
    delete.description = "Revoke a token by id."
    delete.add_argument("token_id")
    delete.set_defaults(handler=cmd_tokens_delete)


def _add_crypto_command(commands: Any, conn: argparse.ArgumentParser, operation: str) -> None:
    command = commands.add_parser(operation, parents=[conn], help=f"{operation} a file or stdin (streaming)")
    command.description = (
        f"Stream IN through the service's {operation} into OUT ('-' = stdin/stdout). A file OUT appears only "
        "when the whole transfer succeeded. Sealed (default) is authenticated; raw is plain AES-CTR"
        + (
            " and prints the iv and key version needed to decrypt on stderr."
            if operation == "encrypt"
            else "."
        )
    )
    command.add_argument("input", metavar="IN")
    command.add_argument("output", metavar="OUT")
    command.add_argument("--key", required=True, help="key name")
    command.add_argument("--format", choices=("sealed", "raw"), default="sealed")
    command.add_argument(
        "--iv", help="raw: 32 hex digits" + (" (default random)" if operation == "encrypt" else "")
    )
    command.add_argument(
        "--offset", type=_non_negative, default=0, help="raw: stream position of IN's first byte"
    )
    ad = command.add_mutually_exclusive_group()
    ad.add_argument("--associated-data", help="sealed: associated data (UTF-8 text)")
    ad.add_argument("--associated-data-file", type=Path, help="sealed: associated data from a file")
    command.add_argument("--key-version", type=_positive, help="key version (raw decrypt: required)")
    command.add_argument(
        "--backend",
        help="service backend: aesni, python or hwsim (python is NOT constant-time: avoid it for real keys)",
    )
    command.add_argument("--force", action="store_true", help="overwrite OUT if it exists")
    command.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    command.set_defaults(handler=cmd_crypto, operation=operation)


# -- helpers -----------------------------------------------------------------------------------------------
def _client(args: argparse.Namespace, stream_timeout: float = 120.0) -> KeystreamClient:
    url = args.url or os.environ.get("KEYSTREAM_URL") or DEFAULT_URL
    token = args.token or os.environ.get("KEYSTREAM_TOKEN")
    if not token:
        raise UsageError("no token: pass --token or set KEYSTREAM_TOKEN")
    try:
        return KeystreamClient(
            url,
            token,
            timeout=args.timeout if args.timeout is not None else 30.0,
            stream_timeout=stream_timeout,
            verify=not args.insecure,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True))


def _print_key(key: Key, as_json: bool) -> None:
    if as_json:
        _print_json(key.to_json())
        return
    print(f"name:                   {key.name}")
    print(f"type:                   {key.type}")
    print(f"segment_size:           {key.segment_size}")
    print(f"latest_version:         {key.latest_version}")
    print(f"min_decryption_version: {key.min_decryption_version}")
    print(f"deletion_allowed:       {str(key.deletion_allowed).lower()}")
    print(f"imported:               {str(key.imported).lower()}")
    print(f"created_at:             {key.created_at.isoformat()}")
    print(f"updated_at:             {key.updated_at.isoformat()}")
    for version in key.versions:
        print(f"  version {version.version}: created {version.created_at.isoformat()}")


def _table(rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def _print_tokens(tokens: Sequence[Token], as_json: bool) -> None:
    if as_json:
        _print_json([token.to_json() for token in tokens])
        return
    rows = [["ID", "SCOPES", "KEY PATTERNS", "CREATED", "DESCRIPTION"]]
    rows += [
        [t.token_id, ",".join(t.scopes), ",".join(t.key_patterns), t.created_at.isoformat(), t.description]
        for t in tokens
    ]
    _table(rows)


# -- commands ----------------------------------------------------------------------------------------------
def cmd_serve(args: argparse.Namespace) -> int:
    """Map the flags onto ``KEYSTREAM_*`` and run :func:`app.server.serve` until interrupted.

    Returns:
        ``EXIT_OK`` after a normal shutdown; ``EXIT_USAGE`` when the master key, the data directory or the
        keystore is unusable (one error line, no traceback).

    Raises:
        UsageError: a ``KEYSTREAM_*`` setting or flag is invalid.
    """
    for flag, env in (
        ("host", "HOST"),
        ("port", "PORT"),
        ("workers", "WORKERS"),
        ("data_dir", "DATA_DIR"),
        ("backend", "DEFAULT_BACKEND"),
    ):
        value = getattr(args, flag)
        if value is not None:
            os.environ[f"KEYSTREAM_{env}"] = str(value)
    from pydantic import ValidationError

    from app.core.config import get_settings
    from app.core.errors import KeystreamError
    from app.keystore import KeystoreSchemaError, MasterKeyError
    from app.server import serve

    try:
        get_settings.cache_clear()
        settings = get_settings()
    except ValidationError as exc:
        raise UsageError(f"invalid settings: {exc}") from exc
    try:
        serve(settings)
    except (MasterKeyError, KeystoreSchemaError, KeystreamError) as exc:
        # The start-up refusals (master key open to others or not matching the keystore, a database from a
        # newer release, a keystore that cannot be opened) say what to fix; a traceback would bury that.
        # Their messages name files and variables, never key material.
        _error(f"cannot start: {exc}")
        return EXIT_USAGE
    return EXIT_OK


def cmd_keys_create(args: argparse.Namespace) -> int:
    """``keys create``."""
    with _client(args) as client:
        key = client.create_key(
            args.name,
            key_type=args.key_type,
            segment_size=args.segment_size,
            deletion_allowed=args.deletion_allowed,
        )
    _print_key(key, args.json)
    return EXIT_OK


def _read_material(path: str, encoding: str) -> bytes:
    raw = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    try:
        if encoding == "base64":
            return base64.b64decode(raw.strip(), validate=True)
        if encoding == "hex":
            return bytes.fromhex(raw.decode("ascii").strip())
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise UsageError(f"key file is not valid {encoding}") from None
    return raw


def cmd_keys_import(args: argparse.Namespace) -> int:
    """``keys import``: material from a file or stdin, never from argv."""
    material = _read_material(args.file, args.encoding)
    if len(material) not in (16, 24, 32):
        raise UsageError(f"key material must be 16, 24 or 32 bytes, got {len(material)}")
    with _client(args) as client:
        key = client.import_key(
            args.name, material, segment_size=args.segment_size, deletion_allowed=args.deletion_allowed
        )
    _print_key(key, args.json)
    return EXIT_OK


def cmd_keys_list(args: argparse.Namespace) -> int:
    """``keys list``."""
    with _client(args) as client:
        keys = client.list_keys()
    if args.json:
        _print_json([key.to_json() for key in keys])
    elif keys:
        rows = [["NAME", "TYPE", "SEGMENT", "LATEST", "MIN_DECRYPT", "DELETABLE"]]
        rows += [
            [
                k.name,
                k.type,
                str(k.segment_size),
                str(k.latest_version),
                str(k.min_decryption_version),
                "yes" if k.deletion_allowed else "no",
            ]
            for k in keys
        ]
        _table(rows)
    return EXIT_OK


def cmd_keys_show(args: argparse.Namespace) -> int:
    """``keys show``."""
    with _client(args) as client:
        _print_key(client.get_key(args.name), args.json)
    return EXIT_OK


def cmd_keys_rotate(args: argparse.Namespace) -> int:
    """``keys rotate``."""
    with _client(args) as client:
        _print_key(client.rotate_key(args.name), args.json)
    return EXIT_OK


def cmd_keys_config(args: argparse.Namespace) -> int:
    """``keys config``."""
    if args.min_decryption_version is None and args.deletion_allowed is None:
        raise UsageError("nothing to change: give --min-decryption-version and/or --[no-]deletion-allowed")
    with _client(args) as client:
        key = client.configure_key(
            args.name,
            min_decryption_version=args.min_decryption_version,
            deletion_allowed=args.deletion_allowed,
        )
    _print_key(key, args.json)
    return EXIT_OK


def cmd_keys_delete(args: argparse.Namespace) -> int:
    """``keys delete``."""
    with _client(args) as client:
        client.delete_key(args.name)
    if args.json:
        _print_json({"deleted": args.name})
    return EXIT_OK


def cmd_tokens_create(args: argparse.Namespace) -> int:
    """``tokens create``: the secret goes to stdout (alone, unless --json)."""
    with _client(args) as client:
        token = client.create_token(args.scopes, args.key_patterns or ["*"], args.description)
    if args.json:
        _print_json({**token.to_json(), "token": token.token})
    else:
        print(token.token)
        print(f"token id {token.token_id}; scopes {','.join(token.scopes)}; shown only once", file=sys.stderr)
    return EXIT_OK


def cmd_tokens_list(args: argparse.Namespace) -> int:
    """``tokens list``."""
    with _client(args) as client:
        _print_tokens(client.list_tokens(), args.json)
    return EXIT_OK


def cmd_tokens_delete(args: argparse.Namespace) -> int:
    """``tokens delete``."""
    with _client(args) as client:
        client.delete_token(args.token_id)
    return EXIT_OK


def cmd_backends(args: argparse.Namespace) -> int:
    """``backends``: what ``GET /v1/backends`` reports, as a table or JSON."""
    with _client(args) as client:
        listing = client.backends()
    if args.json:
        _print_json(listing)
        return EXIT_OK
    rows = [["NAME", "AVAILABLE", "ENABLED", "DEFAULT", "DETAIL"]]
    for backend in listing.get("backends", []):
        detail = backend.get("isa") or backend.get("preset") or backend.get("reason") or ""
        flags = [("yes" if backend.get(flag) else "no") for flag in ("available", "enabled", "default")]
        rows.append([str(backend.get("name", "?")), *flags, str(detail)])
    _table(rows)
    return EXIT_OK


def _version() -> str:
    try:
        return importlib.metadata.version("keystream")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


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
    with _client(args) as client, _open_input(args.input) as source:
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


def cmd_bench(args: argparse.Namespace) -> int:
    """``bench``: run ``python -m bench.report`` from the source checkout."""
    root = Path(__file__).resolve().parent.parent
    if not (root / "bench" / "report.py").is_file():
        raise UsageError(f"`keystream bench` needs a source checkout with bench/report.py (looked in {root})")
    command = [sys.executable, "-m", "bench.report"]
    if args.quick:
        command.append("--quick")
    if args.report_only:
        command.append("--report-only")
    if args.results is not None:
        command += ["--results", str(args.results.resolve())]
    return subprocess.call(command, cwd=root)


# -- entry point -------------------------------------------------------------------------------------------
def _exit_code(exc: KeystreamAPIError) -> int:
    if exc.code == "decryption_failed":
        return EXIT_INTEGRITY
    return {401: EXIT_AUTH, 403: EXIT_AUTH, 404: EXIT_NOT_FOUND, 409: EXIT_CONFLICT}.get(
        exc.status, EXIT_API_ERROR
    )


def _error(message: str) -> None:
    print(f"keystream: error: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``keystream`` command line; returns the exit code (see the module docstring)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    if handler is cmd_crypto and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        return handler(args)
    except UsageError as exc:
        parser.print_usage(sys.stderr)
        _error(str(exc))
        return EXIT_USAGE
    except KeystreamAPIError as exc:
        _error(str(exc))
        return _exit_code(exc)
    except KeystreamStreamError as exc:
        _error(f"{exc}; output is incomplete and was discarded (stdout: discard what was written)")
        return EXIT_INTEGRITY
    except KeystreamConnectionError as exc:
        _error(f"cannot reach the service: {exc}")
        return EXIT_CONNECTION
    except (ValueError, TypeError) as exc:
        _error(str(exc))
        return EXIT_USAGE
    except BrokenPipeError:
        # The reader of stdout went away (e.g. `| head`): stop quietly, as other Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_IO
    except (OSError, KeystreamClientError) as exc:
        _error(str(exc))
        return EXIT_IO
    except TerminatedError:
        _error("terminated")
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        _error("interrupted")
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
