"""The native batch routes' base64, decoded by msgspec while parsing, never disagrees with the per-item
reader (:func:`app.core.base64_codec.decode`, the strict standard-library reading): a text msgspec accepts
decodes to the same bytes, and one it refuses sends the body down the text path, where the per-item reader
answers for each item (:mod:`app.api.batch_json`)."""

from __future__ import annotations

import binascii
import json

import msgspec

from app.api.batch_json import _BYTES, _TEXT, DecryptBatch, EncryptBatch
from app.core import base64_codec
from tests.app.core.test_base64_codec import _TEXTS


def _per_item(text: str) -> bytes | None:
    try:
        return base64_codec.decode(text)
    except (binascii.Error, ValueError):
        return None


def test_msgspec_accepts_only_what_the_per_item_reader_accepts_and_decodes_it_alike() -> None:
    differ = []
    text_path = 0
    for text in _TEXTS:
        if any("\ud800" <= char <= "\udfff" for char in text):
            continue  # a lone surrogate: msgspec refuses the body itself (malformed JSON), base64 aside
        body = json.dumps({"items": [{"plaintext": text, "associated_data": text}]}).encode()
        try:
            item = _BYTES[EncryptBatch].decode(body).items[0]
        except (msgspec.DecodeError, UnicodeDecodeError):
            text_path += 1
            assert _TEXT[EncryptBatch].decode(body).items[0].plaintext == text
            continue
        if not (item.plaintext == item.associated_data == _per_item(text)):
            differ.append(text)
    assert differ == []  # texts msgspec decoded that the per-item reader refuses or reads otherwise
    assert text_path > 10_000  # the malformed ones took the text path


def test_a_decrypt_batch_reads_its_ciphertexts_alike() -> None:
    for text in ["", "QUJD", "QUJD===", "QUJD=", "QQ==QQ==", "-_-_", "QUJD\n"]:
        body = json.dumps({"items": [{"ciphertext": text}]}).encode()
        try:
            value = _BYTES[DecryptBatch].decode(body).items[0].ciphertext
        except msgspec.ValidationError:
            value = None
        assert value is None or value == _per_item(text), text
