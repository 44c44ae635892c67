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
_TOKEN_RE = re.compile(r"^ks_([0-9a-f]{4,32})_([A-Za-z0-9_-]{16,128})$")


def parse_token(token: str) -> tuple[str, str] | None:
    """Split ``ks_<id>_<secret>`` into ``(id, secret)``; ``None`` when malformed."""
    match = _TOKEN_RE.match(token)
    if match is None:
        return None
    return match.group(1), match.group(2)
