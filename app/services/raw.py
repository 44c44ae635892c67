"""Raw CTR's request parameters, as the streaming routes take them: the IV and the keystream range.

The HTTP layer reaches the raw format (:mod:`app.formats.raw`) through this module only, as it reaches the
sealed format through :mod:`app.services.sealing` and :mod:`app.services.keys`: ``app/api`` imports no
format, no key cache and no aescore (``tests/app/test_layers.py``).
"""

from __future__ import annotations

from aescore import MAX_STREAM_LENGTH
from app.formats.raw import check_range, format_iv, new_iv, parse_iv

#: The largest ``offset`` a raw request may start at (a stream position is below 2**64).
MAX_OFFSET = MAX_STREAM_LENGTH - 1

__all__ = ["MAX_OFFSET", "check_range", "format_iv", "new_iv", "parse_iv"]
