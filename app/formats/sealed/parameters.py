"""What the sealed format needs to know of a key besides its material, as one checked object.

Every version of a key shares its key type, segment size and scheme, so a caller builds one
:class:`KeyParameters` per key (the key cache keeps it with each resolved version) and hands it to every
encryptor, decryptor and batch call, instead of the three values apart. They are checked once, here, not on
every message.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.core.schemes import DEFAULT_SCHEME

from .format import ciphertext_length, derived_key_size_of, header_length, validate_segment_size
from .lengths import plaintext_length

__all__ = ["KeyParameters"]


@dataclass(frozen=True, slots=True)
class KeyParameters:
    """A key's sealed-format parameters, checked together at construction.

    Attributes:
        key_type: ``aes128``, ``aes192`` or ``aes256`` (derived AES key of 16, 24 or 32 bytes).
        segment_size: the key's ciphertext segment size, tag included.
        scheme: the key's scheme (:mod:`app.core.schemes`): ``ctr-hmac`` (the default) or ``gcm``.
        derived_key_size: AES key bytes derived per message (from ``key_type``).
        header_length: a message header's bytes (from ``key_type``).

    Raises:
        TypeError: ``segment_size`` is not an int.
        ValueError: unknown ``key_type`` or ``scheme``, or ``segment_size`` too small for them or over
            2**31 - 1.
    """

    key_type: str
    segment_size: int
    scheme: str = DEFAULT_SCHEME
    derived_key_size: int = field(init=False, repr=False, compare=False)
    header_length: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        derived = derived_key_size_of(self.key_type)
        validate_segment_size(self.key_type, self.segment_size, self.scheme)
        object.__setattr__(self, "derived_key_size", derived)
        object.__setattr__(self, "header_length", header_length(self.key_type))

    def sealed_length(self, length: int) -> int:
        """A sealed message's bytes for a plaintext of ``length`` (:func:`~.format.ciphertext_length`).

        Raises:
            PayloadTooLargeError: the plaintext needs more than 2**32 segments.
        """
        return ciphertext_length(length, self.key_type, self.segment_size, self.scheme)

    def opened_length(self, length: int) -> int:
        """The plaintext's bytes for a sealed message of ``length`` bytes, should it verify
        (:func:`~.lengths.plaintext_length`).

        Raises:
            SealedDecryptionError: no sealed message has that length.
        """
        return plaintext_length(length, self.key_type, self.segment_size, self.scheme)


def checked_parameters(parameters: object) -> KeyParameters:
    """``parameters`` if it is a :class:`KeyParameters`.

    Raises:
        TypeError: it is not (the message names the type given).
    """
    if not isinstance(parameters, KeyParameters):
        raise TypeError(f"parameters must be KeyParameters, got {type(parameters).__name__}")
    return parameters
