"""The sealed format's schemes: which Tink streaming AEAD a key's ``format=sealed`` ciphertexts use.

A key's scheme is chosen when the key is created and never changes: its material then only ever keys one
primitive (changing scheme means creating a new key). Both schemes share the segment layout (header, segments
of the key's ``segment_size``, last-segment flag in the nonce) and HKDF-SHA256 with the associated data as
``info``; they differ in the per-segment primitive:

* ``ctr-hmac``: Tink's ``AesCtrHmacStreaming`` (AES-CTR, then HMAC-SHA256 with a 32-byte tag). The default,
  and the only scheme of keys created before schemes existed.
* ``gcm``: Tink's ``AesGcmHkdfStreaming`` (AES-GCM with a 16-byte tag).
"""

from __future__ import annotations

from typing import Final, Literal, get_args

__all__ = ["CTR_HMAC", "DEFAULT_SCHEME", "GCM", "SCHEMES", "Scheme"]

#: A scheme name, for type annotations and the API's request schema; :data:`SCHEMES` is derived from it.
Scheme = Literal["ctr-hmac", "gcm"]

#: Tink ``AesCtrHmacStreaming``.
CTR_HMAC: Final = "ctr-hmac"
#: Tink ``AesGcmHkdfStreaming``.
GCM: Final = "gcm"
#: Every scheme, the default first.
SCHEMES: Final[tuple[str, ...]] = get_args(Scheme)
#: The scheme of a key created without one (and of every key stored before schemes existed).
DEFAULT_SCHEME: Final = CTR_HMAC
