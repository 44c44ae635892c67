"""The shape of a master key: 32 random bytes, written as base64 (standard or URL-safe alphabet).

One home for the settings check (``KEYSTREAM_MASTER_KEY``) and the keystore, which reads it from the
environment or ``master.key`` (:mod:`app.keystore.master`). Messages never echo the value. Base64 text of
other key material (an imported key version) is decoded the same way, straight into locked memory
(:func:`decode_secret_base64`).
"""

from __future__ import annotations

import re
from pathlib import Path

from app.core.secret_memory import SLOT_SIZE, secret_buffer

__all__ = [
    "GENERATE_HINT",
    "MASTER_KEY_SIZE",
    "MasterKeyError",
    "check_master_key_source",
    "decode_secret_base64",
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


_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
#: Sextet of each base64 character; ``-`` and ``_`` are the URL-safe alphabet's ``+`` and ``/``.
_SEXTETS = {character: index for index, character in enumerate(_ALPHABET + "+/")} | {"-": 62, "_": 63}
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]*={0,2}")
_STANDARD_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")


def parse_master_key(value: str, source: str) -> memoryview:
    """Decode a base64 (standard or URL-safe alphabet) master key into locked memory.

    The bytes are written straight into a :class:`~app.core.secret_memory.SecretBuffer`, a few bits at a
    time: no ``bytes`` object ever holds the key (``base64.b64decode`` would leave one in freed memory).
    Returns a read-only view of it (equal to the key's ``bytes``); the memory is zeroed when the last view
    is dropped.

    Args:
        value: the text, surrounding whitespace allowed.
        source: where it came from, for the error message (``"KEYSTREAM_MASTER_KEY"``, a file path).

    Raises:
        MasterKeyError: not base64, or not 32 bytes once decoded. The message never echoes the value.
    """
    text = value.strip()
    if _BASE64.fullmatch(text) is None or len(text) % 4 or "=" in text.rstrip("="):
        raise MasterKeyError(
            f"the master key in {source} is not valid base64; it must be the base64 encoding of "
            f"{MASTER_KEY_SIZE} random bytes, e.g. from: {GENERATE_HINT}"
        )
    padding = len(text) - len(text.rstrip("="))
    length = len(text) // 4 * 3 - padding
    if length != MASTER_KEY_SIZE:
        raise MasterKeyError(
            f"the master key in {source} decodes to {length} bytes; it must be {MASTER_KEY_SIZE} "
            f"random bytes, base64-encoded, e.g. from: {GENERATE_HINT}"
        )
    return _decode_into_secret(text, MASTER_KEY_SIZE)


def _decode_into_secret(text: str, length: int) -> memoryview:
    """Valid base64 ``text`` of ``length`` bytes decoded into a new secret buffer, a few bits at a time."""
    key = secret_buffer(length)
    view = key.view()
    position = 0
    for start in range(0, len(text), 4):
        group = 0
        for character in text[start : start + 4]:
            group = group << 6 | _SEXTETS.get(character, 0)
        for shift in (16, 8, 0):
            if position < length:
                view[position] = group >> shift & 0xFF
                position += 1
    return key.readonly()


def decode_secret_base64(text: str) -> memoryview:
    """Decode standard, padded base64 of 1 to 64 bytes of key material straight into locked memory.

    Accepts what ``base64.b64decode(text, validate=True)`` accepts, but no ``bytes`` object ever holds the
    result. Returns a read-only view of a :class:`~app.core.secret_memory.SecretBuffer`, zeroed when the last
    view is dropped.

    Raises:
        ValueError: not standard padded base64, or not 1 to 64 bytes once decoded. The message never echoes
            the text.
    """
    if _STANDARD_BASE64.fullmatch(text) is None or len(text) % 4:
        raise ValueError("not standard base64 (A-Z, a-z, 0-9, +, / and = padding)")
    length = len(text) // 4 * 3 - (len(text) - len(text.rstrip("=")))
    if not 1 <= length <= SLOT_SIZE:
        raise ValueError(f"base64 of 1 to {SLOT_SIZE} bytes expected, got {length} bytes")
    return _decode_into_secret(text, length)


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
