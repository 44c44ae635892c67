"""app.serving.tls without a server: the loopback rule, the settings that go together, and the context."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.core.config import Settings
from app.serving.tls import ServerTls, StartupRefusedError, check_plain_http_bind, is_loopback
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
