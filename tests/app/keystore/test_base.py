"""Validation rules and metadata records shared by every keystore implementation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from app.errors import BadRequestError
from app.keystore import (
    ALLOWED_SEGMENT_SIZES,
    DEFAULT_SEGMENT_SIZE,
    KEY_TYPES,
    MAX_SEGMENT_SIZE,
    MIN_SEGMENT_SIZE,
    KeyInfo,
    KeyOptions,
    KeyVersionInfo,
    TokenRecord,
    check_key_name,
    check_key_type,
    check_segment_size,
)
from app.keystore.checks import check_token_id, key_type_for_material


def test_key_types_and_segment_limits() -> None:
    assert KEY_TYPES == {"aes128": 16, "aes192": 24, "aes256": 32, "aes256-siv": 64}
    assert (MIN_SEGMENT_SIZE, MAX_SEGMENT_SIZE, DEFAULT_SEGMENT_SIZE) == (4096, 1 << 24, 1 << 20)
    assert 4096 in ALLOWED_SEGMENT_SIZES and (1 << 24) in ALLOWED_SEGMENT_SIZES
    assert 4095 not in ALLOWED_SEGMENT_SIZES and (1 << 24) + 1 not in ALLOWED_SEGMENT_SIZES


@pytest.mark.parametrize("name", ["a", "A", "0", "orders", "orders-2024.v1_x", "a" * 128, "9.-_"])
def test_valid_key_names(name: str) -> None:
    assert check_key_name(name) == name


@pytest.mark.parametrize(
    "name", ["", "-a", ".a", "_a", "a" * 129, "a/b", "a b", "a:b", "é", "a\n", "../x", None, 5, b"abc"]
)
def test_invalid_key_names(name: object) -> None:
    with pytest.raises(BadRequestError, match="invalid key name"):
        check_key_name(name)


@pytest.mark.parametrize("token_id", ["t", "tok_AbC-9.x", "x" * 128])
def test_valid_token_ids(token_id: str) -> None:
    assert check_token_id(token_id) == token_id


@pytest.mark.parametrize("token_id", ["", "x" * 129, "a b", "a/b", None, 3])
def test_invalid_token_ids(token_id: object) -> None:
    with pytest.raises(BadRequestError, match="invalid token id"):
        check_token_id(token_id)


def test_key_type_validation_lists_allowed_types() -> None:
    for key_type in KEY_TYPES:
        assert check_key_type(key_type) == key_type
    with pytest.raises(BadRequestError, match="aes128, aes192, aes256"):
        check_key_type("aes512")
    with pytest.raises(BadRequestError):
        check_key_type(None)


@pytest.mark.parametrize("size", [4096, 4097, 65536, 1 << 20, 1 << 24])
def test_valid_segment_sizes(size: int) -> None:
    assert check_segment_size(size) == size


@pytest.mark.parametrize("size", [0, -4096, 4095, (1 << 24) + 1, 1 << 30])
def test_segment_size_out_of_range(size: int) -> None:
    with pytest.raises(BadRequestError, match="between 4096 and 16777216"):
        check_segment_size(size)


@pytest.mark.parametrize("size", [True, 4096.0, "4096", None])
def test_segment_size_wrong_type(size: object) -> None:
    with pytest.raises(BadRequestError, match="must be an integer"):
        check_segment_size(size)


@pytest.mark.parametrize(("length", "key_type"), [(16, "aes128"), (24, "aes192"), (32, "aes256")])
def test_key_type_follows_material_length(length: int, key_type: str) -> None:
    material = bytes(range(length))
    assert key_type_for_material(material) == (key_type, material)
    assert key_type_for_material(bytearray(material)) == (key_type, material)
    assert key_type_for_material(memoryview(material)) == (key_type, material)


@pytest.mark.parametrize("length", [0, 1, 15, 17, 31, 33, 64])
def test_other_material_lengths_name_the_allowed_ones(length: int) -> None:
    material = b"\xab" * length
    with pytest.raises(BadRequestError) as caught:
        key_type_for_material(material)
    message = str(caught.value)
    assert "16 (aes128), 24 (aes192), 32 (aes256)" in message
    assert f"got {length} bytes" in message
    if length:
        assert "ab" not in message.replace("aes", "")


def test_material_must_be_bytes() -> None:
    with pytest.raises(BadRequestError, match="must be bytes"):
        key_type_for_material("0" * 32)


def test_key_info_json_shape() -> None:
    created = datetime(2026, 1, 2, 3, 4, 5, 600000, tzinfo=UTC)
    later = datetime(2026, 1, 2, 5, 4, 5, tzinfo=timezone(timedelta(hours=2)))  # 03:04:05 UTC
    info = KeyInfo(
        name="orders",
        key_type="aes128",
        scheme="gcm",
        segment_size=4096,
        deletion_allowed=True,
        min_decryption_version=2,
        latest_version=2,
        imported=False,
        created_at=created,
        updated_at=later,
        versions=(KeyVersionInfo(1, created), KeyVersionInfo(2, later)),
        auto_rotate_period=86400,
        options=KeyOptions(exportable=True),
    )
    assert info.last_rotated == later
    assert info.to_json() == {
        "name": "orders",
        "type": "aes128",
        "scheme": "gcm",
        "segment_size": 4096,
        "deletion_allowed": True,
        "min_decryption_version": 2,
        "latest_version": 2,
        "imported": False,
        "auto_rotate_period": 86400,
        "derived": False,
        "convergent_encryption": False,
        "exportable": True,
        "allow_plaintext_backup": False,
        "created_at": "2026-01-02T03:04:05.600000Z",
        "updated_at": "2026-01-02T03:04:05Z",
        "versions": [
            {"version": 1, "created_at": "2026-01-02T03:04:05.600000Z"},
            {"version": 2, "created_at": "2026-01-02T03:04:05Z"},
        ],
    }


def test_token_record_repr_hides_the_secret_hash() -> None:
    secret_hash = bytes.fromhex("deadbeefcafebabe" * 4)
    record = TokenRecord("tok1", secret_hash, ("encrypt",), ("orders*",), "ci", datetime.now(UTC))
    for text in (repr(record), str(record)):
        assert "secret_hash" not in text
        assert "deadbeef" not in text and repr(secret_hash) not in text
        assert "tok1" in text and "encrypt" in text
