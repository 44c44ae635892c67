"""Settings for the PostgreSQL keystore: KEYSTREAM_DATABASE_URL, KEYSTREAM_MASTER_KEY_FILE and their rule."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.core.config import Settings

KEY = base64.b64encode(bytes(range(32))).decode()
URL = "postgresql://ks:Sup3rSecretPw@db.internal:5432/keystream"


def test_unset_means_sqlite_with_a_generated_master_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEYSTREAM_DATABASE_URL", "")
    monkeypatch.setenv("KEYSTREAM_MASTER_KEY_FILE", " ")
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert settings.database_url is None and settings.master_key_file is None and settings.master_key is None


def test_database_url_with_master_key_or_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KEYSTREAM_DATABASE_URL", URL)
    monkeypatch.setenv("KEYSTREAM_MASTER_KEY", KEY)
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert settings.database_url is not None and settings.database_url.get_secret_value() == URL
    assert "Sup3rSecretPw" not in repr(settings) and "db.internal" not in repr(settings)
    monkeypatch.delenv("KEYSTREAM_MASTER_KEY")
    monkeypatch.setenv("KEYSTREAM_MASTER_KEY_FILE", str(tmp_path / "master.key"))
    assert Settings(_env_file=None).master_key_file == tmp_path / "master.key"  # type: ignore[call-arg]


def test_database_url_without_a_given_master_key_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEYSTREAM_DATABASE_URL", URL)
    with pytest.raises(ValidationError, match="KEYSTREAM_MASTER_KEY or KEYSTREAM_MASTER_KEY_FILE") as info:
        Settings(_env_file=None)  # type: ignore[call-arg]
    assert "Sup3rSecretPw" not in str(info.value) and "db.internal" not in str(info.value)


def test_master_key_and_file_together_are_refused(tmp_path: Path) -> None:
    with pytest.raises(
        ValidationError, match="only one of KEYSTREAM_MASTER_KEY and KEYSTREAM_MASTER_KEY_FILE"
    ):
        Settings(_env_file=None, master_key=KEY, master_key_file=tmp_path / "k")  # type: ignore[call-arg]


@pytest.mark.parametrize(
    "url", ["mysql://root:Sup3rSecretPw@db/keys", "Sup3rSecretPw", "http://db.internal/Sup3rSecretPw"]
)
def test_a_malformed_database_url_is_refused_without_echo(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setenv("KEYSTREAM_DATABASE_URL", url)
    monkeypatch.setenv("KEYSTREAM_MASTER_KEY", KEY)
    with pytest.raises(ValidationError, match="must start with postgresql://") as info:
        Settings(_env_file=None)  # type: ignore[call-arg]
    assert "Sup3rSecretPw" not in str(info.value) and "database_url" in str(info.value)
