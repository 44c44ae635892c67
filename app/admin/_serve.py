"""``keystream-server serve``: flags become ``KEYSTREAM_*`` settings, then :func:`app.server.serve` runs."""

from __future__ import annotations

import argparse
import os
from typing import Any

from app.admin._common import EXIT_OK, EXIT_USAGE, error, non_negative, positive

#: Flag (argparse dest) -> setting (``KEYSTREAM_<name>``).
_FLAG_SETTINGS = (
    ("host", "HOST"),
    ("port", "PORT"),
    ("workers", "WORKERS"),
    ("data_dir", "DATA_DIR"),
    ("backend", "DEFAULT_BACKEND"),
)


def add_parser(commands: Any) -> None:
    """Register ``serve`` on the ``keystream-server`` subcommands."""
    serve = commands.add_parser("serve", help="run the service (what `make run` calls)")
    serve.description = "Run the Keystream service; flags override KEYSTREAM_* settings."
    serve.add_argument("--host", help="listen address (KEYSTREAM_HOST, default 127.0.0.1)")
    serve.add_argument("--port", type=non_negative, help="listen port (KEYSTREAM_PORT, default 8000)")
    serve.add_argument(
        "--workers",
        type=positive,
        help="worker processes (KEYSTREAM_WORKERS, default: the CPUs this process may run on, at most 64)",
    )
    serve.add_argument("--data-dir", help="keystore directory (KEYSTREAM_DATA_DIR, default ./data)")
    serve.add_argument(
        "--backend",
        help="default backend: aesni, python or hwsim (KEYSTREAM_DEFAULT_BACKEND). python is NOT "
        "constant-time (cache-timing exposure): disable it with KEYSTREAM_ENABLED_BACKENDS=aesni",
    )
    serve.set_defaults(handler=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    """Bootstrap (first start prints the root token once) and serve until interrupted.

    Returns:
        ``EXIT_OK`` after a normal shutdown; ``EXIT_USAGE`` after one error line (no traceback, no usage
        line) when a ``KEYSTREAM_*`` setting or flag is invalid (it names the variable, never a secret value),
        the master key, the data directory, the keystore or a TLS file is unusable, the listening address is
        in use, plain HTTP would listen on a non-loopback address, or anything else raises
        :class:`app.errors.StartupRefusedError`.
    """
    for flag, env in _FLAG_SETTINGS:
        value = getattr(args, flag)
        if value is not None:
            os.environ[f"KEYSTREAM_{env}"] = str(value)
    # Imported here so `keystream-server --help` stays fast and works when a setting is broken.
    from pydantic import ValidationError

    from app.core.config import describe_settings_error, get_settings
    from app.errors import KeystreamError, StartupRefusedError
    from app.keystore import KeystoreSchemaError, MasterKeyError
    from app.server import serve

    try:
        get_settings.cache_clear()
        settings = get_settings()
    except ValidationError as exc:
        error(f"cannot start: invalid settings: {describe_settings_error(exc)}")
        return EXIT_USAGE
    try:
        serve(settings)
    except (MasterKeyError, KeystoreSchemaError, KeystreamError, StartupRefusedError) as exc:
        # Every refused start (StartupRefusedError from any layer: a TLS file, plain HTTP beyond loopback, the
        # address in use; the master key open to others or not matching the keystore, a database from a newer
        # release, a keystore that cannot be opened) says what to fix; a traceback would bury that.
        # Their messages name files and variables, never key material.
        error(f"cannot start: {exc}")
        return EXIT_USAGE
    return EXIT_OK
