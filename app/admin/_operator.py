"""``keystream-server operator init``: put the keystore under the configured seal.

``init`` opens the seal ``KEYSTREAM_SEAL`` selects, creating what it needs: for ``pkcs11`` the master key in
the token (AES-256, generated inside it, non-extractable and sensitive) when no key has
``KEYSTREAM_PKCS11_KEY_LABEL``; for ``file`` ``data/master.key`` when no key is given. It then opens the
keystore with that seal, which records the seal's check value (and, for a seal that cannot derive keys, the
audit keys' material wrapped under it) on first use. A keystore already sealed by another seal or master key
is refused and nothing is written. Running it again is harmless.

With ``KEYSTREAM_AUDIT_LOG`` set, the operation is recorded in the log's own file (the setting's path, beside
the workers' ``.w<i>`` files), chained and verified like every other line.

Exit codes: 0 done; 1 the keystore cannot serve (database down); 2 bad settings, or a seal or keystore that
refuses (one line naming the setting, never a PIN or key bytes).
"""

from __future__ import annotations

import argparse
import datetime
import logging
from typing import TYPE_CHECKING, Any

from app.admin._common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, error

if TYPE_CHECKING:
    from app.core.config import Settings
    from app.keystore import KeyStore
    from app.seal import Seal

__all__ = ["add_parser", "cmd_init", "write_operator_record"]


def add_parser(commands: Any) -> None:
    """Register ``operator init`` on the ``keystream-server`` subcommands."""
    operator = commands.add_parser("operator", help="the root of trust: initialise the keystore's seal")
    actions = operator.add_subparsers(dest="operator_command", metavar="ACTION", required=True)
    init = actions.add_parser(
        "init",
        help="create the seal's master key if absent and seal the keystore with it",
        description="Open the seal KEYSTREAM_SEAL selects (pkcs11: create the AES-256 master key inside the "
        "token when no key has KEYSTREAM_PKCS11_KEY_LABEL; file: data/master.key when no key is given), then "
        "open the keystore with it, recording its check value. Refuses a keystore sealed by another seal.",
        epilog="exit codes: 0 done, 1 keystore unavailable, 2 bad settings or a refused seal or keystore",
    )
    init.set_defaults(handler=cmd_init)


def _quiet_store_logs() -> None:
    """The error line says it once; the stores' connection warnings would repeat it over several lines."""
    for name in ("psycopg", "app.keystore.postgres", "app.keystore.sqlite"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def write_operator_record(settings: Settings, keystore: KeyStore, seal: Seal, record: dict[str, Any]) -> None:
    """Append an operator ``record`` to the audit log's own file, when ``audit_log`` is set.

    The chain key is the keystore's audit key (:func:`app.audit.audit_keys_for`), so ``audit verify`` checks
    these lines with the workers'.

    Raises:
        AuditUnavailableError: the line cannot be written.
    """
    from app.audit import AuditLog, audit_keys_for, worker_path

    if settings.audit_log is None:
        return
    keys = audit_keys_for(seal, keystore.audit_key_material())
    log = AuditLog(worker_path(settings.audit_log, None), keys.chain_key)
    try:
        now = datetime.datetime.now(datetime.UTC).isoformat().replace("+00:00", "Z")
        log.write({"time": now, "type": "operator", **record})
    finally:
        log.close()


def cmd_init(args: argparse.Namespace) -> int:
    """Run ``operator init`` (see the module docstring for what it does and its exit codes)."""
    from pydantic import ValidationError

    from app.core.config import describe_settings_error, get_settings
    from app.errors import KeystreamError
    from app.keystore import KeystoreSchemaError, MasterKeyError, open_keystore_for
    from app.seal.file import open_file_seal

    _quiet_store_logs()
    try:
        get_settings.cache_clear()
        settings = get_settings()
    except ValidationError as exc:
        error(f"cannot init: invalid settings: {describe_settings_error(exc)}")
        return EXIT_USAGE
    created = False
    try:
        seal: Seal
        if settings.seal == "pkcs11":
            from app.seal.pkcs11 import open_pkcs11_seal

            pkcs11_seal = open_pkcs11_seal(settings, create_key=True)
            created, seal = pkcs11_seal.created_key, pkcs11_seal
        else:
            seal = open_file_seal(settings, create=True)
        try:
            keystore = open_keystore_for(settings, seal)
            try:
                write_operator_record(
                    settings,
                    keystore,
                    seal,
                    {
                        "operation": "init",
                        "seal": seal.kind,
                        "generation": seal.generation,
                        "key_created": created,
                    },
                )
            finally:
                keystore.close()
        finally:
            seal.close()
    except (MasterKeyError, KeystoreSchemaError, ValueError) as exc:
        error(f"cannot init: {exc}")
        return EXIT_USAGE
    except KeystreamError as exc:
        error(f"cannot init: {exc}")
        return EXIT_FAILED
    made = "created the master key in it" if created else "its master key was already there"
    print(f"initialised: the keystore is sealed by {seal.describe()}; {made}")
    return EXIT_OK
