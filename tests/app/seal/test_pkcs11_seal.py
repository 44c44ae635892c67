"""The pkcs11 seal against SoftHSM2: the master key lives in the token; each refusal is one clear line."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pkcs11
import pytest
from pkcs11 import Attribute, KeyType

from app.audit import audit_keys_for
from app.core.secret_memory import secret_copy
from app.keystore import MasterKeyError, SqliteKeyStore
from app.keystore.master import CHECK_ASSOCIATED_DATA, KeyUnwrapError, unwrap_key_material, wrap_key_material
from app.seal import FileSeal, SealError, SealUnwrapError, blob_origin
from app.seal.blob import BlobOrigin, v2_header
from app.seal.pkcs11 import Pkcs11Seal, read_pin_file
from tests.softhsm import SoftHsmToken, make_token, reload_module

KEY_LABEL = "keystream-master"


def open_seal(token: SoftHsmToken, *, create_key: bool = False, pin: str | None = None) -> Pkcs11Seal:
    return Pkcs11Seal(str(token.library), token.label, pin or token.pin, KEY_LABEL, create_key=create_key)


def test_the_key_is_made_in_the_token_and_never_leaves_it(token: SoftHsmToken) -> None:
    seal = open_seal(token, create_key=True)
    assert seal.created_key
    blob = seal.wrap(b"material", b"keystream:key:orders:1")
    seal.close()
    with (
        pkcs11.lib(str(token.library)).get_token(token_label=token.label).open(user_pin=token.pin) as session
    ):
        key = session.get_key(label=KEY_LABEL, key_type=KeyType.AES)
        assert key[Attribute.VALUE_LEN] == 32
        assert not key[Attribute.EXTRACTABLE] and key[Attribute.SENSITIVE]
        with pytest.raises(pkcs11.AttributeSensitive):
            key[Attribute.VALUE]
    again = open_seal(token)
    assert not again.created_key
    assert again.unwrap(blob, b"keystream:key:orders:1") == b"material"


def test_a_wrap_hands_the_token_a_copy_it_zeroes(
    token: SoftHsmToken, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Key material reaches C_Encrypt through a bytearray zeroed after the call, never a bytes copy (which
    would linger in freed memory); the blob still unwraps to the material."""
    seal = open_seal(token, create_key=True)
    given: list[tuple[object, bytes]] = []
    key_class = type(seal._key)
    original = key_class._encrypt

    def spy(self: object, data: bytearray, **kwargs: object) -> bytes:
        given.append((data, bytes(data)))
        result: bytes = original(self, data, **kwargs)
        return result

    monkeypatch.setattr(key_class, "_encrypt", spy)
    material = secret_copy(os.urandom(32)).readonly()
    blob = seal.wrap(material, b"ad")
    monkeypatch.undo()
    try:
        [(data, seen)] = given
        assert isinstance(data, bytearray) and seen == material
        assert data == bytearray(32)
        assert seal.unwrap(blob, b"ad") == material
    finally:
        seal.close()


def test_blobs_name_the_seal_and_bind_header_and_associated_data(token: SoftHsmToken) -> None:
    seal = open_seal(token, create_key=True)
    blob = seal.wrap(b"material", b"ad")
    assert blob_origin(blob) == BlobOrigin("pkcs11", 1)
    with pytest.raises(SealUnwrapError):
        seal.unwrap(blob, b"other ad")
    relabelled = v2_header("pkcs11", 2) + blob[6:]
    with pytest.raises(SealUnwrapError):
        seal.unwrap(relabelled, b"ad")
    flipped = bytearray(blob)
    flipped[-1] ^= 1
    with pytest.raises(SealUnwrapError):
        seal.unwrap(bytes(flipped), b"ad")
    with pytest.raises(SealUnwrapError):
        seal.unwrap(FileSeal(bytes(32)).wrap(b"material", b"ad"), b"ad")
    with pytest.raises(SealUnwrapError):
        FileSeal(bytes(32)).unwrap(blob, b"ad")


