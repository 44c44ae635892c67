"""``/v1/auth``: login roles (admin), the JWT method's configuration (admin), the JWT and the certificate
logins (no token).

* ``POST /v1/auth/roles/{role_name}`` writes (creates or replaces) a role: the scopes, key patterns,
  ``ttl`` and ``max_ttl`` of the tokens it issues, and the method's bindings (for ``jwt``:
  ``bound_audiences``, ``bound_subject``, ``bound_claims``, ``user_claim``, ``claim_mappings``; for ``cert``:
  ``allowed_common_names``, ``allowed_dns_sans``, ``allowed_uri_sans``, ``allowed_organizational_units``).
  Like token management it needs an admin token with the key pattern ``*``, and a role never grants a scope
  the admin lacks.
  ``GET /v1/auth/roles`` lists roles, ``GET``/``DELETE /v1/auth/roles/{role_name}`` read or delete one.
* ``POST /v1/auth/jwt/config`` writes the JWT method's key source, ``bound_issuer`` and ``leeway``;
  ``GET`` reads it back.
* ``POST /v1/auth/jwt/login`` ``{"role", "jwt"}`` answers a new token (201) with its id, expiry, scopes, key
  patterns and metadata (role, subject). ``POST /v1/auth/cert/login`` ``{"role"}`` answers the same for the
  client certificate this connection's TLS handshake verified (mTLS at this server). Attempts of both are
  rate-limited per client address over every role and per address and role, the same limits for both
  methods (429 with ``Retry-After``); the audit line
  records the role, the subject and the token id, never the JWT or the certificate.

Every worker and replica reads roles and the configuration from the keystore at each login (one read for
both), so a change applies at the next login everywhere; the issuer's keys are cached per worker
(:mod:`app.services.jwks`). Both logins are served ahead of FastAPI's router by the fast dispatcher
(:data:`REQUEST_HANDLERS`, :mod:`app.api.hotpath`), through the same middleware and with the same answers.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Annotated, Any, Literal

from anyio import to_thread
from fastapi import APIRouter, Request, Response, status
from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from starlette.types import Scope as AsgiScope

from app.api import paths
from app.api.deps import JsonBody, StateDep, TokenAdminDep
from app.api.grants import KeyPattern, Scope, TtlSeconds, token_json
from app.api.middleware.audit import note
from app.api.openapi import errors
from app.api.request_handler import Handler, request_handler
from app.api.strict_json import StrictJsonRoute
from app.core.token_format import MAX_TOKEN_TTL_SECONDS
from app.core.waiting import WouldWait, without_waiting
from app.keystore import RoleRecord, TokenRecord
from app.services.cert_login import CertBindings, CertLogin
from app.services.identity import JwtBindings, JwtLogin, check_jwt_config, new_role
from app.state import ServiceState

router = APIRouter(route_class=StrictJsonRoute, tags=["auth"])

#: Default lifetimes of a role's tokens.
DEFAULT_ROLE_TTL = 3600
DEFAULT_ROLE_MAX_TTL = 86_400

ShortText = Annotated[str, StringConstraints(min_length=1, max_length=512)]
#: A claim: a top-level name, or a JSON pointer such as ``/kubernetes.io/namespace``.
ClaimPath = Annotated[str, StringConstraints(min_length=1, max_length=256)]
MetadataKey = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]
RoleName = Annotated[str, StringConstraints(max_length=128)]
#: A glob over a certificate's names (:mod:`app.services.cert_login`): printable, no spaces at either end.
NamePattern = Annotated[
    str,
    StringConstraints(
        pattern=r"^[^\s\x00-\x1f\x7f](?:[^\x00-\x1f\x7f]*[^\s\x00-\x1f\x7f])?$", max_length=512
    ),
]


class _RoleFields(BaseModel):
    """What a role's tokens may do, whatever the method."""

    model_config = ConfigDict(extra="forbid", strict=True)

    scopes: list[Scope] = Field(min_length=1)
    key_patterns: list[KeyPattern] = Field(default_factory=lambda: ["*"], min_length=1, max_length=64)
    ttl: TtlSeconds = Field(default=DEFAULT_ROLE_TTL, description="Seconds an issued token lives.")
    max_ttl: TtlSeconds | None = Field(
        default=None, description="Seconds after login beyond which no renewal goes (default: 24 h, or ttl)."
    )


