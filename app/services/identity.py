"""Workload identity: login roles, and the logins that turn a verified credential into a Keystream token.

This module is the public interface; each job lives in its own module:

* :mod:`.login`: what every method shares: roles (:func:`new_role`, :func:`login_role`), the limits on
  login attempts (:class:`LoginLimits`) and the token a login issues (:func:`issue_login_token`);
* :mod:`.jwt_config`: the JWT method's configuration (:func:`check_jwt_config`: exactly one key source, the
  issuer, the leeway) and the issuer's keys a login checks a signature against;
* :mod:`.jwks`: the issuer's key sets fetched over HTTPS and cached;
* :mod:`.jwt_verify`: a JWT's header, signature and registered claims, verified by PyJWT
  (:data:`ALLOWED_ALGORITHMS`, :data:`MAX_JWT_BYTES`, :data:`LOGIN_REFUSED`);
* :mod:`.jwt_login`: a ``jwt`` role's bindings (:class:`JwtBindings`, :func:`claim_at`) and the JWT login
  (:class:`JwtLogin`);
* :mod:`.cert_login`: a ``cert`` role's bindings and the certificate login.
"""

from __future__ import annotations

from .jwt_config import check_jwt_config
from .jwt_login import JwtBindings, JwtLogin, claim_at
from .jwt_verify import ALLOWED_ALGORITHMS, LOGIN_REFUSED, MAX_JWT_BYTES
from .login import (
    LOGIN_ADDRESS_BURST,
    LOGIN_ADDRESS_REFILL_SECONDS,
    LOGIN_BURST,
    LOGIN_REFILL_SECONDS,
    LOGIN_TRACKED,
    RESERVED_METADATA,
    LoginLimits,
    RoleBindings,
    issue_login_token,
    login_limiter,
    login_role,
    new_role,
)

__all__ = [
    "ALLOWED_ALGORITHMS",
    "LOGIN_ADDRESS_BURST",
    "LOGIN_ADDRESS_REFILL_SECONDS",
    "LOGIN_BURST",
    "LOGIN_REFILL_SECONDS",
    "LOGIN_REFUSED",
    "LOGIN_TRACKED",
    "MAX_JWT_BYTES",
    "RESERVED_METADATA",
    "JwtBindings",
    "JwtLogin",
    "LoginLimits",
    "RoleBindings",
    "check_jwt_config",
    "claim_at",
    "issue_login_token",
    "login_limiter",
    "login_role",
    "new_role",
]