def test_another_tokens_key_does_not_unwrap(token: SoftHsmToken) -> None:
    other = make_token(token.conf.parent, label="other")
    reload_module()
    seal = open_seal(token, create_key=True)
    wrapped = wrap_key_material(seal, "orders", 1, os.urandom(32))
    other_seal = open_seal(other, create_key=True)
    with pytest.raises(KeyUnwrapError, match="version 1 of key 'orders'"):
        unwrap_key_material(other_seal, "orders", 1, wrapped)


def test_refusals_name_the_setting(token: SoftHsmToken, tmp_path: Path) -> None:
    with pytest.raises(SealError, match="KEYSTREAM_PKCS11_LIB: cannot load") as caught:
        Pkcs11Seal(str(tmp_path / "missing.so"), token.label, token.pin, KEY_LABEL)
    with pytest.raises(SealError, match="KEYSTREAM_PKCS11_TOKEN_LABEL: no token labelled 'nope'"):
        Pkcs11Seal(str(token.library), "nope", token.pin, KEY_LABEL)
    with pytest.raises(SealError, match="KEYSTREAM_PKCS11_PIN: token 'keystream' refused the PIN") as caught:
        open_seal(token, pin="9999")
    assert "9999" not in str(caught.value)
    with pytest.raises(SealError, match=r"KEYSTREAM_PKCS11_KEY_LABEL: .* no key labelled 'keystream-master'"):
        open_seal(token)
    assert isinstance(caught.value, MasterKeyError)  # serve prints it as one line, exit 2


def test_threads_share_the_session_safely(token: SoftHsmToken) -> None:
    """PKCS#11 forbids two threads in one session at once: the seal serialises them, and every blob opens."""
    seal = open_seal(token, create_key=True)

    def work(index: int) -> bool:
        material = os.urandom(32)
        associated_data = f"keystream:key:k{index}:1".encode()
        return all(
            seal.unwrap(seal.wrap(material, associated_data), associated_data) == material for _ in range(25)
        )

    with ThreadPoolExecutor(max_workers=8) as pool:
        assert all(pool.map(work, range(16)))


def test_an_extractable_key_is_refused(token: SoftHsmToken) -> None:
    with (
        pkcs11.lib(str(token.library))
        .get_token(token_label=token.label)
        .open(user_pin=token.pin, rw=True) as session
    ):
        session.generate_key(
            KeyType.AES, 256, label=KEY_LABEL, store=True, template={Attribute.EXTRACTABLE: True}
        )
    with pytest.raises(SealError, match="is extractable"):
        open_seal(token)


def test_a_pin_file_must_be_private(tmp_path: Path) -> None:
    path = tmp_path / "pin"
    path.write_text("1234\n")
    path.chmod(0o644)
    with pytest.raises(SealError, match=r"KEYSTREAM_PKCS11_PIN_FILE\) is accessible to other users"):
        read_pin_file(str(path))
    path.chmod(0o600)
    assert read_pin_file(str(path)) == "1234"


def test_a_keystore_under_the_pkcs11_seal(token: SoftHsmToken, tmp_path: Path) -> None:
    seal = open_seal(token, create_key=True)
    store = SqliteKeyStore(tmp_path / "keystore.db", seal)
    store.create_key("orders")
    store.rotate_key("orders")
    materials = [store.key_material("orders", version) for version in (1, 2)]
    audit = store.audit_key_material()
    assert audit is not None and len(audit) == 64
    store.close()
    seal.close()
    seal = open_seal(token)
    store = SqliteKeyStore(tmp_path / "keystore.db", seal)
    assert [store.key_material("orders", version) for version in (1, 2)] == materials
    assert store.audit_key_material() == audit  # the audit keys stay the same across restarts
    assert audit_keys_for(seal, audit).chain_key == audit[32:]
    store.close()
    with pytest.raises(MasterKeyError, match=r"is sealed by the pkcs11 seal.*KEYSTREAM_SEAL=pkcs11"):
        SqliteKeyStore(tmp_path / "keystore.db", FileSeal(bytes(32)))
    with pytest.raises(SealError, match="cannot derive"):
        audit_keys_for(seal)
    assert CHECK_ASSOCIATED_DATA  # the check value is bound to its own associated data
