"""Regression tests for the security review (contracts/security-review.md): each failed before its fix."""

from __future__ import annotations

from tests.app.api.conftest import Api

SECRET = b"TOP SECRET payroll data 12345"


async def test_encrypt_only_token_cannot_decrypt_raw_with_a_chosen_iv(api: Api) -> None:
    """H1: CTR encrypt with the ciphertext's IV is decrypt, so a caller-chosen IV needs the decrypt scope."""
    await api.create_key("k1")
    sealed = await api.encrypt("k1", SECRET, format="raw")
    assert sealed.status_code == 200
    iv, version = sealed.headers["Keystream-IV"], sealed.headers["Keystream-Key-Version"]
    encrypt_only = await api.create_token(["encrypt"], ["k1"])
    for params in ({"iv": iv}, {"iv": iv, "offset": "0"}, {"headers": {"Keystream-IV": iv}}):
        oracle = await api.encrypt(
            "k1", sealed.content, token=encrypt_only, format="raw", key_version=version, **params
        )
        assert oracle.status_code == 403, oracle.text
        assert oracle.json()["error"]["code"] == "forbidden"
        assert "decrypt scope" in oracle.json()["error"]["message"]
        assert SECRET not in oracle.content
    # Without iv the encrypt-only token still encrypts, under a fresh random IV.
    fresh = await api.encrypt("k1", SECRET, token=encrypt_only, format="raw")
    assert fresh.status_code == 200
    assert fresh.headers["Keystream-IV"] != iv and fresh.content != sealed.content
    # A token holding both scopes may choose the IV (random access, documented).
    both = await api.create_token(["encrypt", "decrypt"], ["k1"])
    chosen = await api.encrypt("k1", sealed.content, token=both, format="raw", key_version=version, iv=iv)
    assert chosen.status_code == 200 and chosen.content == SECRET
