"""What the sync and async Keystream clients share: URL, token, TLS and timeouts, and the error mapping.

Like hvac's ``Client()``, a client built without arguments reads its URL from ``KEYSTREAM_URL`` (default
:data:`DEFAULT_URL`) and its token from ``KEYSTREAM_TOKEN``; for https, a CA bundle from ``KEYSTREAM_CACERT``
and a client certificate (mTLS) from ``KEYSTREAM_CLIENT_CERT`` and ``KEYSTREAM_CLIENT_KEY``. Without a token,
``KEYSTREAM_ROLE`` and ``KEYSTREAM_JWT_FILE`` make it log in by itself (:mod:`keystream_client._autologin`).
"""

from __future__ import annotations

import contextlib
import os
import ssl
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx

from keystream_client import _transport as transport
from keystream_client._autologin import JwtFileLogin
from keystream_client._calls import Call, quote
from keystream_client._errors import (
    MAX_ERROR_BODY,
    KeystreamAPIError,
    KeystreamClientError,
    KeystreamConnectionError,
    KeystreamStreamError,
    api_error,
)
from keystream_client._options import CryptoOptions

#: The service URL when neither an argument nor ``KEYSTREAM_URL`` gives one.
DEFAULT_URL = "http://127.0.0.1:8000"
#: Environment variables read when the URL or the token is not given.
URL_ENV = "KEYSTREAM_URL"
TOKEN_ENV = "KEYSTREAM_TOKEN"  # noqa: S105 (the variable name, not a secret)
CACERT_ENV = "KEYSTREAM_CACERT"
CLIENT_CERT_ENV = "KEYSTREAM_CLIENT_CERT"
CLIENT_KEY_ENV = "KEYSTREAM_CLIENT_KEY"
#: ``verify=``: True/False, a CA bundle path, a context, or None (``KEYSTREAM_CACERT`` if set, else True).
Verify = bool | str | os.PathLike[str] | ssl.SSLContext | None
#: ``cert=``: a PEM file holding the certificate and its key, or a (certificate, key) pair of paths.
ClientCert = str | os.PathLike[str] | tuple[str | os.PathLike[str], str | os.PathLike[str]] | None
#: Bytes read from a source per request-body chunk.
DEFAULT_CHUNK_SIZE = 256 * 1024


class TlsFilesError(ValueError):
    """A CA bundle or client certificate that cannot be used (missing, unreadable, not PEM, key mismatch), or
    TLS options that do not go together. The message names the file, never its contents."""


