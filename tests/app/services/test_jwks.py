"""The JWKS cache against a real HTTPS issuer: fresh for ``Cache-Control: max-age`` (or 5 minutes), an
unknown ``kid`` refetches at most once per 10 s, keys held keep serving while the issuer is down, and a
source never fetched raises the 503 error with ``Retry-After``. Time is a settable clock."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.core.waiting import WouldWait, without_waiting
from app.errors import IdentityProviderUnavailableError
from app.services.jwks import DEFAULT_MAX_AGE_SECONDS, UNKNOWN_KID_REFETCH_SECONDS, JwksCache, KeySource
from tests.jwt_issuer import Issuer, Signer, serve_issuer

FIRST = Signer.rsa("first")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def issuer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Issuer]:
    with serve_issuer(tmp_path_factory.mktemp("issuer"), [FIRST]) as running:
        yield running


def source(issuer: Issuer) -> KeySource:
    return KeySource(jwks_url=issuer.jwks_url, ca_pem=issuer.ca_pem)


def test_a_key_set_is_fresh_for_its_max_age(issuer: Issuer) -> None:
    clock = Clock()
    cache = JwksCache(clock)
    issuer.cache_control = "public, max-age=30"
    assert cache.key_for(source(issuer), "first") is not None
    clock.now += 29
    assert cache.key_for(source(issuer), "first") is not None
    assert issuer.count("/openid/v1/jwks") == 1
    clock.now += 2
    cache.key_for(source(issuer), "first")
    assert issuer.count("/openid/v1/jwks") == 2
    issuer.cache_control = "no-transform"  # no max-age: five minutes
    clock.now += 31
    cache.key_for(source(issuer), "first")
    clock.now += DEFAULT_MAX_AGE_SECONDS - 1
    cache.key_for(source(issuer), "first")
    assert issuer.count("/openid/v1/jwks") == 3


def test_an_unknown_kid_refetches_at_most_once_per_ten_seconds(issuer: Issuer) -> None:
    clock = Clock()
    cache = JwksCache(clock)
    assert cache.key_for(source(issuer), "first") is not None
    assert cache.key_for(source(issuer), "made-up") is None  # fetched just now: no refetch
    assert issuer.count("/openid/v1/jwks") == 1
    rotated = Signer.ec("second")
    issuer.signers.append(rotated)  # the issuer rotates in a new key
    clock.now += UNKNOWN_KID_REFETCH_SECONDS
    found = cache.key_for(source(issuer), "second")
    assert found is not None and issuer.count("/openid/v1/jwks") == 2
    for _ in range(50):
        assert cache.key_for(source(issuer), "made-up") is None
    assert issuer.count("/openid/v1/jwks") == 2


def test_held_keys_serve_while_the_issuer_is_down_and_none_held_is_503(issuer: Issuer) -> None:
    clock = Clock()
    cache = JwksCache(clock)
    assert cache.key_for(source(issuer), "first") is not None
    issuer.down = True
    clock.now += DEFAULT_MAX_AGE_SECONDS + 1
    assert cache.key_for(source(issuer), "first") is not None  # stale, still the issuer's key
    fresh = JwksCache(clock)
    with pytest.raises(IdentityProviderUnavailableError) as caught:
        fresh.key_for(source(issuer), "first")
    assert caught.value.retry_after_seconds >= 1 and caught.value.code == "identity_provider_unavailable"


def test_a_server_outside_the_given_ca_is_refused(
    issuer: Issuer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    other_ca = issuer.pki.other_ca.read_text()
    with pytest.raises(IdentityProviderUnavailableError):
        JwksCache().key_for(KeySource(jwks_url=issuer.jwks_url, ca_pem=other_ca), "first")


def test_discovery_names_the_jwks(issuer: Issuer) -> None:
    cache = JwksCache()
    found = cache.key_for(KeySource(discovery_url=issuer.discovery_url, ca_pem=issuer.ca_pem), "first")
    assert found is not None
    assert issuer.count("/.well-known/openid-configuration") == 1 and issuer.count("/openid/v1/jwks") == 1


def test_without_waiting_only_the_keys_held_answer_and_nothing_is_spent(issuer: Issuer) -> None:
    clock = Clock()
    cache = JwksCache(clock)
    with without_waiting(), pytest.raises(WouldWait):
        cache.key_for(source(issuer), "first")  # never fetched
    assert issuer.count("/openid/v1/jwks") == 0 and cache.fetches == 0
    assert cache.key_for(source(issuer), "first") is not None
    with without_waiting():
        assert cache.key_for(source(issuer), "first") is not None  # held and fresh
        assert cache.key_for(source(issuer), "made-up") is None  # fetched just now: no refetch is due
    clock.now += UNKNOWN_KID_REFETCH_SECONDS
    with without_waiting(), pytest.raises(WouldWait):
        cache.key_for(source(issuer), "made-up")  # a refetch is due: it would wait
    assert issuer.count("/openid/v1/jwks") == 1
    assert cache.key_for(source(issuer), "made-up") is None  # the refetch allowance was not spent above
    assert issuer.count("/openid/v1/jwks") == 2
    clock.now += DEFAULT_MAX_AGE_SECONDS
    with without_waiting(), pytest.raises(WouldWait):
        cache.key_for(source(issuer), "first")  # stale


def test_without_waiting_another_threads_fetch_in_progress_is_not_waited_for(issuer: Issuer) -> None:
    cache = JwksCache()
    assert cache.key_for(source(issuer), "first") is not None
    lock = cache._lock(source(issuer))
    with lock:  # as while another thread fetches
        with without_waiting(), pytest.raises(WouldWait):
            cache.key_for(source(issuer), "first")
    with without_waiting():
        assert cache.key_for(source(issuer), "first") is not None
