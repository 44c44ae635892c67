"""The shamir seal: the master key rebuilt in memory from operator shares; a server starts sealed.

``keystream-server operator init --shares N --threshold K`` generates the 32-byte master key, splits it into
N shares (:mod:`app.seal.shares`) of which any K rebuild it, and stores only the keystore's check value and
the share set's public parameters (set id, K, N). No process keeps the key on disk: a server opened with
this seal is **sealed** until K distinct shares are given to it (:meth:`ShamirSeal.submit_share`), and each
reconstructed key is checked against the check value before it is used, so wrong shares never make a
wrong key. :meth:`ShamirSeal.seal` wipes the key again.

Blobs use the ``0x02`` layout of :mod:`app.seal.blob` (seal kind ``shamir``, generation 1): AES-256-GCM
(:mod:`app.seal.aead`) with the six header bytes in the associated data.

The key lives in locked memory left out of core dumps (:mod:`app.core.secret_memory`), rebuilt straight into
it, and :meth:`ShamirSeal.seal` zeroes it. No method puts key or share bytes into an exception, a log line or
a ``repr``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from app.core.secret_memory import secret_copy, wipe_secret

from .aead import open_blob, open_blob_secret, seal_blob
from .base import Seal, SealError, SealUnwrapError
from .blob import NONCE_SIZE, V2_HEADER_SIZE, blob_origin, v2_header
from .shares import InvalidShareError, Share, ShareParameters, combine_shares, decode_share

__all__ = ["MASTER_KEY_SIZE", "ShamirSeal", "UnsealProgress", "new_master_key"]

MASTER_KEY_SIZE = 32
_GENERATION = 1


@dataclass(frozen=True)
class UnsealProgress:
    """Where unsealing stands: ``progress`` of ``threshold`` shares given, out of ``shares`` made."""

    sealed: bool
    threshold: int
    shares: int
    progress: int


class ShamirSeal(Seal):
    """A master key rebuilt from K of N shares, held in memory while unsealed.

    Args:
        master_key: the key (``operator init``, or a sibling worker handing it over); ``None`` starts sealed.
        parameters: the share set's parameters; a sealed seal learns them from the keystore
            (:meth:`await_unseal`).
        initialising: this seal is ``operator init``'s: a keystore that already has a check value refuses it.

    Raises:
        SealError: ``master_key`` is not 32 bytes.
    """

    kind: ClassVar[str] = "shamir"
    seals_online: ClassVar[bool] = True

    def __init__(
        self,
        master_key: bytes | memoryview | None = None,
        parameters: ShareParameters | None = None,
        *,
        initialising: bool = False,
    ) -> None:
        self._lock = threading.Lock()
        self._key: memoryview | None = None
        self._parameters = parameters
        self._matches: Callable[[Seal], bool] | None = None
        self._given: list[Share] = []
        self._initialising = initialising
        if master_key is not None:
            if len(master_key) != MASTER_KEY_SIZE:
                raise SealError(f"the master key must be {MASTER_KEY_SIZE} bytes long, got {len(master_key)}")
            self._key = secret_copy(master_key).readonly()

    @property
    def generation(self) -> int:
        """Always 1: the rebuilt key (an online rotation adds generations: :mod:`app.seal.keyring`)."""
        return _GENERATION

    @property
    def sealed(self) -> bool:
        """True until K shares rebuilt the key (or one was handed over), and again after :meth:`seal`."""
        return self._key is None

    @property
    def initialising(self) -> bool:
        """True for ``operator init``'s seal, which must find the keystore without a check value."""
        return self._initialising

    @property
    def parameters(self) -> ShareParameters | None:
        """The share set's public parameters, once known."""
        return self._parameters

    def describe(self) -> str:
        """``the shamir seal (K of N shares)``."""
        if self._parameters is None:
            return "the shamir seal"
        return f"the shamir seal ({self._parameters.threshold} of {self._parameters.shares} shares)"

    def public_parameters(self) -> bytes | None:
        """The share parameters' bytes, to store beside the check value when a keystore is initialised."""
        return None if self._parameters is None else self._parameters.to_bytes()

    def await_unseal(self, stored: bytes | None, matches: Callable[[Seal], bool]) -> None:
        """Learn, from the keystore, the share set to expect and how to check a rebuilt key.

        Args:
            stored: the keystore's share parameters row.
            matches: true when a seal over a candidate key opens the keystore's check value.

        Raises:
            SealError: the keystore holds no (or corrupt) share parameters.
        """
        if stored is None:
            raise SealError(
                "the keystore has no shamir share parameters: initialise it with keystream-server operator "
                "init --shares N --threshold K"
            )
        try:
            parameters = ShareParameters.from_bytes(stored)
        except ValueError as exc:
            raise SealError(str(exc)) from None
        with self._lock:
            self._parameters = parameters
            self._matches = matches

    def status(self) -> UnsealProgress:
        """Sealed or not, the threshold, the share count and the shares given so far.

        Raises:
            SealError: the share parameters are not known yet (the keystore was not opened with this seal).
        """
        parameters = self._known_parameters()
        with self._lock:
            return UnsealProgress(self.sealed, parameters.threshold, parameters.shares, len(self._given))

    def _known_parameters(self) -> ShareParameters:
        if self._parameters is None:
            raise SealError("the shamir seal does not know its share set yet: open the keystore first")
        return self._parameters

    def submit_share(self, text: str) -> memoryview | None:
        """Add one share; at the threshold, rebuild the key, check it and unseal.

        A refused share leaves the progress as it was. Giving a share to an unsealed seal is refused too.

        Returns:
            The master key when this share unsealed the seal (to hand to sibling workers over a private
            channel; never log it), else ``None``.

        Raises:
            InvalidShareError: ``malformed`` or ``checksum`` (see :func:`~app.seal.shares.decode_share`),
                ``foreign`` (another init's share), ``duplicate`` (already given), ``mismatch`` (the
                threshold reached, but the shares do not rebuild the keystore's master key), or
                ``unsealed`` (nothing to do).
            SealError: the share parameters are not known yet.
        """
        parameters = self._known_parameters()
        share = decode_share(text)
        if share.parameters != parameters:
            raise InvalidShareError(
                "foreign", "foreign share: it belongs to another init than this keystore's shares"
            )
        with self._lock:
            if self._key is not None:
                raise InvalidShareError("unsealed", "the seal is already unsealed")
            if any(given.index == share.index for given in self._given):
                raise InvalidShareError("duplicate", "duplicate share: this share was already given")
            candidate_shares = [*self._given, share]
            if len(candidate_shares) < parameters.threshold:
                self._given = candidate_shares
                return None
            key = combine_shares(candidate_shares)
            if not self._key_matches(key):
                raise InvalidShareError(
                    "mismatch",
                    "the shares given do not rebuild this keystore's master key (a wrong share); progress "
                    "is kept without this one: try another share, or reset",
                )
            self._key = key
            self._given = []
            return key

    def _key_matches(self, key: bytes | memoryview) -> bool:
        if self._matches is None:
            return False
        candidate = ShamirSeal(key, self._parameters)
        try:
            return self._matches(candidate)
        finally:
            candidate.seal()

    def unseal_with_key(self, key: bytes | memoryview) -> None:
        """Unseal with a key another worker rebuilt (handed over by the supervisor); checked first.

        Raises:
            SealError: the key is not this keystore's master key, or the parameters are unknown.
        """
        self._known_parameters()
        if len(key) != MASTER_KEY_SIZE or not self._key_matches(key):
            raise SealError("the key handed over does not open this keystore's check value")
        with self._lock:
            self._key = secret_copy(key).readonly()
            self._given = []

    def reset(self) -> None:
        """Forget the shares given so far (``{"reset": true}``)."""
        with self._lock:
            self._given = []

    def seal(self) -> None:
        """Wipe the master key (overwritten with zeros) and the shares given; sealed afterwards."""
        with self._lock:
            if self._key is not None:
                wipe_secret(self._key)
            self._key = None
            self._given = []

    def _master(self) -> memoryview:
        key = self._key
        if key is None:
            raise SealError(f"{self.describe()} is sealed: unseal it with POST /v1/sys/unseal")
        return key

    def wrap(self, plaintext: bytes | memoryview, associated_data: bytes) -> bytes:
        """AES-256-GCM under the rebuilt master key: ``header | nonce | ciphertext | tag``."""
        header = v2_header(self.kind, self.generation)
        nonce = os.urandom(NONCE_SIZE)
        return header + nonce + seal_blob(self._master(), nonce, plaintext, header + associated_data)

    def _parts(self, blob: bytes) -> tuple[bytes, bytes, bytes]:
        """``(header, nonce, ciphertext || tag)`` of a blob of this seal's kind and generation."""
        origin = blob_origin(blob)
        if origin is None or origin.kind != self.kind or origin.generation != self.generation:
            raise SealUnwrapError("not a blob of this seal")
        return (
            blob[:V2_HEADER_SIZE],
            blob[V2_HEADER_SIZE : V2_HEADER_SIZE + NONCE_SIZE],
            blob[V2_HEADER_SIZE + NONCE_SIZE :],
        )

    def unwrap_secret(self, blob: bytes, associated_data: bytes) -> memoryview:
        """:meth:`unwrap` straight into locked memory (no ``bytes`` object holds the plaintext).

        Raises:
            SealUnwrapError, SealError: as :meth:`unwrap`.
            ValueError: the plaintext is longer than a secret buffer holds (64 bytes).
        """
        header, nonce, sealed = self._parts(bytes(blob))
        return open_blob_secret(self._master(), nonce, sealed, header + associated_data)

    def unwrap(self, blob: bytes, associated_data: bytes) -> bytes:
        """Open a blob of this seal's kind and generation.

        Raises:
            SealUnwrapError: another seal's or generation's blob, other associated data, or corruption.
            SealError: the seal is sealed.
        """
        header, nonce, sealed = self._parts(bytes(blob))
        return open_blob(self._master(), nonce, sealed, header + associated_data)

    def close(self) -> None:
        """Seal (wipe the key); idempotent."""
        self.seal()


def new_master_key() -> bytes:
    """32 random bytes for ``operator init``."""
    return os.urandom(MASTER_KEY_SIZE)
