"""The sealed format's input helpers: key material is taken without a copy, and only bytes-like values."""

from __future__ import annotations

import pytest

from app.formats.sealed.format import as_bytes, as_key_material, as_view


def test_a_read_only_byte_view_is_key_material_as_it_is() -> None:
    view = memoryview(bytearray(range(32))).toreadonly()
    assert as_key_material("ikm", view) is view
    material = b"k" * 32
    assert as_key_material("ikm", material) is material


@pytest.mark.parametrize(
    "value",
    [
        bytearray(range(32)),
        memoryview(bytearray(range(32))),  # writable
        memoryview(bytearray(range(32))).cast("I"),  # not bytes
        memoryview(bytearray(range(32))).cast("B", (4, 8)).toreadonly(),  # not flat
    ],
)
def test_any_other_buffer_becomes_a_flat_read_only_byte_view_of_the_same_bytes(value: object) -> None:
    material = as_key_material("ikm", value)
    assert isinstance(material, memoryview)
    assert material.readonly and material.format == "B" and material.ndim == 1
    assert material.tobytes() == bytes(range(32))
    assert material is not value


def test_a_view_with_gaps_is_refused_as_before() -> None:
    with pytest.raises(TypeError):
        as_key_material("ikm", memoryview(bytes(range(32)))[::2])


@pytest.mark.parametrize("value", ["text", 3, None, [1, 2]])
def test_what_is_not_bytes_like_is_refused_naming_the_field(value: object) -> None:
    with pytest.raises(TypeError, match="ikm must be bytes-like"):
        as_key_material("ikm", value)
    with pytest.raises(TypeError, match="associated_data must be bytes-like"):
        as_bytes("associated_data", value)
    with pytest.raises(TypeError, match="data must be bytes-like"):
        as_view(value)
