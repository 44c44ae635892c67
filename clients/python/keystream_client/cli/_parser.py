"""The ``keystream`` argument parser: every command, its flags and ``--help`` text."""

from __future__ import annotations

import argparse
import importlib.metadata
import re
from pathlib import Path
from typing import Any

from keystream_client._base import DEFAULT_URL
from keystream_client._calls import HASH_ALGORITHMS, HMAC_ALGORITHMS
from keystream_client._options import IV_SIZE
from keystream_client.cli._batch import BATCH_FIELDS, cmd_batch
from keystream_client.cli._commands import (
    cmd_backends,
    cmd_keys_backup,
    cmd_keys_config,
    cmd_keys_create,
    cmd_keys_delete,
    cmd_keys_export,
    cmd_keys_import,
    cmd_keys_import_version,
    cmd_keys_list,
    cmd_keys_restore,
    cmd_keys_rotate,
    cmd_keys_show,
    cmd_keys_trim,
    cmd_tokens_create,
    cmd_tokens_delete,
    cmd_tokens_list,
    cmd_tokens_renew,
    cmd_tokens_self,
)
from keystream_client.cli._datakey import cmd_datakey
from keystream_client.cli._login import cmd_login_cert, cmd_login_jwt
from keystream_client.cli._operator import (
    cmd_operator_rotate_master,
    cmd_operator_seal,
    cmd_operator_seal_status,
    cmd_operator_unseal,
)
from keystream_client.cli._roles import add_role_commands
from keystream_client.cli._tools import cmd_hash, cmd_hmac, cmd_random, cmd_verify
from keystream_client.cli._transfer import cmd_crypto

_PERIOD_HELP = (
    "rotate the key automatically once its latest version is this old: seconds or a duration such as 24h, "
    "1h30m or 7d: d, h, m, s each at most once, in that order (at least 1h; 0 = never)"
)

#: The service's sealed schemes (``app.core.schemes`` on the server; the client does not import the server).
SCHEMES = ("ctr-hmac", "gcm")
#: Key types ``keys create --type`` offers (the service's ``type``).
KEY_TYPES = ("aes128", "aes192", "aes256", "aes256-siv")
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([KMG]i?B?)?\s*$", re.IGNORECASE)


#: ``--wrapped`` on the import commands.
_WRAPPED_HELP = (
    "fetch the service's wrapping key and send the material wrapped under it (RSA-OAEP + AES key wrap, "
    "Vault's BYOK layout), never in clear; needs pip install 'keystream-client[wrapped]'"
)


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


