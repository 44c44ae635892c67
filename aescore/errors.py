"""The aescore error hierarchy.

Every error raised by aescore derives from :class:`AesCoreError`. Errors about the *type* of an argument are
also :class:`TypeError`, errors about its *value* (size, range) are also :class:`ValueError`, so callers can
catch either the library base class or the builtin they expect. No message ever contains key bytes.
"""

from __future__ import annotations

__all__ = [
    "AesCoreError",
    "AesCoreTypeError",
    "AesCoreValueError",
    "AlreadyFinalizedError",
    "BackendUnavailableError",
    "CounterOverflowError",
    "InvalidTag",
    "UnknownBackendError",
]


class AesCoreError(Exception):
    """Base class of every aescore error."""


class AesCoreTypeError(AesCoreError, TypeError):
    """An argument has the wrong type (the message names the field and the accepted types)."""


class AesCoreValueError(AesCoreError, ValueError):
    """An argument has a wrong size or value (the message names the field and the allowed values)."""


class CounterOverflowError(AesCoreError, OverflowError):
    """A fixed-width (32- or 64-bit) counter would run past its last value.

    Raised *before* any keystream is produced, so a counter block is never reused.
    """


class AlreadyFinalizedError(AesCoreError, RuntimeError):
    """An incremental encryption was used after ``finalize`` (or after it failed); start a new one, with a new
    nonce."""


class UnknownBackendError(AesCoreValueError):
    """No backend is registered under the requested name."""


class BackendUnavailableError(AesCoreError):
    """The backend exists but cannot run here (the message says why, e.g. the CPU lacks AES-NI)."""


class InvalidTag(AesCoreError):
    """Authenticated decryption failed: the tag does not match the key, nonce, ciphertext and associated data.

    Raised by :class:`aescore.AesGcm` before any plaintext is returned; ``decrypt_into`` zeroes what it wrote.
    The message never says which input was wrong (any of them may have been tampered with).
    """
