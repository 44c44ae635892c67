"""``/v1/auth/jwt``: the configuration, and logins with tokens shaped like Kubernetes projected
service-account tokens, signed by a test issuer whose JWKS a real local HTTPS server serves
(``tests/jwt_issuer.py``).

Every refused login is a 4xx JSON error naming the problem, and neither the answers nor the logs hold the JWT.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import logging
import statistics
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest

from app.services import attempts
from app.services.identity import LOGIN_ADDRESS_BURST, LOGIN_REFUSED
from app.services.jwks import JwksCache
from tests.app.api.conftest import Api, running_api
from tests.jwt_issuer import AUDIENCE, ISSUER, Issuer, Signer, k8s_claims, serve_issuer

RSA = Signer.rsa()
#: An RSA key whose JWK declares no ``alg``.
ANY_RSA = dataclasses.replace(Signer.rsa("rsa-any"), publish_alg=False)
SIGNERS = [
    RSA,
    Signer.ec(),
    Signer.ec("ec-384", "ES384"),
    Signer.ed25519(),
    Signer.rsa("ps-1", "PS256"),
    ANY_RSA,
]

ROLE: dict[str, Any] = {
    "method": "jwt",
    "scopes": ["encrypt", "decrypt"],
    "key_patterns": ["billing-*"],
    "ttl": 600,
    "max_ttl": 1200,
    "bound_audiences": [AUDIENCE],
    "bound_claims": {
        "/kubernetes.io/namespace": "billing",
        "/kubernetes.io/serviceaccount/name": ["api", "w*"],
    },
    "claim_mappings": {"/kubernetes.io/pod/name": "pod", "/kubernetes.io/namespace": "namespace"},
}


@pytest.fixture(scope="module")
def issuer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Issuer]:
    with serve_issuer(tmp_path_factory.mktemp("issuer"), SIGNERS) as running:
        yield running


@pytest.fixture
async def jwt_api(api: Api, issuer: Issuer) -> AsyncIterator[Api]:
    """The app with the JWT method on the issuer's JWKS (over HTTPS, its CA given), and role ``billing``."""
    config = {"jwks_url": issuer.jwks_url, "jwks_ca_pem": issuer.ca_pem, "bound_issuer": ISSUER}
    written = await api.client.post("/v1/auth/jwt/config", json=config, headers=api.auth())
    assert written.status_code == 200, written.text
    role = await api.client.post("/v1/auth/roles/billing", json=ROLE, headers=api.auth())
    assert role.status_code == 200, role.text
    yield api


async def login(api: Api, token: str, role: str = "billing") -> Any:
    return await api.client.post("/v1/auth/jwt/login", json={"role": role, "jwt": token})


def telltale(token: str) -> str:
    """The longest part of ``token`` (its claims, or its signature): what a leak of it would show."""
    return max(token.split("."), key=len)


def refused(response: Any, status: int, message: str, token: str) -> None:
    """A clear 4xx JSON error naming the problem, without the JWT."""
    assert response.status_code == status, response.text
    assert message in response.json()["error"]["message"], response.text
    assert token not in response.text and telltale(token) not in response.text


async def test_a_kubernetes_token_logs_in_and_gets_an_ordinary_token(jwt_api: Api) -> None:
    api = jwt_api
    answer = await login(api, RSA.sign(k8s_claims()))
    assert answer.status_code == 201, answer.text
    issued = answer.json()
    assert issued["token"].startswith("ks_") and issued["ttl"] == 600
    assert (issued["scopes"], issued["key_patterns"]) == (["encrypt", "decrypt"], ["billing-*"])
    assert issued["metadata"] == {
        "role": "billing",
        "subject": "system:serviceaccount:billing:api",
        "pod": "api-6d8f7b9c4-x2x7q",
        "namespace": "billing",
    }
    await api.create_key("billing-orders")
    await api.create_key("payroll")
    assert (await api.encrypt("billing-orders", b"x", token=issued["token"])).status_code == 200
    assert (await api.encrypt("payroll", b"x", token=issued["token"])).status_code == 403
    listed = (await api.client.get("/v1/tokens", headers=api.auth())).json()["tokens"]
    assert [t["metadata"] for t in listed if t["id"] == issued["id"]] == [issued["metadata"]]
    renewed = await api.client.post(
        "/v1/tokens/self/renew", json={"ttl": 5000}, headers=api.auth(issued["token"])
    )
    assert renewed.status_code == 200 and renewed.json()["capped"] is True  # no further than max_ttl
    assert renewed.json()["expires_at"] == issued["max_expires_at"]
    assert (await api.client.delete(f"/v1/tokens/{issued['id']}", headers=api.auth())).status_code == 204
    assert (await api.encrypt("billing-orders", b"x", token=issued["token"])).status_code == 401


