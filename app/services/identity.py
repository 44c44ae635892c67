"""Workload identity: login roles, and the JWT login that turns a verified JWT into a Keystream token.

**Roles** (:func:`new_role`) carry what a token issued through them may do (scopes, key patterns, ttl,
max_ttl) and the bindings its method's credential must meet (:class:`RoleBindings`: a JWT's
:class:`JwtBindings`, a client certificate's :class:`~app.services.cert_login.CertBindings`). An admin can
write a role granting no more than it could grant a token it creates (:func:`~app.services.security.
require_grantable`).

**The JWT method's configuration** (:func:`check_jwt_config`) names exactly one key source: a ``jwks_url``
(with an optional ``jwks_ca_pem``), an ``oidc_discovery_url``, or ``jwt_validation_pubkeys`` (PEM), plus an
optional ``bound_issuer`` and the ``leeway`` in seconds for ``exp``, ``nbf`` and ``iat``.

**A login** (:meth:`JwtLogin.login`, blocking: run it in a worker thread) verifies with PyJWT, never by hand:
only :data:`ALLOWED_ALGORITHMS` (``none`` and every HMAC algorithm are refused before any key is looked at,
so a public key can never serve as an HMAC secret); ``exp`` is required; the issuer and the role's audiences
are checked; then the role's subject, bound claims (glob values, a list claim matching when any element
does, nested claims addressed by a JSON pointer such as ``/kubernetes.io/namespace``, as Vault does) and the
user claim. A role that does not exist gets the very answer a wrong signature gets (:data:`LOGIN_REFUSED`),
after the same work (the role is read and the signature verified either way), so roles cannot be found out.
The token issued is an ordinary one (revocable, renewable up to the role's max_ttl) whose ``metadata`` holds
the role, the subject and the role's claim mappings. No error message or log line holds the JWT.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import jwt
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from app.errors import BadRequestError, PayloadTooLargeError, RoleNotFoundError
from app.keystore import KeyStore, RoleRecord, TokenRecord
from app.keystore.records import utc_now

from .attempts import AttemptLimiter
from .jwks import JwksCache, KeySource
from .security import Principal, new_token, require_grantable

__all__ = [
    "ALLOWED_ALGORITHMS",
    "LOGIN_REFUSED",
    "MAX_JWT_BYTES",
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

#: The JWS algorithms a login accepts: RSA, RSA-PSS, ECDSA and EdDSA signatures; never ``none`` nor HMAC.
ALLOWED_ALGORITHMS: tuple[str, ...] = ("RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA")
#: The longest JWT accepted (longer: 413).
MAX_JWT_BYTES = 16 * 1024
#: The one answer to a wrong signature, an unknown ``kid`` and a role that does not exist.
LOGIN_REFUSED = "login refused: the role does not exist or the JWT's signature does not verify"
#: A ``kid`` is an opaque name: no path separators, no spaces.
_KID = re.compile(r"[A-Za-z0-9_.=+:-]{1,256}")
#: Login attempts per client address and role and worker: a burst of this many, then one per interval.
LOGIN_BURST = 30
LOGIN_REFILL_SECONDS = 0.5
LOGIN_TRACKED = 8192
#: Login attempts per client address over every role, per worker: made-up role names each get a fresh
#: bucket of the limit above, so this one bounds what an address can try in all.
LOGIN_ADDRESS_BURST = 120
LOGIN_ADDRESS_REFILL_SECONDS = 0.1
#: The metadata keys a login always sets (claim mappings may not take them).
RESERVED_METADATA = ("role", "subject")


class RoleBindings(Protocol):
    """A method's bindings: what a caller's credential must carry to log in through a role of ``method``."""

    method: ClassVar[str]

    def to_stored(self) -> dict[str, Any]:
        """The JSON object stored as the role's bindings."""
        ...


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


