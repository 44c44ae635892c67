"""The seal interface: the one object that holds (or reaches) the master key.

A seal wraps and unwraps every secret Keystream stores under its master key: key versions, the keystore's
check value, and the audit keys' material. Nothing else touches master key bytes; with a hardware seal
(:mod:`app.seal.pkcs11`) no master key bytes exist in this process at all.

A seal has a :attr:`Seal.kind` (``file``, ``pkcs11``, ``shamir``) and a master key **generation**; every
blob it writes says both (:mod:`app.seal.blob`), so a keystore can tell which seal made a blob. The seal's
own key is generation 1; an online rotation adds later generations under the same seal
(:meth:`Seal.create_generation`), which the keystore's :class:`~app.seal.keyring.Keyring` uses, keeping
older generations readable. A seal is *unsealed* (able to
wrap) once opened; :meth:`Seal.close` seals it again. A seal whose key is assembled from operator shares
(:mod:`app.seal.shamir`) starts sealed: the keystore tells it what to expect (:meth:`Seal.await_unseal`).

Errors, drawn from the base:

* :class:`SealError` (a :class:`~app.core.master_key_format.MasterKeyError`): the seal cannot be opened or
  used (library missing, token absent, wrong PIN, key missing, sealed). ``keystream-server`` prints it as one
  line and exits with status 2 at start-up. It names the setting, never a PIN or key bytes.
* :class:`SealUnwrapError`: a blob does not authenticate under this seal. It carries no detail; the keystore
  turns it into a ``KeyUnwrapError`` naming the key and version.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from app.core.master_key_format import MasterKeyError
from app.core.secret_memory import random_secret, secret_copy

if TYPE_CHECKING:
    from .keyring import GenerationKey

__all__ = ["SEAL_KINDS", "Seal", "SealError", "SealUnwrapError"]

#: The seal kinds ``KEYSTREAM_SEAL`` accepts.
SEAL_KINDS = ("file", "pkcs11", "shamir")


class SealError(MasterKeyError):
    """The seal cannot be opened or used: its message names the setting and what to fix, never a secret."""


class SealUnwrapError(Exception):
    """A blob does not authenticate under this seal (another seal or master key, or corruption)."""


class Seal(abc.ABC):
    """Wraps and unwraps secrets under a master key it never hands out.

    Implementations are thread-safe. ``associated_data`` binds a blob to its place (a key's name and
    version, the check value, the audit material), so a blob moved elsewhere does not unwrap.
    """

    #: The ``KEYSTREAM_SEAL`` name of this kind of seal.
    kind: ClassVar[str]
    #: True when :meth:`derive_key_into` works (the master key is in memory); other seals' keystores store the
    #: secrets a file seal would derive, wrapped.
    derives_keys: ClassVar[bool] = False
    #: True when the seal can be sealed and unsealed while a server runs (shamir): the server then checks
    #: :attr:`sealed` on every request.
    seals_online: ClassVar[bool] = False

    @property
    @abc.abstractmethod
    def generation(self) -> int:
        """The generation of this seal's own key: 1 (later ones: :mod:`app.seal.keyring`)."""

    @property
    def sealed(self) -> bool:
        """True while the seal cannot wrap or unwrap (closed, or waiting for its unseal material)."""
        return False

    @property
    def initialising(self) -> bool:
        """True for a seal made by ``operator init`` that must find the keystore uninitialised."""
        return False

    def public_parameters(self) -> bytes | None:
        """Public bytes the keystore stores beside its check value when first opened (none by default)."""
        return None

    def await_unseal(self, stored: bytes | None, matches: Callable[[Seal], bool]) -> None:
        """Called by a keystore opened with a sealed seal: its stored public parameters, and a test that a
        seal over a candidate master key opens the keystore's check value.

        Raises:
            SealError: this seal cannot be unsealed later (the default).
        """
        raise SealError(f"{self.describe()} is sealed")

    @abc.abstractmethod
    def describe(self) -> str:
        """A short phrase for messages (``"the file seal (data/master.key)"``); never a secret."""

    @abc.abstractmethod
    def wrap(self, plaintext: bytes | memoryview, associated_data: bytes) -> bytes:
        """Encrypt and authenticate ``plaintext`` bound to ``associated_data``; the blob names this seal.

        Raises:
            SealError: the seal is sealed or its device fails.
        """

    @abc.abstractmethod
    def unwrap(self, blob: bytes, associated_data: bytes) -> bytes:
        """Return what :meth:`wrap` wrapped with the same ``associated_data``.

        Raises:
            SealUnwrapError: the blob was made by another seal or master key, for other associated data, or
                is corrupt.
            SealError: the seal is sealed or its device fails.
        """

    def unwrap_secret(self, blob: bytes, associated_data: bytes) -> memoryview:
        """:meth:`unwrap` into locked memory (:mod:`app.core.secret_memory`), for secrets of up to 64 bytes.

        Returns a read-only view that keeps the secret alive; the memory is zeroed when the last view goes.
        This default copies the ``bytes`` :meth:`unwrap` returns (a seal whose device hands back ``bytes``
        cannot avoid that copy); the file seal decrypts straight into locked memory.

        Raises:
            SealUnwrapError, SealError: as :meth:`unwrap`.
            ValueError: the plaintext is longer than a secret buffer holds.
        """
        return secret_copy(self.unwrap(blob, associated_data)).readonly()

    def derive_key_into(self, salt: bytes, info: bytes, out: memoryview) -> None:
        """HKDF-SHA256 of the master key, for secrets derived from it rather than stored, written into all of
        ``out`` (locked memory the caller owns: no ``bytes`` object holds the derived key).

        Only a seal whose master key is in memory can; the file seal does, so that audit logs written before
        seals existed keep verifying. Others store such secrets wrapped instead.

        Raises:
            SealError: this seal cannot derive from its master key.
        """
        raise SealError(f"{self.describe()} cannot derive keys from its master key")

    def create_generation(self, generation: int) -> tuple[bytes, GenerationKey]:
        """Make master key generation ``generation`` (2 or more) for an online rotation
        (:mod:`app.seal.keyring`): its stored form, which the keystore keeps, and the key.

        This default, for seals whose master key is in memory, makes 32 random bytes in locked memory and
        stores them wrapped under this seal's own key (generation 1), bound to the generation's number.

        Raises:
            SealError: the seal is sealed, or its device fails.
        """
        from .keyring import GENERATION_KEY_SIZE, MemoryGenerationKey, generation_associated_data

        key = random_secret(GENERATION_KEY_SIZE)
        stored = self.wrap(key.view(), generation_associated_data(generation))
        return stored, MemoryGenerationKey(self.kind, generation, key.readonly())

    def open_generation(self, generation: int, stored: bytes) -> GenerationKey:
        """The key of generation ``generation`` from its stored form (:meth:`create_generation`).

        Raises:
            SealError: the stored form does not open under this seal (another master key, corruption), or
                the seal is sealed. The message names the generation only.
        """
        from .keyring import MemoryGenerationKey, generation_associated_data

        try:
            key = self.unwrap_secret(stored, generation_associated_data(generation))
        except SealUnwrapError:
            key = None
        if key is None:
            raise SealError(f"master key generation {generation} does not open under {self.describe()}")
        return MemoryGenerationKey(self.kind, generation, key)

    def destroy_generation(self, generation: int) -> None:  # noqa: B027 - in memory, zeroing was enough
        """Destroy what generation ``generation`` left outside the keystore (a token key) once no blob uses
        it; this default has nothing (the keystore deletes its stored form).

        Raises:
            SealError: the seal's device fails.
        """

    def close(self) -> None:  # noqa: B027 - a seal without resources needs nothing here
        """Release the seal's resources (a token session); idempotent. The seal is sealed afterwards."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} kind={self.kind} generation={self.generation}>"
