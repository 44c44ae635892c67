"""Certificate login against a real server serving HTTPS with mTLS: client certificates from a throwaway CA
carrying common names, organizational units, DNS names and SPIFFE IDs, each binding kind matched and missed,
the glob that does not cross ``/``, the issued token's scopes, the audit line, the limit shared with the JWT
login, and a server that verified no certificate (plain HTTP, certificate headers sent anyway)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.services.cert_login import CERT_LOGIN_REFUSED, NO_CLIENT_CERTIFICATE
from app.services.identity import LOGIN_BURST
from bench.service_process import Server, ServerTlsFiles, start_server, stop_server
from tls_ca import TlsFiles, make_ca_files, make_client_cert

SPIFFE_ID = "spiffe://example.org/ns/prod/sa/billing"
#: Client certificates by name: (common name, organizational units, DNS names, URIs).
CERTIFICATES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "billing": ("billing-worker", ("payments",), ("Worker.Billing.example.org",), (SPIFFE_ID,)),
    "nested": ("nested", (), (), ("spiffe://example.org/ns/a/b/sa/billing",)),
    "payroll": ("payroll", ("hr",), ("payroll.example.org",), ("spiffe://example.org/ns/prod/sa/payroll",)),
}
GRANT = {"scopes": ["encrypt"], "key_patterns": ["billing-*"], "ttl": 600}
#: Roles by name: each binding kind alone, and a common name with an organizational unit.
ROLES = {
    "by-spiffe": {"allowed_uri_sans": ["spiffe://example.org/ns/*/sa/billing"]},
    "by-dns": {"allowed_dns_sans": ["*.billing.example.org"]},
    "by-cn": {"allowed_common_names": ["billing-*"]},
    "by-cn-and-ou": {"allowed_common_names": ["*"], "allowed_organizational_units": ["payments"]},
}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_ca_files(tmp_path_factory.mktemp("cert-login-pki"))


@pytest.fixture(scope="module")
def certificates(pki: TlsFiles) -> dict[str, tuple[Path, Path]]:
    return {
        name: make_client_cert(pki, name, cn, organizational_units=units, dns_names=dns, uris=uris)
        for name, (cn, units, dns, uris) in CERTIFICATES.items()
    }


@pytest.fixture(scope="module")
def server(pki: TlsFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """HTTPS with mTLS (the test CA's client certificates) on two workers, an audit log, the cert roles and
    a jwt role."""
    base = tmp_path_factory.mktemp("cert-login")
    tls = ServerTlsFiles(
        pki.server_cert, pki.server_key, pki.ca, pki.ca, client_cert=(pki.client_cert, pki.client_key)
    )
    # Two workers: a fresh connection (each login's) lands on either, and each must hand its certificate on.
    running = start_server(
        base / "data",
        base / "server.log",
        tls=tls,
        KEYSTREAM_AUDIT_LOG=str(base / "audit.log"),
        KEYSTREAM_WORKERS="2",
    )
    try:
        with running.client() as admin:
            for name, bindings in {**ROLES, "jwt-role": {"bound_audiences": ["keystream"]}}.items():
                method = "jwt" if name == "jwt-role" else "cert"
                body = {"method": method, **GRANT, **bindings}
                assert admin.post(f"/v1/auth/roles/{name}", json=body).status_code == 200
            for key in ("billing-orders", "payroll"):
                assert admin.post("/v1/keys", json={"name": key}).status_code == 201
        yield running
    finally:
        stop_server(running)


def as_holder(server: Server, certificate: tuple[Path, Path]) -> httpx.Client:
    """A client presenting ``certificate`` (a fresh connection, so a fresh handshake)."""
    assert server.tls is not None
    context = server.tls.ssl_context(client_cert=False)
    context.load_cert_chain(*certificate)
    return httpx.Client(base_url=server.url, timeout=30, verify=context)


def login(server: Server, certificate: tuple[Path, Path], role: str) -> httpx.Response:
    with as_holder(server, certificate) as client:
        return client.post("/v1/auth/cert/login", json={"role": role})


@pytest.mark.parametrize(
    ("certificate", "role", "subject"),
    [
        ("billing", "by-spiffe", SPIFFE_ID),
        ("billing", "by-dns", "worker.billing.example.org"),  # DNS names compared without case
        ("billing", "by-cn", "billing-worker"),
        ("billing", "by-cn-and-ou", "billing-worker"),
        ("nested", "by-spiffe", None),  # * stops at /
        ("payroll", "by-spiffe", None),
        ("payroll", "by-dns", None),
        ("payroll", "by-cn", None),
        ("payroll", "by-cn-and-ou", None),  # the common name matches, the organizational unit does not
        ("billing", "jwt-role", None),  # another method's role
        ("billing", "no-such-role", None),
    ],
)
def test_each_binding_kind_matches_and_misses(
    server: Server,
    certificates: dict[str, tuple[Path, Path]],
    certificate: str,
    role: str,
    subject: str | None,
) -> None:
    answer = login(server, certificates[certificate], role)
    if subject is None:
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"] == {"code": "bad_request", "message": CERT_LOGIN_REFUSED}
    else:
        assert answer.status_code == 201, answer.text
        assert answer.json()["metadata"] == {"role": role, "subject": subject}


def test_the_token_is_an_ordinary_one_within_its_role(
    server: Server, certificates: dict[str, tuple[Path, Path]]
) -> None:
    answer = login(server, certificates["billing"], "by-spiffe")
    assert answer.status_code == 201, answer.text
    issued = answer.json()
    assert issued["token"].startswith("ks_") and issued["ttl"] == 600
    assert (issued["scopes"], issued["key_patterns"]) == (["encrypt"], ["billing-*"])
    bearer = {"Authorization": f"Bearer {issued['token']}", "Content-Type": "application/octet-stream"}
    with as_holder(server, certificates["billing"]) as client:
        sealed = client.post("/v1/keys/billing-orders/encrypt", content=b"invoice 7", headers=bearer)
        assert sealed.status_code == 200, sealed.text
        assert client.post("/v1/keys/payroll/encrypt", content=b"x", headers=bearer).status_code == 403
        opened = client.post("/v1/keys/billing-orders/decrypt", content=sealed.content, headers=bearer)
        assert opened.status_code == 403  # the role grants encrypt only
    with server.client() as admin:
        listed = admin.get("/v1/tokens").json()["tokens"]
        assert [t["description"] for t in listed if t["id"] == issued["id"]] == ["cert login: role by-spiffe"]
        assert admin.delete(f"/v1/tokens/{issued['id']}").status_code == 204
    with as_holder(server, certificates["billing"]) as client:
        assert client.post("/v1/keys/billing-orders/encrypt", content=b"x", headers=bearer).status_code == 401


def test_the_audit_line_names_role_and_subject_never_the_certificate(
    server: Server, certificates: dict[str, tuple[Path, Path]]
) -> None:
    answer = login(server, certificates["billing"], "by-dns")
    assert answer.status_code == 201, answer.text
    audit_files = sorted(server.log.parent.glob("audit.log*"))
    written = "".join(path.read_text() for path in audit_files)
    records = [json.loads(line) for line in written.splitlines()]
    assert any(
        record.get("role") == "by-dns"
        and record.get("subject") == "worker.billing.example.org"
        and record.get("issued_token_id") == answer.json()["id"]
        for record in records
    ), records[-3:]
    pem_body = "".join(certificates["billing"][0].read_text().splitlines()[1:-1])
    for leak in (pem_body[:64], pem_body[-64:]):
        assert leak not in written and leak not in server.log.read_text()


def test_logins_share_the_jwt_logins_limit(
    server: Server, certificates: dict[str, tuple[Path, Path]]
) -> None:
    with as_holder(server, certificates["payroll"]) as client:
        answers = [
            client.post("/v1/auth/cert/login", json={"role": "limited"}) for _ in range(LOGIN_BURST + 1)
        ]
        assert [a.status_code for a in answers[:LOGIN_BURST]] == [400] * LOGIN_BURST
        assert answers[-1].status_code == 429 and int(answers[-1].headers["Retry-After"]) >= 1
        jwt = client.post("/v1/auth/jwt/login", json={"role": "limited", "jwt": "a.b.c"})
        assert jwt.status_code == 429 and "Retry-After" in jwt.headers
        other_role = client.post("/v1/auth/cert/login", json={"role": "by-cn"})
        assert other_role.status_code == 400  # counted per role: payroll's certificate meets none of by-cn


def test_without_a_verified_certificate_the_method_is_off(tmp_path: Path) -> None:
    """Plain HTTP (as behind a TLS-terminating proxy): no certificate reaches the app, whatever the headers
    say."""
    plain = start_server(tmp_path / "data", tmp_path / "server.log")
    try:
        with plain.client() as admin:
            body = {"method": "cert", **GRANT, **ROLES["by-cn"]}
            assert admin.post("/v1/auth/roles/by-cn", json=body).status_code == 200
        forwarded = {
            "X-Forwarded-Client-Cert": 'Subject="CN=billing-worker";URI=' + SPIFFE_ID,
            "X-SSL-Client-Cert": "-----BEGIN CERTIFICATE-----",
            "X-Client-Verify": "SUCCESS",
        }
        with httpx.Client(base_url=plain.url, timeout=30) as client:
            answer = client.post("/v1/auth/cert/login", json={"role": "by-cn"}, headers=forwarded)
        assert answer.status_code == 400
        assert answer.json()["error"] == {"code": "bad_request", "message": NO_CLIENT_CERTIFICATE}
    finally:
        stop_server(plain)
