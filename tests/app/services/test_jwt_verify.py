"""A JWT's verification: the segment check done in C answers exactly as PyJWT's own (every shape of segment,
and whole JWTs through header reading and verification), and a change of PyJWT's check fails here until the
override is reviewed against it."""

from __future__ import annotations

import base64
import hashlib
import inspect
import json
from collections.abc import Callable

import jwt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.errors import BadRequestError
from app.services import jwt_verify
from app.services.jwt_verify import LOGIN_REFUSED, read_header, verified_claims
from tests.jwt_issuer import AUDIENCE, ISSUER, Signer, k8s_claims

#: sha256 of the source of ``jwt.PyJWS._decode_base64url_segment`` as of PyJWT 2.15.1, the check that
#: ``jwt_verify._SegmentCheckedJWS`` does the same as.
REVIEWED_SEGMENT_CHECK = "c00c1d4615f8809dd3f46a36f4fd4f8591cc0a9860afc2b7bc0182dc099159a4"

SIGNER = Signer.rsa()
ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def outcome(check: Callable[[bytes, str], bytes], segment: bytes) -> tuple[str, bytes | str]:
    """What ``check`` makes of ``segment``: the decoded bytes, or the error's type and message."""
    try:
        return "ok", check(segment, "payload")
    except Exception as exc:  # the very type and message are compared
        return type(exc).__name__, str(exc)


def same_as_pyjwt(segment: bytes) -> None:
    ours = outcome(jwt_verify._SegmentCheckedJWS._decode_base64url_segment, segment)
    theirs = outcome(jwt.PyJWS._decode_base64url_segment, segment)
    assert ours == theirs, segment


def test_pyjwt_segment_check_is_the_reviewed_one() -> None:
    source = inspect.getsource(jwt.PyJWS._decode_base64url_segment)
    assert hashlib.sha256(source.encode()).hexdigest() == REVIEWED_SEGMENT_CHECK, (
        "PyJWT changed its segment check: review app/services/jwt_verify.py's _SegmentCheckedJWS against it, "
        "then update REVIEWED_SEGMENT_CHECK"
    )


def test_verification_goes_through_the_c_segment_check() -> None:
    assert isinstance(jwt_verify._JWT._jws, jwt_verify._SegmentCheckedJWS)
    assert (
        jwt_verify._JWS._decode_base64url_segment is jwt_verify._SegmentCheckedJWS._decode_base64url_segment
    )


@pytest.mark.parametrize(
    "segment",
    [
        b"",
        b"=",
        b"==",
        b"===",
        b"A",
        b"AA",
        b"AAA",
        b"AAAA",
        b"AA==",
        b"AAA=",
        b"AA=",
        b"AAAAA",
        b"AAAAA===",
        b"AB",  # stray bits: does not re-encode to itself
        b"AQ",
        b"AQ==",
        b"QUJD",
        b"!!!!",
        b"AA!A",
        b"AA+/",  # the standard alphabet, not base64url
        b"AA A",
        b"AA\nA",
        b"AA=A",
        b"=AAA",
        "AAé".encode(),
        b"\x00AAA",
        base64.urlsafe_b64encode(b"\xff" * 100).rstrip(b"="),
        base64.urlsafe_b64encode(b"\xff" * 100),
    ],
)
def test_segment_shapes_answer_as_pyjwt(segment: bytes) -> None:
    same_as_pyjwt(segment)


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=ALPHABET + "=+/! .\x00é", max_size=24))
def test_any_segment_answers_as_pyjwt(text: str) -> None:
    same_as_pyjwt(text.encode())


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=40), st.integers(min_value=0, max_value=3))
def test_encoded_bytes_with_any_padding_answer_as_pyjwt(data: bytes, padding: int) -> None:
    same_as_pyjwt(base64.urlsafe_b64encode(data).rstrip(b"=") + b"=" * padding)


def verify(token: str) -> dict[str, object]:
    algorithm, _ = read_header(token)
    return verified_claims(
        token, algorithm, [SIGNER.key.public_key()], issuer=ISSUER, audiences=[AUDIENCE], leeway=60
    )


def test_a_good_jwt_verifies() -> None:
    claims = verify(SIGNER.sign(k8s_claims("billing", "api")))
    assert claims["sub"] == "system:serviceaccount:billing:api"


@pytest.mark.parametrize("part", [1, 2])
@pytest.mark.parametrize("junk", ["!", "=", "+", "A"])
def test_junk_in_the_payload_or_signature_is_refused(part: int, junk: str) -> None:
    token = SIGNER.sign(k8s_claims())
    segments = token.split(".")
    segments[part] = segments[part][:10] + junk + segments[part][10:]
    with pytest.raises(BadRequestError) as caught:
        verify(".".join(segments))
    assert "malformed" in str(caught.value) or str(caught.value) == LOGIN_REFUSED


def test_a_padded_signature_is_accepted_as_pyjwt_accepts_it() -> None:
    token = SIGNER.sign(k8s_claims())
    header, payload, signature = token.split(".")
    padded = signature + "=" * (-len(signature) % 4)
    assert verify(f"{header}.{payload}.{padded}")["iss"] == ISSUER


def test_a_header_that_is_not_base64url_is_malformed() -> None:
    header = base64.urlsafe_b64encode(json.dumps({"alg": "RS256"}).encode()).decode().rstrip("=")
    with pytest.raises(BadRequestError, match="malformed"):
        read_header(header[:-1] + "!.e30.")
