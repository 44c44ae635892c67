"""Certificate login: the ``cert`` method's role bindings, and how a verified client certificate meets them.

A ``cert`` role (:class:`CertBindings`) names what the client certificate the TLS layer verified must carry:
``allowed_common_names``, ``allowed_dns_sans``, ``allowed_uri_sans`` (at least one of these three) and,
optionally, ``allowed_organizational_units``. Each list holds glob patterns (:func:`glob_matches`). A
certificate meets the role when, for every list the role sets, at least one of the certificate's values of
that kind matches at least one pattern of the list (Vault's ``cert`` method reads its ``allowed_*`` lists the
same way).

The glob rule, one for every list: ``*`` matches one or more characters other than ``/``; every other
character matches itself. So ``spiffe://example.org/ns/*/sa/billing`` matches
``spiffe://example.org/ns/prod/sa/billing`` but neither ``spiffe://example.org/ns/a/b/sa/billing`` nor
``spiffe://example.org/ns//sa/billing``, and ``*.example.org`` matches ``api.example.org`` and
``a.b.example.org`` (a DNS name holds no ``/``). DNS names are compared without regard to case (RFC 4343);
common names, organizational units and URIs (SPIFFE IDs are lowercase by their specification) exactly.

**A login** (:meth:`CertLogin.login`, blocking: on the event loop only inside
:func:`~app.core.waiting.without_waiting`, else in a worker thread) takes the PEM certificate the
serving layer put in the request's scope after the TLS handshake verified it (never a header), reads its
names (:meth:`CertificateIdentity.from_pem`) and issues the same kind of token a JWT login does
(:func:`~app.services.login.issue_login_token`), with the matched name as ``metadata.subject``. A role
that does not exist, a role of another method and a certificate that meets none of the role's lists get one
answer (:data:`CERT_LOGIN_REFUSED`), so roles cannot be found out by trying names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

from cryptography import x509
from cryptography.x509.oid import NameOID

from app.errors import BadRequestError
from app.keystore import KeyStore, TokenRecord

from .login import issue_login_token, login_role

__all__ = [
    "CERT_LOGIN_REFUSED",
    "MATCHED_KINDS",
    "NO_CLIENT_CERTIFICATE",
    "CertBindings",
    "CertLogin",
    "CertificateIdentity",
    "glob_matches",
    "matched_subject",
]

#: The answer to a login over a connection without a certificate the TLS handshake verified.
NO_CLIENT_CERTIFICATE = (
    "no client certificate: certificate login needs a connection whose TLS handshake with this server "
    "verified a client certificate (KEYSTREAM_TLS_CLIENT_CA_FILE); behind a TLS-terminating proxy it is off"
)
#: The one answer to an unknown role, a role of another method, and a certificate that meets no binding.
CERT_LOGIN_REFUSED = (
    "login refused: the role does not exist, is not a cert role, or the client certificate meets none of its "
    "allowed names"
)

#: The binding lists that name a caller, in the order the token's subject is taken from: a workload's URI
#: (a SPIFFE ID) names it best, then its DNS name, then the subject's common name.
MATCHED_KINDS: tuple[str, ...] = ("allowed_uri_sans", "allowed_dns_sans", "allowed_common_names")


@lru_cache(maxsize=1024)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile("[^/]+".join(re.escape(part) for part in pattern.split("*")), re.DOTALL)


def glob_matches(pattern: str, value: str) -> bool:
    """Whether ``value`` matches ``pattern`` whole: ``*`` stands for one or more characters other than
    ``/``, every other character for itself."""
    return _compiled(pattern).fullmatch(value) is not None


@dataclass(frozen=True)
class CertificateIdentity:
    """What a client certificate says about its holder: the subject's common names and organizational units,
    and the DNS and URI subject alternative names."""

    common_names: tuple[str, ...] = ()
    organizational_units: tuple[str, ...] = ()
    dns_sans: tuple[str, ...] = ()
    uri_sans: tuple[str, ...] = ()

    @classmethod
    def from_pem(cls, pem: str) -> CertificateIdentity:
        """The names a PEM certificate carries.

        Raises:
            BadRequestError: ``pem`` is not a PEM certificate, or its subject alternative names do not parse.
        """
        try:
            certificate = x509.load_pem_x509_certificate(pem.encode())
            try:
                names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            except x509.ExtensionNotFound:
                names = x509.SubjectAlternativeName([])
        except ValueError:
            raise BadRequestError("the client certificate does not parse as an X.509 certificate") from None

        def attributes(oid: x509.ObjectIdentifier) -> tuple[str, ...]:
            found = certificate.subject.get_attributes_for_oid(oid)
            return tuple(item.value for item in found if isinstance(item.value, str))

        return cls(
            common_names=attributes(NameOID.COMMON_NAME),
            organizational_units=attributes(NameOID.ORGANIZATIONAL_UNIT_NAME),
            dns_sans=tuple(names.get_values_for_type(x509.DNSName)),
            uri_sans=tuple(names.get_values_for_type(x509.UniformResourceIdentifier)),
        )

    def values(self, kind: str) -> tuple[str, ...]:
        """The certificate's values a binding list of ``kind`` (``allowed_dns_sans``...) is matched
        against; DNS names lowercased."""
        if kind == "allowed_common_names":
            return self.common_names
        if kind == "allowed_organizational_units":
            return self.organizational_units
        if kind == "allowed_dns_sans":
            return tuple(name.lower() for name in self.dns_sans)
        if kind == "allowed_uri_sans":
            return self.uri_sans
        raise ValueError(f"unknown binding kind {kind!r}")


@dataclass(frozen=True)
class CertBindings:
    """What a verified client certificate must carry to log in through a ``cert`` role (stored as the role's
    ``bindings``).

    Raises:
        BadRequestError: none of ``allowed_common_names``, ``allowed_dns_sans`` and ``allowed_uri_sans`` is
            set (a role that any certificate of the CA meets would be too easy to write by mistake), or a
            pattern is empty.
    """

    method: ClassVar[str] = "cert"

    allowed_common_names: tuple[str, ...] = ()
    allowed_dns_sans: tuple[str, ...] = ()
    allowed_uri_sans: tuple[str, ...] = ()
    allowed_organizational_units: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not any(getattr(self, kind) for kind in MATCHED_KINDS):
            raise BadRequestError(
                "a cert role needs at least one of allowed_common_names, allowed_dns_sans and "
                "allowed_uri_sans"
            )
        for kind in (*MATCHED_KINDS, "allowed_organizational_units"):
            if any(not pattern for pattern in getattr(self, kind)):
                raise BadRequestError(f"{kind} may not hold an empty pattern")

    def metadata_keys(self) -> tuple[str, ...]:
        """None: a certificate login's metadata is the role and the subject alone."""
        return ()

    def to_stored(self) -> dict[str, Any]:
        """The JSON object stored as the role's bindings."""
        return {
            "allowed_common_names": list(self.allowed_common_names),
            "allowed_dns_sans": [pattern.lower() for pattern in self.allowed_dns_sans],
            "allowed_uri_sans": list(self.allowed_uri_sans),
            "allowed_organizational_units": list(self.allowed_organizational_units),
        }

    @classmethod
    def from_stored(cls, stored: Mapping[str, Any]) -> CertBindings:
        """The bindings of a stored role (written by :meth:`to_stored`)."""
        return cls(
            allowed_common_names=tuple(stored.get("allowed_common_names", ())),
            allowed_dns_sans=tuple(stored.get("allowed_dns_sans", ())),
            allowed_uri_sans=tuple(stored.get("allowed_uri_sans", ())),
            allowed_organizational_units=tuple(stored.get("allowed_organizational_units", ())),
        )


