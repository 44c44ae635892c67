"""The one-match reading of a bearer ``Authorization`` value (:data:`BEARER_TOKEN_RE`) agrees with the
step-by-step reading on every value it matches, and the readers that use it (token verification, the audit
record's token id) answer as the steps do on every value."""

from __future__ import annotations

import random

import pytest

from app.api.middleware.audit import token_id
from app.core.token_format import BEARER_TOKEN_RE, parse_token
from app.errors import UnauthorizedError
from app.services.security import _parse_authorization

TOKEN = "ks_0123456789abcdef_" + "Az09_-" * 6


def _by_steps(authorization: str | None) -> tuple[str, str] | None:
    """The reading the fast path stands in for: split at the first space, scheme in lower case, strip."""
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return parse_token(value.strip())


def _fast(authorization: str) -> tuple[str, str] | None:
    usual = BEARER_TOKEN_RE.fullmatch(authorization)
    return None if usual is None else (usual[1], usual[2])


def _verified(authorization: str | None) -> tuple[str, str] | None:
    try:
        return _parse_authorization(authorization)
    except UnauthorizedError:
        return None


CASES = [
    f"Bearer {TOKEN}",
    f"bearer {TOKEN}",
    f"BEARER {TOKEN}",
    f"bEaReR {TOKEN}",
    f"Bearer  {TOKEN}",
    f"Bearer \t{TOKEN} \t",
    f"Bearer {TOKEN}\n",
    f"Bearer {TOKEN}\n\n",
    f"Bearer \x85{TOKEN}\xa0",
    f"Bearer \x1c{TOKEN}\x1f",
    f"Bearer\t{TOKEN}",
    f" Bearer {TOKEN}",
    f"Bearer{TOKEN}",
    f"Basic {TOKEN}",
    f"Bearer {TOKEN} x",
    f"Bearer {TOKEN}\x00",
    f"Bearer {TOKEN[:-1]}é",
    "Bearer ks_ABCD_0123456789abcdefgh",
    "Bearer ks_abc_0123456789abcdefgh",
    "Bearer ks_abcd_0123456789abcdef",
    "Bearer ks_abcd_0123456789abcde",
    "Bearer ks_" + "a" * 33 + "_" + "x" * 16,
    "Bearer ks_abcd_" + "x" * 129,
    "Bearer ks_abcd_" + "x" * 128,
    "Bearer ks_abcd__" + "x" * 15,
    "Bearer ",
    "Bearer",
    "",
]


@pytest.mark.parametrize("authorization", CASES)
def test_the_fast_reading_and_the_readers_agree_with_the_steps(authorization: str) -> None:
    expected = _by_steps(authorization)
    fast = _fast(authorization)
    assert fast is None or fast == expected
    assert _verified(authorization) == expected
    assert token_id(authorization) == (expected[0] if expected is not None else None)


def test_the_usual_header_takes_the_fast_reading() -> None:
    assert _fast(f"Bearer {TOKEN}") == ("0123456789abcdef", "Az09_-" * 6)


def test_random_values_read_alike() -> None:
    """Values built as scheme, separator, whitespace, a token or a near miss, whitespace: a few percent are
    well formed."""
    schemes = ["Bearer", "bearer", "BeArEr", "Basic", "", " Bearer", "Bearer\t"]
    whitespace = ["", " ", "  ", "\t", "\n", "\x85", "\xa0", "\x1c", "\u2028", "x"]
    ids = ["0123", "abcdef0123456789", "a" * 32, "a" * 33, "abc", "ABCD", "ab_cd", ""]
    secrets = ["x" * 16, "Az09_-" * 21, "x" * 128, "x" * 129, "x" * 15, "xé" * 9, "x y" * 8, "_" * 20]
    generator = random.Random(1234)
    accepted = 0
    for _ in range(20_000):
        token = f"ks_{generator.choice(ids)}_{generator.choice(secrets)}"
        if generator.random() < 0.1:
            token = token.replace("ks_", generator.choice(["KS_", "ks", "k_s_", ""]), 1)
        value = (
            generator.choice(schemes)
            + generator.choice([" ", "", "\t"])
            + generator.choice(whitespace)
            + token
            + generator.choice(whitespace)
        )
        expected = _by_steps(value)
        accepted += expected is not None
        fast = _fast(value)
        assert fast is None or fast == expected, repr(value)
        assert _verified(value) == expected, repr(value)
        assert token_id(value) == (expected[0] if expected is not None else None), repr(value)
    assert accepted > 300  # the well-formed shapes were exercised, not only refusals
