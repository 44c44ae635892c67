"""What every login method shares: roles, the limits on attempts, and the token a login issues.

**Roles** (:func:`new_role`) carry what a token issued through them may do (scopes, key patterns, ttl,
max_ttl) and the bindings its method's credential must meet (:class:`RoleBindings`: a JWT's
:class:`~app.services.jwt_login.JwtBindings`, a client certificate's
:class:`~app.services.cert_login.CertBindings`). An admin can write a role granting no more than it could
grant a token it creates (:func:`~app.services.security.require_grantable`). A login finds its role with
:func:`login_role`, which tells a missing role, another method's role and a malformed name apart from
nothing: each method answers all of them as it answers a credential that does not verify.

**Attempts** are limited per client address and per address and role (:class:`LoginLimits`), the same
limits for every method.

**The token** a login issues (:func:`issue_login_token`) is an ordinary one (revocable, renewable up to the
role's max_ttl) whose ``metadata`` holds the role, the subject and what the method's bindings add.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, Protocol

from app.errors import BadRequestError, RoleNotFoundError
from app.keystore import KeyStore, RoleRecord, TokenRecord
from app.keystore.records import utc_now

from .attempts import AttemptLimiter
from .security import Principal, new_token, require_grantable

__all__ = [
    "LOGIN_ADDRESS_BURST",
    "LOGIN_ADDRESS_REFILL_SECONDS",
    "LOGIN_BURST",
    "LOGIN_REFILL_SECONDS",
    "LOGIN_TRACKED",
    "RESERVED_METADATA",
    "LoginLimits",
    "RoleBindings",
    "issue_login_token",
    "login_limiter",
    "login_role",
    "login_role_and_config",
    "new_role",
]

#: Login attempts per client address and role and worker: a burst of this many, then one per interval.
LOGIN_BURST = 30
LOGIN_REFILL_SECONDS = 0.5
LOGIN_TRACKED = 8192
#: Login attempts per client address over every role, per worker: made-up role names each get a fresh
#: bucket of the limit above, so this one bounds what an address can try in all.
LOGIN_ADDRESS_BURST = 120
LOGIN_ADDRESS_REFILL_SECONDS = 0.1
#: The metadata keys a login always sets (a method's bindings may not take them).
RESERVED_METADATA = ("role", "subject")


class RoleBindings(Protocol):
    """A method's bindings: what a caller's credential must carry to log in through a role of ``method``."""

    method: ClassVar[str]

    def to_stored(self) -> dict[str, Any]:
        """The JSON object stored as the role's bindings."""
        ...

    def metadata_keys(self) -> tuple[str, ...]:
        """The token metadata keys a login through these bindings sets besides :data:`RESERVED_METADATA`."""
        ...


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
        BadRequestError: ``max_ttl_seconds`` below ``ttl_seconds``, or bindings that would set a reserved
            metadata key (a JWT role's claim mappings).
    """
    require_grantable(principal, scopes, key_patterns)
    if max_ttl_seconds < ttl_seconds:
        raise BadRequestError(f"max_ttl ({max_ttl_seconds}) may not be below ttl ({ttl_seconds})")
    taken = sorted(set(bindings.metadata_keys()) & set(RESERVED_METADATA))
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


def login_role_and_config(
    keystore: KeyStore, name: str, method: str
) -> tuple[RoleRecord | None, Mapping[str, Any] | None]:
    """The role ``name`` of ``method`` (``None`` as :func:`login_role` says) and ``method``'s configuration
    (``None`` when none was written), in one read of the keystore (:meth:`~app.keystore.base.KeyStore.
    read_login`).

    Raises:
        ServiceUnavailableError: the keystore cannot serve now.
    """
    role, config = keystore.read_login(name, method)
    return (role if role is not None and role.method == method else None), config


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