def _first_match(patterns: Iterable[str], values: Iterable[str]) -> str | None:
    for value in values:
        if any(glob_matches(pattern, value) for pattern in patterns):
            return value
    return None


def matched_subject(bindings: CertBindings, identity: CertificateIdentity) -> str | None:
    """The subject a certificate with ``identity`` logs in as through a role with ``bindings``, or ``None``
    when it does not meet them.

    Every list the role sets must be met by one of the certificate's values of that kind; the subject is the
    value that met the first set list of :data:`MATCHED_KINDS` (URI SAN, then DNS SAN, then common name).
    """
    subject: str | None = None
    for kind in (*MATCHED_KINDS, "allowed_organizational_units"):
        patterns = getattr(bindings, kind)
        if not patterns:
            continue
        found = _first_match(patterns, identity.values(kind))
        if found is None:
            return None
        if subject is None and kind != "allowed_organizational_units":
            subject = found
    return subject


class CertLogin:
    """Certificate logins against the keystore's ``cert`` roles (see the module doc).

    Args:
        keystore: where roles and the issued tokens live.
    """

    def __init__(self, keystore: KeyStore) -> None:
        self._keystore = keystore

    def login(self, role_name: str, certificate_pem: str | None) -> tuple[str, TokenRecord]:
        """Match the verified client certificate against role ``role_name`` and issue a Keystream token;
        blocking (keystore), or :class:`~app.core.waiting.WouldWait` having changed nothing where waiting is
        refused.

        Args:
            role_name: the role to log in through.
            certificate_pem: the client certificate the TLS handshake verified, or ``None`` without one.

        Returns:
            The new token (show it once) and its stored record.

        Raises:
            BadRequestError: :data:`NO_CLIENT_CERTIFICATE`, or :data:`CERT_LOGIN_REFUSED`.
            ServiceUnavailableError: the keystore cannot serve now.
        """
        if certificate_pem is None:
            raise BadRequestError(NO_CLIENT_CERTIFICATE)
        identity = CertificateIdentity.from_pem(certificate_pem)
        role = login_role(self._keystore, role_name, CertBindings.method)
        if role is None:
            raise BadRequestError(CERT_LOGIN_REFUSED)
        subject = matched_subject(CertBindings.from_stored(role.bindings), identity)
        if subject is None:
            raise BadRequestError(CERT_LOGIN_REFUSED)
        return issue_login_token(self._keystore, role, subject)
