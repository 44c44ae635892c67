"""The master key: data directory and key file permissions, env values, wrapping with AES-GCM."""

from __future__ import annotations

import base64
import logging
import os
import secrets
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.errors import ServiceUnavailableError
from app.keystore import KeyUnwrapError, MasterKeyError, load_or_create_master_key
from app.keystore.master import (
    check_master_key,
    ensure_data_dir,
    key_associated_data,
    make_master_key_check,
    master_key_matches,
    unwrap_key_material,
    wrap_key_material,
)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    """Run the test under the umask given by ``request.param``; restore the previous one afterwards."""
    previous = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(previous)


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077, 0o277], indirect=True)
def test_first_start_creates_dir_0700_and_key_file_0600(data_dir: Path, umask: int) -> None:
    key = load_or_create_master_key(data_dir / "nested", None)
    assert len(key) == 32
    assert mode_of(data_dir / "nested") == 0o700
    key_file = data_dir / "nested" / "master.key"
    assert mode_of(key_file) == 0o600
    assert base64.b64decode(key_file.read_text().strip(), validate=True) == key
    assert sorted(os.listdir(data_dir / "nested")) == ["master.key"]  # no temporary file left behind


def test_second_start_reads_the_same_key(data_dir: Path) -> None:
    first = load_or_create_master_key(data_dir, None)
    assert load_or_create_master_key(data_dir, None) == first
    assert load_or_create_master_key(data_dir, "") == first
    assert load_or_create_master_key(data_dir, "  \n") == first


def test_two_data_dirs_get_different_keys(tmp_path: Path) -> None:
    assert load_or_create_master_key(tmp_path / "a", None) != load_or_create_master_key(tmp_path / "b", None)


def test_generating_logs_the_path_but_not_the_key(data_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="app.keystore.master"):
        key = load_or_create_master_key(data_dir, None)
    assert "generated a new master key" in caplog.text and str(data_dir) in caplog.text
    assert base64.b64encode(key).decode() not in caplog.text


def test_existing_open_data_dir_is_tightened_with_a_warning(
    data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data_dir.mkdir()
    os.chmod(data_dir, 0o755)  # noqa: S103 - the insecure state under test
    with caplog.at_level(logging.WARNING, logger="app.keystore.master"):
        ensure_data_dir(data_dir)
    assert mode_of(data_dir) == 0o700
    assert "open to other users" in caplog.text


def test_data_dir_that_is_a_file_is_refused(data_dir: Path) -> None:
    data_dir.write_text("not a directory")
    with pytest.raises(MasterKeyError, match="not a directory"):
        load_or_create_master_key(data_dir, None)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o666])
def test_key_file_open_to_others_is_refused(data_dir: Path, mode: int) -> None:
    key = load_or_create_master_key(data_dir, None)
    key_file = data_dir / "master.key"
    os.chmod(key_file, mode)
    with pytest.raises(MasterKeyError) as caught:
        load_or_create_master_key(data_dir, None)
    message = str(caught.value)
    assert "accessible to other users" in message and f"chmod 600 {key_file}" in message
    assert base64.b64encode(key).decode() not in message


def test_key_file_0400_is_accepted(data_dir: Path) -> None:
    key = load_or_create_master_key(data_dir, None)
    os.chmod(data_dir / "master.key", 0o400)
    assert load_or_create_master_key(data_dir, None) == key


def test_key_file_symlink_is_refused(data_dir: Path, tmp_path: Path) -> None:
    real = tmp_path / "elsewhere.key"
    real.write_text(base64.b64encode(secrets.token_bytes(32)).decode())
    os.chmod(real, 0o600)
    data_dir.mkdir(mode=0o700)
    (data_dir / "master.key").symlink_to(real)
    with pytest.raises(MasterKeyError, match="cannot open master key file"):
        load_or_create_master_key(data_dir, None)


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"not base64!!\n",
        base64.b64encode(b"\x07" * 31) + b"\n",
        b"\xff\xfe\x00garbage",
        b"A" * 44 + b"\n",
    ],
)
def test_corrupt_key_file_gives_a_clear_error_without_its_content(data_dir: Path, content: bytes) -> None:
    data_dir.mkdir(mode=0o700)
    key_file = data_dir / "master.key"
    key_file.write_bytes(content)
    os.chmod(key_file, 0o600)
    with pytest.raises(MasterKeyError, match="master key") as caught:
        load_or_create_master_key(data_dir, None)
    assert caught.value.__context__ is None and caught.value.__cause__ is None  # no chained error with bytes
    if content.strip():
        assert content.strip()[:8].decode("latin-1") not in str(caught.value)


def test_env_value_is_used_and_never_written(data_dir: Path) -> None:
    key = secrets.token_bytes(32)
    assert load_or_create_master_key(data_dir, base64.b64encode(key).decode()) == key
    assert mode_of(data_dir) == 0o700
    assert not (data_dir / "master.key").exists()


