"""The audit log writer: one sealed JSON line per record, appended to a file (rotated by size) or stdout.

Writing is a single ``os.write`` of the whole line to a descriptor opened with ``O_APPEND``: the line reaches
the kernel before :meth:`AuditLog.write` returns (it survives the process dying; like Vault's file device it
is not ``fsync``-ed, so a power loss can lose the last lines). No Python buffer sits in between, so nothing
is ever released that a crash would drop from the log.

Fail closed: any failure to write (disk full, permission, the file or its directory removed) raises
:class:`AuditUnavailableError` and the line is not counted, so the caller refuses the request. Before every
write the path is checked with one ``stat``: a file that was removed or replaced is reopened at its path
(its chain continues), and when it cannot be reopened the write fails. Each call tries again, so the log
heals as soon as the operator fixes the path. A line cut short (the disk filled up in the middle of it) is
taken back out (the file is truncated to where the line began), so a failed write leaves the file as it was
and the lines after it chain on cleanly once there is room again.

Rotation: when a line would take the file past ``max_bytes``, ``PATH.<keep-1>`` ... ``PATH.1`` move up one
(the oldest beyond ``keep`` is deleted), ``PATH`` becomes ``PATH.1`` and a new ``PATH`` is started. The chain
continues across files, and across restarts: at open, the chain resumes after the last line of ``PATH`` (or
of ``PATH.1`` when ``PATH`` is empty). Verify them oldest first: ``PATH.<n> ... PATH.1 PATH``.

One writer per process and per file: with several workers each gets its own file (:func:`worker_path`).
Writes happen on the event loop (no lock): a line is ~400 bytes and one ``write`` to the page cache.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import secrets
import stat
import sys
from collections.abc import Mapping
from typing import Any, ClassVar

from app.audit.chain import LineMac, Link, link_after, seal
from app.errors import ServiceUnavailableError, StartupRefusedError

logger = logging.getLogger("keystream.audit")

#: The setting's value that selects standard output.
STDOUT = "-"
#: How much of a file's end is read at open to find its last line.
_TAIL_BYTES = 64 * 1024
#: Free space below which the log's file system counts as full for readiness: room for the longest line (a
#: ``request`` line holds the path, up to the default 64 KiB head limit).
MIN_FREE_BYTES = 64 * 1024
_OPEN_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC


class AuditUnavailableError(ServiceUnavailableError):
    """The audit log cannot be written: the request is refused (nothing is served without its record)."""

    code = "audit_unavailable"
    #: Seconds a client should wait before retrying (the HTTP layer's ``Retry-After``).
    retry_after_seconds: ClassVar[int] = 5


def worker_path(path: str, worker_index: int | None) -> str:
    """The file a worker writes: ``path`` for a single process, ``path.w<index>`` for worker ``index`` (two
    processes never append to one file, so each file is one chain). Stdout stays stdout."""
    if path == STDOUT or worker_index is None:
        return path
    return f"{path}.w{worker_index}"


def worker_paths(path: str, workers: int) -> list[str]:
    """Every file ``workers`` processes write for the setting ``path`` (see :func:`worker_path`)."""
    if workers == 1:
        return [worker_path(path, None)]
    return [worker_path(path, index) for index in range(workers)]


def check_writable(path: str) -> None:
    """Refuse to start with an audit log file that cannot be opened for appending (its directory missing,
    no permission, a read-only file system): open it as :class:`AuditLog` does (creating it), then close it.
    Without this the service would start, and answer every ``/v1`` request with 503.

    Raises:
        StartupRefusedError: it cannot be opened (the message names the setting, the file and the reason).
    """
    if path == STDOUT:
        return
    try:
        os.close(os.open(path, _OPEN_FLAGS, 0o600))
    except OSError as exc:
        raise StartupRefusedError(
            f"KEYSTREAM_AUDIT_LOG {path}: cannot be opened for appending: {exc.strerror or exc}"
        ) from None


def log_files(path: str) -> list[str]:
    """The existing files of the log configured as ``path``, in the order ``audit verify`` reads them.

    First ``path`` itself (a single process) after its rotations, then each worker's ``path.w<i>`` after its
    rotations, worker by worker: ``path.2 path.1 path path.w0.1 path.w0 path.w1``, oldest first within each
    writer's chain. Empty when none of them exists.

    Raises:
        OSError: the directory cannot be listed.
    """
    directory, name = os.path.split(path)
    entries = set(os.listdir(directory or "."))
    workers = sorted(
        (int(match.group(1)), entry)
        for entry in entries
        if (match := re.fullmatch(re.escape(name) + r"\.w(\d+)", entry)) is not None
    )
    files: list[str] = []
    for writer in [name, *(entry for _, entry in workers)]:
        rotations = sorted(
            (
                (int(match.group(1)), entry)
                for entry in entries
                if (match := re.fullmatch(re.escape(writer) + r"\.(\d+)", entry)) is not None
            ),
            reverse=True,
        )
        present = [entry for _, entry in rotations] + ([writer] if writer in entries else [])
        files += [os.path.join(directory, entry) for entry in present]
    return files


def is_first_file(path: str) -> bool:
    """Whether ``path`` must hold the start of every chain that begins in it: it is not a rotated file (its
    name does not end in ``.<number>``) and no rotated file ``path.1`` exists, so no older file of its log
    can have held the chain's first records. A chain that starts later there lost lines at the start."""
    return re.search(r"\.\d+$", os.path.basename(path)) is None and not os.path.exists(f"{path}.1")