class LoginLimits:
    """A worker's limits on login attempts: per client address over every role (:data:`LOGIN_ADDRESS_BURST`,
    then one per :data:`LOGIN_ADDRESS_REFILL_SECONDS`), and per address and role (:data:`LOGIN_BURST`, then
    one per :data:`LOGIN_REFILL_SECONDS`). Both count every attempt, whatever its outcome and method; the
    address's limit comes first, so trying role names that do not exist spends it too."""

    def __init__(self) -> None:
        self._per_address = AttemptLimiter(
            LOGIN_ADDRESS_BURST,
            LOGIN_ADDRESS_REFILL_SECONDS,
            LOGIN_TRACKED,
            "login attempts from this address",
        )
        self._per_role = AttemptLimiter(
            LOGIN_BURST, LOGIN_REFILL_SECONDS, LOGIN_TRACKED, "login attempts from this address for this role"
        )

    def attempt(self, address: str, role: str) -> None:
        """Count one login attempt from ``address`` through ``role``.

        Raises:
            TooManyRequestsError: either limit is spent (429 with the seconds until the next attempt).
        """
        self._per_address.attempt(address)
        self._per_role.attempt(f"{address} {role}")


def login_limiter() -> LoginLimits:
    """A worker's limits on login attempts (:class:`LoginLimits`)."""
    return LoginLimits()


def new_role(
    principal: Principal,
    name: str,
    scopes: tuple[str, ...],
    key_patterns: tuple[str, ...],
    ttl_seconds: int,
    max_ttl_seconds: int,
    bindings: RoleBindings,
) -> RoleRecord:
    """The role of ``bindings.method`` that ``principal`` asks to write, once it is checked that the admin
    could grant it.

    Raises:
        ForbiddenError: the role would grant scopes or key patterns beyond the caller's.
        BadRequestError: ``max_ttl_seconds`` below ``ttl_seconds``, or a claim mapping onto a reserved
            metadata key.
    """
    require_grantable(principal, scopes, key_patterns)
    if max_ttl_seconds < ttl_seconds:
        raise BadRequestError(f"max_ttl ({max_ttl_seconds}) may not be below ttl ({ttl_seconds})")
    if isinstance(bindings, JwtBindings):
        taken = sorted(set(bindings.claim_mappings.values()) & set(RESERVED_METADATA))
        if taken:
            raise BadRequestError(f"claim_mappings may not set the metadata key(s) {', '.join(taken)}")
    now = utc_now()
    return RoleRecord(
        name,
        bindings.method,
        scopes,
        key_patterns,
        ttl_seconds,
        max_ttl_seconds,
        bindings.to_stored(),
        now,
        now,
    )


def login_role(keystore: KeyStore, name: str, method: str) -> RoleRecord | None:
    """The role ``name`` of ``method``, or ``None`` (no such role, another method's, or a malformed name): a
    login tells none of these apart from a credential that does not verify."""
    try:
        role = keystore.get_role(name)
    except (RoleNotFoundError, BadRequestError):
        return None
    return role if role.method == method else None


def issue_login_token(
    keystore: KeyStore, role: RoleRecord, subject: str, metadata: Mapping[str, str] | None = None
) -> tuple[str, TokenRecord]:
    """Issue and store the token a login through ``role`` gets, whatever the method: the role's scopes, key
    patterns, ttl and max_ttl, and ``metadata`` with the role's name and ``subject`` (the caller, as the
    method names it: a JWT's user claim, a certificate's name; cut at 512 characters) over ``metadata``.

    The token is stored as reissuable (:meth:`~app.keystore.base.KeyStore.create_token`): the caller can
    get another by logging in again, so a store may commit it with less durability.

    Returns:
        The new token (show it once) and its stored record.

    Raises:
        ServiceUnavailableError: the keystore cannot serve now.
    """
    secret, record = new_token(
        role.scopes,
        role.key_patterns,
        f"{role.method} login: role {role.name}",
        ttl_seconds=role.ttl_seconds,
        max_ttl_seconds=role.max_ttl_seconds,
    )
    record = dataclasses.replace(
        record, metadata={**(metadata or {}), "role": role.name, "subject": subject[:512]}
    )
    # Reissuable: if a power loss takes it, the holder's next call gets 401 and it logs in again.
    keystore.create_token(record, reissuable=True)
    return secret, record