def test_env_value_accepts_url_safe_base64_and_whitespace(data_dir: Path) -> None:
    key = b"\xfb\xff" * 16  # encodes with + and / in the standard alphabet
    assert "+" in base64.b64encode(key).decode() or "/" in base64.b64encode(key).decode()
    assert load_or_create_master_key(data_dir, " " + base64.urlsafe_b64encode(key).decode() + "\n") == key


def test_env_value_overrides_an_existing_key_file(data_dir: Path) -> None:
    file_key = load_or_create_master_key(data_dir, None)
    env_key = secrets.token_bytes(32)
    assert load_or_create_master_key(data_dir, base64.b64encode(env_key).decode()) == env_key != file_key


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("this is not base64 at all", "not valid base64"),
        ("c2VjcmV0LXNob3J0", "decodes to 12 bytes"),
        (base64.b64encode(b"s" * 64).decode(), "decodes to 64 bytes"),
    ],
)
def test_bad_env_value_gives_a_clear_error_without_echoing_it(
    data_dir: Path, value: str, expected: str
) -> None:
    with pytest.raises(MasterKeyError) as caught:
        load_or_create_master_key(data_dir, value)
    message = str(caught.value)
    assert expected in message and "KEYSTREAM_MASTER_KEY" in message and "32" in message
    assert value not in message
    assert caught.value.__context__ is None and caught.value.__cause__ is None


def test_concurrent_first_starts_agree_on_one_key(data_dir: Path) -> None:
    results: list[bytes] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def start() -> None:
        try:
            barrier.wait(timeout=5)
            results.append(load_or_create_master_key(data_dir, None))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert not errors
    assert len(results) == 8 and len(set(results)) == 1
    assert sorted(os.listdir(data_dir)) == ["master.key"]


def test_check_master_key() -> None:
    key = secrets.token_bytes(32)
    assert check_master_key(bytearray(key)) == key
    with pytest.raises(MasterKeyError, match="32 bytes long, got 16"):
        check_master_key(bytes(16))
    with pytest.raises(MasterKeyError, match="must be bytes"):
        check_master_key(base64.b64encode(key).decode())


def test_wrap_round_trip_and_format() -> None:
    master = secrets.token_bytes(32)
    material = secrets.token_bytes(32)
    wrapped = wrap_key_material(master, "orders", 3, material)
    assert len(wrapped) == 1 + 12 + 32 + 16 and wrapped[0] == 1
    assert material not in wrapped
    assert unwrap_key_material(master, "orders", 3, wrapped) == material
    again = wrap_key_material(master, "orders", 3, material)
    assert again[1:13] != wrapped[1:13] and again != wrapped  # a fresh random nonce every time
    assert key_associated_data("orders", 3) == b"keystream:key:orders:3"


@pytest.mark.parametrize(("name", "version"), [("orders", 4), ("orders", 2), ("orders2", 3), ("order", 3)])
def test_wrapped_material_is_bound_to_name_and_version(name: str, version: int) -> None:
    master = secrets.token_bytes(32)
    wrapped = wrap_key_material(master, "orders", 3, secrets.token_bytes(16))
    with pytest.raises(KeyUnwrapError):
        unwrap_key_material(master, name, version, wrapped)


def test_wrong_master_key_gives_a_clear_error_without_bytes() -> None:
    master, other = secrets.token_bytes(32), secrets.token_bytes(32)
    material = secrets.token_bytes(32)
    wrapped = wrap_key_material(master, "orders", 1, material)
    with pytest.raises(KeyUnwrapError) as caught:
        unwrap_key_material(other, "orders", 1, wrapped)
    error = caught.value
    assert isinstance(error, ServiceUnavailableError) and error.code == "key_unwrap_failed"
    message = str(error)
    assert "version 1 of key 'orders'" in message and "master key" in message
    for secret in (master, other, material, wrapped):
        assert secret.hex() not in message and repr(secret) not in message
    assert error.__cause__ is None and error.__context__ is None  # no chained traceback with bytes


@pytest.mark.parametrize(
    "damage", ["flip_tag", "flip_ciphertext", "flip_nonce", "truncate", "format", "empty"]
)
def test_damaged_wrapped_material_is_refused(damage: str) -> None:
    master = secrets.token_bytes(32)
    wrapped = bytearray(wrap_key_material(master, "k", 1, secrets.token_bytes(24)))
    if damage == "flip_tag":
        wrapped[-1] ^= 1
    elif damage == "flip_ciphertext":
        wrapped[20] ^= 0x80
    elif damage == "flip_nonce":
        wrapped[1] ^= 1
    elif damage == "truncate":
        del wrapped[-5:]
    elif damage == "format":
        wrapped[0] = 2
    else:
        wrapped.clear()
    with pytest.raises(KeyUnwrapError):
        unwrap_key_material(master, "k", 1, bytes(wrapped))


def test_master_key_check() -> None:
    master = secrets.token_bytes(32)
    check = make_master_key_check(master)
    assert master_key_matches(master, check)
    assert not master_key_matches(secrets.token_bytes(32), check)
    assert not master_key_matches(master, check[:-1])
