"""A JWT's verification with PyJWT, never by hand: its header, its signature and its registered claims.

Only :data:`ALLOWED_ALGORITHMS` are accepted (``none`` and every HMAC algorithm are refused from the header,
before any key is looked at, so a public key can never serve as an HMAC secret: :func:`read_header`); a JWT
longer than :data:`MAX_JWT_BYTES` is refused unread. :func:`verified_claims` then has PyJWT check the
signature against each candidate key, ``exp`` (required), ``nbf`` and ``iat`` with the configuration's leeway,
the issuer, and the audience. A JWT that no key verifies gets :data:`LOGIN_REFUSED`, the very answer a role
that does not exist gets. No error message names a claim's value or holds the JWT.

PyJWT checks each segment's characters against the base64url alphabet with a Python generator, one step per
character: about 60 µs of a 1 KiB RS256 JWT's ~140 µs verification, twice the RSA signature check. The
instances here (:class:`_SegmentCheckedJWS`) do the same checks, in the same order and with the same errors,
with ``bytes.translate`` (C); everything else (JSON, algorithms, signatures, claims) is PyJWT's own code.
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Sequence
from typing import Any

import jwt
from jwt.utils import base64url_decode, base64url_encode

from app.errors import BadRequestError, PayloadTooLargeError

__all__ = [
    "ALLOWED_ALGORITHMS",
    "LOGIN_REFUSED",
    "MAX_JWT_BYTES",
    "read_header",
    "verified_claims",
]

#: The JWS algorithms a login accepts: RSA, RSA-PSS, ECDSA and EdDSA signatures; never ``none`` nor HMAC.
ALLOWED_ALGORITHMS: tuple[str, ...] = ("RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA")
#: The longest JWT accepted (longer: 413).
MAX_JWT_BYTES = 16 * 1024
#: The one answer to a wrong signature, an unknown ``kid`` and a role that does not exist.
LOGIN_REFUSED = "login refused: the role does not exist or the JWT's signature does not verify"
#: A ``kid`` is an opaque name: no path separators, no spaces.
_KID = re.compile(r"[A-Za-z0-9_.=+:-]{1,256}")
#: The base64url alphabet (RFC 4648 section 5), the characters a segment may hold besides its padding.
_BASE64URL_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


class _SegmentCheckedJWS(jwt.PyJWS):
    """PyJWT's JWS with its segment check (``PyJWS._decode_base64url_segment``, PyJWT 2.15) done in C.

    Same checks, same order, same :class:`jwt.DecodeError`: at most two ``=`` of padding and only on a
    segment whose length is a multiple of four, no length of the form 4k+1, only base64url characters, and a
    segment that re-encodes to itself (no stray bits). ``tests/app/services/test_jwt_verify.py`` compares it
    with PyJWT's on every shape of segment and fails when PyJWT's own check changes, so that an upgrade is
    reviewed.
    """

    @staticmethod
    def _decode_base64url_segment(segment: bytes, name: str) -> bytes:
        stripped = segment.rstrip(b"=")
        padding = len(segment) - len(stripped)
        if (
            padding > 2
            or (padding and len(segment) % 4 != 0)
            or len(stripped) % 4 == 1
            or stripped.translate(None, _BASE64URL_ALPHABET)
        ):
            raise jwt.DecodeError(f"Invalid {name} padding")
        try:
            decoded = base64url_decode(stripped)
        except (TypeError, binascii.Error) as err:
            raise jwt.DecodeError(f"Invalid {name} padding") from err
        if base64url_encode(decoded) != stripped:
            raise jwt.DecodeError(f"Invalid {name} padding")
        return decoded


class _SegmentCheckedJWT(jwt.PyJWT):
    """PyJWT's JWT (claims, options, everything) over :class:`_SegmentCheckedJWS`."""

    def __init__(self) -> None:
        super().__init__()
        self._jws = _SegmentCheckedJWS(options=self._get_sig_options())


_JWS = _SegmentCheckedJWS()
_JWT = _SegmentCheckedJWT()


def read_header(token: str) -> tuple[str, str | None]:
    """The JWT's algorithm and ``kid``, read before any key is chosen and checked against the allow-list.

    PyJWT reads the header segment alone: it checks every character of every segment it is given in a Python
    loop, and it reads the whole token again when it verifies, so handing it the whole token here cost a
    login about a tenth of its time. A malformed payload or signature is refused by that verification.

    Raises:
        PayloadTooLargeError: the JWT is longer than :data:`MAX_JWT_BYTES`.
        BadRequestError: not three segments, a header that is not JSON, an algorithm not allowed, or a
            ``kid`` that is not a key id.
    """
    if len(token) > MAX_JWT_BYTES:
        raise PayloadTooLargeError(f"the JWT is longer than {MAX_JWT_BYTES} bytes")
    header_segment, dots = token.partition(".")[0], token.count(".")
    try:
        if dots != 2:
            raise jwt.DecodeError("not three segments")
        header = _JWS.get_unverified_header(header_segment + "..")
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


def verified_claims(
    token: str,
    algorithm: str,
    keys: Sequence[Any],
    *,
    issuer: str | None,
    audiences: Sequence[str] | None,
    leeway: int,
) -> dict[str, Any]:
    """The claims of ``token`` once PyJWT verified its signature with one of ``keys`` under ``algorithm``
    (from :func:`read_header`), its times with ``leeway`` seconds, ``issuer`` (when set) and, with
    ``audiences``, its audience (without, the audience is not checked: a login without a role refuses after
    the same work).

    Raises:
        BadRequestError: :data:`LOGIN_REFUSED` when no key verifies the signature; otherwise what the claims
            got wrong (expired, not yet valid, issuer, audience, a required claim missing, malformed).
    """
    required = ["exp", *(["iss"] if issuer else []), *(["aud"] if audiences is not None else [])]
    options: dict[str, Any] = {"require": required, "verify_aud": audiences is not None}
    for key in keys:
        try:
            claims: dict[str, Any] = _JWT.decode(
                token,
                key=key,
                algorithms=[algorithm],
                audience=list(audiences) if audiences is not None else None,
                issuer=issuer,
                leeway=leeway,
                options=options,  # type: ignore[arg-type]
            )
            return claims
        except (jwt.InvalidSignatureError, jwt.InvalidKeyError, jwt.InvalidAlgorithmError, TypeError):
            continue
        except jwt.PyJWTError as exc:
            raise BadRequestError(_claim_problem(exc)) from None
    raise BadRequestError(LOGIN_REFUSED)


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