class JwtRoleBody(_RoleFields):
    """A ``jwt`` role: what its tokens may do, and what a JWT must carry to get one."""

    method: Literal["jwt"]
    bound_audiences: list[ShortText] = Field(min_length=1, max_length=32)
    bound_subject: ShortText | None = None
    bound_claims: dict[ClaimPath, ShortText | list[ShortText]] = Field(default_factory=dict, max_length=32)
    user_claim: ClaimPath = "sub"
    claim_mappings: dict[ClaimPath, MetadataKey] = Field(default_factory=dict, max_length=16)

    def bindings(self) -> JwtBindings:
        """The JWT bindings this body asks for."""
        return JwtBindings(
            bound_audiences=tuple(self.bound_audiences),
            bound_subject=self.bound_subject,
            bound_claims={
                path: (values,) if isinstance(values, str) else tuple(values)
                for path, values in self.bound_claims.items()
            },
            user_claim=self.user_claim,
            claim_mappings=self.claim_mappings,
        )


class CertRoleBody(_RoleFields):
    """A ``cert`` role: what its tokens may do, and the names (globs) a verified client certificate must
    carry to get one; at least one of the first three lists (else 400)."""

    method: Literal["cert"]
    allowed_common_names: list[NamePattern] = Field(default_factory=list, max_length=64)
    allowed_dns_sans: list[NamePattern] = Field(default_factory=list, max_length=64)
    allowed_uri_sans: list[NamePattern] = Field(default_factory=list, max_length=64)
    allowed_organizational_units: list[NamePattern] = Field(default_factory=list, max_length=64)

    def bindings(self) -> CertBindings:
        """The certificate bindings this body asks for (raises ``BadRequestError`` when none names a
        caller)."""
        return CertBindings(
            allowed_common_names=tuple(self.allowed_common_names),
            allowed_dns_sans=tuple(self.allowed_dns_sans),
            allowed_uri_sans=tuple(self.allowed_uri_sans),
            allowed_organizational_units=tuple(self.allowed_organizational_units),
        )


RoleBody = Annotated[JwtRoleBody | CertRoleBody, Field(discriminator="method")]


class JwtConfigBody(BaseModel):
    """Where the JWT issuer's public keys come from (exactly one source), the issuer, the clock leeway."""

    model_config = ConfigDict(extra="forbid", strict=True)

    jwks_url: str | None = Field(default=None, max_length=2048)
    jwks_ca_pem: str | None = Field(default=None, max_length=32_768)
    oidc_discovery_url: str | None = Field(default=None, max_length=2048)
    jwt_validation_pubkeys: list[Annotated[str, StringConstraints(max_length=8192)]] | None = Field(
        default=None, max_length=8
    )
    bound_issuer: str | None = Field(default=None, max_length=2048)
    leeway: int = Field(default=60, ge=0, le=300)


class CertLoginBody(BaseModel):
    """A certificate login: the role to log in through (the credential is the TLS client certificate)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    role: RoleName


class LoginBody(BaseModel):
    """A JWT login: the role to log in through, and the JWT (at most 16 KiB, else 413)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    role: RoleName
    jwt: str


@router.post(paths.AUTH_ROLE, dependencies=[JsonBody], responses=errors(403, 415, 422))
async def write_role(
    role_name: str, body: RoleBody, principal: TokenAdminDep, state: StateDep
) -> dict[str, Any]:
    """Create or replace role ``role_name``; it may grant no scope the caller lacks."""
    max_ttl = (
        body.max_ttl
        if body.max_ttl is not None
        else min(max(body.ttl, DEFAULT_ROLE_MAX_TTL), MAX_TOKEN_TTL_SECONDS)
    )
    record = new_role(
        principal,
        role_name,
        tuple(dict.fromkeys(body.scopes)),
        tuple(dict.fromkeys(body.key_patterns)),
        body.ttl,
        max_ttl,
        body.bindings(),
    )
    stored: RoleRecord = await to_thread.run_sync(state.keystore.write_role, record)
    return stored.to_json()


@router.get(paths.AUTH_ROLES, responses=errors(403))
async def list_roles(principal: TokenAdminDep, state: StateDep) -> dict[str, Any]:
    """Every role."""
    records = await to_thread.run_sync(state.keystore.list_roles)
    return {"roles": [record.to_json() for record in records]}


@router.get(paths.AUTH_ROLE, responses=errors(403, 404))
async def get_role(role_name: str, principal: TokenAdminDep, state: StateDep) -> dict[str, Any]:
    """One role."""
    record: RoleRecord = await to_thread.run_sync(state.keystore.get_role, role_name)
    return record.to_json()


