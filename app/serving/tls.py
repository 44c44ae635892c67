"""HTTPS for the service: the server's TLS context and the rule against plain HTTP on a network address.

``KEYSTREAM_TLS_CERT_FILE`` and ``KEYSTREAM_TLS_KEY_FILE`` make every worker serve HTTPS, TLS 1.2 or later
(``minimum_version``; older clients fail the handshake). ``KEYSTREAM_TLS_CLIENT_CA_FILE`` also requires a
client certificate issued by that CA bundle (mTLS): a connection without one fails the handshake, and a
request still needs its bearer token. The certificate the handshake verified reaches the app as the ASGI TLS
extension, ``scope["extensions"]["tls"]`` (:func:`client_tls_extension`), which the certificate login reads.

:class:`ServerTls` holds only the three paths. Each worker builds its context from them
(:meth:`app.serving.BoundedHttpToolsProtocol.use_tls`), and the protocol runs the handshake itself, so that
the connection limits cover connections still in their handshake. :meth:`ServerTls.context` is also called
once before serving, so that a missing or unreadable file, or a key that does not match its certificate,
stops the start with one line (:class:`StartupRefusedError`) instead of a worker crash loop.

:func:`check_plain_http_bind` refuses plain HTTP on any address but loopback unless
``KEYSTREAM_TLS_DISABLE=true`` says TLS ends at a proxy in front (tokens and plaintext would otherwise cross
the network in clear).
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509

from app.core.config import Settings
from app.errors import StartupRefusedError

__all__ = [
    "MINIMUM_TLS_VERSION",
    "ServerTls",
    "StartupRefusedError",
    "check_plain_http_bind",
    "client_tls_extension",
    "is_loopback",
]

#: The oldest protocol version the server accepts.
MINIMUM_TLS_VERSION = ssl.TLSVersion.TLSv1_2
#: The ASGI TLS extension's ``tls_version``: the protocol's number on the wire.
_WIRE_VERSIONS = {"TLSv1.2": 0x0303, "TLSv1.3": 0x0304}


class _EncryptedKeyError(Exception):
    pass


def _no_password() -> bytes:
    # Without a callback OpenSSL would prompt on the terminal for an encrypted key.
    raise _EncryptedKeyError


def _check_readable(setting: str, path: Path) -> None:
    try:
        with path.open("rb"):
            pass
    except OSError as exc:
        raise StartupRefusedError(f"{setting} {path}: {exc.strerror or exc}") from None


@dataclass(frozen=True)
class ServerTls:
    """The server's certificate, key and optional client CA bundle; builds the ``ssl.SSLContext``."""

    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> ServerTls | None:
        """The TLS files of ``settings``, or ``None`` for plain HTTP."""
        if settings.tls_cert_file is None or settings.tls_key_file is None:
            return None
        return cls(settings.tls_cert_file, settings.tls_key_file, settings.tls_client_ca_file)

    def context(self) -> ssl.SSLContext:
        """A server context: TLS 1.2+, Python's default ciphers, client certificates required under mTLS.

        Raises:
            StartupRefusedError: a file is missing or unreadable, is not PEM, the key is encrypted or does not
                match the certificate, or the client CA file holds no certificate. The message names the
                setting and the path, never file contents.
        """
        _check_readable("KEYSTREAM_TLS_CERT_FILE", self.cert_file)
        _check_readable("KEYSTREAM_TLS_KEY_FILE", self.key_file)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = MINIMUM_TLS_VERSION
        try:
            context.load_cert_chain(self.cert_file, self.key_file, password=_no_password)
        except _EncryptedKeyError:
            raise StartupRefusedError(
                f"KEYSTREAM_TLS_KEY_FILE {self.key_file}: the private key is encrypted; give an unencrypted "
                "key (protect it with file permissions or a mounted secret)"
            ) from None
        except ssl.SSLError as exc:
            raise StartupRefusedError(
                f"KEYSTREAM_TLS_CERT_FILE {self.cert_file} and KEYSTREAM_TLS_KEY_FILE {self.key_file}: not a "
                f"PEM certificate chain and its matching private key ({exc.reason or exc})"
            ) from None
        if self.client_ca_file is not None:
            _check_readable("KEYSTREAM_TLS_CLIENT_CA_FILE", self.client_ca_file)
            try:
                context.load_verify_locations(cafile=self.client_ca_file)
            except ssl.SSLError as exc:
                raise StartupRefusedError(
                    f"KEYSTREAM_TLS_CLIENT_CA_FILE {self.client_ca_file}: not a PEM CA bundle "
                    f"({exc.reason or exc})"
                ) from None
            context.verify_mode = ssl.CERT_REQUIRED
        return context


def client_tls_extension(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> dict[str, Any] | None:
    """The ASGI TLS extension (``scope["extensions"]["tls"]``) for a connection whose handshake verified a
    client certificate, else ``None``.

    Only a certificate the handshake verified counts: the context must ask for one
    (``KEYSTREAM_TLS_CLIENT_CA_FILE``, or uvicorn's ``--ssl-cert-reqs``), and OpenSSL then fails the
    handshake of a certificate that does not verify, so a certificate present here was verified. Nothing is
    read from request headers. The extension follows the ASGI specification: ``client_cert_chain`` holds the
    client's own certificate as PEM (Python 3.11 gives no access to the rest of the chain it verified),
    ``client_cert_name`` its subject as an RFC 4514 string, ``client_cert_error`` ``None``, ``tls_version``
    the protocol's number (``0x0304`` for TLS 1.3), ``server_cert`` and ``cipher_suite`` ``None``. It is built
    once per connection and shared by its requests: read it, never change it.
    """
    if ssl_object is None or ssl_object.context.verify_mode == ssl.CERT_NONE:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    return {
        "server_cert": None,
        "client_cert_chain": [ssl.DER_cert_to_PEM_cert(der)],
        "client_cert_name": x509.load_der_x509_certificate(der).subject.rfc4514_string(),
        "client_cert_error": None,
        "tls_version": _WIRE_VERSIONS.get(ssl_object.version() or ""),
        "cipher_suite": None,
    }


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` resolves to is a loopback address (an unresolvable name is not)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)


def check_plain_http_bind(host: str, tls: ServerTls | None, tls_disable: bool) -> str | None:
    """Refuse plain HTTP on a non-loopback ``host`` unless ``tls_disable``.

    Returns:
        A warning to log when plain HTTP is allowed on a non-loopback host by ``tls_disable``, else ``None``.

    Raises:
        StartupRefusedError: plain HTTP on a non-loopback host without ``tls_disable``.
    """
    if tls is not None or is_loopback(host):
        return None
    if not tls_disable:
        raise StartupRefusedError(
            f"refusing plain HTTP on {host}, which is not a loopback address: set KEYSTREAM_TLS_CERT_FILE "
            "and KEYSTREAM_TLS_KEY_FILE to serve HTTPS, or KEYSTREAM_TLS_DISABLE=true when a proxy in front "
            "terminates TLS"
        )
    return (
        f"serving plain HTTP on {host} (KEYSTREAM_TLS_DISABLE=true): tokens and data cross the network in "
        "clear unless a proxy in front terminates TLS and only it can reach this port"
    )
