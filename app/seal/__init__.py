"""Seals: the one place that wraps and unwraps what the master key protects.

``KEYSTREAM_SEAL`` picks one (:func:`open_seal`):

* ``file`` (:mod:`app.seal.file`): the master key in memory, from ``KEYSTREAM_MASTER_KEY``, ``_FILE`` or
  ``data/master.key``. For development: it protects nothing from whoever can read the data directory.
* ``pkcs11`` (:mod:`app.seal.pkcs11`): a non-extractable AES-256 key inside an HSM; every wrap and unwrap is
  a call into the token. For production.
* ``shamir`` (:mod:`app.seal.shamir`): the master key rebuilt in memory from K of N operator shares; the
  server starts sealed and is unsealed over ``POST /v1/sys/unseal``.

The interface is :class:`Seal` (:mod:`app.seal.base`); the blob layout, naming the seal kind and master key
generation, is :mod:`app.seal.blob`. This package imports only ``app.core``, so the keystore and the
audit log can both use it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import SEAL_KINDS, Seal, SealError, SealUnwrapError
from .blob import BlobOrigin, blob_origin
from .file import FileSeal, open_file_seal

if TYPE_CHECKING:
    from app.core.config import Settings

__all__ = [
    "SEAL_KINDS",
    "BlobOrigin",
    "FileSeal",
    "Seal",
    "SealError",
    "SealUnwrapError",
    "blob_origin",
    "open_seal",
]


def open_seal(settings: Settings, *, create: bool = True, kind: str | None = None) -> Seal:
    """Open (unseal) the seal ``settings`` select, or the one of ``kind`` (``operator migrate-seal --to``).

    ``create``: the file seal may generate ``data/master.key``. The pkcs11 seal never creates its key here
    (``operator init`` does). The shamir seal opens sealed.

    Raises:
        MasterKeyError: the seal cannot be opened (:class:`SealError` and the file seal's key errors); the
            message names the setting, never a secret.
    """
    chosen = kind or settings.seal
    if chosen == "pkcs11":
        from .pkcs11 import open_pkcs11_seal  # python-pkcs11 is needed only here

        return open_pkcs11_seal(settings)
    if chosen == "shamir":
        from .shamir import ShamirSeal

        return ShamirSeal()  # sealed: the keystore names its share set (await_unseal)
    if chosen != "file":
        raise SealError(f"unknown seal {chosen!r}; known: {', '.join(SEAL_KINDS)}")
    return open_file_seal(settings, create=create)