@pytest.mark.parametrize("signer", SIGNERS, ids=lambda signer: signer.algorithm)
async def test_every_allowed_algorithm_logs_in(jwt_api: Api, signer: Signer) -> None:
    answer = await login(jwt_api, signer.sign(k8s_claims(service_account="worker")))
    assert answer.status_code == 201, answer.text


async def test_the_configuration_reads_back_and_needs_exactly_one_key_source(
    api: Api, issuer: Issuer
) -> None:
    assert (await api.client.get("/v1/auth/jwt/config", headers=api.auth())).json() == {}
    both = {"jwks_url": issuer.jwks_url, "jwt_validation_pubkeys": [RSA.public_pem()]}
    answer = await api.client.post("/v1/auth/jwt/config", json=both, headers=api.auth())
    assert answer.status_code == 400 and "exactly one of" in answer.text
    answer = await api.client.post("/v1/auth/jwt/config", json={"leeway": 5}, headers=api.auth())
    assert answer.status_code == 400 and "exactly one of" in answer.text
    plain = await api.client.post(
        "/v1/auth/jwt/config", json={"jwks_url": "http://x/jwks"}, headers=api.auth()
    )
    assert plain.status_code == 400 and "https://" in plain.text
    junk = await api.client.post(
        "/v1/auth/jwt/config", json={"jwt_validation_pubkeys": ["nope"]}, headers=api.auth()
    )
    assert junk.status_code == 400 and "not a PEM public key" in junk.text
    config = {"oidc_discovery_url": issuer.discovery_url, "jwks_ca_pem": issuer.ca_pem, "leeway": 5}
    assert (await api.client.post("/v1/auth/jwt/config", json=config, headers=api.auth())).status_code == 200
    assert (await api.client.get("/v1/auth/jwt/config", headers=api.auth())).json() == config
    user = await api.create_token(["encrypt"])
    assert (await api.client.get("/v1/auth/jwt/config", headers=api.auth(user))).status_code == 403


async def test_oidc_discovery_and_static_public_keys_also_log_in(api: Api, issuer: Issuer) -> None:
    assert (await api.client.post("/v1/auth/roles/billing", json=ROLE, headers=api.auth())).status_code == 200
    discovery = {"oidc_discovery_url": issuer.discovery_url, "jwks_ca_pem": issuer.ca_pem}
    await api.client.post("/v1/auth/jwt/config", json=discovery, headers=api.auth())
    assert (await login(api, RSA.sign(k8s_claims()))).status_code == 201
    static = {"jwt_validation_pubkeys": [SIGNERS[1].public_pem(), RSA.public_pem()]}
    await api.client.post("/v1/auth/jwt/config", json=static, headers=api.auth())
    assert (await login(api, RSA.sign(k8s_claims()))).status_code == 201
    stranger = Signer.rsa().sign(k8s_claims())
    refused(await login(api, stranger), 400, LOGIN_REFUSED, stranger)


