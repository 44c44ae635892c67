"""A test JWT issuer: signing keys, tokens shaped like Kubernetes projected service-account tokens, and a
real HTTPS server (threaded, self-signed CA from ``tls_ca``) serving its JWKS and OIDC discovery document.

The server counts requests, can answer 503 (``down``) and sends the ``Cache-Control`` the test sets, so tests
can see the service's JWKS cache at work. Tokens are signed with PyJWT (as an issuer would), never by hand,
except for the deliberately broken ones a test builds itself.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from tls_ca import TlsFiles, make_ca_files

#: The issuer every Kubernetes-shaped token names (a cluster's ``--service-account-issuer``).
ISSUER = "https://kubernetes.default.svc.cluster.local"
#: The audience a projected token is asked for (``serviceAccountToken.audience``).
AUDIENCE = "keystream"

SigningKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey


@dataclass
class Signer:
    """One signing key with its ``kid`` and JWS algorithm; ``publish_alg`` false leaves ``alg`` out of its JWK
    (a JWK may omit it: any algorithm of the key's type may then use the key)."""

    kid: str
    algorithm: str
    key: SigningKey
    publish_alg: bool = True

    @classmethod
    def rsa(cls, kid: str = "rsa-1", algorithm: str = "RS256") -> Signer:
        return cls(kid, algorithm, rsa.generate_private_key(public_exponent=65537, key_size=2048))

    @classmethod
    def ec(cls, kid: str = "ec-1", algorithm: str = "ES256") -> Signer:
        curve = ec.SECP256R1() if algorithm == "ES256" else ec.SECP384R1()
        return cls(kid, algorithm, ec.generate_private_key(curve))

    @classmethod
    def ed25519(cls, kid: str = "ed-1") -> Signer:
        return cls(kid, "EdDSA", ed25519.Ed25519PrivateKey.generate())

    def public_pem(self) -> str:
        return (
            self.key.public_key()
            .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
            .decode()
        )

    def jwk(self) -> dict[str, Any]:
        """The public key as a JWK (``kid``, ``use``, ``alg``), as ``/openid/v1/jwks`` lists it."""
        algorithm = jwt.get_algorithm_by_name(self.algorithm)
        entry: dict[str, Any] = json.loads(algorithm.to_jwk(self.key.public_key()))
        entry.update({"kid": self.kid, "use": "sig"})
        if self.publish_alg:
            entry["alg"] = self.algorithm
        return entry

    def sign(self, claims: dict[str, Any], **header: Any) -> str:
        return jwt.encode(claims, self.key, algorithm=self.algorithm, headers={"kid": self.kid, **header})


def k8s_role(*key_patterns: str, scopes: tuple[str, ...] = ("encrypt",)) -> dict[str, Any]:
    """A ``jwt`` role's body for the tokens of :func:`k8s_claims`: bound to this audience and to the
    ``billing`` namespace, ttl 600 s, granting ``scopes`` on ``key_patterns`` (default ``billing-*``)."""
    return {
        "method": "jwt",
        "scopes": list(scopes),
        "key_patterns": list(key_patterns or ("billing-*",)),
        "ttl": 600,
        "bound_audiences": [AUDIENCE],
        "bound_claims": {"/kubernetes.io/namespace": "billing"},
    }


def k8s_claims(
    namespace: str = "billing",
    service_account: str = "api",
    *,
    audience: str | list[str] | None = None,
    lifetime: int = 3600,
    now: float | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """Claims exactly as the kubelet's projected service-account token carries them (``aud`` a list)."""
    issued = int(time.time() if now is None else now)
    claims: dict[str, Any] = {
        "aud": [AUDIENCE] if audience is None else audience,
        "exp": issued + lifetime,
        "iat": issued,
        "iss": ISSUER,
        "kubernetes.io": {
            "namespace": namespace,
            "node": {"name": "node-1", "uid": "7b3c1c1e-2f4e-4b8e-9a53-2d4c0b1f5a10"},
            "pod": {
                "name": f"{service_account}-6d8f7b9c4-x2x7q",
                "uid": "0f6d2d3a-1b7c-4b8e-8c3d-9a1e2f3b4c5d",
            },
            "serviceaccount": {"name": service_account, "uid": "3c2b1a09-8f7e-4d6c-b5a4-938271605f4e"},
            "warnafter": issued + lifetime // 2,
        },
        "nbf": issued,
        "sub": f"system:serviceaccount:{namespace}:{service_account}",
    }
    claims.update(extra)
    return claims


@dataclass
class Issuer:
    """The HTTPS server's state: the keys it publishes and how it answers."""

    url: str
    pki: TlsFiles
    signers: list[Signer]
    cache_control: str = "max-age=300"
    down: bool = False
    requests: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def jwks_url(self) -> str:
        return f"{self.url}/openid/v1/jwks"

    @property
    def discovery_url(self) -> str:
        return f"{self.url}/.well-known/openid-configuration"

    @property
    def ca_pem(self) -> str:
        return self.pki.ca.read_text()

    def count(self, path: str) -> int:
        with self.lock:
            return sum(1 for seen in self.requests if seen == path)


def _handler(issuer: Issuer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            # The query is ignored, so one issuer can stand for many key sources (the login benchmark's
            # first logins); requests are counted by path alone.
            path = urlsplit(self.path).path
            with issuer.lock:
                issuer.requests.append(path)
            if issuer.down:
                self._answer(503, {"error": "down"})
            elif path == "/openid/v1/jwks":
                self._answer(200, {"keys": [signer.jwk() for signer in issuer.signers]})
            elif path == "/.well-known/openid-configuration":
                self._answer(200, {"issuer": ISSUER, "jwks_uri": issuer.jwks_url})
            else:
                self._answer(404, {"error": "not found"})

        def _answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", issuer.cache_control)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


@contextmanager
def serve_issuer(directory: Path, signers: list[Signer]) -> Iterator[Issuer]:
    """Run the issuer's HTTPS server on 127.0.0.1 (a fresh CA in ``directory``) until the block ends.

    Raises:
        OSError: the server cannot start (the test fails, it is never skipped).
    """
    pki = make_ca_files(directory)
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    issuer = Issuer(f"https://127.0.0.1:{server.server_address[1]}", pki, signers)
    server.RequestHandlerClass = _handler(issuer)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pki.server_cert, pki.server_key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, name="jwt-issuer", daemon=True)
    thread.start()
    try:
        yield issuer
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
