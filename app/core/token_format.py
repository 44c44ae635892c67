"""The shape of a bearer token, ``ks_<id>_<secret>``: one home for the settings check and the verifier.

Also the bounds of a token's lifetime (``ttl`` and ``max_ttl``, in seconds), shared by the API's request
models and the keystore's record check.
"""

from __future__ import annotations

import re

TOKEN_PREFIX = "ks_"  # noqa: S105 (a prefix, not a secret)
#: Shortest ``ttl`` / ``max_ttl`` of a token, in seconds.
MIN_TOKEN_TTL_SECONDS = 1
#: Longest ``ttl`` / ``max_ttl`` of a token, in seconds (10 years of 365 days).
MAX_TOKEN_TTL_SECONDS = 10 * 365 * 86_400
_ID_PATTERN = r"[0-9a-f]{4,32}"
_SECRET_PATTERN = r"[A-Za-z0-9_-]{16,128}"  # noqa: S105 (a pattern, not a secret)
_TOKEN_RE = re.compile(rf"^ks_({_ID_PATTERN})_({_SECRET_PATTERN})$")
#: An ``Authorization`` value of the usual shape, matched whole (``fullmatch``): ``Bearer`` in any case, one
#: space, then a well-formed token with any whitespace (``str.isspace``'s, as ``str.strip`` removes) around
#: it; groups: id and secret. Every value it matches, the step-by-step reading of a bearer header (split at
#: the first space, the scheme compared in lower case, the rest stripped and given to :func:`parse_token`)
#: reads as the same id and secret; the values it does not match are left to that reading, which says what
#: is wrong with them.
BEARER_TOKEN_RE = re.compile(rf"[Bb][Ee][Aa][Rr][Ee][Rr] \s*ks_({_ID_PATTERN})_({_SECRET_PATTERN})\s*")


def parse_token(token: str) -> tuple[str, str] | None:
    """Split ``ks_<id>_<secret>`` into ``(id, secret)``; ``None`` when malformed."""
    match = _TOKEN_RE.match(token)
    if match is None:
        return None
    return match.group(1), match.group(2)
