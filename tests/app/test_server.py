"""First-start bootstrap: data dir 0700, master key 0600, the root token printed once with a curl example."""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

from app.core.config import Settings
from app.keystore import load_or_create_master_key, open_keystore
from app.server import _export_settings, bootstrap
from app.services.security import TokenVerifier


def test_first_start_creates_files_and_prints_token_once(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    settings = Settings(_env_file=None, data_dir=data_dir, port=8123)  # type: ignore[call-arg]
    out = io.StringIO()
    token = bootstrap(settings, out)
    assert token is not None and token.startswith("ks_")
    printed = out.getvalue()
    assert printed.count(token) >= 1
    assert "curl" in printed and "http://127.0.0.1:8123/v1/keys" in printed
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE((data_dir / "master.key").stat().st_mode) == 0o600
    again = io.StringIO()
    assert bootstrap(settings, again) is None
    assert again.getvalue() == ""
    keystore = open_keystore(data_dir, load_or_create_master_key(data_dir, None))
    try:
        assert TokenVerifier(keystore).verify(f"Bearer {token}").has_scope("admin")
        assert token.split("_", 2)[2].encode() not in (data_dir / "keystore.db").read_bytes()
    finally:
        keystore.close()


def test_explicit_root_token_is_not_printed(tmp_path: Path) -> None:
    root = "ks_feedface_explicit-root-secret-0123"
    settings = Settings(_env_file=None, data_dir=tmp_path / "d", root_token=root)  # type: ignore[call-arg]
    out = io.StringIO()
    assert bootstrap(settings, out) is None
    assert out.getvalue() == ""


def test_export_settings_round_trips(tmp_path: Path) -> None:
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None,
        data_dir=tmp_path,
        enabled_backends=["python"],
        workers=3,
        root_token="ks_abcd_0123456789abcdefXYZ",
    )
    saved = dict(os.environ)
    try:
        for name in [k for k in os.environ if k.startswith("KEYSTREAM_")]:
            del os.environ[name]
        _export_settings(settings)
        rebuilt = Settings(_env_file=None)  # type: ignore[call-arg]
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert rebuilt == settings


def test_banner_shows_https_and_the_cacert_hint_under_tls(tmp_path: Path) -> None:
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None,
        data_dir=tmp_path / "data",
        port=8443,
        tls_cert_file=tmp_path / "server.pem",
        tls_key_file=tmp_path / "server.key",
        tls_client_ca_file=tmp_path / "ca.pem",
    )
    out = io.StringIO()
    assert bootstrap(settings, out) is not None
    printed = out.getvalue()
    assert "https://127.0.0.1:8443/v1/keys" in printed and "http://" not in printed
    assert "--cacert" in printed and "--cert/--key" in printed


def test_export_settings_carries_the_tls_files_to_the_workers(tmp_path: Path) -> None:
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None,
        data_dir=tmp_path,
        tls_cert_file=tmp_path / "server.pem",
        tls_key_file=tmp_path / "server.key",
        tls_client_ca_file=tmp_path / "ca.pem",
    )
    saved = dict(os.environ)
    try:
        for name in [k for k in os.environ if k.startswith("KEYSTREAM_")]:
            del os.environ[name]
        _export_settings(settings)
        rebuilt = Settings(_env_file=None)  # type: ignore[call-arg]
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert rebuilt == settings
