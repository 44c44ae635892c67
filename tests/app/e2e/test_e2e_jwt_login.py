"""JWT login against a real 2-worker server: Kubernetes-shaped tokens from a test issuer whose JWKS a real
HTTPS server serves (its CA given as ``jwks_ca_pem``). Every worker logs in through a role written through
another, a deleted role refuses at once everywhere, the issued token is an ordinary one (revoked everywhere),
and neither the audit log (which records role and subject) nor the server log holds a JWT."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.services.identity import LOGIN_REFUSED
from bench.service_process import Server, start_server, stop_server
from tests.jwt_issuer import AUDIENCE, ISSUER, Issuer, Signer, k8s_claims, serve_issuer

SIGNER = Signer.rsa("cluster-key")
ROLE = {
    "method": "jwt",
    "scopes": ["encrypt", "decrypt"],
    "key_patterns": ["billing-*"],
    "ttl": 600,
    "bound_audiences": [AUDIENCE],
    "bound_claims": {"/kubernetes.io/namespace": "billing", "/kubernetes.io/serviceaccount/name": "api"},
}


@pytest.fixture(scope="module")
def issuer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Issuer]:
    with serve_issuer(tmp_path_factory.mktemp("issuer"), [SIGNER]) as running:
        yield running


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    running = start_server(
        tmp_path / "data",
        tmp_path / "server.log",
        KEYSTREAM_WORKERS="2",
        KEYSTREAM_AUDIT_LOG=str(tmp_path / "audit.log"),
    )
    try:
        yield running
    finally:
        stop_server(running)


def fresh(server: Server) -> httpx.Client:
    """A client on a new connection: each lands on a worker the kernel picks (one socket per worker)."""
    return httpx.Client(base_url=server.url, timeout=10.0)


def login(server: Server, jwt: str, role: str = "billing") -> httpx.Response:
    with fresh(server) as client:
        return client.post("/v1/auth/jwt/login", json={"role": role, "jwt": jwt})


def test_jwt_login_on_two_workers(server: Server, issuer: Issuer, tmp_path: Path) -> None:
    with fresh(server) as admin:
        config = {"jwks_url": issuer.jwks_url, "jwks_ca_pem": issuer.ca_pem, "bound_issuer": ISSUER}
        assert admin.post("/v1/auth/jwt/config", json=config, headers=server.auth).status_code == 200
        assert admin.post("/v1/auth/roles/billing", json=ROLE, headers=server.auth).status_code == 200
        assert admin.post("/v1/keys", json={"name": "billing-orders"}, headers=server.auth).status_code == 201
    jwts = [SIGNER.sign(k8s_claims()) for _ in range(12)]
    issued = []
    for jwt in jwts:
        answer = login(server, jwt)
        assert answer.status_code == 201, answer.text
        issued.append(answer.json())
    assert {token["metadata"]["subject"] for token in issued} == {"system:serviceaccount:billing:api"}
    token = issued[0]["token"]
    with fresh(server) as client:
        sealed = client.post(
            "/v1/keys/billing-orders/encrypt", content=b"hello", headers={"Authorization": f"Bearer {token}"}
        )
        assert sealed.status_code == 200, sealed.text
    wrong_namespace = login(server, SIGNER.sign(k8s_claims(namespace="payroll")))
    assert wrong_namespace.status_code == 400 and "matches none" in wrong_namespace.text

    with fresh(server) as admin:
        assert admin.delete("/v1/auth/roles/billing", headers=server.auth).status_code == 204
        assert admin.delete(f"/v1/tokens/{issued[0]['id']}", headers=server.auth).status_code == 204
    for _ in range(8):  # every worker, at once: roles are read from the keystore at each login
        gone = login(server, SIGNER.sign(k8s_claims()))
        assert gone.status_code == 400 and gone.json()["error"]["message"] == LOGIN_REFUSED
    for _ in range(8):
        with fresh(server) as client:
            refused = client.get("/v1/tokens/self", headers={"Authorization": f"Bearer {token}"})
            assert refused.status_code == 401

    audit_files = [Path(f"{tmp_path / 'audit.log'}.w{worker}") for worker in (0, 1)]
    records = [
        json.loads(line) for path in audit_files if path.exists() for line in path.read_text().splitlines()
    ]
    logins = [record for record in records if record.get("role") == "billing" and "subject" in record]
    assert len(logins) >= len(jwts)
    assert {record["subject"] for record in logins} == {"system:serviceaccount:billing:api"}
    assert {token["id"] for token in issued} <= {record.get("issued_token_id") for record in logins}
    written = "".join(path.read_text() for path in audit_files if path.exists()) + server.log.read_text()
    for jwt in jwts:
        assert max(jwt.split("."), key=len) not in written
    assert sum(1 for path in audit_files if path.exists() and "jwt/login" in path.read_text()) == 2


def test_a_login_token_survives_the_process_being_killed(issuer: Issuer, tmp_path: Path) -> None:
    """A login's token commits with synchronous=NORMAL (docs/operations.md): it must still be in the WAL file
    when the process dies without a chance to flush anything (SIGKILL right after the answer)."""
    first = start_server(tmp_path / "data", tmp_path / "first.log")
    try:
        with fresh(first) as admin:
            config = {"jwks_url": issuer.jwks_url, "jwks_ca_pem": issuer.ca_pem, "bound_issuer": ISSUER}
            assert admin.post("/v1/auth/jwt/config", json=config, headers=first.auth).status_code == 200
            assert admin.post("/v1/auth/roles/billing", json=ROLE, headers=first.auth).status_code == 200
        answers = [login(first, SIGNER.sign(k8s_claims())) for _ in range(5)]
        assert [answer.status_code for answer in answers] == [201] * 5
    finally:
        first.process.kill()  # no shutdown, no checkpoint: only what the commits wrote survives
        first.process.wait(timeout=10)
    second = start_server(tmp_path / "data", tmp_path / "second.log")
    try:
        for answer in answers:
            with fresh(second) as client:
                own = client.get(
                    "/v1/tokens/self", headers={"Authorization": f"Bearer {answer.json()['token']}"}
                )
            assert own.status_code == 200 and own.json()["metadata"]["role"] == "billing"
    finally:
        stop_server(second)
