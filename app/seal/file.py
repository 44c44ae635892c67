"""The file seal: the master key as 32 bytes in memory, from the environment, a file, or ``data/master.key``.

**For development and tests.** The master key lies in ``KEYSTREAM_MASTER_KEY``, ``KEYSTREAM_MASTER_KEY_FILE``
or ``<data_dir>/master.key`` (base64 text, mode 0600, generated on first start; the data directory is kept at
mode 0700), usually next to the database it protects: whoever can read the data directory can unwrap every
key. Production deployments use a seal whose key never leaves a device (:mod:`app.seal.pkcs11`).

Blobs are AES-256-GCM in the ``0x01`` layout of :mod:`app.seal.blob`, byte for byte what Keystream wrote
before seals existed. No function here puts key bytes into an exception, a log line or a ``repr``.

The master key never sits in a ``bytes`` object: it is decoded into locked memory left out of core dumps
(:mod:`app.core.secret_memory`) and zeroed by :meth:`FileSeal.close` (and at exit). Each wrap and unwrap
builds its AES-GCM key schedule with aescore's ``aesni`` backend, which zeroes it as soon as the call is
done (pycryptodome frees its schedules without zeroing them, leaving the master key in freed heap memory:
it is used only on a CPU without AES-NI). :meth:`FileSeal.unwrap_secret` decrypts straight into locked
memory, and :meth:`FileSeal.derive_key_into` runs aescore's C HKDF into the caller's locked memory, zeroing
its intermediate values.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import aescore
from app.core.master_key_format import (
    MASTER_KEY_SIZE,
    MasterKeyError,
    check_master_key_source,
    parse_master_key,
)
from app.core.secret_memory import SecretBuffer, random_secret, secret_copy, wipe_secret

from .aead import open_blob, open_blob_secret, seal_blob
from .base import Seal, SealError, SealUnwrapError
from .blob import FORMAT_FILE_V1, NONCE_SIZE, TAG_SIZE

if TYPE_CHECKING:
    from app.core.config import Settings

__all__ = [
    "DATA_DIR_MODE",
    "MASTER_KEY_FILE",
    "MASTER_KEY_MODE",
    "FileSeal",
    "check_master_key",
    "ensure_data_dir",
    "load_master_key_for",
    "load_or_create_master_key",
    "open_file_seal",
    "read_master_key_file",
    "read_private_file",
]

logger = logging.getLogger(__name__)

MASTER_KEY_FILE = "master.key"
DATA_DIR_MODE = 0o700
MASTER_KEY_MODE = 0o600
_FORMAT = bytes([FORMAT_FILE_V1])


def check_master_key(master_key: object) -> memoryview:
    """A copy of ``master_key`` in locked memory if it is 32 bytes long, as a read-only view (the caller's
    own copy stays the caller's: dropping the last view of a :class:`SecretBuffer` zeroes it).

    Raises:
        MasterKeyError: not bytes-like, or another length.
    """
    if isinstance(master_key, SecretBuffer):
        view = master_key.readonly()
    elif isinstance(master_key, bytes | bytearray | memoryview):
        view = memoryview(master_key).cast("B")
    else:
        raise MasterKeyError(f"the master key must be bytes, got {type(master_key).__name__}")
    if len(view) != MASTER_KEY_SIZE:
        raise MasterKeyError(f"the master key must be {MASTER_KEY_SIZE} bytes long, got {len(view)} bytes")
    return secret_copy(view).readonly()


def ensure_data_dir(data_dir: Path) -> Path:
    """Create ``data_dir`` (and parents) if needed and make it mode 0700, whatever the umask.

    An existing directory that other users can enter or read is tightened to 0700 with a warning.

    Raises:
        MasterKeyError: the path exists and is not a directory, cannot be created, or is open to other
            users and its mode cannot be changed.
    """
    path = Path(data_dir)
    existed = path.is_dir()
    try:
        path.mkdir(mode=DATA_DIR_MODE, parents=True, exist_ok=True)
    except FileExistsError as exc:
        raise MasterKeyError(f"data directory {path} exists and is not a directory") from exc
    except OSError as exc:
        raise MasterKeyError(f"cannot create data directory {path}: {exc.strerror}") from exc
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode != DATA_DIR_MODE:
        try:
            os.chmod(path, DATA_DIR_MODE)
        except OSError as exc:
            if mode & 0o077:
                raise MasterKeyError(
                    f"data directory {path} is open to other users (mode {mode:#o}) and its mode cannot be "
                    f"changed ({exc.strerror}); run: chmod 700 {path}"
                ) from exc
        else:
            if existed and mode & 0o077:
                logger.warning(
                    "data directory %s was open to other users (mode %#o); changed it to 0700", path, mode
                )
    return path


def read_private_file(path: Path, label: str, error: type[MasterKeyError] = MasterKeyError) -> bytes:
    """The first 4096 bytes of a file that holds a secret (a master key, a PIN), checked first.

    Args:
        path: the file; a symbolic link is refused (``O_NOFOLLOW``).
        label: the file in messages, e.g. ``"master key file data/master.key"``.
        error: the exception class to raise.

    Raises:
        MasterKeyError: (``error``) the file cannot be opened, is not a regular file, or is accessible to
            other users (group or world bits set). Messages never show the content.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise error(f"cannot open {label}: {exc.strerror}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{label} is not a regular file")
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o077:
            raise error(
                f"{label} is accessible to other users (mode {mode:#o}); refusing to use it. "
                f"Run: chmod 600 {path}"
            )
        return os.read(fd, 4096)
    finally:
        os.close(fd)


def _read_master_key_file(path: Path) -> memoryview:
    data = read_private_file(path, f"master key file {path}")
    if not data.isascii():  # checked, not caught: a UnicodeDecodeError would carry the file's bytes
        raise MasterKeyError(f"master key file {path} is not base64 text of {MASTER_KEY_SIZE} bytes")
    return parse_master_key(data.decode("ascii"), str(path))


def read_master_key_file(path: Path) -> memoryview:
    """Read a master key file given explicitly (``KEYSTREAM_MASTER_KEY_FILE``, e.g. a mounted secret).

    Raises:
        MasterKeyError: the file cannot be opened, is not a regular file, is accessible to other users
            (group or world bits set), or does not hold base64 of 32 bytes.
    """
    return _read_master_key_file(Path(path))


def _write_new_file(path: Path, content: bytes) -> None:
    """Create ``path`` with mode 0600 (O_EXCL, so never over an existing file) and write ``content``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, MASTER_KEY_MODE)
    try:
        os.fchmod(fd, MASTER_KEY_MODE)  # the umask may have removed bits we want; never adds any
        view = memoryview(content)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _create_master_key_file(path: Path) -> memoryview | None:
    """Write a new random master key to ``path`` atomically; ``None`` when another process was first.

    The key is written to a unique temporary file and hard-linked into place, so ``path`` never exists
    half-written even while several workers start at once.
    """
    key = random_secret(MASTER_KEY_SIZE)
    content = base64.b64encode(key.view()) + b"\n"
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(8).hex()}.tmp")
    _write_new_file(temporary, content)
    try:
        os.link(temporary, path)
    except FileExistsError:
        return None
    except OSError:
        # File systems without hard links: create the file itself exclusively instead.
        try:
            _write_new_file(path, content)
        except FileExistsError:
            return None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
    _fsync_dir(path.parent)
    return key.readonly()


def load_or_create_master_key(data_dir: Path, env_value: str | None) -> memoryview:
    """Return the master key, creating the data directory (0700) and, on first start, ``master.key`` (0600).

    Args:
        data_dir: the service's data directory.
        env_value: the value of ``KEYSTREAM_MASTER_KEY`` (base64 of 32 bytes), or ``None``/empty to use
            ``data_dir/master.key``. A key given here is never written to disk.

    Raises:
        MasterKeyError: the data directory is unusable; ``env_value`` or the file is not base64 of 32 bytes;
            the file is accessible to other users (group or world bits set) or is not a regular file.
    """
    path = ensure_data_dir(Path(data_dir))
    if env_value is not None and env_value.strip():
        return parse_master_key(env_value, "KEYSTREAM_MASTER_KEY")
    key_path = path / MASTER_KEY_FILE
    if not os.path.lexists(key_path):
        created = _create_master_key_file(key_path)
        if created is not None:
            logger.warning(
                "generated a new master key in %s: back it up; without it no stored key can be used", key_path
            )
            return created
    return _read_master_key_file(key_path)


class FileSeal(Seal):
    """The master key in locked memory; wraps with AES-256-GCM in the ``0x01`` layout (generation 1).

    Args:
        master_key: the 32 bytes (never in a ``repr``), copied into locked memory (a :class:`SecretBuffer`
            or any bytes-like value).
        source: where the key came from, for messages (``"KEYSTREAM_MASTER_KEY"``, a file path).

    Raises:
        MasterKeyError: ``master_key`` is not 32 bytes.
    """

    kind: ClassVar[str] = "file"
    derives_keys: ClassVar[bool] = True

    def __init__(self, master_key: bytes | memoryview | SecretBuffer, source: str = "the master key") -> None:
        self._key: memoryview | None = check_master_key(master_key)
        self._source = source

    @property
    def generation(self) -> int:
        """Always 1: the ``0x01`` layout has no generation field."""
        return 1

    @property
    def sealed(self) -> bool:
        """True after :meth:`close`."""
        return self._key is None

    def describe(self) -> str:
        """``the file seal (<source>)``."""
        return f"the file seal ({self._source})"

    def _master(self) -> memoryview:
        key = self._key
        if key is None:
            raise SealError(f"{self.describe()} is closed")
        return key

    def wrap(self, plaintext: bytes | memoryview, associated_data: bytes) -> bytes:
        """AES-256-GCM under the master key with a random 12-byte nonce: ``0x01 | nonce | ct | tag``.

        ``plaintext`` may be any buffer (a :class:`SecretBuffer`'s view): it is read in place.
        """
        nonce = os.urandom(NONCE_SIZE)
        return _FORMAT + nonce + seal_blob(self._master(), nonce, plaintext, associated_data)

    @staticmethod
    def _parts(blob: bytes) -> tuple[bytes, bytes]:
        if len(blob) < 1 + NONCE_SIZE + TAG_SIZE or blob[:1] != _FORMAT:
            raise SealUnwrapError("not a file seal blob")
        return blob[1 : 1 + NONCE_SIZE], blob[1 + NONCE_SIZE :]

    def unwrap(self, blob: bytes, associated_data: bytes) -> bytes:
        """Open a ``0x01`` blob.

        Raises:
            SealUnwrapError: another layout (another seal's blob), another master key or associated data,
                or corruption.
        """
        nonce, sealed = self._parts(bytes(blob))
        return open_blob(self._master(), nonce, sealed, associated_data)

    def unwrap_secret(self, blob: bytes, associated_data: bytes) -> memoryview:
        """Open a ``0x01`` blob straight into locked memory: no ``bytes`` object holds the plaintext.

        Raises:
            SealUnwrapError: as :meth:`unwrap`.
            ValueError: the plaintext is longer than a secret buffer holds (64 bytes).
        """
        nonce, sealed = self._parts(bytes(blob))
        return open_blob_secret(self._master(), nonce, sealed, associated_data)

    def derive_key_into(self, salt: bytes, info: bytes, out: memoryview) -> None:
        """HKDF-SHA256 (RFC 5869) of the master key with ``salt`` and ``info``, written into ``out`` by
        aescore's C core, which zeroes its intermediate values (an empty ``salt`` is RFC 5869's default).

        Raises:
            ValueError: ``out`` is empty or longer than HKDF-SHA256 can derive.
        """
        aescore.hkdf_sha256_into(self._master(), salt, info, out)

    def close(self) -> None:
        """Zero the master key's memory and forget it; the seal is sealed afterwards (idempotent)."""
        key, self._key = self._key, None
        if key is not None:
            wipe_secret(key)


def load_master_key_for(settings: Settings, *, create: bool = True) -> tuple[memoryview, str]:
    """The master key from where ``settings`` say, and that place's name for messages.

    The places: ``master_key_file``, ``master_key``, or (SQLite only) ``data_dir/master.key``, generated on
    first start when ``create`` is true.

    Raises:
        MasterKeyError: see :func:`check_master_key_source`, :func:`load_or_create_master_key` and
            :func:`read_master_key_file`; or, with ``create`` false, no key exists yet.
    """
    env_value = settings.master_key.get_secret_value() if settings.master_key else None
    database_url = settings.database_url.get_secret_value() if settings.database_url else None
    check_master_key_source(env_value, settings.master_key_file, shared_database=database_url is not None)
    # A failure names the setting that chose the place (a start-up refusal is one line naming the setting).
    if settings.master_key_file is not None:
        try:
            return read_master_key_file(settings.master_key_file), str(settings.master_key_file)
        except MasterKeyError as exc:
            raise MasterKeyError(f"KEYSTREAM_MASTER_KEY_FILE: {exc}") from exc
    if env_value is not None and env_value.strip():
        return parse_master_key(env_value, "KEYSTREAM_MASTER_KEY"), "KEYSTREAM_MASTER_KEY"
    key_path = Path(settings.data_dir) / MASTER_KEY_FILE
    if not create and not key_path.exists():
        raise MasterKeyError(
            f"no master key: set KEYSTREAM_MASTER_KEY or KEYSTREAM_MASTER_KEY_FILE, or point "
            f"KEYSTREAM_DATA_DIR at the directory holding {MASTER_KEY_FILE}"
        )
    try:
        return load_or_create_master_key(settings.data_dir, None), str(key_path)
    except MasterKeyError as exc:
        raise MasterKeyError(f"KEYSTREAM_DATA_DIR: {exc}") from exc


def open_file_seal(settings: Settings, *, create: bool = True) -> FileSeal:
    """The file seal over the master key :func:`load_master_key_for` finds.

    Raises:
        MasterKeyError: see :func:`load_master_key_for`.
    """
    key, source = load_master_key_for(settings, create=create)
    return FileSeal(key, source)