def _segment(value: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def hs256_with_public_key(claims: dict[str, Any]) -> str:
    """Algorithm confusion, built by hand (PyJWT refuses to make it): HS256 keyed with the RSA public key."""
    signing_input = f"{_segment({'alg': 'HS256', 'typ': 'JWT', 'kid': RSA.kid})}.{_segment(claims)}"
    tag = hmac.new(RSA.public_pem().encode(), signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{base64.urlsafe_b64encode(tag).rstrip(b'=').decode()}"


def bad_tokens() -> list[tuple[str, str, int, str]]:
    now = time.time()
    nested = k8s_claims()
    nested["kubernetes.io"]["namespace"] = {"name": "billing"}
    numeric = k8s_claims()
    numeric["kubernetes.io"]["serviceaccount"]["name"] = 7
    no_aud = k8s_claims()
    del no_aud["aud"]
    no_exp = k8s_claims()
    del no_exp["exp"]
    return [
        (
            "alg none",
            jwt.encode(k8s_claims(), None, algorithm="none"),
            400,
            "algorithm 'none' is not accepted",
        ),
        (
            "HS256 keyed with the public key",
            hs256_with_public_key(k8s_claims()),
            400,
            "'HS256' is not accepted",
        ),
        ("another key, same kid", Signer.rsa(RSA.kid).sign(k8s_claims()), 400, LOGIN_REFUSED),
        ("kid unknown", Signer.rsa("rsa-404").sign(k8s_claims()), 400, LOGIN_REFUSED),
        (
            "kid with path characters",
            Signer.rsa("../../etc/passwd").sign(k8s_claims()),
            400,
            "kid is not a key id",
        ),
        ("expired", RSA.sign(k8s_claims(now=now - 7200)), 400, "the JWT has expired"),
        ("not yet valid", RSA.sign(k8s_claims(now=now + 600)), 400, "not valid yet"),
        ("no exp", RSA.sign(no_exp), 400, "no 'exp' claim"),
        (
            "wrong issuer",
            RSA.sign(k8s_claims(iss="https://evil.example")),
            400,
            "issuer is not the configured",
        ),
        ("audience missing", RSA.sign(no_aud), 400, "no 'aud' claim"),
        ("audience wrong (string)", RSA.sign(k8s_claims(audience="vault")), 400, "audience matches none"),
        (
            "audience wrong (list)",
            RSA.sign(k8s_claims(audience=["vault", "x"])),
            400,
            "audience matches none",
        ),
        (
            "bound claim an object",
            RSA.sign(nested),
            400,
            "'/kubernetes.io/namespace' is not a string or a list",
        ),
        ("bound claim a number", RSA.sign(numeric), 400, "is not a string or a list of strings"),
        (
            "bound claim mismatch",
            RSA.sign(k8s_claims(namespace="payroll")),
            400,
            "matches none of the role's",
        ),
        ("not a JWT", "not-a-jwt", 400, "the JWT is malformed"),
        ("two segments", ".".join(RSA.sign(k8s_claims()).split(".")[:2]), 400, "the JWT is malformed"),
        ("four segments", RSA.sign(k8s_claims()) + ".e30", 400, "the JWT is malformed"),
        ("payload not base64url", _replaced(RSA.sign(k8s_claims()), 1, "!!!!"), 400, "the JWT is malformed"),
        ("signature not base64url", _replaced(RSA.sign(k8s_claims()), 2, "a$b"), 400, "the JWT is malformed"),
        ("over 16 KiB", RSA.sign(k8s_claims(padding="x" * 17_000)), 413, "longer than 16384 bytes"),
    ]


def _replaced(token: str, index: int, segment: str) -> str:
    """``token`` with its segment ``index`` (0 header, 1 payload, 2 signature) replaced by ``segment``."""
    parts = token.split(".")
    parts[index] = segment
    return ".".join(parts)


async def test_bad_tokens_get_clear_4xx_errors_and_are_never_logged(
    jwt_api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    tokens = bad_tokens()
    for name, token, status, message in tokens:
        answer = await login(jwt_api, token, role="billing")
        assert answer.status_code == status and message in answer.json()["error"]["message"], (
            name,
            answer.text,
        )
        refused(answer, status, message, token)
    for _, token, _, _ in tokens:
        assert telltale(token) not in caplog.text
    # The audience given as one string (not a list) is fine when it is bound.
    assert (await login(jwt_api, RSA.sign(k8s_claims(audience=AUDIENCE)))).status_code == 201


async def test_an_unknown_role_answers_as_a_wrong_signature_in_body_and_time(jwt_api: Api) -> None:
    good = RSA.sign(k8s_claims())
    forged = Signer.rsa(RSA.kid).sign(k8s_claims())
    unknown = await login(jwt_api, good, role="no-such-role")
    wrong = await login(jwt_api, forged)
    assert (unknown.status_code, unknown.json()) == (wrong.status_code, wrong.json())
    assert unknown.json()["error"]["message"] == LOGIN_REFUSED

    async def seconds(token: str, role: str) -> float:
        started = time.perf_counter()
        await login(jwt_api, token, role=role)
        return time.perf_counter() - started

    unknown_times, wrong_times = [], []
    for _ in range(12):  # interleaved, so a change in the machine's load weighs on both alike
        unknown_times.append(await seconds(good, "no-such-role"))
        wrong_times.append(await seconds(forged, "billing"))
    unknown_time, wrong_time = statistics.median(unknown_times), statistics.median(wrong_times)
    assert 1 / 3 < unknown_time / wrong_time < 3, (unknown_time, wrong_time)


async def test_a_jwt_must_name_the_algorithm_its_key_is_published_for(jwt_api: Api) -> None:
    # The RSA key is published with "alg": "RS256"; the same key signing PS256 gives a valid signature,
    # which the declared algorithm refuses.
    claims = k8s_claims()
    other = jwt.encode(claims, RSA.key, algorithm="PS256", headers={"kid": RSA.kid})
    refused(
        await login(jwt_api, other), 400, "alg PS256 is not the alg RS256 its key is published for", other
    )
    assert (await login(jwt_api, RSA.sign(claims))).status_code == 201
    # A key whose JWK declares no alg verifies every allowed algorithm of its type.
    for algorithm in ("RS256", "RS512", "PS256"):
        token = jwt.encode(claims, ANY_RSA.key, algorithm=algorithm, headers={"kid": ANY_RSA.kid})
        assert (await login(jwt_api, token)).status_code == 201, algorithm


async def test_login_floods_are_limited_per_address_and_role(jwt_api: Api) -> None:
    await jwt_api.client.post("/v1/auth/roles/flood", json=ROLE, headers=jwt_api.auth())
    forged = Signer.rsa(RSA.kid).sign(k8s_claims())
    statuses = [(await login(jwt_api, forged, role="flood")).status_code for _ in range(40)]
    assert statuses[:30] == [400] * 30 and 429 in statuses[30:]
    limited = await login(jwt_api, RSA.sign(k8s_claims()), role="flood")
    assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
    assert "too many login attempts" in limited.json()["error"]["message"]
    assert (await login(jwt_api, RSA.sign(k8s_claims()))).status_code == 201  # another role still logs in


async def test_made_up_role_names_spend_the_address_limit(
    jwt_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each made-up role name has a fresh per-role count; the address's count over every role still runs out.
    # The limiter's clock stands still: at ten attempts a second of refill, the 125 logins below would
    # otherwise earn back as many attempts as they take longer than 0.1 s each to make.
    monkeypatch.setattr(attempts, "_now", lambda: 1_000.0)
    forged = Signer.rsa(RSA.kid).sign(k8s_claims())
    statuses = [
        (await login(jwt_api, forged, role=f"made-up-{attempt}")).status_code
        for attempt in range(LOGIN_ADDRESS_BURST + 5)
    ]
    assert (
        statuses[:LOGIN_ADDRESS_BURST] == [400] * LOGIN_ADDRESS_BURST
        and 429 in statuses[LOGIN_ADDRESS_BURST:]
    )
    limited = await login(jwt_api, RSA.sign(k8s_claims()))  # a real role, never tried: the address is spent
    assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
    assert limited.json()["error"]["message"].startswith("too many login attempts from this address:")


async def test_without_config_and_with_the_issuer_down(
    settings_factory: Any, issuer: Issuer, tmp_path: Path
) -> None:
    async with running_api(settings_factory()) as api:
        await api.client.post("/v1/auth/roles/billing", json=ROLE, headers=api.auth())
        token = RSA.sign(k8s_claims())
        refused(await login(api, token), 400, "JWT login is not configured", token)
        config = {"jwks_url": issuer.jwks_url, "jwks_ca_pem": issuer.ca_pem}
        await api.client.post("/v1/auth/jwt/config", json=config, headers=api.auth())
        api.app.state.keystream.jwks = JwksCache()
        issuer.down = True
        try:
            down = await login(api, RSA.sign(k8s_claims()))
            assert down.status_code == 503, down.text
            assert down.json()["error"]["code"] == "identity_provider_unavailable"
            assert int(down.headers["retry-after"]) >= 1
        finally:
            issuer.down = False
        assert (await login(api, RSA.sign(k8s_claims()))).status_code == 201
        issuer.down = True
        try:  # keys already fetched keep serving while the issuer is down
            assert (await login(api, RSA.sign(k8s_claims()))).status_code == 201
        finally:
            issuer.down = False
