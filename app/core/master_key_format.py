"""The shape of a master key: 32 random bytes, written as base64 (standard or URL-safe alphabet).

One home for the settings check (``KEYSTREAM_MASTER_KEY``) and the keystore, which reads it from the
environment or ``master.key`` (:mod:`app.keystore.master`). Messages never echo the value.
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path

__all__ = [
    "GENERATE_HINT",
    "MASTER_KEY_SIZE",
    "MasterKeyError",
    "check_master_key_source",
    "parse_master_key",
]

MASTER_KEY_SIZE = 32
#: How to make a master key (quoted in error messages).
GENERATE_HINT = (
    "python3 -c 'import base64,secrets; print(base64.b64encode(secrets.token_bytes(32)).decode())'"
)


class MasterKeyError(RuntimeError):
    """The master key or the data directory is unusable (bad value, bad permissions, wrong key).

    Raised at start-up; the message says what to fix and never contains key bytes.
    """


def parse_master_key(value: str, source: str) -> bytes:
    """Decode a base64 (standard or URL-safe alphabet) master key.

    Args:
        value: the text, surrounding whitespace allowed.
        source: where it came from, for the error message (``"KEYSTREAM_MASTER_KEY"``, a file path).

    Raises:
        MasterKeyError: not base64, or not 32 bytes once decoded. The message never echoes the value.
    """
    text = value.strip()
    decoded: bytes | None = None
    for altchars in (None, b"-_"):
        try:
            decoded = base64.b64decode(text, altchars=altchars, validate=True)
            break
        except (binascii.Error, ValueError):
            continue
    if decoded is None:
        raise MasterKeyError(
            f"the master key in {source} is not valid base64; it must be the base64 encoding of "
            f"{MASTER_KEY_SIZE} random bytes, e.g. from: {GENERATE_HINT}"
        )
    if len(decoded) != MASTER_KEY_SIZE:
        raise MasterKeyError(
            f"the master key in {source} decodes to {len(decoded)} bytes; it must be {MASTER_KEY_SIZE} "
            f"random bytes, base64-encoded, e.g. from: {GENERATE_HINT}"
        )
    return decoded


def check_master_key_source(env_value: str | None, key_file: Path | None, *, shared_database: bool) -> None:
    """Check that the master key comes from exactly one place, and from an explicit one for a shared database.

    Args:
        env_value: ``KEYSTREAM_MASTER_KEY``, or ``None``/empty.
        key_file: ``KEYSTREAM_MASTER_KEY_FILE``, or ``None``.
        shared_database: the keystore is a database several replicas share (PostgreSQL). Each replica
            would otherwise generate its own ``master.key`` and the others could not unwrap its keys.

    Raises:
        MasterKeyError: both are set, or ``shared_database`` and neither is set.
    """
    has_env = env_value is not None and bool(env_value.strip())
    if has_env and key_file is not None:
        raise MasterKeyError("set only one of KEYSTREAM_MASTER_KEY and KEYSTREAM_MASTER_KEY_FILE")
    if shared_database and not has_env and key_file is None:
        raise MasterKeyError(
            "with KEYSTREAM_DATABASE_URL (a PostgreSQL keystore shared by replicas) the master key must be "
            "given: set KEYSTREAM_MASTER_KEY or KEYSTREAM_MASTER_KEY_FILE, the same on every replica"
        )