class BaseClient:
    """Configuration shared by both clients: URL, token, TLS and timeouts.

    ``base_url`` None (or empty) reads ``KEYSTREAM_URL``, then falls back to :data:`DEFAULT_URL`; ``token``
    None reads ``KEYSTREAM_TOKEN`` (unset or empty: no ``Authorization`` header), unless ``role`` and
    ``jwt_file`` (or ``KEYSTREAM_ROLE`` and ``KEYSTREAM_JWT_FILE``) are given: then the client logs in by
    itself with the file's JWT (:attr:`jwt_file_login`). For an https URL, ``verify``
    None reads ``KEYSTREAM_CACERT`` (unset: the system's CA store) and ``cert`` None reads
    ``KEYSTREAM_CLIENT_CERT`` and ``KEYSTREAM_CLIENT_KEY``; see :func:`client_ssl_context`.

    Raises:
        ValueError: the URL is not http(s), ``chunk_size`` < 1, a CA bundle or client certificate cannot
            be loaded, or the automatic login's role or file is missing or comes with a token.
    """

    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        stream_timeout: float = 120.0,
        verify: Verify = None,
        cert: ClientCert = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        role: str | None = None,
        jwt_file: str | os.PathLike[str] | None = None,
    ) -> None:
        base_url = base_url or os.environ.get(URL_ENV) or DEFAULT_URL
        environment_token = os.environ.get(TOKEN_ENV) or None
        #: The automatic login's role and file, or None when the client uses a fixed token (or none).
        self.jwt_file_login = JwtFileLogin.configured(role, jwt_file, token, environment_token is not None)
        if token is None and self.jwt_file_login is None:
            token = environment_token
        url = httpx.URL(base_url)
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError(f"base_url must be an http:// or https:// URL, got {base_url!r}")
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        self._base_url = str(url).rstrip("/")
        self._prefix = url.path.rstrip("/")
        self._timeout = timeout
        self._stream_timeout = stream_timeout
        self._chunk_size = chunk_size
        self._ssl = client_ssl_context(verify, cert) if url.scheme == "https" else None
        self._endpoint = transport.Endpoint(
            url.host, url.port or (443 if url.scheme == "https" else 80), self._ssl
        )
        self._headers = {"User-Agent": "keystream-client/0.1", "Accept": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"

    def __repr__(self) -> str:  # never the token
        return f"{type(self).__name__}({self._base_url!r})"

    @property
    def base_url(self) -> str:
        """The service URL this client talks to."""
        return self._base_url

    @staticmethod
    def _bearer(token: str | None) -> dict[str, str] | None:
        """The per-request header carrying the automatic login's token (None: the client's own headers)."""
        return None if token is None else {"Authorization": f"Bearer {token}"}

    def _httpx_options(self) -> dict[str, Any]:
        return {
            "base_url": self._base_url,
            "headers": self._headers,
            "timeout": httpx.Timeout(self._timeout),
            "verify": self._ssl if self._ssl is not None else True,
            # The streaming connection does not use proxies, so JSON calls do not either: one network path.
            "trust_env": False,
        }

    def _duplex(
        self,
        operation: str,
        key: str,
        options: CryptoOptions,
        body: transport.ChunkReader,
        length: int | None,
        token: str | None = None,
    ) -> transport.DuplexCall:
        """A streaming call; ``token`` is the automatic login's (a fixed token is in the headers already)."""
        options.check(operation)
        target = f"{self._prefix}/v1/keys/{quote(key)}/{operation}?{httpx.QueryParams(options.params())}"
        headers = [(name, value) for name, value in self._headers.items() if name != "Accept"]
        if token is not None:
            headers.append(("Authorization", f"Bearer {token}"))
        headers += [("Content-Type", "application/octet-stream"), *options.headers().items()]
        return transport.DuplexCall(
            self._endpoint, "POST", target, headers, body, length, self._timeout, self._stream_timeout
        )

    @staticmethod
    def _result(response: httpx.Response, call: Call) -> Any:
        if response.status_code >= 400:
            raise api_error(response.status_code, response.content[:MAX_ERROR_BODY])
        if not call.expect_json or response.status_code == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError as exc:
            raise KeystreamAPIError(response.status_code, "invalid_response", "response is not JSON") from exc


def client_ssl_context(verify: Verify = None, cert: ClientCert = None) -> ssl.SSLContext:
    """The TLS context both transports use (httpx for JSON calls, h11 for streams).

    Args:
        verify: True verifies against the system's CA store; a path verifies against that PEM CA bundle;
            False turns verification off (testing only); an :class:`ssl.SSLContext` is used as it is; None
            reads the bundle path from ``KEYSTREAM_CACERT`` (unset or empty: True).
        cert: the client certificate for mTLS: one PEM file with the certificate and its key, or a
            (certificate, key) pair; None reads ``KEYSTREAM_CLIENT_CERT`` (and ``KEYSTREAM_CLIENT_KEY`` when
            the key is a separate file).

    Raises:
        ValueError: a file is missing or not PEM, the key does not match the certificate, or ``cert`` was
            given with an :class:`ssl.SSLContext` (load it into the context instead). The message names the
            file, never its contents.
    """
    if verify is None:
        verify = os.environ.get(CACERT_ENV) or True
    if cert is None:
        env_cert, env_key = os.environ.get(CLIENT_CERT_ENV) or None, os.environ.get(CLIENT_KEY_ENV) or None
        if env_key and not env_cert:
            raise TlsFilesError(f"{CLIENT_KEY_ENV} is set without {CLIENT_CERT_ENV}")
        cert = (env_cert, env_key) if env_cert and env_key else env_cert
    if isinstance(verify, ssl.SSLContext):
        if cert is not None:
            raise TlsFilesError("cert= cannot be combined with an SSLContext: load the certificate into it")
        return verify
    if isinstance(verify, bool):
        context = ssl.create_default_context()
        if not verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
    else:
        bundle = os.fspath(verify)
        try:
            context = ssl.create_default_context(cafile=bundle)
        except ssl.SSLError as exc:  # before OSError, its base class
            raise TlsFilesError(f"CA bundle {bundle}: no PEM certificate in it ({exc.reason})") from None
        except OSError as exc:
            raise TlsFilesError(f"CA bundle {bundle}: {exc.strerror or exc}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert is not None:
        cert_file, key_file = (cert[0], cert[1]) if isinstance(cert, tuple) else (cert, None)
        names = os.fspath(cert_file) + (f" and {os.fspath(key_file)}" if key_file is not None else "")
        try:
            context.load_cert_chain(cert_file, key_file)
        except ssl.SSLError as exc:  # before OSError, its base class
            raise TlsFilesError(
                f"client certificate {names}: not a PEM certificate and its matching key ({exc.reason})"
            ) from None
        except OSError as exc:
            raise TlsFilesError(f"client certificate {names}: {exc.strerror or exc}") from None
    return context


@contextlib.contextmanager
def mapped_errors(
    endpoint: transport.Endpoint | None = None, *, probe_timeout: float | None = None
) -> Iterator[None]:
    """Transport failures as the client's exceptions: a response cut short is a stream error, a failure to
    reach the service a connection error.

    ``endpoint`` is given around httpx calls. For https, a connection closed before any answer is a
    connection error (that is how a server requiring a client certificate refuses one under TLS 1.3). For
    http, the same (or a reset) is asked about with :func:`~keystream_client._transport.speaks_tls`, when
    ``probe_timeout`` is given: a server that speaks TLS closes on a plain HTTP request without answering,
    which without the probe read as a response cut short (the integrity exit code of the CLI).
    """
    try:
        yield
    except transport.ConnectFailedError as exc:
        raise KeystreamConnectionError(str(exc)) from exc
    except transport.StreamBrokenError as exc:
        raise KeystreamStreamError(str(exc)) from exc
    except transport.RequestBodyError as exc:
        raise KeystreamClientError(str(exc)) from exc
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
        if endpoint is not None and unanswered(exc):
            if endpoint.ssl_context is not None:
                raise KeystreamConnectionError(f"{transport.TLS_CLOSED_HINT} ({exc})") from exc
            if probe_timeout is not None and transport.speaks_tls(
                endpoint.host, endpoint.port, probe_timeout
            ):
                raise KeystreamConnectionError(
                    transport.plain_http_to_tls_message(endpoint.host, endpoint.port)
                ) from exc
        if isinstance(exc, httpx.WriteError):
            raise KeystreamConnectionError(f"{type(exc).__name__}: {exc}") from exc
        raise KeystreamStreamError(f"the response was cut short: {exc}") from exc
    except httpx.TransportError as exc:
        raise KeystreamConnectionError(f"{type(exc).__name__}: {exc}") from exc


def unanswered(exc: httpx.TransportError) -> bool:
    """Whether httpx lost the connection before any byte of the answer: closed ("Server disconnected
    without sending a response"), reset, or broken while the request was still being written."""
    if isinstance(exc, httpx.WriteError) or "without sending a response" in str(exc):
        return True
    reason: BaseException | None = exc
    while reason is not None:
        if isinstance(reason, ConnectionResetError):
            return True
        reason = reason.__cause__ or reason.__context__
    return False


@contextlib.asynccontextmanager
async def async_mapped_errors(endpoint: transport.Endpoint, probe_timeout: float) -> AsyncIterator[None]:
    """:func:`mapped_errors` around an httpx call of the async client, probing without blocking the loop."""
    try:
        with mapped_errors(endpoint):
            yield
    except (KeystreamStreamError, KeystreamConnectionError) as exc:
        cause = exc.__cause__
        if (
            endpoint.ssl_context is None
            and isinstance(cause, httpx.TransportError)
            and unanswered(cause)
            and await transport.speaks_tls_async(endpoint.host, endpoint.port, probe_timeout)
        ):
            raise KeystreamConnectionError(
                transport.plain_http_to_tls_message(endpoint.host, endpoint.port)
            ) from cause
        raise
