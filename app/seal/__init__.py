"""Seals: the one place that wraps and unwraps what the master key protects.

``KEYSTREAM_SEAL`` picks one (:func:`open_seal`):

* ``file`` (:mod:`app.seal.file`): the master key in memory, from ``KEYSTREAM_MASTER_KEY``, ``_FILE`` or
  ``data/master.key``. For development: it protects nothing from whoever can read the data directory.

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


def open_seal(settings: Settings, *, create: bool = True) -> Seal:
    """Open (unseal) the seal ``settings`` select. ``create``: the file seal may generate ``data/master.key``.

    Raises:
        MasterKeyError: the seal cannot be opened (:class:`SealError` and the file seal's key errors); the
            message names the setting, never a secret.
    """
    return open_file_seal(settings, create=create)
