"""The PKCS#11 seal: the master key is an AES-256 key inside a token (an HSM, or SoftHSM2 for tests).

The key is generated **in** the token, non-extractable and sensitive, so its bytes never exist in this
process: every wrap and unwrap is a call into the token (``CKM_AES_GCM``, a random 12-byte IV per blob, a
16-byte tag). Blobs use the ``0x02`` layout of :mod:`app.seal.blob` (seal kind ``pkcs11``, the key's
generation), whose header is part of the associated data given to the token.

The binding is python-pkcs11 (a maintained Cython wrapper over the PKCS#11 C API), imported only when this
seal is used (``pip install 'keystream[pkcs11]'``). One logged-in session per process; PKCS#11 forbids
using one session from two threads at once, so calls take a lock (a wrap is tens of microseconds in
SoftHSM2). Worker processes are spawned, never forked, so each opens its own session.

Opening refuses with a :class:`~app.seal.base.SealError` naming the setting: the library cannot be loaded, no
token has the label, the PIN is refused, no key has the label, or the key is extractable or not sensitive.
The PIN never appears in a message or ``repr``.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from .base import Seal, SealError, SealUnwrapError
from .blob import NONCE_SIZE, TAG_SIZE, V2_HEADER_SIZE, blob_origin, v2_header
from .file import read_private_file
from .keyring import GenerationKey, generation_associated_data

if TYPE_CHECKING:
    import pkcs11

    from app.core.config import Settings

__all__ = ["KEY_SIZE_BITS", "Pkcs11Seal", "generation_label", "open_pkcs11_seal", "read_pin_file"]

KEY_SIZE_BITS = 256
_TAG_BITS = TAG_SIZE * 8
#: What a generation's stored form wraps: proof that the token key with the generation's label is the one
#: that generation was made with (a key deleted and re-created under the label would not open it).
_GENERATION_CHECK = b"keystream master key generation check v1"


def generation_label(key_label: str, generation: int) -> str:
    """The token label of master key generation ``generation`` (2 or more): ``<key label>.g<generation>``."""
    return f"{key_label}.g{generation}"


_Result = TypeVar("_Result")


def _binding() -> Any:
    """The ``pkcs11`` module, or a :class:`SealError` saying how to install it."""
    try:
        import pkcs11
    except ImportError as exc:
        raise SealError(
            "KEYSTREAM_SEAL=pkcs11 needs python-pkcs11, which is not installed: "
            "pip install 'keystream[pkcs11]'"
        ) from exc
    return pkcs11


class Pkcs11Seal(Seal):
    """The master key as a non-extractable AES-256 key in a PKCS#11 token.

    Args:
        library: the token's PKCS#11 module (``KEYSTREAM_PKCS11_LIB``), e.g.
            ``/usr/lib/softhsm/libsofthsm2.so``.
        token_label: the token (``KEYSTREAM_PKCS11_TOKEN_LABEL``).
        pin: the user PIN (``KEYSTREAM_PKCS11_PIN`` or the content of ``KEYSTREAM_PKCS11_PIN_FILE``).
        key_label: the master key's label (``KEYSTREAM_PKCS11_KEY_LABEL``).
        create_key: generate the key in the token when none has the label (``operator init``).

    Raises:
        SealError: python-pkcs11 missing, the library not loadable, no such token, the PIN refused, no such
            key (and ``create_key`` false), several keys with the label, or the key extractable or not
            sensitive.
    """

    kind: ClassVar[str] = "pkcs11"

    def __init__(
        self, library: str, token_label: str, pin: str, key_label: str, *, create_key: bool = False
    ) -> None:
        binding = _binding()
        self._token_label = token_label
        self._key_label = key_label
        self._lock = threading.Lock()
        self._created = False
        try:
            lib = binding.lib(library)
        except binding.PKCS11Error as exc:
            raise SealError(
                f"KEYSTREAM_PKCS11_LIB: cannot load the PKCS#11 library {library}: {exc}"
            ) from None
        try:
            token = lib.get_token(token_label=token_label)
        except binding.NoSuchToken:
            raise SealError(
                f"KEYSTREAM_PKCS11_TOKEN_LABEL: no token labelled {token_label!r} in {library} "
                "(initialise one, e.g. softhsm2-util --init-token --free --label ...)"
            ) from None
        except binding.PKCS11Error as exc:
            raise SealError(
                f"KEYSTREAM_PKCS11_TOKEN_LABEL: cannot list the tokens of {library}: {exc!r}"
            ) from None
        self._token = token
        try:
            self._session: pkcs11.Session | None = token.open(user_pin=pin, rw=create_key)
        except binding.UserAlreadyLoggedIn:
            # A login is the whole process's: another session of this process logged in already.
            self._session = token.open(rw=create_key)
        except (binding.PinIncorrect, binding.PinInvalid, binding.PinLenRange):
            raise SealError(
                f"KEYSTREAM_PKCS11_PIN: token {token_label!r} refused the PIN (wrong PIN); check "
                "KEYSTREAM_PKCS11_PIN or KEYSTREAM_PKCS11_PIN_FILE"
            ) from None
        except binding.PinLocked:
            raise SealError(f"KEYSTREAM_PKCS11_PIN: token {token_label!r} has locked its user PIN") from None
        except binding.PKCS11Error as exc:
            raise SealError(f"cannot log in to token {token_label!r}: {type(exc).__name__}") from None
        try:
            self._key = self._find_or_create_key(binding, create_key)
        except BaseException:
            self.close()
            raise

    def _find_keys(self, session: Any, binding: Any, label: str) -> list[Any]:
        return list(
            session.get_objects(
                {binding.Attribute.CLASS: binding.ObjectClass.SECRET_KEY, binding.Attribute.LABEL: label}
            )
        )

    @staticmethod
    def _generate(session: Any, binding: Any, label: str) -> Any:
        """A new AES-256 token key, non-extractable and sensitive, labelled ``label``."""
        return session.generate_key(
            binding.KeyType.AES,
            KEY_SIZE_BITS,
            label=label,
            store=True,
            template={
                binding.Attribute.EXTRACTABLE: False,
                binding.Attribute.SENSITIVE: True,
                binding.Attribute.TOKEN: True,
            },
        )

    def _find_or_create_key(self, binding: Any, create_key: bool) -> Any:
        assert self._session is not None
        keys = self._find_keys(self._session, binding, self._key_label)
        if len(keys) > 1:
            raise SealError(
                f"KEYSTREAM_PKCS11_KEY_LABEL: token {self._token_label!r} holds {len(keys)} keys labelled "
                f"{self._key_label!r}; the master key's label must be unique"
            )
        if not keys:
            if not create_key:
                raise SealError(
                    f"KEYSTREAM_PKCS11_KEY_LABEL: token {self._token_label!r} holds no key labelled "
                    f"{self._key_label!r}; create it with: keystream-server operator init"
                )
            self._created = True
            return self._generate(self._session, binding, self._key_label)
        return self._checked(binding, keys[0], self._key_label)

    def _checked(self, binding: Any, key: Any, label: str) -> Any:
        """``key`` if it is a non-extractable, sensitive AES-256 key, else a SealError naming ``label``."""
        problems = []
        if key[binding.Attribute.KEY_TYPE] != binding.KeyType.AES or key[binding.Attribute.VALUE_LEN] != 32:
            problems.append("not an AES-256 key")
        if key[binding.Attribute.EXTRACTABLE]:
            problems.append("extractable")
        if not key[binding.Attribute.SENSITIVE]:
            problems.append("not sensitive")
        if problems:
            raise SealError(
                f"KEYSTREAM_PKCS11_KEY_LABEL: key {label!r} in token {self._token_label!r} is "
                f"{' and '.join(problems)}; the master key must be a non-extractable, sensitive AES-256 key "
                "generated in the token"
            )
        return key

    @property
    def created_key(self) -> bool:
        """True when opening generated the key in the token (``create_key`` and none existed)."""
        return self._created

    @property
    def generation(self) -> int:
        """1: the key labelled ``KEYSTREAM_PKCS11_KEY_LABEL`` (a rotation adds others)."""
        return 1

    @property
    def sealed(self) -> bool:
        """True after :meth:`close` (the session is logged out)."""
        return self._session is None

    def describe(self) -> str:
        """``the pkcs11 seal (key 'L' in token 'T')``."""
        return f"the pkcs11 seal (key {self._key_label!r} in token {self._token_label!r})"

    def _call(self, operation: Callable[[Any], _Result]) -> _Result:
        """Run ``operation(binding)`` on the session under the lock; device failures become SealError."""
        binding = _binding()
        with self._lock:
            if self._session is None:
                raise SealError(f"{self.describe()} is closed")
            try:
                return operation(binding)
            except SealUnwrapError:
                raise
            except binding.PKCS11Error as exc:
                raise SealError(f"{self.describe()} failed: {type(exc).__name__}") from None

    def _encrypt(
        self, key: Any, generation: int, plaintext: bytes | memoryview, associated_data: bytes
    ) -> bytes:
        """``header | iv | ciphertext | tag`` by token key ``key`` of ``generation``.

        The plaintext (key material, often from locked memory) reaches the token through a ``bytearray``
        zeroed as soon as the call returns. python-pkcs11's public ``encrypt`` takes ``bytes`` only (any other
        object is read as an iterable of chunks), and a ``bytes`` copy of a key version would linger in freed
        memory; its one-shot ``_encrypt``, which ``encrypt`` calls for ``bytes``, takes any buffer it can
        pass to ``C_Encrypt`` as a pointer. A library without it gets the ``bytes`` copy.
        """
        data = bytearray(plaintext)
        header = v2_header(self.kind, generation)
        iv = os.urandom(NONCE_SIZE)

        def encrypt(binding: Any) -> bytes:
            params = binding.GCMParams(iv, header + associated_data, _TAG_BITS)
            one_shot = getattr(key, "_encrypt", None)
            if one_shot is None:
                copied: bytes = key.encrypt(
                    bytes(data), mechanism=binding.Mechanism.AES_GCM, mechanism_param=params
                )
                return copied
            sealed: bytes = one_shot(data, mechanism=binding.Mechanism.AES_GCM, mechanism_param=params)
            return sealed

        try:
            return header + iv + self._call(encrypt)
        finally:
            data[:] = bytes(len(data))

    def _decrypt(self, key: Any, generation: int, blob: bytes, associated_data: bytes) -> bytes:
        """Open a blob of this kind and ``generation`` with token key ``key``."""
        blob = bytes(blob)
        origin = blob_origin(blob)
        if origin is None or origin.kind != self.kind or origin.generation != generation:
            raise SealUnwrapError("not a blob of this seal")
        header = blob[:V2_HEADER_SIZE]
        iv = blob[V2_HEADER_SIZE : V2_HEADER_SIZE + NONCE_SIZE]
        body = blob[V2_HEADER_SIZE + NONCE_SIZE :]

        def decrypt(binding: Any) -> bytes:
            params = binding.GCMParams(iv, header + associated_data, _TAG_BITS)
            try:
                opened: bytes = key.decrypt(body, mechanism=binding.Mechanism.AES_GCM, mechanism_param=params)
            except (binding.EncryptedDataInvalid, binding.EncryptedDataLenRange, binding.GeneralError):
                # SoftHSM2 answers a failed tag with CKR_GENERAL_ERROR, others with ENCRYPTED_DATA_INVALID.
                raise SealUnwrapError("the blob does not authenticate") from None
            return opened

        return self._call(decrypt)

    def wrap(self, plaintext: bytes | memoryview, associated_data: bytes) -> bytes:
        """AES-256-GCM in the token: ``header | iv | ciphertext | tag``; the header is associated data.

        Key material from locked memory is copied into a ``bytearray`` for the call and zeroed right after
        (see :meth:`_encrypt`).
        """
        return self._encrypt(self._key, self.generation, plaintext, associated_data)

    def unwrap(self, blob: bytes, associated_data: bytes) -> bytes:
        """Open a blob of this seal's kind and generation in the token.

        Raises:
            SealUnwrapError: another seal's or generation's blob, other associated data, or corruption.
            SealError: the token fails (removed, session lost).
        """
        return self._decrypt(self._key, self.generation, blob, associated_data)

    def _generation_key(self, generation: int, *, create: bool) -> Any:
        """The token key of ``generation`` in this seal's session; with ``create``, generated when absent
        (in a read-write session of its own: the server's session is read-only)."""
        label = generation_label(self._key_label, generation)

        def find(binding: Any) -> Any:
            assert self._session is not None
            keys = self._find_keys(self._session, binding, label)
            if not keys and create:
                with self._token.open(rw=True) as writer:  # the login is the process's: no PIN again
                    self._generate(writer, binding, label)
                keys = self._find_keys(self._session, binding, label)
            if len(keys) != 1:
                found = "no key" if not keys else f"{len(keys)} keys"
                raise SealError(
                    f"token {self._token_label!r} holds {found} labelled {label!r}: master key generation "
                    f"{generation} needs exactly one"
                )
            return self._checked(binding, keys[0], label)

        return self._call(find)

    def create_generation(self, generation: int) -> tuple[bytes, GenerationKey]:
        """Generate generation ``generation``'s AES-256 key in the token (non-extractable, sensitive,
        labelled :func:`generation_label`; one left by a rotation that died is used); its stored form is a
        check value that key made.

        Raises:
            SealError: the token refuses (read-only, full), or several keys have the label.
        """
        key = Pkcs11GenerationKey(self, generation, self._generation_key(generation, create=True))
        return key.wrap(_GENERATION_CHECK, generation_associated_data(generation)), key

    def open_generation(self, generation: int, stored: bytes) -> GenerationKey:
        """The token key of ``generation``, checked against its stored check value.

        Raises:
            SealError: no (or several) keys with the generation's label, or the key does not open the check
                value (another key under that label).
        """
        key = Pkcs11GenerationKey(self, generation, self._generation_key(generation, create=False))
        try:
            matches = key.unwrap(stored, generation_associated_data(generation)) == _GENERATION_CHECK
        except SealUnwrapError:
            matches = False
        if not matches:
            raise SealError(
                f"the token key {generation_label(self._key_label, generation)!r} is not master key "
                f"generation {generation} of this keystore"
            )
        return key

    def destroy_generation(self, generation: int) -> None:
        """Destroy generation ``generation``'s token key (no blob uses it any more); absent is fine.

        Raises:
            SealError: the token refuses.
        """
        label = generation_label(self._key_label, generation)

        def destroy(binding: Any) -> None:
            with self._token.open(rw=True) as writer:
                for key in self._find_keys(writer, binding, label):
                    key.destroy()

        self._call(destroy)

    def close(self) -> None:
        """Log out and close the session; idempotent."""
        with self._lock:
            session, self._session = self._session, None
        if session is not None:
            # Closing the session of a removed token fails; that must not mask the caller's own error.
            with contextlib.suppress(Exception):
                session.close()


def read_pin_file(path: str) -> str:
    """The PIN in ``path`` (``KEYSTREAM_PKCS11_PIN_FILE``), surrounding whitespace removed, checked as the
    master key file is (:func:`app.seal.file.read_private_file`).

    Raises:
        SealError: the file cannot be opened, is not a regular file, is open to other users (group or world
            bits), or is empty. The message never shows the PIN.
    """
    data = read_private_file(Path(path), f"the PIN file {path} (KEYSTREAM_PKCS11_PIN_FILE)", SealError)
    pin = data.decode("utf-8", errors="replace").strip()
    if not pin:
        raise SealError(f"the PIN file {path} (KEYSTREAM_PKCS11_PIN_FILE) is empty")
    return pin


def open_pkcs11_seal(settings: Settings, *, create_key: bool = False) -> Pkcs11Seal:
    """The PKCS#11 seal the ``pkcs11_*`` settings describe (the settings checked they are all given).

    Raises:
        SealError: see :class:`Pkcs11Seal` and :func:`read_pin_file`.
    """
    if settings.pkcs11_lib is None or settings.pkcs11_token_label is None:
        raise SealError("seal=pkcs11 needs KEYSTREAM_PKCS11_LIB and KEYSTREAM_PKCS11_TOKEN_LABEL")
    if settings.pkcs11_pin_file is not None:
        pin = read_pin_file(str(settings.pkcs11_pin_file))
    elif settings.pkcs11_pin is not None:
        pin = settings.pkcs11_pin.get_secret_value()
    else:
        raise SealError("seal=pkcs11 needs KEYSTREAM_PKCS11_PIN or KEYSTREAM_PKCS11_PIN_FILE")
    return Pkcs11Seal(
        str(settings.pkcs11_lib),
        settings.pkcs11_token_label,
        pin,
        settings.pkcs11_key_label,
        create_key=create_key,
    )


class Pkcs11GenerationKey(GenerationKey):
    """Master key generation >= 2 as a token key of a :class:`Pkcs11Seal`; every call goes into the token."""

    def __init__(self, seal: Pkcs11Seal, generation: int, key: Any) -> None:
        super().__init__(seal.kind, generation)
        self._seal = seal
        self._key = key

    def wrap(self, plaintext: bytes | memoryview, associated_data: bytes) -> bytes:
        """See :meth:`GenerationKey.wrap`: AES-256-GCM in the token."""
        return self._seal._encrypt(self._key, self.generation, plaintext, associated_data)

    def unwrap(self, blob: bytes, associated_data: bytes) -> bytes:
        """See :meth:`GenerationKey.unwrap`: AES-256-GCM in the token."""
        return self._seal._decrypt(self._key, self.generation, blob, associated_data)
