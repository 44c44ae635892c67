"""Roles across 2 real replicas on one PostgreSQL database: a role written, changed or deleted through one
replica applies to the next login on the other at once (every login reads its role from the keystore), and a
token a login issued on one replica, revoked through the other, is refused there within the change log's
bound (its NOTIFY hint: milliseconds; the poll is the backstop)."""

from __future__ import annotations

import time
from pathlib import Path

from app.services.identity import LOGIN_REFUSED
from bench.bench_propagation import replicas
from tests.jwt_issuer import Signer, k8s_claims, k8s_role

SIGNER = Signer.ec("replica-key")
ROLE = k8s_role("*")
#: Seconds a revocation may take to reach the other replica here (the poll interval is 1 s by default).
REVOCATION_BOUND = 2.0


def test_role_changes_and_revocations_reach_the_other_replica(pg_url: str, tmp_path: Path) -> None:
    with replicas(2, tmp_path, pg_url, {}) as (first, second):
        config = {"jwt_validation_pubkeys": [SIGNER.public_pem()]}
        assert first.client.post("/v1/auth/jwt/config", json=config).status_code == 200
        assert first.client.post("/v1/auth/roles/billing", json=ROLE).status_code == 200

        def login() -> dict[str, object]:
            answer = second.client.post(
                "/v1/auth/jwt/login", json={"role": "billing", "jwt": SIGNER.sign(k8s_claims())}
            )
            return {"status": answer.status_code, **answer.json()}

        issued = login()
        assert issued["status"] == 201, issued
        moved = {**ROLE, "bound_claims": {"/kubernetes.io/namespace": "payroll"}}
        assert first.client.post("/v1/auth/roles/billing", json=moved).status_code == 200
        refused = login()
        assert refused["status"] == 400 and "matches none" in str(refused["error"])
        assert first.client.delete("/v1/auth/roles/billing").status_code == 204
        gone = login()
        assert gone["status"] == 400 and gone["error"] == {"code": "bad_request", "message": LOGIN_REFUSED}

        bearer = {"Authorization": f"Bearer {issued['token']}"}
        assert second.client.get("/v1/tokens/self", headers=bearer).status_code == 200  # cached there now
        assert first.client.delete(f"/v1/tokens/{issued['id']}").status_code == 204
        started = time.monotonic()
        while second.client.get("/v1/tokens/self", headers=bearer).status_code != 401:
            assert time.monotonic() - started < REVOCATION_BOUND, "revocation did not reach the other replica"
            time.sleep(0.01)
