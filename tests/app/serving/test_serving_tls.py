"""app.serving.tls without a server: the loopback rule, the settings that go together, and the context."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.core.config import Settings
from app.serving.tls import (
    ServerTls,
    StartupRefusedError,
    check_plain_http_bind,
    client_tls_extension,
    is_loopback,
)
from tls_ca import make_ca_files


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost"])
def test_loopback_hosts(host: str) -> None:
    assert is_loopback(host)
    assert check_plain_http_bind(host, None, tls_disable=False) is None


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.1", "10.1.2.3", "no-such-host.invalid"])  # noqa: S104
def test_non_loopback_plain_http_is_refused_unless_disabled(host: str) -> None:
    assert not is_loopback(host)
    with pytest.raises(StartupRefusedError, match="KEYSTREAM_TLS_DISABLE=true"):
        check_plain_http_bind(host, None, tls_disable=False)
    warning = check_plain_http_bind(host, None, tls_disable=True)
    assert warning is not None and host in warning


def test_non_loopback_with_tls_needs_nothing_else(tmp_path: Path) -> None:
    tls = ServerTls(tmp_path / "c.pem", tmp_path / "k.pem")
    assert check_plain_http_bind("0.0.0.0", tls, tls_disable=False) is None  # noqa: S104


def test_context_is_tls_1_2_or_later_and_mtls_requires_certificates(tmp_path: Path) -> None:
    files = make_ca_files(tmp_path)
    plain = ServerTls(files.server_cert, files.server_key).context()
    assert plain.minimum_version == ssl.TLSVersion.TLSv1_2
    assert plain.verify_mode == ssl.CERT_NONE
    mutual = ServerTls(files.server_cert, files.server_key, files.ca).context()
    assert mutual.minimum_version == ssl.TLSVersion.TLSv1_2
    assert mutual.verify_mode == ssl.CERT_REQUIRED


def test_encrypted_key_is_refused_without_a_prompt(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    files = make_ca_files(tmp_path)
    key = serialization.load_pem_private_key(files.server_key.read_bytes(), None)
    encrypted = tmp_path / "encrypted.key"
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"passphrase"),
        )
    )
    with pytest.raises(StartupRefusedError, match="the private key is encrypted"):
        ServerTls(files.server_cert, encrypted).context()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"tls_cert_file": "c.pem"}, "go together"),
        ({"tls_key_file": "k.pem"}, "go together"),
        ({"tls_client_ca_file": "ca.pem"}, "needs tls_cert_file"),
        ({"tls_cert_file": "c.pem", "tls_key_file": "k.pem", "tls_disable": True}, "contradicts"),
    ],
)
def test_settings_that_go_together(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Settings(_env_file=None, **fields)  # type: ignore[call-arg]


def test_empty_tls_variables_are_unset() -> None:
    settings = Settings(_env_file=None, tls_cert_file="", tls_key_file=" ")  # type: ignore[call-arg]
    assert settings.tls_cert_file is None and settings.tls_key_file is None


def _handshake_in_memory(server_context: ssl.SSLContext, client_context: ssl.SSLContext) -> ssl.SSLObject:
    """A real TLS handshake between two in-memory ends; the server's end, once both are done."""
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    from_server, from_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    server = server_context.wrap_bio(to_server, from_server, server_side=True)
    client = client_context.wrap_bio(to_client, from_client, server_hostname="localhost")
    done = {"server": False, "client": False}
    for _ in range(10):
        for name, end in (("client", client), ("server", server)):
            if not done[name]:
                try:
                    end.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        to_server.write(from_client.read())
        to_client.write(from_server.read())
    client.write(b"x")  # TLS 1.3: the server checks the client's certificate on its first read
    to_server.write(from_client.read())
    assert server.read(1) == b"x" and all(done.values())
    return server


def test_the_tls_extension_carries_only_a_verified_client_certificate(tmp_path: Path) -> None:
    from cryptography import x509

    files = make_ca_files(tmp_path)
    client_context = ssl.create_default_context(cafile=str(files.ca))
    client_context.load_cert_chain(files.client_cert, files.client_key)
    mutual = ServerTls(files.server_cert, files.server_key, files.ca).context()
    extension = client_tls_extension(_handshake_in_memory(mutual, client_context))
    assert extension is not None
    (pem,) = extension["client_cert_chain"]
    assert x509.load_pem_x509_certificate(pem.encode()) == x509.load_pem_x509_certificate(
        files.client_cert.read_bytes()
    )
    assert extension["client_cert_name"] == "CN=keystream test client"
    assert extension["client_cert_error"] is None and extension["tls_version"] == 0x0304
    # Without a client CA the server asks for no certificate: a client's certificate is never sent, so none
    # could reach the app unverified.
    plain = ServerTls(files.server_cert, files.server_key).context()
    assert client_tls_extension(_handshake_in_memory(plain, client_context)) is None
    assert client_tls_extension(None) is None  # plain HTTP
