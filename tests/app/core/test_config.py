"""Settings: KEYSTREAM_ prefix, comma lists, validation with clear messages, cached get_settings."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.core.config import Settings, get_settings


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
        ("master_key", base64.b64encode(bytes(16)).decode(), "32 bytes"),
        ("root_token", "hunter2", "ks_<id>_<secret>"),
        ("workers", "0", "greater than or equal"),
    ],
)
def test_invalid_values(field: str, value: str, fragment: str) -> None:
    with pytest.raises(ValidationError, match=fragment) as info:
        Settings(_env_file=None, **{field: value})  # type: ignore[arg-type]
    if field in ("master_key", "root_token"):
        assert value not in str(info.value).replace(f"input_value='{value}'", "")


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
