"""The shape of a master key: 32 random bytes, written as base64 (standard or URL-safe alphabet).

One home for the settings check (``KEYSTREAM_MASTER_KEY``) and the keystore, which reads it from the
environment or ``master.key`` (:mod:`app.keystore.master`). Messages never echo the value.
"""

from __future__ import annotations

import base64
import binascii

__all__ = ["GENERATE_HINT", "MASTER_KEY_SIZE", "MasterKeyError", "parse_master_key"]

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
