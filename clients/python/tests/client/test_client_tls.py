"""The client over https: the real app under uvicorn with a self-signed certificate for 127.0.0.1."""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

import keystream_server
from keystream_client import AsyncKeystreamClient, KeystreamClient, KeystreamConnectionError


def _self_signed(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "keystream test")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    base = tmp_path_factory.mktemp("tls")
    cert, key = _self_signed(base)
    port = keystream_server.free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEYSTREAM_")}
    env.update(
        {
            "KEYSTREAM_DATA_DIR": str(base / "data"),
            "KEYSTREAM_ROOT_TOKEN": keystream_server.ROOT_TOKEN,
            "KEYSTREAM_MASTER_KEY": keystream_server.MASTER_KEY,
            "PYTHONPATH": str(keystream_server.REPO),
        }
    )
    bootstrap = "from app.server import bootstrap; from app.core.config import get_settings; "
    bootstrap += "bootstrap(get_settings())"
    subprocess.run(
        [sys.executable, "-c", bootstrap], env=env, cwd=keystream_server.REPO, check=True, timeout=60
    )
    command = [sys.executable, "-m", "uvicorn", "app.main:create_app", "--factory", "--host", "127.0.0.1"]
    command += [
        "--port",
        str(port),
        "--ssl-keyfile",
        str(key),
        "--ssl-certfile",
        str(cert),
        "--log-level",
        "warning",
    ]
    with (base / "server.log").open("wb") as log:
        process = subprocess.Popen(
            command, env=env, cwd=keystream_server.REPO, stdout=log, stderr=subprocess.STDOUT
        )
    url = f"https://127.0.0.1:{port}"
    trusted = ssl.create_default_context(cafile=str(cert))
    try:
        deadline = time.monotonic() + keystream_server.STARTUP_SECONDS
        while True:
            assert process.poll() is None, (base / "server.log").read_text()
            try:
                if httpx.get(f"{url}/healthz", verify=trusted, timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "TLS server did not start"
                time.sleep(0.1)
        yield url, cert
    finally:
        keystream_server.stop(process)


def test_https_round_trip_with_a_ca_bundle(tls_server: tuple[str, Path]) -> None:
    url, cert = tls_server
    with KeystreamClient(url, keystream_server.ROOT_TOKEN, verify=str(cert)) as ks:
        ks.create_key("tls-key", segment_size=4096)
        plaintext = os.urandom(3 << 20)
        sealed = ks.encrypt("tls-key", plaintext, associated_data=b"over tls")
        assert ks.decrypt("tls-key", sealed.data, associated_data=b"over tls").data == plaintext


async def test_async_https_and_unverified_mode(tls_server: tuple[str, Path]) -> None:
    url, _ = tls_server
    async with AsyncKeystreamClient(url, keystream_server.ROOT_TOKEN, verify=False) as ks:
        raw = await ks.encrypt("tls-key", b"x" * 100_000, format="raw")
        opened = await ks.decrypt("tls-key", raw.data, format="raw", iv=raw.iv, key_version=raw.key_version)
        assert opened.data == b"x" * 100_000


def test_untrusted_certificate_is_a_connection_error(tls_server: tuple[str, Path]) -> None:
    url, _ = tls_server
    with KeystreamClient(url, keystream_server.ROOT_TOKEN) as ks:
        with pytest.raises(KeystreamConnectionError):
            ks.list_keys()
        with pytest.raises(KeystreamConnectionError, match="certificate"):
            ks.encrypt("tls-key", b"data")
