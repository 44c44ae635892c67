"""Settings: KEYSTREAM_ prefix, comma lists, validation with clear messages, cached get_settings."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.core.config import Settings, get_settings
from app.keystore.master import parse_master_key


def test_environment_prefix_and_lists(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KEYSTREAM_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("KEYSTREAM_ENABLED_BACKENDS", "python, aesni")
    monkeypatch.setenv("KEYSTREAM_WORKERS", "3")
    monkeypatch.setenv("KEYSTREAM_ALLOW_KEY_IMPORT", "true")
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert settings.data_dir == tmp_path
    assert settings.enabled_backends == ["python", "aesni"]
    assert settings.workers == 3 and settings.allow_key_import is True


def test_env_file_is_read(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    env = tmp_path / ".env"
    env.write_text("KEYSTREAM_PORT=9123\nKEYSTREAM_BATCH_MAX_ITEMS=7\n")
    settings = Settings(_env_file=env)  # type: ignore[call-arg]
    assert (settings.port, settings.batch_max_items) == (9123, 7)


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("enabled_backends", "aesni,gpu", "unknown backends"),
        ("default_backend", "gpu", "unknown backend"),
        ("master_key", "not base64", "base64"),
        ("master_key", base64.b64encode(bytes(16)).decode(), "decodes to 16 bytes"),
        ("root_token", "hunter2", "ks_<id>_<secret>"),
        ("workers", "0", "greater than or equal"),
        ("forwarded_allow_ips", "127.0.0.1,haproxy", "'haproxy' is not an IP address or network"),
        ("ui_prometheus_url", "prometheus:9090", "must be an http or https URL"),
        ("ui_prometheus_url", "javascript:alert(1)", "must be an http or https URL"),
        ("ui_prometheus_url", "http://admin:hunter2@prometheus:9090", "must not hold a user or password"),
        ("ui_prometheus_url", "http:///api", "must name a host"),
        ("ui_prometheus_url", "http://prometheus:9090/?x=1", "no query or fragment"),
        ("ui_prometheus_url", "http://prometheus:90900", "port"),
    ],
)
def test_invalid_values(field: str, value: str, fragment: str) -> None:
    with pytest.raises(ValidationError, match=fragment) as info:
        Settings(_env_file=None, **{field: value})  # type: ignore[arg-type]
    if field in ("master_key", "root_token") or "hunter2" in value:
        assert value not in str(info.value).replace(f"input_value='{value}'", "")


@pytest.mark.parametrize(
    "encode",
    [base64.urlsafe_b64encode, lambda raw: base64.b64encode(raw) + b"\n"],
    ids=["url-safe", "trailing-newline"],
)
def test_master_key_accepts_what_the_keystore_accepts(encode: Callable[[bytes], bytes]) -> None:
    # The keystore decodes KEYSTREAM_MASTER_KEY in the standard or URL-safe alphabet, whitespace stripped;
    # the settings used to refuse a URL-safe key (with "-" or "_") before the keystore ever saw it.
    raw = bytes([0xFB, 0xFF]) * 16  # standard base64 of these bytes holds "+" and "/", URL-safe "-" and "_"
    value = encode(raw).decode()
    settings = Settings(_env_file=None, master_key=value)  # type: ignore[call-arg]
    assert settings.master_key is not None
    assert parse_master_key(settings.master_key.get_secret_value(), "test") == raw


def test_default_backend_must_be_enabled() -> None:
    with pytest.raises(ValidationError, match="not in enabled_backends"):
        Settings(_env_file=None, enabled_backends=["python"], default_backend="aesni")  # type: ignore[call-arg]


def test_secrets_are_not_in_repr() -> None:
    key = base64.b64encode(bytes(range(32))).decode()
    settings = Settings(_env_file=None, master_key=key, root_token="ks_abcd_0123456789abcdefXYZ")  # type: ignore[call-arg]
    assert key not in repr(settings) and "0123456789abcdefXYZ" not in repr(settings)


def test_get_settings_is_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    get_settings.cache_clear()
    monkeypatch.setenv("KEYSTREAM_PORT", "8111")
    try:
        first = get_settings()
        monkeypatch.setenv("KEYSTREAM_PORT", "8222")
        assert get_settings() is first and first.port == 8111
    finally:
        get_settings.cache_clear()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("KEYSTREAM_ROOT_TOKEN", "ks_zz_MySuperSecretRootToken123"),
        ("KEYSTREAM_MASTER_KEY", base64.b64encode(b"secret-master-key-28-bytes!!").decode()),
        ("KEYSTREAM_MASTER_KEY", "not base64 but a secret value"),
    ],
)
def test_malformed_secrets_are_not_echoed(monkeypatch: pytest.MonkeyPatch, field: str, value: str) -> None:
    """M1: a typo'd secret (often the real one) must not reach start-up logs through the error text."""
    monkeypatch.setenv(field, value)
    with pytest.raises(ValidationError) as info:
        Settings(_env_file=None)  # type: ignore[call-arg]
    text = str(info.value)
    assert value not in text and value[:8] not in text
    assert field.removeprefix("KEYSTREAM_").lower() in text  # the field is still named


def test_change_log_settings_and_the_tombstone_bound() -> None:
    settings = Settings(change_poll_interval=0.1)
    assert settings.effective_tombstone_seconds == pytest.approx(1.0)
    assert settings.cache_trust_seconds == pytest.approx(0.5)
    assert Settings(key_tombstone_seconds=30).effective_tombstone_seconds == 30
    with pytest.raises(ValueError, match="key_tombstone_seconds must be at least 6 x change_poll_interval"):
        Settings(key_tombstone_seconds=1.0)  # below 6 x 0.25 s: a cut-off replica could outlive it


def test_forwarded_allow_ips_is_nobody_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """uvicorn's own default believed X-Forwarded-For from 127.0.0.1; ours believes nobody."""
    assert Settings(_env_file=None).forwarded_allow_ips is None  # type: ignore[call-arg]
    monkeypatch.setenv("KEYSTREAM_FORWARDED_ALLOW_IPS", "10.0.0.5, 10.1.0.0/16,::1")
    assert Settings(_env_file=None).forwarded_allow_ips == ["10.0.0.5", "10.1.0.0/16", "::1"]  # type: ignore[call-arg]
    monkeypatch.setenv("KEYSTREAM_FORWARDED_ALLOW_IPS", " ")
    assert Settings(_env_file=None).forwarded_allow_ips is None  # type: ignore[call-arg]
