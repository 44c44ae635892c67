"""The JWT login: a ``jwt`` role's bindings, and the login that turns a verified JWT into a Keystream token.

**A login** (:meth:`JwtLogin.login`, blocking: on the event loop only inside
:func:`~app.core.waiting.without_waiting`, else in a worker thread) reads the JWT's header
(:func:`~app.services.jwt_verify.read_header`), the role and the method's configuration (one read), has
PyJWT verify the JWT against the issuer's keys (:func:`~app.services.jwt_config.issuer_keys`,
:func:`~app.services.jwt_verify.verified_claims`), then checks the role's subject, bound claims (glob
values, a list claim matching when any element does, nested claims addressed by a JSON pointer such as
``/kubernetes.io/namespace``, as Vault does) and the user claim. A role that does not exist gets the very
answer a wrong signature gets (:data:`~app.services.jwt_verify.LOGIN_REFUSED`), after the same work (the
role is read and the signature verified either way), so roles cannot be found out. The token issued
(:func:`~app.services.login.issue_login_token`) has the role, the subject and the role's claim mappings in
its ``metadata``. No error message or log line holds the JWT.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from app.errors import BadRequestError
from app.keystore import KeyStore, TokenRecord

from .jwks import JwksCache
from .jwt_config import DEFAULT_LEEWAY_SECONDS, issuer_keys
from .jwt_verify import LOGIN_REFUSED, read_header, verified_claims
from .login import issue_login_token, login_role_and_config

__all__ = ["JwtBindings", "JwtLogin", "claim_at"]


@dataclass(frozen=True)
class JwtBindings:
    """What a JWT must carry to log in through a ``jwt`` role (stored as the role's ``bindings``)."""

    method: ClassVar[str] = "jwt"

    bound_audiences: tuple[str, ...]
    bound_subject: str | None = None
    bound_claims: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    user_claim: str = "sub"
    claim_mappings: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def to_stored(self) -> dict[str, Any]:
        """The JSON object stored as the role's bindings."""
        return {
            "bound_audiences": list(self.bound_audiences),
            "bound_subject": self.bound_subject,
            "bound_claims": {path: list(values) for path, values in self.bound_claims.items()},
            "user_claim": self.user_claim,
            "claim_mappings": dict(self.claim_mappings),
        }

    def metadata_keys(self) -> tuple[str, ...]:
        """The metadata keys the claim mappings set."""
        return tuple(self.claim_mappings.values())

    @classmethod
    def from_stored(cls, stored: Mapping[str, Any]) -> JwtBindings:
        """The bindings of a stored role (written by :meth:`to_stored`)."""
        return cls(
            bound_audiences=tuple(stored["bound_audiences"]),
            bound_subject=stored.get("bound_subject"),
            bound_claims={path: tuple(values) for path, values in stored.get("bound_claims", {}).items()},
            user_claim=stored.get("user_claim", "sub"),
            claim_mappings=dict(stored.get("claim_mappings", {})),
        )


def claim_at(claims: Mapping[str, Any], path: str) -> Any:
    """The claim ``path`` names: a top-level claim, or with a leading ``/`` a JSON pointer (RFC 6901, ``~1``
    for ``/`` and ``~0`` for ``~`` in a name) into nested objects and lists; ``None`` when absent."""
    if not path.startswith("/"):
        return claims.get(path)
    value: Any = claims
    for part in path[1:].split("/"):
        name = part.replace("~1", "/").replace("~0", "~")
        if isinstance(value, Mapping):
            value = value.get(name)
        elif isinstance(value, list) and name.isdigit() and int(name) < len(value):
            value = value[int(name)]
        else:
            return None
        if value is None:
            return None
    return value


def _check_bound_claims(claims: Mapping[str, Any], bound: Mapping[str, tuple[str, ...]]) -> None:
    for path, patterns in bound.items():
        value = claim_at(claims, path)
        if value is None:
            raise BadRequestError(f"the JWT lacks the bound claim {path!r}")
        if isinstance(value, str):
            candidates = [value]
        elif isinstance(value, list) and all(isinstance(item, str) for item in value):
            candidates = value
        else:
            raise BadRequestError(f"the JWT's claim {path!r} is not a string or a list of strings")
        if not any(fnmatch.fnmatchcase(item, pattern) for item in candidates for pattern in patterns):
            raise BadRequestError(f"the JWT's claim {path!r} matches none of the role's bound values")


def _mapped(claims: Mapping[str, Any], mappings: Mapping[str, str]) -> dict[str, str]:
    """The metadata the role's ``claim_mappings`` take from ``claims``: strings, integers and booleans (as
    ``true``/``false``); a claim that is absent or of another type is left out."""
    metadata: dict[str, str] = {}
    for path, key in mappings.items():
        value = claim_at(claims, path)
        if isinstance(value, bool):
            metadata[key] = "true" if value else "false"
        elif isinstance(value, str | int):
            metadata[key] = str(value)[:512]
    return metadata


class JwtLogin:
    """JWT logins against the keystore's roles and the JWT method's configuration (see the module doc).

    Args:
        keystore: where roles, the configuration and the issued tokens live.
        jwks: the key sets fetched so far (one per process).
    """

    def __init__(self, keystore: KeyStore, jwks: JwksCache) -> None:
        self._keystore = keystore
        self._jwks = jwks

    def login(self, role_name: str, token: str) -> tuple[str, TokenRecord]:
        """Verify ``token`` for role ``role_name`` and issue a Keystream token; blocking (keystore, JWKS), or
        :class:`~app.core.waiting.WouldWait` having changed nothing where waiting is refused.

        Returns:
            The new token (show it once) and its stored record.

        Raises:
            PayloadTooLargeError: the JWT is longer than :data:`~app.services.jwt_verify.MAX_JWT_BYTES`.
            BadRequestError: a malformed JWT, an algorithm not allowed, a bad ``kid``, a JWT that fails a
                check (expired, not yet valid, issuer, audience, subject, bound claims, user claim), login
                not configured, or :data:`~app.services.jwt_verify.LOGIN_REFUSED`.
            IdentityProviderUnavailableError: the issuer's keys cannot be fetched and none are cached.
            ServiceUnavailableError: the keystore cannot serve now.
        """
        algorithm, kid = read_header(token)
        role, config = login_role_and_config(self._keystore, role_name, "jwt")
        if config is None:
            raise BadRequestError("JWT login is not configured: an admin must write the jwt config first")
        bindings = JwtBindings.from_stored(role.bindings) if role is not None else None
        claims = verified_claims(
            token,
            algorithm,
            issuer_keys(config, self._jwks, algorithm, kid),
            issuer=config.get("bound_issuer"),
            audiences=bindings.bound_audiences if bindings is not None else None,
            leeway=int(config.get("leeway", DEFAULT_LEEWAY_SECONDS)),
        )
        if role is None or bindings is None:
            raise BadRequestError(LOGIN_REFUSED)
        if bindings.bound_subject is not None and claims.get("sub") != bindings.bound_subject:
            raise BadRequestError("the JWT's sub is not the role's bound subject")
        _check_bound_claims(claims, bindings.bound_claims)
        subject = claim_at(claims, bindings.user_claim)
        if not isinstance(subject, str) or not subject:
            raise BadRequestError(f"the JWT's user claim {bindings.user_claim!r} is not a non-empty string")
        return issue_login_token(self._keystore, role, subject, _mapped(claims, bindings.claim_mappings))