def rotated_paths(path: str, keep: int) -> list[str]:
    """The files of one log, oldest first, as ``audit verify`` wants them: ``path.keep ... path.1 path``."""
    return [f"{path}.{index}" for index in range(keep, 0, -1)] + [path]


class AuditLog:
    """Appends sealed records to ``path`` (or stdout for ``"-"``); see the module docstring.

    Args:
        path: the file, or ``"-"`` for standard output.
        chain_key: the key of the line HMACs (:attr:`app.audit.keys.AuditKeys.chain_key`).
        max_bytes: rotate before a line would take the file past this size; 0 never rotates.
        keep: rotated files kept (``PATH.1`` ... ``PATH.<keep>``); older ones are deleted.
    """

    def __init__(
        self, path: str, chain_key: bytes | memoryview, *, max_bytes: int = 0, keep: int = 1
    ) -> None:
        self.path = path
        self._mac = LineMac(chain_key)  # keeps no copy of the key itself
        self._max_bytes = max_bytes
        self._keep = max(1, keep)
        self._fd: int | None = None
        self._inode: tuple[int, int] | None = None
        self._size = 0
        self._link: Link | None = None
        #: Where a line cut short by a full disk began, until the file is truncated back to it.
        self._torn_end: int | None = None
        #: Why the last write failed (``None`` after a success): readiness for a file that cannot be probed.
        self._last_failure: str | None = None
        if path == STDOUT:
            self._fd = sys.stdout.fileno()
            self._link = Link(secrets.token_hex(8))
            return
        try:
            self._open()
        except OSError as exc:  # requests get 503 until the path works (each write tries again)
            logger.error("audit log %s cannot be opened (%s): /v1 requests get 503", path, exc.strerror)

    @property
    def link(self) -> Link | None:
        """Where the chain stands (``None`` before the file was ever opened)."""
        return self._link

    def write(self, record: Mapping[str, Any]) -> None:
        """Append one sealed record; it has reached the kernel when this returns.

        Raises:
            AuditUnavailableError: the line could not be written in full (the chain does not advance).
        """
        try:
            if self.path != STDOUT:
                self._ensure_open()
            assert self._fd is not None and self._link is not None
            line, after = seal(self._mac, self._link, record)
            if self._max_bytes and self._size and self._size + len(line) > self._max_bytes:
                self._rotate()
            self._write_all(line)
        except OSError as exc:
            self._last_failure = exc.strerror or type(exc).__name__
            raise AuditUnavailableError(
                f"the audit log cannot be written ({self._last_failure}): requests are refused until it can"
            ) from None
        self._size += len(line)
        self._link = after
        self._last_failure = None

    def unwritable_reason(self) -> str | None:
        """Why a record could not be written now, or ``None`` when it could (what ``/readyz`` reports).

        A regular file is probed without writing: the path is (re)opened as :meth:`write` would, a line cut
        short earlier is cut back, and its file system must be writable with :data:`MIN_FREE_BYTES` free. A
        device or a pipe (stdout) cannot be probed: the result of the last write stands. The reason never
        names the path (``/readyz`` needs no token).
        """
        failure = self._last_failure
        last = None if failure is None else f"the audit log cannot be written ({failure})"
        if self.path == STDOUT:
            return last
        try:
            self._ensure_open()
            self._cut_torn_line()
            assert self._fd is not None
            if not stat.S_ISREG(os.fstat(self._fd).st_mode):
                return last
            usage = os.fstatvfs(self._fd)
        except OSError as exc:
            return f"the audit log cannot be opened ({exc.strerror or type(exc).__name__})"
        if usage.f_flag & os.ST_RDONLY:
            return "the audit log's file system is read-only"
        blocks = usage.f_bfree if os.geteuid() == 0 else usage.f_bavail  # root may use the reserved blocks
        if blocks * usage.f_frsize < MIN_FREE_BYTES:
            return "the audit log's file system is full"
        return None

    def close(self) -> None:
        """Close the file (stdout stays open)."""
        if self._fd is not None and self.path != STDOUT:
            with contextlib.suppress(OSError):
                self._cut_torn_line()
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd = None
        self._torn_end = None

    def _write_all(self, line: bytes) -> None:
        """One ``write`` of the whole line; a line that does not fit is taken back out of the file.

        Raises:
            OSError: nothing was written, or only part of the line (then removed again when the file can
                be cut back; otherwise every later write is refused until it can).
        """
        assert self._fd is not None
        self._cut_torn_line()
        written = os.write(self._fd, line)
        if written != len(line):
            # Disk full mid-line: the start of the line is in the file without its end or newline. Left there,
            # the next line would continue it and verify would fail on it forever; cut the file back to where
            # the line began (O_APPEND, one writer: the last ``written`` bytes are this line's).
            info = os.fstat(self._fd)
            if stat.S_ISREG(info.st_mode):
                self._torn_end = info.st_size - written
                self._cut_torn_line()
            else:  # a pipe or a device cannot be cut back: end the torn line so the next one starts clean
                with contextlib.suppress(OSError):
                    os.write(self._fd, b"\n")
            raise OSError(errno.ENOSPC, "short write to the audit log")

    def _cut_torn_line(self) -> None:
        """Truncate back to the start of a line cut short earlier, if there is one (before any new line).

        Raises:
            OSError: the file cannot be truncated (the next write tries again).
        """
        if self._torn_end is not None:
            assert self._fd is not None
            os.ftruncate(self._fd, self._torn_end)
            self._torn_end = None

    def _ensure_open(self) -> None:
        """Reopen when the file is closed, removed or replaced (one ``stat`` per write).

        Raises:
            OSError: it cannot be opened.
        """
        if self._fd is not None:
            try:
                info = os.stat(self.path)
            except FileNotFoundError:
                info = None
            if info is not None and (info.st_dev, info.st_ino) == self._inode:
                return
            logger.warning("audit log %s was removed or replaced: reopening it", self.path)
            self.close()
        self._open()

    def _open(self) -> None:
        fd = os.open(self.path, _OPEN_FLAGS, 0o600)
        try:
            info = os.fstat(fd)
            if self._link is None:
                self._link = self._resume(fd, info) or Link(secrets.token_hex(8))
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._inode = (info.st_dev, info.st_ino)
        self._size = info.st_size if stat.S_ISREG(info.st_mode) else 0

    def _resume(self, fd: int, info: os.stat_result) -> Link | None:
        """The link after the last line of this file, else of ``PATH.1`` (a restart continues the chain)."""
        if not stat.S_ISREG(info.st_mode):
            return None  # /dev/full, a pipe...: nothing to read back
        return chain_head(self.path)

    def _rotate(self) -> None:
        """Shift ``PATH.n`` up, ``PATH`` to ``PATH.1``, and open a new ``PATH`` (the chain continues).

        Raises:
            OSError: a rename or the new file failed.
        """
        self.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{self.path}.{self._keep}")
        for index in range(self._keep - 1, 0, -1):
            with contextlib.suppress(FileNotFoundError):
                os.replace(f"{self.path}.{index}", f"{self.path}.{index + 1}")
        os.replace(self.path, f"{self.path}.1")
        self._open()


def chain_head(path: str) -> Link | None:
    """Where the chain written to the file ``path`` stands, read from the file's end and not verified (that
    is ``audit verify``'s job): the link after its last line, or, when ``path`` is empty (just rotated), after
    the last line of ``path.1``. ``None`` when neither holds a sealed line (or ``path.1`` cannot be read).

    Raises:
        OSError: ``path`` cannot be read.
    """
    if os.path.getsize(path):
        return _last_link(path)
    with contextlib.suppress(OSError):
        return _last_link(f"{path}.1")
    return None


def _last_link(path: str) -> Link | None:
    """The link after the last complete line of ``path`` (``None``: no line, or not a sealed record)."""
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        handle.seek(max(0, size - _TAIL_BYTES))
        tail = handle.read()
    lines = [line for line in tail.split(b"\n") if line.strip()]
    for line in reversed(lines):  # a torn last line (crash mid-write) is skipped: verify reports it
        link = link_after(line.decode("utf-8", "replace"))
        if link is not None:
            return link
    return None
