"""A throwaway certificate authority for the TLS tests, made with ``cryptography`` on the fly.

:func:`make_ca_files` writes, into a directory: the CA certificate and key, a server certificate for
``127.0.0.1``, ``::1`` and ``localhost`` with its key, and a client certificate with its key (both issued by
the CA), plus a second, unrelated CA (``other-ca.pem``) for "wrong CA" tests. :func:`make_client_cert`
issues more client certificates from that CA, with the names a test chooses (common name, organizational
units, DNS and URI subject alternative names). Keys are P-256 and unencrypted; the files
live only as long as the test's temporary directory. Shared by the server tests (``tests/``) and the client
tests (both have ``clients/python/tests`` on their path).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class TlsFiles:
    """Paths of the PEM files :func:`make_ca_files` wrote."""

    ca: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path


def _name(common_name: str, organizational_units: tuple[str, ...] = ()) -> x509.Name:
    units = [x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit) for unit in organizational_units]
    return x509.Name([*units, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    path.chmod(0o600)


def _ca(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return certificate, key


def _leaf(
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    common_name: str,
    usage: x509.ObjectIdentifier,
    names: list[x509.GeneralName] | None = None,
    organizational_units: tuple[str, ...] = (),
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, organizational_units))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def make_ca_files(directory: Path) -> TlsFiles:
    """Write a CA, a server and a client certificate (and keys) into ``directory``; return their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key = _ca("Keystream test CA")
    server, server_key = _leaf(
        ca,
        ca_key,
        "localhost",
        ExtendedKeyUsageOID.SERVER_AUTH,
        [
            x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.IPAddress(ipaddress.ip_address("::1")),
        ],
    )
    client, client_key = _leaf(ca, ca_key, "keystream test client", ExtendedKeyUsageOID.CLIENT_AUTH)
    other, _ = _ca("Some other CA")
    files = TlsFiles(
        ca=directory / "ca.pem",
        ca_key=directory / "ca.key",
        server_cert=directory / "server.pem",
        server_key=directory / "server.key",
        client_cert=directory / "client.pem",
        client_key=directory / "client.key",
        other_ca=directory / "other-ca.pem",
    )
    pem = serialization.Encoding.PEM
    files.ca.write_bytes(ca.public_bytes(pem))
    files.server_cert.write_bytes(server.public_bytes(pem))
    files.client_cert.write_bytes(client.public_bytes(pem))
    files.other_ca.write_bytes(other.public_bytes(pem))
    _write_key(ca_key, files.ca_key)
    _write_key(server_key, files.server_key)
    _write_key(client_key, files.client_key)
    return files


def make_client_cert(
    files: TlsFiles,
    stem: str,
    common_name: str,
    *,
    organizational_units: tuple[str, ...] = (),
    dns_names: tuple[str, ...] = (),
    uris: tuple[str, ...] = (),
) -> tuple[Path, Path]:
    """Issue a client certificate from ``files``' CA with these names; write ``STEM.pem`` and ``STEM.key``
    beside the CA and return their paths."""
    ca = x509.load_pem_x509_certificate(files.ca.read_bytes())
    ca_key = serialization.load_pem_private_key(files.ca_key.read_bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    names += [x509.UniformResourceIdentifier(uri) for uri in uris]
    certificate, key = _leaf(
        ca, ca_key, common_name, ExtendedKeyUsageOID.CLIENT_AUTH, names, organizational_units
    )
    cert_path, key_path = files.ca.with_name(f"{stem}.pem"), files.ca.with_name(f"{stem}.key")
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    _write_key(key, key_path)
    return cert_path, key_path
