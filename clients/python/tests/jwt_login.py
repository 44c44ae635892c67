"""What the client's and the CLI's login tests share: an issuer key of their own, the server configured to
trust it (``jwt_validation_pubkeys``) with a role, and JWTs shaped like Kubernetes service-account tokens."""

from __future__ import annotations

import time
from typing import Any

import httpx
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

AUDIENCE = "keystream"
ISSUER_KEY = ec.generate_private_key(ec.SECP256R1())
ROLE = "client-tests"


def configure(url: str, root_token: str) -> None:
    """Trust :data:`ISSUER_KEY` for JWT logins and write the role :data:`ROLE` (encrypt on ``login-*``)."""
    pem = (
        ISSUER_KEY.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    # Roles and the JWT configuration are admin calls the client library does not wrap.
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {root_token}"}) as admin:
        assert admin.post("/v1/auth/jwt/config", json={"jwt_validation_pubkeys": [pem]}).status_code == 200
    write_role(url, root_token, ROLE, ttl=300)


def write_role(url: str, root_token: str, name: str, *, ttl: int) -> None:
    """Write the role ``name``: encrypt on ``login-*`` for JWTs of namespace ``apps``, tokens living ``ttl``
    seconds."""
    role = {
        "method": "jwt",
        "scopes": ["encrypt"],
        "key_patterns": ["login-*"],
        "ttl": ttl,
        "bound_audiences": [AUDIENCE],
        "bound_claims": {"/kubernetes.io/namespace": "apps"},
    }
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {root_token}"}) as admin:
        assert admin.post(f"/v1/auth/roles/{name}", json=role).status_code == 200


def k8s_jwt(namespace: str = "apps", **claims: Any) -> str:
    """A JWT shaped like a projected service-account token for ``namespace``/``worker``."""
    now = int(time.time())
    body = {
        "iss": "https://kubernetes.default.svc.cluster.local",
        "aud": [AUDIENCE],
        "sub": f"system:serviceaccount:{namespace}:worker",
        "iat": now,
        "nbf": now,
        "exp": now + 600,
        "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": "worker", "uid": "1"}},
        **claims,
    }
    return jwt.encode(body, ISSUER_KEY, algorithm="ES256")
