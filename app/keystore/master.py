"""The master key: where it comes from, and how it wraps key material.

The master key is 32 random bytes. It comes from ``KEYSTREAM_MASTER_KEY`` (base64) when that is set, else from
``<data_dir>/master.key`` (base64 text, mode 0600), which is generated on first start. The data directory is
kept at mode 0700.

Every stored key version is wrapped with AES-256-GCM (pycryptodome) under the master key; the associated data
``keystream:key:<name>:<version>`` binds a wrapped blob to its key name and version, so a blob copied to
another row does not unwrap. Wrapped format: ``0x01 | 12-byte random nonce | ciphertext | 16-byte tag``.

No function here puts key bytes into an exception, a log line or a ``repr``.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import secrets
import stat
from pathlib import Path

from Crypto.Cipher import AES

from app.core.master_key_format import (
    MASTER_KEY_SIZE,
    MasterKeyError,
    check_master_key_source,
    parse_master_key,
)
from app.errors import ServiceUnavailableError

__all__ = [
    "MASTER_KEY_FILE",
    "MASTER_KEY_SIZE",
    "KeyUnwrapError",
    "MasterKeyError",
    "check_master_key",
    "check_master_key_source",
    "ensure_data_dir",
    "key_associated_data",
    "load_or_create_master_key",
    "make_master_key_check",
    "master_key_matches",
    "parse_master_key",
    "read_master_key_file",
    "unwrap_key_material",
    "wrap_key_material",
]

logger = logging.getLogger(__name__)

MASTER_KEY_FILE = "master.key"
DATA_DIR_MODE = 0o700
MASTER_KEY_MODE = 0o600

_WRAP_FORMAT_V1 = b"\x01"  # AES-256-GCM, 12-byte nonce, 16-byte tag
_NONCE_SIZE = 12
_TAG_SIZE = 16
_CHECK_ASSOCIATED_DATA = b"keystream:master-key-check"
_CHECK_PLAINTEXT = b"keystream master key check v1"


class KeyUnwrapError(ServiceUnavailableError):
    """A stored key version does not unwrap under the master key (another master key, or a corrupt row)."""

    code = "key_unwrap_failed"


def check_master_key(master_key: object) -> bytes:
    """Return ``master_key`` as bytes if it is 32 bytes long.

    Raises:
        MasterKeyError: not bytes-like, or another length.
    """
    if not isinstance(master_key, bytes | bytearray | memoryview):
        raise MasterKeyError(f"the master key must be bytes, got {type(master_key).__name__}")
    key = bytes(master_key)
    if len(key) != MASTER_KEY_SIZE:
        raise MasterKeyError(f"the master key must be {MASTER_KEY_SIZE} bytes long, got {len(key)} bytes")
    return key


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


def _read_master_key_file(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise MasterKeyError(f"cannot open master key file {path}: {exc.strerror}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise MasterKeyError(f"master key file {path} is not a regular file")
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o077:
            raise MasterKeyError(
                f"master key file {path} is accessible to other users (mode {mode:#o}); refusing to use it. "
                f"Run: chmod 600 {path}"
            )
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    if not data.isascii():  # checked, not caught: a UnicodeDecodeError would carry the file's bytes
        raise MasterKeyError(f"master key file {path} is not base64 text of {MASTER_KEY_SIZE} bytes")
    return parse_master_key(data.decode("ascii"), str(path))


def read_master_key_file(path: Path) -> bytes:
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


def _create_master_key_file(path: Path) -> bytes | None:
    """Write a new random master key to ``path`` atomically; ``None`` when another process was first.

    The key is written to a unique temporary file and hard-linked into place, so ``path`` never exists
    half-written even while several workers start at once.
    """
    key = secrets.token_bytes(MASTER_KEY_SIZE)
    content = base64.b64encode(key) + b"\n"
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(8)}.tmp")
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
    return key


def load_or_create_master_key(data_dir: Path, env_value: str | None) -> bytes:
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


def key_associated_data(name: str, version: int) -> bytes:
    """The AES-GCM associated data that binds a wrapped key to its name and version."""
    return f"keystream:key:{name}:{version}".encode()


def _seal(master_key: bytes, plaintext: bytes, associated_data: bytes) -> bytes:
    nonce = os.urandom(_NONCE_SIZE)
    cipher = AES.new(master_key, AES.MODE_GCM, nonce=nonce)
    cipher.update(associated_data)
    ciphertext, tag = cipher.encrypt_and_digest(plaintext)
    return _WRAP_FORMAT_V1 + nonce + ciphertext + tag


def _open(master_key: bytes, blob: bytes, associated_data: bytes) -> bytes | None:
    if len(blob) < 1 + _NONCE_SIZE + _TAG_SIZE or blob[:1] != _WRAP_FORMAT_V1:
        return None
    nonce = blob[1 : 1 + _NONCE_SIZE]
    cipher = AES.new(master_key, AES.MODE_GCM, nonce=nonce)
    cipher.update(associated_data)
    try:
        plaintext: bytes = cipher.decrypt_and_verify(blob[1 + _NONCE_SIZE : -_TAG_SIZE], blob[-_TAG_SIZE:])
    except ValueError:
        return None
    return plaintext


def wrap_key_material(master_key: bytes, name: str, version: int, material: bytes) -> bytes:
    """Encrypt ``material`` under the master key, bound to ``(name, version)``."""
    return _seal(master_key, material, key_associated_data(name, version))


def unwrap_key_material(master_key: bytes, name: str, version: int, wrapped: bytes) -> bytes:
    """Decrypt what :func:`wrap_key_material` produced for the same ``(name, version)``.

    Raises:
        KeyUnwrapError: the blob does not authenticate: another master key, another name/version, or
            corruption. The message names the key and version only.
    """
    material = _open(master_key, bytes(wrapped), key_associated_data(name, version))
    if material is None:
        raise KeyUnwrapError(
            f"cannot unwrap version {version} of key {name!r}: it does not authenticate under the current "
            "master key (a different master key, or a corrupt keystore record)"
        )
    return material


def make_master_key_check(master_key: bytes) -> bytes:
    """A blob stored with the keystore that lets :func:`master_key_matches` detect a wrong master key."""
    return _seal(master_key, _CHECK_PLAINTEXT, _CHECK_ASSOCIATED_DATA)


def master_key_matches(master_key: bytes, check: bytes) -> bool:
    """True when ``check`` (from :func:`make_master_key_check`) was made with ``master_key``."""
    return _open(master_key, bytes(check), _CHECK_ASSOCIATED_DATA) == _CHECK_PLAINTEXT
