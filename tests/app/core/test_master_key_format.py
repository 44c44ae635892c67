"""Base64 key material decoded straight into locked memory: the same bytes as ``base64.b64decode``, the same
inputs refused, and never a ``bytes`` object holding the result."""

from __future__ import annotations

import base64
import binascii
import os

import pytest

from app.core.master_key_format import decode_secret_base64
from app.core.secret_memory import SLOT_SIZE, SecretBuffer


@pytest.mark.parametrize("length", range(1, SLOT_SIZE + 1))
def test_decodes_as_b64decode_into_a_secret_buffer(length: int) -> None:
    for _ in range(5):
        material = os.urandom(length)
        decoded = decode_secret_base64(base64.b64encode(material).decode())
        assert decoded == material and decoded.readonly
        assert isinstance(decoded.obj, SecretBuffer)


@pytest.mark.parametrize(
    "text",
    ["QUJ", "QQ=A", "Q===", "QQ==\n", " QQ==", "QU-D", "QU_D", "QUJD!", "====", "QQ==QQ=="],
)
def test_refuses_what_b64decode_refuses(text: str) -> None:
    with pytest.raises((binascii.Error, ValueError)):
        base64.b64decode(text, validate=True)
    with pytest.raises(ValueError) as caught:
        decode_secret_base64(text)
    assert text.strip() not in str(caught.value)


@pytest.mark.parametrize("length", [0, SLOT_SIZE + 1, 100])
def test_refuses_material_no_secret_buffer_holds(length: int) -> None:
    with pytest.raises(ValueError, match=f"got {length} bytes"):
        decode_secret_base64(base64.b64encode(bytes(length)).decode())