@router.delete(paths.AUTH_ROLE, status_code=status.HTTP_204_NO_CONTENT, responses=errors(403, 404))
async def delete_role(role_name: str, principal: TokenAdminDep, state: StateDep) -> Response:
    """Delete a role; the tokens it issued live on until they expire or are revoked."""
    await to_thread.run_sync(state.keystore.delete_role, role_name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(paths.JWT_CONFIG, dependencies=[JsonBody], responses=errors(403, 415, 422))
async def write_jwt_config(body: JwtConfigBody, principal: TokenAdminDep, state: StateDep) -> dict[str, Any]:
    """Write the JWT method's configuration (exactly one of ``jwks_url``, ``oidc_discovery_url`` and
    ``jwt_validation_pubkeys``)."""
    config = check_jwt_config(body.model_dump())
    await to_thread.run_sync(state.keystore.write_auth_config, "jwt", config)
    return config


@router.get(paths.JWT_CONFIG, responses=errors(403, 404))
async def read_jwt_config(principal: TokenAdminDep, state: StateDep) -> dict[str, Any]:
    """The JWT method's configuration (``{}`` when none was written)."""
    config = await to_thread.run_sync(state.keystore.read_auth_config, "jwt")
    return dict(config or {})


async def _login(
    request: Request, state: ServiceState, role: str, verify: Callable[[], tuple[str, TokenRecord]]
) -> dict[str, Any]:
    """A login through ``role`` by any method: count the attempt (per client address, and per address and
    role; the same limits for every method), run the method's ``verify`` (which issues the token), note the
    role, subject and token id for the audit line (never the credential), and answer the token.

    ``verify`` runs on the event loop first, where it may not wait (:mod:`app.core.waiting`): with the
    issuer's keys held and the SQLite keystore free it finishes there, without the two thread wake-ups a hop
    costs (a fifth of a login's server CPU). Whatever would wait (a JWKS fetch, a lock held by another
    writer, PostgreSQL) raises :class:`WouldWait` having changed nothing, and ``verify`` runs again in a
    worker thread."""
    address = request.client.host if request.client else "unknown"
    state.login_attempts.attempt(address, role)
    try:
        with without_waiting():
            token, record = verify()
    except WouldWait:
        token, record = await to_thread.run_sync(verify)
    note(
        request.scope,
        role=record.metadata["role"],
        subject=record.metadata["subject"],
        issued_token_id=record.token_id,
    )
    return {"token": token, **token_json(record)}


@router.post(
    paths.JWT_LOGIN,
    status_code=status.HTTP_201_CREATED,
    dependencies=[JsonBody],
    responses=errors(413, 415, 422, 429, 503),
)
async def login_jwt(body: LoginBody, request: Request, state: StateDep) -> dict[str, Any]:
    """Log in with a JWT through a role; the answer's ``token`` is the only time the secret is shown.

    A role that does not exist and a JWT whose signature does not verify get the same 400.
    """
    login = JwtLogin(state.keystore, state.jwks)
    return await _login(request, state, body.role, partial(login.login, body.role, body.jwt))


def verified_client_certificate(scope: AsgiScope) -> str | None:
    """The PEM client certificate the server's TLS handshake verified, from the ASGI TLS extension the
    serving layer sets (:func:`app.serving.tls.client_tls_extension`); ``None`` on plain HTTP, behind a
    TLS-terminating proxy and without mTLS. Never read from a header."""
    chain = scope.get("extensions", {}).get("tls", {}).get("client_cert_chain") or ()
    return chain[0] if chain and isinstance(chain[0], str) else None


@router.post(
    paths.CERT_LOGIN,
    status_code=status.HTTP_201_CREATED,
    dependencies=[JsonBody],
    responses=errors(415, 422, 429),
)
async def login_cert(body: CertLoginBody, request: Request, state: StateDep) -> dict[str, Any]:
    """Log in with the client certificate this connection's TLS handshake verified, through a ``cert`` role;
    the answer's ``token`` is the only time the secret is shown.

    No verified certificate is a 400 ``no client certificate``; a role that does not exist, is not a cert
    role, or whose allowed names the certificate does not meet get one other 400.
    """
    login = CertLogin(state.keystore)
    certificate = verified_client_certificate(request.scope)
    return await _login(request, state, body.role, partial(login.login, body.role, certificate))


#: The logins as handlers of the request alone, by path, for the fast dispatcher (:mod:`app.api.hotpath`,
#: :mod:`app.api.request_handler`): each gives its endpoint what FastAPI would, in FastAPI's order, and
#: answers 201 with its JSON.
REQUEST_HANDLERS: dict[str, Handler] = {
    paths.JWT_LOGIN: request_handler(login_jwt, LoginBody, status_code=status.HTTP_201_CREATED),
    paths.CERT_LOGIN: request_handler(login_cert, CertLoginBody, status_code=status.HTTP_201_CREATED),
}
