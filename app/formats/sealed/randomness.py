"""Where the sealed format's salts and nonce prefixes come from: the OS CSPRNG, in one place.

The streaming encryptor and the batch sealer both draw through :data:`random_bytes`, looked up on this
module at each call, so a test that replaces it (to get reproducible ciphertexts) replaces it for both. The
native batch core takes these bytes as an argument and has no entropy source of its own.
"""

from __future__ import annotations

import os
from collections.abc import Callable

__all__ = ["random_bytes"]

#: Fresh random bytes from the OS CSPRNG (:func:`os.urandom`); call it as ``randomness.random_bytes(n)``.
random_bytes: Callable[[int], bytes] = os.urandom
