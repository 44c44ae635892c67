"""Fixtures for the format tests: aescore backends and Tink keysets built from known key material."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator

import pytest
import tink
from tink import daead, secret_key_access, streaming_aead
from tink.proto import (
    aes_ctr_hmac_streaming_pb2,
    aes_gcm_hkdf_streaming_pb2,
    aes_siv_pb2,
    common_pb2,
    tink_pb2,
)

import aescore

#: Backends cheap enough to run every small case through (hwsim models a device and is tested elsewhere).
CHEAP_BACKENDS = ("aesni", "python")
TINK_KEY_TYPE_URL = "type.googleapis.com/google.crypto.tink.AesCtrHmacStreamingKey"
TINK_GCM_KEY_TYPE_URL = "type.googleapis.com/google.crypto.tink.AesGcmHkdfStreamingKey"
TINK_SIV_KEY_TYPE_URL = "type.googleapis.com/google.crypto.tink.AesSivKey"


def _available(name: str) -> bool:
    return aescore.available_backends().get(name, "missing") is None


@pytest.fixture(params=[name for name in CHEAP_BACKENDS if _available(name)])
def backend(request: pytest.FixtureRequest) -> aescore.Backend:
    """Every available cheap backend in turn."""
    return aescore.get_backend(request.param)


@pytest.fixture
def fast_backend() -> aescore.Backend:
    """``aesni`` when it runs here, else ``python``: for the multi-MiB cases."""
    return aescore.get_backend("aesni" if _available("aesni") else "python")


def _key_data(material: bytes, derived_key_size: int, segment_size: int, scheme: str) -> tink_pb2.KeyData:
    if scheme == "gcm":
        gcm_key = aes_gcm_hkdf_streaming_pb2.AesGcmHkdfStreamingKey(version=0, key_value=material)
        gcm_key.params.ciphertext_segment_size = segment_size
        gcm_key.params.derived_key_size = derived_key_size
        gcm_key.params.hkdf_hash_type = common_pb2.SHA256
        value, type_url = gcm_key.SerializeToString(), TINK_GCM_KEY_TYPE_URL
    else:
        key = aes_ctr_hmac_streaming_pb2.AesCtrHmacStreamingKey(version=0, key_value=material)
        key.params.ciphertext_segment_size = segment_size
        key.params.derived_key_size = derived_key_size
        key.params.hkdf_hash_type = common_pb2.SHA256
        key.params.hmac_params.hash = common_pb2.SHA256
        key.params.hmac_params.tag_size = 32
        value, type_url = key.SerializeToString(), TINK_KEY_TYPE_URL
    return tink_pb2.KeyData(type_url=type_url, value=value, key_material_type=tink_pb2.KeyData.SYMMETRIC)


def tink_keyset_handle(
    keys: list[tuple[int, bytes]], derived_key_size: int, segment_size: int, scheme: str = "ctr-hmac"
) -> tink.KeysetHandle:
    """A Tink keyset of streaming AEAD keys with the given (key id, material), the first one primary.

    ``scheme`` ``ctr-hmac``: AesCtrHmacStreaming keys with the parameters of Tink's
    ``AES{128,256}_CTR_HMAC_SHA256_{4KB,1MB}`` templates (HKDF-SHA256, HMAC-SHA256, 32-byte tags); ``gcm``:
    AesGcmHkdfStreaming keys as ``AES{128,256}_GCM_HKDF_{4KB,1MB}`` (HKDF-SHA256); the sizes as passed in.
    """
    keyset = tink_pb2.Keyset(primary_key_id=keys[0][0])
    for key_id, material in keys:
        key_data = _key_data(material, derived_key_size, segment_size, scheme)
        keyset.key.append(
            tink_pb2.Keyset.Key(
                key_data=key_data, status=tink_pb2.ENABLED, key_id=key_id, output_prefix_type=tink_pb2.RAW
            )
        )
    return tink.proto_keyset_format.parse(keyset.SerializeToString(), secret_key_access.TOKEN)


def tink_deterministic_aead(keys: list[tuple[int, bytes]]) -> daead.DeterministicAead:
    """Tink's own AES-SIV ``DeterministicAead`` over a keyset of ``AesSivKey`` keys with the given (key id,
    64-byte material), the first one primary, each with the RAW output prefix (nothing in front of a
    ciphertext), as an application holding an ``aes256-siv`` key's exported material would build it."""
    daead.register()
    keyset = tink_pb2.Keyset(primary_key_id=keys[0][0])
    for key_id, material in keys:
        value = aes_siv_pb2.AesSivKey(version=0, key_value=material).SerializeToString()
        key_data = tink_pb2.KeyData(
            type_url=TINK_SIV_KEY_TYPE_URL, value=value, key_material_type=tink_pb2.KeyData.SYMMETRIC
        )
        keyset.key.append(
            tink_pb2.Keyset.Key(
                key_data=key_data, status=tink_pb2.ENABLED, key_id=key_id, output_prefix_type=tink_pb2.RAW
            )
        )
    handle = tink.proto_keyset_format.parse(keyset.SerializeToString(), secret_key_access.TOKEN)
    primitive: daead.DeterministicAead = handle.primitive(daead.DeterministicAead)
    return primitive


class _KeepValue(io.BytesIO):
    """A BytesIO that keeps its contents when Tink closes it."""

    value = b""

    def close(self) -> None:
        if not self.closed:
            self.value = self.getvalue()
        super().close()


class TinkStreamingAead:
    """Tink's own AesCtrHmacStreaming (or AesGcmHkdfStreaming), to check interoperability both ways."""

    def __init__(
        self,
        keys: list[tuple[int, bytes]],
        derived_key_size: int,
        segment_size: int,
        scheme: str = "ctr-hmac",
    ) -> None:
        handle = tink_keyset_handle(keys, derived_key_size, segment_size, scheme)
        self._primitive = handle.primitive(streaming_aead.StreamingAead)

    def encrypt(self, plaintext: bytes, associated_data: bytes, write_size: int | None = None) -> bytes:
        destination = _KeepValue()
        with self._primitive.new_encrypting_stream(destination, associated_data) as stream:
            step = write_size or max(len(plaintext), 1)
            for start in range(0, len(plaintext), step):
                stream.write(plaintext[start : start + step])
        return destination.value

    def decrypt(self, ciphertext: bytes, associated_data: bytes) -> bytes:
        with self._primitive.new_decrypting_stream(io.BytesIO(ciphertext), associated_data) as stream:
            result: bytes = stream.read()
        return result


@pytest.fixture(scope="session")
def tink_factory() -> Iterator[Callable[..., TinkStreamingAead]]:
    streaming_aead.register()
    yield TinkStreamingAead