def check_jwt_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Return the JWT method's configuration to store, after checking it names exactly one key source.

    Raises:
        BadRequestError: no key source or more than one, a URL that is not ``https://``, a CA or a public key
            that is not PEM, a ``jwks_ca_pem`` without a URL, or a ``leeway`` outside 0..300.
    """
    sources = [
        name for name in ("jwks_url", "oidc_discovery_url", "jwt_validation_pubkeys") if config.get(name)
    ]
    if len(sources) != 1:
        raise BadRequestError(
            "give exactly one of jwks_url, oidc_discovery_url and jwt_validation_pubkeys"
            + (f" (got {', '.join(sources)})" if sources else "")
        )
    for name in ("jwks_url", "oidc_discovery_url"):
        url = config.get(name)
        if url is not None and (not isinstance(url, str) or not url.startswith("https://")):
            raise BadRequestError(f"{name} must be an https:// URL")
    ca_pem = config.get("jwks_ca_pem")
    if ca_pem is not None:
        if sources[0] == "jwt_validation_pubkeys":
            raise BadRequestError("jwks_ca_pem goes with jwks_url or oidc_discovery_url")
        if not isinstance(ca_pem, str) or "-----BEGIN CERTIFICATE-----" not in ca_pem:
            raise BadRequestError("jwks_ca_pem must be PEM certificates")
    for pem in config.get("jwt_validation_pubkeys") or ():
        _public_key(pem)
    leeway = config.get("leeway", 60)
    if not isinstance(leeway, int) or isinstance(leeway, bool) or not 0 <= leeway <= 300:
        raise BadRequestError("leeway must be 0..300 seconds")
    issuer = config.get("bound_issuer")
    if issuer is not None and not isinstance(issuer, str):
        raise BadRequestError("bound_issuer must be a string")
    return {name: value for name, value in {**config, "leeway": leeway}.items() if value is not None}


def _public_key(pem: object) -> Any:
    if not isinstance(pem, str):
        raise BadRequestError("jwt_validation_pubkeys must be PEM public keys")
    try:
        return load_pem_public_key(pem.encode())
    except (ValueError, TypeError) as exc:
        raise BadRequestError("a jwt_validation_pubkeys entry is not a PEM public key") from exc


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
        """Verify ``token`` for role ``role_name`` and issue a Keystream token; blocking (keystore, JWKS).

        Returns:
            The new token (show it once) and its stored record.

        Raises:
            PayloadTooLargeError: the JWT is longer than :data:`MAX_JWT_BYTES`.
            BadRequestError: a malformed JWT, an algorithm not allowed, a bad ``kid``, a JWT that fails a
                check (expired, not yet valid, issuer, audience, subject, bound claims, user claim), login
                not configured, or :data:`LOGIN_REFUSED`.
            IdentityProviderUnavailableError: the issuer's keys cannot be fetched and none are cached.
            ServiceUnavailableError: the keystore cannot serve now.
        """
        if len(token) > MAX_JWT_BYTES:
            raise PayloadTooLargeError(f"the JWT is longer than {MAX_JWT_BYTES} bytes")
        algorithm, kid = _header(token)
        role = login_role(self._keystore, role_name, "jwt")
        config = self._keystore.read_auth_config("jwt")
        if config is None:
            raise BadRequestError("JWT login is not configured: an admin must write the jwt config first")
        bindings = JwtBindings.from_stored(role.bindings) if role is not None else None
        claims = self._verify(token, algorithm, kid, config, bindings)
        if role is None or bindings is None:
            raise BadRequestError(LOGIN_REFUSED)
        if bindings.bound_subject is not None and claims.get("sub") != bindings.bound_subject:
            raise BadRequestError("the JWT's sub is not the role's bound subject")
        _check_bound_claims(claims, bindings.bound_claims)
        subject = claim_at(claims, bindings.user_claim)
        if not isinstance(subject, str) or not subject:
            raise BadRequestError(f"the JWT's user claim {bindings.user_claim!r} is not a non-empty string")
        return issue_login_token(self._keystore, role, subject, _mapped(claims, bindings.claim_mappings))

    def _verify(
        self,
        token: str,
        algorithm: str,
        kid: str | None,
        config: Mapping[str, Any],
        bindings: JwtBindings | None,
    ) -> dict[str, Any]:
        """The claims of ``token`` once PyJWT verified its signature, times, issuer and (with a role) its
        audience."""
        issuer = config.get("bound_issuer")
        required = ["exp", *(["iss"] if issuer else []), *(["aud"] if bindings else [])]
        options: dict[str, Any] = {"require": required, "verify_aud": bindings is not None}
        if "jwt_validation_pubkeys" in config:
            keys = [_public_key(pem) for pem in config["jwt_validation_pubkeys"]]
        else:
            source = KeySource(
                config.get("jwks_url"), config.get("jwks_ca_pem"), config.get("oidc_discovery_url")
            )
            found = self._jwks.key_for(source, kid)
            if found is not None and found.algorithm is not None and found.algorithm != algorithm:
                # The issuer said which algorithm this key signs with: a JWT naming another is not its.
                raise BadRequestError(
                    f"the JWT's alg {algorithm} is not the alg {found.algorithm} its key is published for"
                )
            keys = [] if found is None else [found.jwk.key]
        for key in keys:
            try:
                claims: dict[str, Any] = jwt.decode(
                    token,
                    key=key,
                    algorithms=[algorithm],
                    audience=list(bindings.bound_audiences) if bindings else None,
                    issuer=issuer,
                    leeway=int(config.get("leeway", 60)),
                    options=options,  # type: ignore[arg-type]
                )
                return claims
            except (jwt.InvalidSignatureError, jwt.InvalidKeyError, jwt.InvalidAlgorithmError, TypeError):
                continue
            except jwt.PyJWTError as exc:
                raise BadRequestError(_claim_problem(exc)) from None
        raise BadRequestError(LOGIN_REFUSED)


def _header(token: str) -> tuple[str, str | None]:
    """The JWT's algorithm and ``kid``, read before any key is chosen and checked against the allow-list.

    PyJWT reads the header segment alone: it checks every character of every segment it is given in a Python
    loop, and it reads the whole token again when it verifies, so handing it the whole token here cost a
    login about a tenth of its time. A malformed payload or signature is refused by that verification.
    """
    header_segment, dots = token.partition(".")[0], token.count(".")
    try:
        if dots != 2:
            raise jwt.DecodeError("not three segments")
        header = jwt.get_unverified_header(header_segment + "..")
    except jwt.PyJWTError:
        raise BadRequestError(
            "the JWT is malformed (expected three base64url parts, a JSON header)"
        ) from None
    algorithm = header.get("alg")
    if algorithm not in ALLOWED_ALGORITHMS:
        shown = algorithm if isinstance(algorithm, str) and len(algorithm) <= 16 else "?"
        raise BadRequestError(
            f"the JWT's algorithm {shown!r} is not accepted; allowed: {', '.join(ALLOWED_ALGORITHMS)}"
        )
    kid = header.get("kid")
    if kid is not None and (not isinstance(kid, str) or not _KID.fullmatch(kid)):
        raise BadRequestError("the JWT's kid is not a key id (1-256 of A-Z a-z 0-9 _ . = + : -)")
    return str(algorithm), kid


def _claim_problem(exc: jwt.PyJWTError) -> str:
    """What a verified JWT's claims got wrong, in words that name no claim value."""
    if isinstance(exc, jwt.ExpiredSignatureError):
        return "the JWT has expired"
    if isinstance(exc, jwt.ImmatureSignatureError):
        return "the JWT is not valid yet (nbf or iat is in the future)"
    if isinstance(exc, jwt.InvalidIssuerError):
        return "the JWT's issuer is not the configured bound_issuer"
    if isinstance(exc, jwt.InvalidAudienceError):
        return "the JWT's audience matches none of the role's bound_audiences"
    if isinstance(exc, jwt.MissingRequiredClaimError):
        return f"the JWT has no {exc.claim!r} claim"
    if isinstance(exc, jwt.DecodeError):  # the payload or the signature is not base64url, or not JSON
        return "the JWT is malformed (expected three base64url parts, a JSON header)"
    return f"the JWT is invalid: {type(exc).__name__}"
