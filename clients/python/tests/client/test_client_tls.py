"""The client over https against ``keystream-server serve`` with TLS (and mTLS), certificates from a throwaway
CA made by :mod:`tls_ca`: CA bundles by argument and by ``KEYSTREAM_CACERT``, client certificates by argument
and by ``KEYSTREAM_CLIENT_CERT``/``KEYSTREAM_CLIENT_KEY``, on both transports (httpx for JSON calls, the h11
full-duplex transport for streams)."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import keystream_server
from keystream_client import (
    AsyncKeystreamClient,
    KeystreamAPIError,
    KeystreamClient,
    KeystreamConnectionError,
    KeystreamStreamError,
)
from keystream_server import RunningServer
from tls_ca import TlsFiles, make_ca_files


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_ca_files(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_server(pki: TlsFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    base = tmp_path_factory.mktemp("tls")
    server = keystream_server.start(base / "data", base / "server.log", pki)
    try:
        yield server
    finally:
        keystream_server.stop(server.process)


@pytest.fixture(scope="module")
def mtls_server(pki: TlsFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    base = tmp_path_factory.mktemp("mtls")
    server = keystream_server.start(base / "data", base / "server.log", pki, mtls=True)
    try:
        yield server
    finally:
        keystream_server.stop(server.process)


@pytest.fixture(autouse=True)
def no_tls_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KEYSTREAM_CACERT", "KEYSTREAM_CLIENT_CERT", "KEYSTREAM_CLIENT_KEY"):
        monkeypatch.delenv(name, raising=False)


def test_https_round_trip_with_a_ca_bundle(tls_server: RunningServer, pki: TlsFiles) -> None:
    with KeystreamClient(tls_server.url, tls_server.token, verify=str(pki.ca)) as ks:
        ks.create_key("tls-key", segment_size=4096)
        plaintext = os.urandom(3 << 20)
        sealed = ks.encrypt("tls-key", plaintext, associated_data=b"over tls")
        assert ks.decrypt("tls-key", sealed.data, associated_data=b"over tls").data == plaintext


def test_cacert_from_the_environment(
    tls_server: RunningServer, pki: TlsFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KEYSTREAM_CACERT", str(pki.ca))
    with KeystreamClient(tls_server.url, tls_server.token) as ks:
        assert ks.health()
        sealed = ks.encrypt("tls-key", b"y" * 200_000)  # the h11 transport uses the same context
        assert ks.decrypt("tls-key", sealed.data).data == b"y" * 200_000
    # An explicit verify= wins over the environment.
    monkeypatch.setenv("KEYSTREAM_CACERT", str(pki.other_ca))
    with KeystreamClient(tls_server.url, tls_server.token, verify=pki.ca) as ks:
        assert ks.health()


async def test_async_https_and_unverified_mode(tls_server: RunningServer, pki: TlsFiles) -> None:
    async with AsyncKeystreamClient(tls_server.url, tls_server.token, verify=str(pki.ca)) as ks:
        await ks.create_key("tls-async")
        raw = await ks.encrypt("tls-async", b"x" * 100_000, format="raw")
        opened = await ks.decrypt("tls-async", raw.data, format="raw", iv=raw.iv, key_version=raw.key_version)
        assert opened.data == b"x" * 100_000
    async with AsyncKeystreamClient(tls_server.url, tls_server.token, verify=False) as ks:
        assert (await ks.encrypt("tls-async", b"z")).data


def test_untrusted_certificate_is_a_connection_error(tls_server: RunningServer, pki: TlsFiles) -> None:
    for verify in (None, str(pki.other_ca)):  # the system store, then the wrong CA
        with KeystreamClient(tls_server.url, tls_server.token, verify=verify) as ks:
            with pytest.raises(KeystreamConnectionError):
                ks.list_keys()
            with pytest.raises(KeystreamConnectionError, match="certificate"):
                ks.encrypt("tls-key", b"data")


def test_unusable_tls_files_are_value_errors_naming_the_file(
    tls_server: RunningServer,
    pki: TlsFiles,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    no_tls_env: None,
) -> None:
    missing = tmp_path / "missing.pem"
    with pytest.raises(ValueError, match=f"CA bundle {missing}: No such file"):
        KeystreamClient(tls_server.url, tls_server.token, verify=str(missing))
    with pytest.raises(ValueError, match=r"client certificate .*not a PEM certificate and its matching key"):
        KeystreamClient(
            tls_server.url, tls_server.token, verify=pki.ca, cert=(pki.client_cert, pki.server_key)
        )
    monkeypatch.setenv("KEYSTREAM_CLIENT_KEY", str(pki.client_key))
    with pytest.raises(ValueError, match="KEYSTREAM_CLIENT_KEY is set without KEYSTREAM_CLIENT_CERT"):
        KeystreamClient(tls_server.url, tls_server.token, verify=pki.ca)
    # Over plain http the TLS settings are not used at all.
    monkeypatch.setenv("KEYSTREAM_CACERT", str(missing))
    KeystreamClient("http://127.0.0.1:1", "t").close()


def test_mtls_client_certificate_by_argument_and_environment(
    mtls_server: RunningServer, pki: TlsFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert = (pki.client_cert, pki.client_key)
    with KeystreamClient(mtls_server.url, mtls_server.token, verify=pki.ca, cert=cert) as ks:
        ks.create_key("mtls")
        sealed = ks.encrypt("mtls", b"m" * 300_000)
        assert ks.decrypt("mtls", sealed.data).data == b"m" * 300_000
    with KeystreamClient(mtls_server.url, mtls_server.token, verify=pki.ca) as ks:
        with pytest.raises(KeystreamConnectionError, match="requires a client certificate"):
            ks.list_keys()
        with pytest.raises(KeystreamConnectionError, match="requires a client certificate"):
            ks.encrypt("mtls", b"m")
    monkeypatch.setenv("KEYSTREAM_CACERT", str(pki.ca))
    monkeypatch.setenv("KEYSTREAM_CLIENT_CERT", str(pki.client_cert))
    monkeypatch.setenv("KEYSTREAM_CLIENT_KEY", str(pki.client_key))
    with KeystreamClient(mtls_server.url, mtls_server.token) as ks:
        assert [key.name for key in ks.list_keys()] == ["mtls"]
    # The certificate opens the connection; the API still needs the token.
    with KeystreamClient(mtls_server.url, "ks_0000aaaa_not-the-right-secret-000") as ks:
        with pytest.raises(KeystreamAPIError) as refused:
            ks.list_keys()
        assert refused.value.status == 401


def _plain(server: RunningServer) -> tuple[str, str]:
    authority = server.url.removeprefix("https://")
    return f"http://{authority}", authority


def test_http_url_against_an_https_server_is_a_connection_error_saying_use_https(
    tls_server: RunningServer,
) -> None:
    """A TLS server closes a plain HTTP request without answering; that was a KeystreamStreamError ("the
    response was cut short"; for streams h11's "can't handle event type ConnectionClosed ...")."""
    url, authority = _plain(tls_server)
    expected = (
        f"the server at {authority} speaks TLS \\(HTTPS\\) but the URL says http://: use https://{authority}"
    )
    with KeystreamClient(url, tls_server.token) as ks:
        with pytest.raises(KeystreamConnectionError, match=expected):
            ks.list_keys()
        with pytest.raises(KeystreamConnectionError, match=expected):
            ks.health()
        with pytest.raises(KeystreamConnectionError, match=expected):
            ks.encrypt("tls-key", b"data")  # the h11 transport
        with pytest.raises(KeystreamConnectionError, match=expected):
            ks.decrypt("tls-key", os.urandom(1 << 20))


async def test_async_http_url_against_an_https_server_says_use_https(tls_server: RunningServer) -> None:
    url, authority = _plain(tls_server)
    async with AsyncKeystreamClient(url, tls_server.token) as ks:
        with pytest.raises(KeystreamConnectionError, match=f"speaks TLS .* use https://{authority}"):
            await ks.list_keys()
        with pytest.raises(KeystreamConnectionError, match=f"speaks TLS .* use https://{authority}"):
            await ks.encrypt("tls-key", b"data")


def test_a_plain_server_that_closes_unanswered_is_not_called_tls() -> None:
    """The probe asks the port for a TLS handshake: a server that is not TLS keeps the old answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    stop = threading.Event()

    def close_every_connection() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            connection.recv(65536)
            connection.close()

    thread = threading.Thread(target=close_every_connection, daemon=True)
    thread.start()
    try:
        with KeystreamClient(f"http://127.0.0.1:{port}", "ks_0123456789abcdef_x") as ks:
            with pytest.raises(KeystreamStreamError) as caught:
                ks.list_keys()
            assert "TLS" not in str(caught.value)
            with pytest.raises(KeystreamStreamError) as caught:
                ks.encrypt("k", b"data")
            assert "TLS" not in str(caught.value) and "closed the connection before answering" in str(
                caught.value
            )
    finally:
        stop.set()
        listener.close()
        thread.join(5)
