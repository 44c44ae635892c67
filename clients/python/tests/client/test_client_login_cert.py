"""``login_cert``, sync and async, against a real server with mTLS: the client certificate given as ``cert=``
for a token whose metadata names the role and the certificate's common name, and the service's refusals as
:class:`KeystreamAPIError`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cert_login import ROLE, SUBJECT, CertServer, cert_server
from keystream_client import AsyncKeystreamClient, KeystreamAPIError, KeystreamClient


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CertServer]:
    with cert_server(tmp_path_factory.mktemp("client-cert-login")) as started:
        yield started


def client(running: CertServer, certificate: tuple[str, str], token: str = "") -> KeystreamClient:
    return KeystreamClient(running.server.url, token, verify=str(running.pki.ca), cert=certificate)


def test_login_cert_gives_a_token_that_works(running: CertServer) -> None:
    own_certificate = (str(running.pki.client_cert), str(running.pki.client_key))
    with client(running, own_certificate) as anonymous:
        issued = anonymous.login_cert(ROLE)
    assert issued.token.startswith("ks_") and issued.scopes == ("encrypt",)
    assert issued.metadata == {"role": ROLE, "subject": SUBJECT}
    with client(running, own_certificate, issued.token) as own:
        assert own.token_self().metadata["subject"] == SUBJECT
        with pytest.raises(KeystreamAPIError) as beyond:
            own.create_key("login-key")  # the role grants encrypt only
        assert beyond.value.status == 403


def test_login_cert_refusals_are_api_errors(running: CertServer) -> None:
    stranger = (str(running.stranger[0]), str(running.stranger[1]))
    with client(running, stranger) as anonymous:
        with pytest.raises(KeystreamAPIError) as unmet:
            anonymous.login_cert(ROLE)
        assert unmet.value.status == 400 and "login refused" in unmet.value.message
    own_certificate = (str(running.pki.client_cert), str(running.pki.client_key))
    with client(running, own_certificate) as anonymous:
        with pytest.raises(KeystreamAPIError) as no_role:
            anonymous.login_cert("no-such-role")
        assert no_role.value.status == 400 and no_role.value.message == unmet.value.message


async def test_async_login_cert(running: CertServer) -> None:
    certificate = (str(running.pki.client_cert), str(running.pki.client_key))
    async with AsyncKeystreamClient(
        running.server.url, "", verify=str(running.pki.ca), cert=certificate
    ) as anonymous:
        issued = await anonymous.login_cert(ROLE)
    assert issued.metadata == {"role": ROLE, "subject": SUBJECT}
