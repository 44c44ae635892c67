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
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

from app.errors import BadRequestError

__all__ = ["MATCHED_KINDS", "CertBindings", "CertificateIdentity", "glob_matches", "matched_subject"]

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
