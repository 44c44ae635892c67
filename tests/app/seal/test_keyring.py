"""Master key generations under one seal (:mod:`app.seal.keyring`): file, shamir and pkcs11 (SoftHSM2).

A keyring wraps under its newest generation, opens every blob with the generation its header names, never
opens a generation it was not given, and forgets its generations when the seal is sealed. The pkcs11 seal's
generations are token keys: non-extractable, and destroyed only when asked.
"""

from __future__ import annotations

from collections.abc import Iterator

import pkcs11
import pytest
from pkcs11 import Attribute

from app.seal import FileSeal, Seal, SealError, SealUnwrapError, blob_origin
from app.seal.blob import BlobOrigin
from app.seal.keyring import Keyring, KeyringState
from app.seal.pkcs11 import Pkcs11Seal, generation_label
from app.seal.shamir import ShamirSeal
from tests.softhsm import SoftHsmToken

MASTER = bytes(range(32))
AD = b"keystream:key:orders:1"


@pytest.fixture(params=["file", "shamir", "pkcs11"])
def seal(request: pytest.FixtureRequest) -> Iterator[Seal]:
    if request.param == "file":
        made: Seal = FileSeal(MASTER)
    elif request.param == "shamir":
        made = ShamirSeal(MASTER)
    else:
        token: SoftHsmToken = request.getfixturevalue("token")
        made = Pkcs11Seal(str(token.library), token.label, token.pin, "keystream-master", create_key=True)
    yield made
    made.close()


def test_new_blobs_name_the_newest_generation_and_old_ones_still_open(seal: Seal) -> None:
    keyring = Keyring(seal)
    old = keyring.wrap(b"version one", AD)
    assert blob_origin(old) == BlobOrigin(seal.kind, 1)
    stored = keyring.create(2)
    assert keyring.generation == 1  # made, but not used before the keystore says so
    keyring.install(KeyringState(2, [(2, stored)]))
    new = keyring.wrap(b"version two", AD)
    assert blob_origin(new) == BlobOrigin(seal.kind, 2)
    assert keyring.unwrap(old, AD) == b"version one"
    assert keyring.unwrap(new, AD) == b"version two"
    assert bytes(keyring.unwrap_secret(new, AD)) == b"version two"
    with pytest.raises(SealUnwrapError):
        keyring.unwrap(new, b"keystream:key:orders:2")  # bound to its place, as generation 1's blobs
    with pytest.raises(SealUnwrapError):
        seal.unwrap(new, AD)  # the seal alone knows generation 1 only

    # Another process opens generation 2 from its stored form only.
    other = Keyring(seal, lambda: KeyringState(2, [(2, stored)]))
    assert other.unwrap(new, AD) == b"version two"
    assert blob_origin(other.wrap(b"x", AD)) == BlobOrigin(seal.kind, 2)

    # Retired: generation 2 is gone from the keystore, so nothing opens its blobs any more.
    keyring.install(KeyringState(1, []))
    with pytest.raises(SealUnwrapError):
        keyring.unwrap(new, AD)
    assert blob_origin(keyring.wrap(b"x", AD)) == BlobOrigin(seal.kind, 1)


def test_a_stored_generation_of_another_master_key_is_refused(seal: Seal) -> None:
    stored = Keyring(seal).create(2)
    other_root = FileSeal(bytes(32)) if seal.kind != "pkcs11" else None
    if other_root is not None:
        with pytest.raises(SealError, match="generation 2 does not open"):
            Keyring(other_root).install(KeyringState(2, [(2, stored)]))
        other_root.close()
    with pytest.raises(SealError, match="generation 3"):
        Keyring(seal).install(KeyringState(3, [(3, stored)]))  # bound to its number


def test_a_blob_of_a_generation_the_loader_learns_later_opens_after_a_reload() -> None:
    seal = FileSeal(MASTER)
    state = KeyringState(1, [])
    reloads = 0

    def loader() -> KeyringState:
        nonlocal reloads
        reloads += 1
        return state

    writer = Keyring(seal)
    reader = Keyring(seal, loader)
    assert reader.generation == 1 and reloads == 1
    state = KeyringState(2, [(2, writer.create(2))])
    writer.install(state)
    blob = writer.wrap(b"made elsewhere", AD)
    assert reader.unwrap(blob, AD) == b"made elsewhere"  # an unknown generation: reload once, then open
    assert reloads == 2 and reader.generation == 2


def test_sealing_the_shamir_seal_forgets_every_generation() -> None:
    seal = ShamirSeal(MASTER)
    keyring = Keyring(seal)
    keyring.install(KeyringState(2, [(2, keyring.create(2))]))
    blob = keyring.wrap(b"material", AD)
    seal.seal()
    with pytest.raises(SealError, match="sealed"):
        keyring.unwrap(blob, AD)
    assert "open=[]" in repr(keyring)


def test_pkcs11_generations_are_non_extractable_token_keys_destroyed_on_request(token: SoftHsmToken) -> None:
    seal = Pkcs11Seal(str(token.library), token.label, token.pin, "keystream-master", create_key=True)
    keyring = Keyring(seal)
    stored = keyring.create(2)
    keyring.install(KeyringState(2, [(2, stored)]))
    blob = keyring.wrap(b"material", AD)
    label = generation_label("keystream-master", 2)
    # The seal's login is the process's: another session of it sees the token's private objects.
    with pkcs11.lib(str(token.library)).get_token(token_label=token.label).open() as session:
        key = session.get_key(label=label)
        assert not key[Attribute.EXTRACTABLE] and key[Attribute.SENSITIVE]
    assert Keyring(seal, lambda: KeyringState(2, [(2, stored)])).unwrap(blob, AD) == b"material"
    seal.destroy_generation(2)
    with pytest.raises(SealError, match=r"no key labelled 'keystream-master\.g2'"):
        Keyring(seal).install(KeyringState(2, [(2, stored)]))
    seal.close()