def _iv(text: str) -> str:
    try:
        if len(bytes.fromhex(text)) == IV_SIZE:
            return text
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"not {IV_SIZE * 2} hex digits: {text!r}")


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
    group.add_argument(
        "--cacert", default=default, help="PEM CA bundle to verify the server with (env KEYSTREAM_CACERT)"
    )
    group.add_argument(
        "--client-cert", default=default, help="PEM client certificate for mTLS (env KEYSTREAM_CLIENT_CERT)"
    )
    group.add_argument(
        "--client-key",
        default=default,
        help="its PEM private key, unless in --client-cert's file (env KEYSTREAM_CLIENT_KEY)",
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
        description="Keystream: AES-CTR encryption as a service. Manage keys and tokens, encrypt and "
        "decrypt files (the server itself runs with `keystream-server serve`).",
        epilog="exit codes: 0 ok, 1 API error, 2 usage, 3 connection, 4 integrity/decryption failure, "
        "5 auth (401/403), 6 not found, 7 conflict, 8 local I/O, 9 some batch items failed, 130 interrupted, "
        "143 terminated",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    _client_options(parser)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    conn, as_json = _client_options(), _json_option()

    _add_key_commands(commands, conn, as_json)
    _add_token_commands(commands, conn, as_json)
    add_role_commands(commands, conn, as_json)
    for operation in ("encrypt", "decrypt", "rewrap"):
        _add_crypto_command(commands, conn, operation)
    _add_batch_command(commands, conn)
    _add_datakey_command(commands, conn, as_json)
    _add_tool_commands(commands, conn, as_json)

    _add_operator_commands(commands, conn, as_json)

    login = commands.add_parser("login", help="log in with a workload identity for a token")
    login.description = "Trade a workload identity for a token through a role (no token needed)."
    methods = login.add_subparsers(dest="login_method", metavar="METHOD", required=True)
    jwt = methods.add_parser("jwt", parents=[conn, as_json], help="log in with a JWT (Kubernetes, OIDC)")
    jwt.description = (
        "Log in with a JWT, such as a Kubernetes projected service-account token, through ROLE; the token is "
        "printed on stdout."
    )
    jwt.add_argument("--role", required=True, help="the role to log in through")
    jwt.add_argument(
        "--jwt-file",
        required=True,
        help="the file holding the JWT (e.g. /var/run/secrets/tokens/keystream; - for stdin)",
    )
    jwt.set_defaults(handler=cmd_login_jwt)
    cert = methods.add_parser(
        "cert", parents=[conn, as_json], help="log in with the mTLS client certificate (--client-cert)"
    )
    cert.description = (
        "Log in through ROLE with the client certificate given for mTLS (--client-cert, --client-key), which "
        "the service verifies in the TLS handshake; the token is printed on stdout."
    )
    cert.add_argument("--role", required=True, help="the cert role to log in through")
    cert.set_defaults(handler=cmd_login_cert)

    backends = commands.add_parser("backends", parents=[conn, as_json], help="list the service's backends")
    backends.description = "List the service's AES backends (for --backend): availability, ISA path, preset."
    backends.set_defaults(handler=cmd_backends)

    return parser


def _add_key_commands(commands: Any, conn: argparse.ArgumentParser, as_json: argparse.ArgumentParser) -> None:
    keys = commands.add_parser(
        "keys", help="create, import, list, show, rotate, import versions, trim, configure and delete keys"
    )
    keys.description = "Manage keys (admin scope needed except for list/show)."
    sub = keys.add_subparsers(dest="keys_command", metavar="ACTION", required=True)

    create = sub.add_parser("create", parents=[conn, as_json], help="create a key")
    create.description = "Create a key with server-generated material."
    create.add_argument("name")
    create.add_argument(
        "--type",
        dest="key_type",
        choices=KEY_TYPES,
        default="aes256",
        help="aes128/aes192/aes256: the sealed format; aes256-siv: deterministic AES-SIV for the batch "
        "commands (equal plaintexts give equal ciphertexts)",
    )
    create.add_argument(
        "--segment-size", type=parse_size, help="sealed segment size, e.g. 4KiB (default 1MiB)"
    )
    create.add_argument("--deletion-allowed", action="store_true", help="allow `keys delete` later")
    create.add_argument(
        "--scheme",
        choices=SCHEMES,
        help="sealed format: ctr-hmac (Tink AesCtrHmacStreaming, the service default) or gcm "
        "(Tink AesGcmHkdfStreaming); fixed for the key's life",
    )
    create.add_argument("--auto-rotate-period", metavar="PERIOD", help=_PERIOD_HELP)
    create.add_argument(
        "--derived", action="store_true", help="every operation needs a context (fixed for the key's life)"
    )
    create.add_argument(
        "--convergent-encryption",
        action="store_true",
        help="with --derived: Transit encryptions of equal plaintexts under one context are equal",
    )
    create.add_argument(
        "--exportable", action="store_true", help="the material may be exported (never undone)"
    )
    create.add_argument(
        "--allow-plaintext-backup", action="store_true", help="the key may be backed up (never undone)"
    )
    create.set_defaults(handler=cmd_keys_create)

    imp = sub.add_parser("import", parents=[conn, as_json], help="import key material from a file")
    imp.description = (
        "Import 16/24/32 bytes of key material (64 with --type aes256-siv) from FILE ('-' = stdin); the "
        "service must run with KEYSTREAM_ALLOW_KEY_IMPORT=true. Material never goes on the command line."
    )
    imp.add_argument("name")
    imp.add_argument("file", help="file holding the key ('-' = stdin)")
    imp.add_argument("--encoding", choices=("raw", "base64", "hex"), default="raw", help="file format")
    imp.add_argument("--segment-size", type=parse_size)
    imp.add_argument("--deletion-allowed", action="store_true")
    imp.add_argument("--scheme", choices=SCHEMES, help="sealed format, as for `keys create`")
    imp.add_argument(
        "--type",
        dest="key_type",
        choices=KEY_TYPES,
        help="the key's type (default: the AES type of the material's length; 64 bytes need aes256-siv)",
    )
    imp.add_argument("--auto-rotate-period", metavar="PERIOD", help=_PERIOD_HELP)
    imp.add_argument("--wrapped", action="store_true", help=_WRAPPED_HELP)
    imp.set_defaults(handler=cmd_keys_import)

    imp_version = sub.add_parser(
        "import-version", parents=[conn, as_json], help="add a key version with material from a file"
    )
    imp_version.description = (
        "Add a new version of key NAME whose material is read from --file ('-' = stdin); its length must "
        "match the key's type (16/24/32 bytes). It becomes the latest version. The service must run with "
        "KEYSTREAM_ALLOW_KEY_IMPORT=true. Material never goes on the command line."
    )
    imp_version.add_argument("name")
    imp_version.add_argument("--file", required=True, help="file holding the key ('-' = stdin)")
    imp_version.add_argument(
        "--encoding", choices=("raw", "base64", "hex"), default="raw", help="file format"
    )
    imp_version.add_argument("--wrapped", action="store_true", help=_WRAPPED_HELP)
    imp_version.set_defaults(handler=cmd_keys_import_version)

    trim = sub.add_parser("trim", parents=[conn, as_json], help="delete old key versions for good")
    trim.description = (
        "Delete every version of key NAME below --min-available-version, for good (it may not exceed the "
        "key's min decryption version). Idempotent."
    )
    trim.add_argument("name")
    trim.add_argument("--min-available-version", type=_positive, required=True)
    trim.set_defaults(handler=cmd_keys_trim)

    export = sub.add_parser("export", parents=[conn], help="print an exportable key's material")
    export.description = (
        'Print the material of key NAME (created or configured exportable) as JSON {"<version>": '
        '"<base64>"}: every remaining version, or --version (a number or latest). Needs the admin scope; '
        "what it prints is the key itself."
    )
    export.add_argument("name")
    export.add_argument("--version", help="a version number or latest (default: every version)")
    export.set_defaults(handler=cmd_keys_export)

    backup = sub.add_parser("backup", parents=[conn], help="print a key's backup blob")
    backup.description = (
        "Print the backup blob of key NAME (allow_plaintext_backup or exportable): its record and versions "
        "wrapped under the service's seal, restorable only under the same name into the same keystore (or a "
        "copy) while its master key generation is kept."
    )
    backup.add_argument("name")
    backup.set_defaults(handler=cmd_keys_backup)

    restore = sub.add_parser("restore", parents=[conn, as_json], help="restore a key from its backup blob")
    restore.description = "Restore the key a backup blob holds, under its own name."
    restore.add_argument("--file", required=True, help="file holding the blob ('-' = stdin)")
    restore.add_argument("--name", help="the key's name (must be the one the backup was made for)")
    restore.add_argument("--force", action="store_true", help="replace an existing key of that name")
    restore.set_defaults(handler=cmd_keys_restore)

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
        "config", parents=[conn, as_json], help="change min decryption version / deletion / auto-rotation"
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
    config.add_argument("--auto-rotate-period", metavar="PERIOD", help=_PERIOD_HELP)
    config.add_argument(
        "--exportable", action="store_true", help="let the key's material be exported (never undone)"
    )
    config.add_argument(
        "--allow-plaintext-backup", action="store_true", help="let the key be backed up (never undone)"
    )
    config.set_defaults(handler=cmd_keys_config)


def _add_token_commands(
    commands: Any, conn: argparse.ArgumentParser, as_json: argparse.ArgumentParser
) -> None:
    tokens = commands.add_parser(
        "tokens", help="create, list and delete API tokens (admin); show or renew your own"
    )
    tokens.description = (
        "Manage bearer tokens: create, list and delete need the admin scope; self and renew work with any "
        "valid token."
    )
    sub = tokens.add_subparsers(dest="tokens_command", metavar="ACTION", required=True)

    create = sub.add_parser("create", parents=[conn, as_json], help="create a token (printed once)")
    create.description = "Create a token; the secret is printed once on stdout."
    create.add_argument(
        "--scope",
        dest="scopes",
        action="append",
        required=True,
        choices=("admin", "encrypt", "decrypt", "rewrap", "hmac", "verify"),
    )
    create.add_argument("--key-pattern", dest="key_patterns", action="append", help="glob (default *)")
    create.add_argument("--description", default="")
    create.add_argument("--ttl", type=_positive, help="seconds until the token expires (default: never)")
    create.add_argument(
        "--max-ttl",
        type=_positive,
        help="seconds after creation beyond which no renewal goes (default: --ttl)",
    )
    create.set_defaults(handler=cmd_tokens_create)

    listing = sub.add_parser("list", parents=[conn, as_json], help="list tokens (never secrets)")
    listing.description = "List tokens."
    listing.set_defaults(handler=cmd_tokens_list)

    delete = sub.add_parser("delete", parents=[conn], help="revoke a token")
    delete.description = "Revoke a token by id."
    delete.add_argument("token_id")
    delete.set_defaults(handler=cmd_tokens_delete)

    own = sub.add_parser("self", parents=[conn, as_json], help="show the token in use (no admin needed)")
    own.description = "Show the metadata of the token in use: scopes, key patterns, expiry."
    own.set_defaults(handler=cmd_tokens_self)

    renew = sub.add_parser("renew", parents=[conn, as_json], help="extend the token in use (no admin needed)")
    renew.description = (
        "Extend the expiry of the token in use to now + TTL seconds (default: its ttl at creation), never "
        "past its max_expires_at."
    )
    renew.add_argument("--ttl", type=_positive, help="seconds from now (default: the token's ttl)")
    renew.set_defaults(handler=cmd_tokens_renew)


_CRYPTO_HELP = {
    "encrypt": (
        "encrypt a file, stdin or a small --value (streaming)",
        "Sealed (default) is authenticated; raw is plain AES-CTR and prints the iv and key version needed to "
        "decrypt on stderr. Or encrypt a small text given as --value and print the ciphertext as base64.",
        "a UTF-8 text to encrypt; prints base64 ciphertext (visible in ps: not for secrets)",
        "ciphertext",
    ),
    "decrypt": (
        "decrypt a file, stdin or a small --value (streaming)",
        "Sealed (default) is authenticated; raw is plain AES-CTR. Or decrypt a small base64 --value and "
        "print the plaintext as UTF-8 text.",
        "base64 ciphertext to decrypt; prints the plaintext (UTF-8 text)",
        "plaintext",
    ),
    "rewrap": (
        "seal a sealed file again under the key's latest version (streaming; the plaintext stays in the "
        "service)",
        "IN is a sealed ciphertext of --key under any version the key still decrypts (or --key-version's); "
        "OUT gets the same plaintext sealed under the latest version, with the same associated data. The "
        "token needs the rewrap scope (or encrypt and decrypt). Or rewrap a base64 --value and print the "
        "new ciphertext as base64.",
        "base64 sealed ciphertext to rewrap; prints the new ciphertext (base64)",
        "ciphertext",
    ),
}


def _add_crypto_command(commands: Any, conn: argparse.ArgumentParser, operation: str) -> None:
    summary, details, value_help, output_field = _CRYPTO_HELP[operation]
    command = commands.add_parser(operation, parents=[conn], help=summary)
    command.description = (
        f"Stream IN through the service's {operation} into OUT ('-' = stdin/stdout). A file OUT appears only "
        f"when the whole transfer succeeded. {details}"
    )
    command.add_argument("input", metavar="IN", nargs="?")
    command.add_argument("output", metavar="OUT", nargs="?")
    command.add_argument("--value", help=f"instead of IN and OUT: {value_help}")
    command.add_argument(
        "--json",
        action="store_true",
        help=f"with --value: print {{key, key_version, {output_field}}} as JSON, base64 inside",
    )
    command.add_argument("--key", required=True, help="key name")
    if operation != "rewrap":
        command.add_argument("--format", choices=("sealed", "raw"), default="sealed")
        command.add_argument(
            "--iv",
            type=_iv,
            help="raw: 32 hex digits" + (" (default random)" if operation == "encrypt" else ""),
        )
        command.add_argument(
            "--offset", type=_non_negative, default=0, help="raw: stream position of IN's first byte"
        )
    ad = command.add_mutually_exclusive_group()
    sealed = "" if operation == "rewrap" else "sealed: "
    ad.add_argument("--associated-data", help=f"{sealed}associated data (UTF-8 text)")
    ad.add_argument("--associated-data-file", type=Path, help=f"{sealed}associated data from a file")
    command.add_argument(
        "--key-version",
        type=_positive,
        help="the version IN was sealed under (default: try every version the key decrypts)"
        if operation == "rewrap"
        else "key version (raw decrypt: required)",
    )
    command.add_argument(
        "--backend",
        help="service backend: aesni, python or hwsim (python is NOT constant-time: avoid it for real keys)",
    )
    command.add_argument("--force", action="store_true", help="overwrite OUT if it exists")
    command.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    command.set_defaults(handler=cmd_crypto, operation=operation, format="sealed", iv=None, offset=0)


def _add_batch_command(commands: Any, conn: argparse.ArgumentParser) -> None:
    batch = commands.add_parser(
        "batch", help="encrypt, decrypt or rewrap many small items from a JSON-lines file"
    )
    batch.description = "Encrypt, decrypt or rewrap a JSON-lines file through the service's batch routes."
    sub = batch.add_subparsers(dest="batch_command", metavar="ACTION", required=True)
    for operation, (field, output) in BATCH_FIELDS.items():
        command = sub.add_parser(
            operation, parents=[conn], help=f"{operation} every line of a JSON-lines file"
        )
        command.description = (
            f"Each line of INPUT is a JSON object with base64 {field!r} and optional base64 "
            "'associated_data' ('reference' is copied, other fields ignored). Each output line has the "
            f"input's 'line' number and base64 {output!r} with 'key_version', or 'error'. Failed lines do "
            "not stop the batch; the exit code is then 9. Requests are split to fit the service's limits."
        )
        command.add_argument("--key", required=True, help="key name")
        command.add_argument("--input", required=True, help="JSON-lines file ('-' = stdin)")
        command.add_argument("--output", default="-", help="JSON-lines file (default '-' = stdout)")
        command.add_argument(
            "--key-version",
            type=_positive,
            help="the version the items were sealed under" if operation == "rewrap" else "key version",
        )
        command.add_argument("--backend", help="service backend: aesni, python or hwsim")
        command.add_argument("--force", action="store_true", help="overwrite OUTPUT if it exists")
        command.set_defaults(handler=cmd_batch, operation=operation)


def _add_datakey_command(
    commands: Any, conn: argparse.ArgumentParser, as_json: argparse.ArgumentParser
) -> None:
    command = commands.add_parser(
        "datakey",
        parents=[conn, as_json],
        help="generate a sealed data key (envelope encryption)",
    )
    command.description = (
        "Generate a random data key and print it sealed under --key's latest version (ciphertext, base64; "
        "`decrypt` opens it) and, unless --no-plaintext, the data key itself (plaintext, base64). The token "
        "needs the encrypt scope, and decrypt too for the plaintext."
    )
    command.add_argument("--key", required=True, help="key name")
    command.add_argument(
        "--type", dest="key_type", choices=("aes128", "aes256"), default="aes256", help="data key size"
    )
    command.add_argument(
        "--no-plaintext", action="store_true", help="print only the sealed data key (encrypt scope only)"
    )
    ad = command.add_mutually_exclusive_group()
    ad.add_argument("--associated-data", help="associated data (UTF-8 text); decrypt needs the same")
    ad.add_argument("--associated-data-file", type=Path, help="associated data from a file")
    command.set_defaults(handler=cmd_datakey)


def _data_source(command: argparse.ArgumentParser) -> None:
    source = command.add_mutually_exclusive_group(required=True)
    source.add_argument("input", nargs="?", metavar="INPUT", help="file with the data, or - for stdin")
    source.add_argument("--value", help="the data inline (UTF-8 text)")


def _add_tool_commands(
    commands: Any, conn: argparse.ArgumentParser, as_json: argparse.ArgumentParser
) -> None:
    algorithms = HMAC_ALGORITHMS
    made = commands.add_parser("hmac", parents=[conn, as_json], help="the HMAC of data under a key")
    made.description = (
        "Print the HMAC of INPUT (or --value) under --key's latest version (or --key-version) as "
        "ks:v<version>:<base64>. The HMAC key is derived from the version's material and stays in the "
        "service. The token needs the hmac scope. Data up to about 48 KiB (the service's JSON body limit)."
    )
    made.add_argument("--key", required=True, help="key name")
    made.add_argument(
        "--algorithm", choices=algorithms, default="sha2-256", help="HMAC hash (default sha2-256)"
    )
    made.add_argument("--key-version", type=int, help="key version (default: latest)")
    _data_source(made)
    made.set_defaults(handler=cmd_hmac)
    check = commands.add_parser("verify", parents=[conn, as_json], help="check an HMAC made by `hmac`")
    check.description = (
        "Check that --hmac is the HMAC of INPUT (or --value) under the key version it names: prints valid "
        "(exit 0) or invalid (exit 4). The token needs the verify scope."
    )
    check.add_argument("--key", required=True, help="key name")
    check.add_argument("--hmac", required=True, help="the tag, ks:v<version>:<base64>")
    check.add_argument(
        "--algorithm", choices=algorithms, default="sha2-256", help="HMAC hash (default sha2-256)"
    )
    _data_source(check)
    check.set_defaults(handler=cmd_verify)
    rand = commands.add_parser("random", parents=[conn], help="random bytes from the service's CSPRNG")
    rand.description = (
        "Print --bytes (1-65536, default 32) random bytes from the service as base64 (or --hex)."
    )
    rand.add_argument("--bytes", type=int, default=32, help="how many (1-65536)")
    rand.add_argument("--hex", action="store_true", help="print hex instead of base64")
    rand.set_defaults(handler=cmd_random)
    digest = commands.add_parser(
        "hash", parents=[conn], help="a SHA-2 or SHA-3 digest computed by the service"
    )
    digest.description = "Print the digest of INPUT (or --value) as hex (or --base64)."
    digest.add_argument(
        "--algorithm",
        choices=HASH_ALGORITHMS,
        default="sha2-256",
        help="digest (default sha2-256)",
    )
    digest.add_argument("--base64", action="store_true", help="print base64 instead of hex")
    _data_source(digest)
    digest.set_defaults(handler=cmd_hash)


def _add_operator_commands(
    commands: Any, conn: argparse.ArgumentParser, as_json: argparse.ArgumentParser
) -> None:
    operator = commands.add_parser(
        "operator", help="a replica's seal (unseal it with shares, or seal it) and the master key's rotation"
    )
    operator.description = (
        "The seal of the server at --url (one replica: unseal each replica in turn). A server with the "
        "shamir seal starts sealed and answers 503 sealed until the threshold of shares is given. "
        "rotate-master rotates the master key of the whole keystore (every replica)."
    )
    sub = operator.add_subparsers(dest="operator_command", metavar="ACTION", required=True)
    unseal = sub.add_parser("unseal", parents=[conn], help="give unseal shares (prompted without echo)")
    unseal.description = (
        "Give the server unseal shares: prompted without echo on a terminal (an empty answer stops), else "
        "read one a line from stdin. A refused share is reported and the next one asked for. No token "
        "needed. Exit code 0 once unsealed, 1 when the shares ran out first."
    )
    unseal.add_argument("--reset", action="store_true", help="forget the shares given so far first")
    unseal.set_defaults(handler=cmd_operator_unseal)
    status = sub.add_parser("seal-status", parents=[conn, as_json], help="sealed or not, and the progress")
    status.set_defaults(handler=cmd_operator_seal_status)
    seal = sub.add_parser("seal", parents=[conn], help="seal the server (admin token): its key is wiped")
    seal.set_defaults(handler=cmd_operator_seal)
    rotate = sub.add_parser(
        "rotate-master",
        parents=[conn, as_json],
        help="rotate the master key (admin token): new key versions wrapped under a new generation at once, "
        "every stored secret rewrapped in the background",
    )
    rotate.description = (
        "Have the server make a new master key generation under its seal and rewrap every stored secret in "
        "batches while it keeps serving (ciphertexts are untouched); an unfinished rotation is resumed. "
        "Exit code 1 (master_rotation_running) while another rotation holds its lease."
    )
    rotate.add_argument(
        "--batch-size", type=int, default=None, metavar="N", help="key versions rewrapped per transaction"
    )
    rotate.add_argument("--wait", action="store_true", help="follow the rotation until it finished")
    rotate.set_defaults(handler=cmd_operator_rotate_master)


def _version() -> str:
    """The installed ``keystream-client`` version."""
    try:
        return importlib.metadata.version("keystream-client")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"
