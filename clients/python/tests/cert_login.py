"""What the client's and the CLI's certificate login tests share: a server serving HTTPS with mTLS (the
:mod:`tls_ca` CA's client certificates), the role :data:`ROLE` that :mod:`tls_ca`'s client certificate meets,
and a second client certificate from the same CA that meets it not."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

import keystream_server
from keystream_server import RunningServer
from tls_ca import TlsFiles, make_ca_files, make_client_cert

ROLE = "client-cert-tests"
#: The common name of :func:`tls_ca.make_ca_files`' client certificate.
SUBJECT = "keystream test client"


@dataclass(frozen=True)
class CertServer:
    """The mTLS server, its CA's files, and a client certificate (and key) the role refuses."""

    server: RunningServer
    pki: TlsFiles
    stranger: tuple[Path, Path]

    def context(self, certificate: tuple[Path, Path] | None = None) -> ssl.SSLContext:
        """A client context trusting the CA and presenting ``certificate`` (default: the role's)."""
        context = ssl.create_default_context(cafile=str(self.pki.ca))
        context.load_cert_chain(*(certificate or (self.pki.client_cert, self.pki.client_key)))
        return context


@contextlib.contextmanager
def cert_server(base: Path) -> Iterator[CertServer]:
    """Start the mTLS server in ``base`` and write :data:`ROLE` (encrypt on ``login-*``, for the common
    name :data:`SUBJECT`); stop it on exit."""
    pki = make_ca_files(base / "pki")
    stranger = make_client_cert(pki, "stranger", "someone else", uris=("spiffe://example.org/ns/x/sa/y",))
    server = keystream_server.start(base / "data", base / "server.log", pki, mtls=True)
    try:
        running = CertServer(server, pki, stranger)
        role = {
            "method": "cert",
            "scopes": ["encrypt"],
            "key_patterns": ["login-*"],
            "ttl": 300,
            "allowed_common_names": [SUBJECT],
        }
        # Roles are admin calls the client library does not wrap.
        headers = {"Authorization": f"Bearer {server.token}"}
        with httpx.Client(base_url=server.url, headers=headers, verify=running.context()) as admin:
            assert admin.post(f"/v1/auth/roles/{ROLE}", json=role).status_code == 200
        yield running
    finally:
        keystream_server.stop(server.process)
