"""Keystream service client: sync :class:`KeystreamClient` and async :class:`AsyncKeystreamClient`.

>>> with KeystreamClient() as ks:         # KEYSTREAM_URL and KEYSTREAM_TOKEN  # doctest: +SKIP
...     ks.create_key("invoices")
...     sealed = ks.encrypt("invoices", b"hello", associated_data=b"invoice-42")
...     ks.decrypt("invoices", sealed.data, associated_data=b"invoice-42").data
b'hello'

``KeystreamClient(url, token)`` takes them explicitly; without arguments the URL comes from
``KEYSTREAM_URL`` (default ``http://127.0.0.1:8000``) and the token from ``KEYSTREAM_TOKEN``. A workload
with an identity sets ``KEYSTREAM_ROLE`` and ``KEYSTREAM_JWT_FILE`` instead (or passes ``role=`` and
``jwt_file=``): the client then logs in by itself with the file's JWT, and again, re-reading the file,
before its token expires (:mod:`keystream_client._autologin`).

JSON calls (keys, tokens, batch) go through httpx. Streaming encrypt/decrypt goes through a full-duplex
HTTP/1.1 connection (h11): the service streams its response while it still reads the request, and a client
that sends the whole body first stalls on large transfers. Bodies and responses are streamed in chunks of
``chunk_size`` bytes; no call loads a whole file into memory. Connections go straight to the service: the
full-duplex connection does not speak to proxies, so ``HTTP(S)_PROXY`` variables are ignored for JSON calls
too.

Errors (the tree is drawn in :mod:`keystream_client._errors`): every JSON error of the service raises
:class:`KeystreamAPIError` (``status``, ``code``, ``message``); a connection that cannot be made raises
:class:`KeystreamConnectionError`; a response stream that ends without its terminator (the service aborts the
connection when a sealed segment fails to verify after output started) raises :class:`KeystreamStreamError`,
so truncated or tampered output is never returned as a success.

The ``keystream`` command line lives in :mod:`keystream_client.cli`. This distribution depends on httpx and
h11 only and never imports the server.
"""

from __future__ import annotations

from keystream_client._async import AsyncCipherStream, AsyncKeystreamClient
from keystream_client._base import DEFAULT_CHUNK_SIZE, DEFAULT_URL
from keystream_client._errors import (
    KeystreamAPIError,
    KeystreamClientError,
    KeystreamConnectionError,
    KeystreamLoginError,
    KeystreamStreamError,
)
from keystream_client._models import (
    BatchError,
    BatchItem,
    BatchResult,
    CipherResult,
    DataKey,
    Key,
    KeyVersion,
    MasterRotation,
    NewToken,
    RenewedToken,
    Role,
    SealStatus,
    Token,
    TransferResult,
)
from keystream_client._sources import ProgressCallback, Source
from keystream_client._streams import Destination
from keystream_client._sync import KeystreamClient
from keystream_client._sync_stream import CipherStream

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_URL",
    "AsyncCipherStream",
    "AsyncKeystreamClient",
    "BatchError",
    "BatchItem",
    "BatchResult",
    "CipherResult",
    "CipherStream",
    "DataKey",
    "Destination",
    "Key",
    "KeyVersion",
    "KeystreamAPIError",
    "KeystreamClient",
    "KeystreamClientError",
    "KeystreamConnectionError",
    "KeystreamLoginError",
    "KeystreamStreamError",
    "MasterRotation",
    "NewToken",
    "ProgressCallback",
    "RenewedToken",
    "Role",
    "SealStatus",
    "Source",
    "Token",
    "TransferResult",
]
