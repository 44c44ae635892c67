"""Change hints for the SQLite keystore: a thread that notices when the change log moved.

SQLite has no ``NOTIFY``; its analogue is ``PRAGMA data_version``, which changes on a connection whenever
another connection (in any process) has committed to the file since the last call. When it changed, the
thread reads the change log's head (its newest number and how far it was trimmed, one indexed statement) and
hints only when that moved: a commit that appends no change (a login's token: see
:meth:`~app.keystore.base.KeyStore.create_token`) wakes no follower. A hint only says to read the log now
(:meth:`~app.keystore.base.KeyStore.changes_since` stays the truth).

When to check. Checking every 10 ms costs microseconds each time, but each wake of the thread takes the GIL
several times (the wait's return, then ``sqlite3`` releasing and retaking it around each statement), and a
busy event loop had to hand the GIL over hundreds of times a second for it: 3-10% of a worker's CPU per
request under load, about 1.5% of a core idle. So on Linux the thread sleeps in the kernel, in ``poll()`` on
an inotify instance, and checks only when the database can have changed: a write to the ``-wal`` file (a
commit in WAL mode) or to the database file (a checkpoint, or a commit in rollback-journal mode), or either
name appearing in the directory (SQLite removes the ``-wal`` file at the last connection's close and creates
it again at the next open: its watch is added again then). The directory is watched for those entries only,
never for writes: the audit log may live there and is written all the time. A worker whose database nobody
writes never wakes for this.

inotify reports a write when ``write()`` returns, but a commit in WAL mode becomes visible later: after
SQLite has synced the ``-wal`` file (``synchronous=FULL``) and updated the WAL index in shared memory, which
raises no event. So the first write after a quiet spell is checked at once, then 1, 2, 4 and 8 ms later and
every :data:`HINT_INTERVAL` while writes go on (a key's change is two commits a moment apart); the checks go
on for :data:`_SETTLE_SECONDS` after the last write, and after a write to the ``-wal`` file until one of them
has seen a commit (for at most :data:`_COMMIT_WAIT_SECONDS`: an ``fsync`` that slow). While a check is due,
writes wake nothing: they are read when it is, so a burst of writes costs at most one wake and one check an
interval, the former poll's rate. A commit is thus noticed within :data:`HINT_INTERVAL` of becoming visible,
usually within two milliseconds of its write; a commit that becomes visible more than
:data:`_SETTLE_SECONDS` after its write while an earlier one was seen meanwhile is left to the follower's
poll. (Without WAL mode a commit writes the database file under an exclusive lock, which the check waits
for.) inotify sees every write made through this machine's kernel, which is every writer of a SQLite
keystore (WAL mode shares memory between them: they must run on one host); the change follower's own poll
stays the backstop for anything missed.

Where inotify is unavailable (not Linux, no ``inotify_init1`` in libc, the per-user limit of instances or
watches reached) the thread checks every :data:`HINT_INTERVAL`, as before; the process logs that once. The
inotify calls go through ``ctypes`` on libc (three functions and a fixed event layout): a dependency such as
``inotify_simple`` would bring nothing more.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import math
import os
import select
import sqlite3
import struct
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["HINT_INTERVAL", "DataVersionWatcher"]

logger = logging.getLogger("app.keystore.sqlite")

#: Seconds between two ``PRAGMA data_version`` checks while writes go on (and always, without inotify).
HINT_INTERVAL = 0.01
#: The change log's head: its newest number and the number it was trimmed through.
_HEAD = "SELECT (SELECT coalesce(max(seq), 0) FROM key_changes), (SELECT through FROM key_changes_trimmed)"

# inotify's constants and event layout (<sys/inotify.h>, the same on every Linux architecture).
_IN_MODIFY = 0x00000002
_IN_CLOSE_WRITE = 0x00000008
_IN_MOVED_TO = 0x00000080
_IN_CREATE = 0x00000100
_IN_Q_OVERFLOW = 0x00004000
_IN_IGNORED = 0x00008000
_IN_ONLYDIR = 0x01000000
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC
#: A watched file's events: written to (and closed after writing).
_FILE_EVENTS = _IN_MODIFY | _IN_CLOSE_WRITE
#: The directory's events: an entry appeared (created, or renamed into it). Never its entries' writes.
_DIRECTORY_EVENTS = _IN_CREATE | _IN_MOVED_TO | _IN_ONLYDIR
#: ``struct inotify_event`` without its name: watch descriptor, mask, cookie, length of the name.
_EVENT = struct.Struct("iIII")
_READ_SIZE = 64 * 1024

#: Seconds between the first check after a quiet spell and the next; the spacing doubles up to
#: :data:`HINT_INTERVAL` while writes go on (a key's change is two commits a moment apart).
_FIRST_SPACING_SECONDS = 0.001
#: Seconds of checks after the last write: a commit becomes visible a moment after its last write (see the
#: module doc), even when an earlier commit was seen meanwhile.
_SETTLE_SECONDS = 0.03
#: Seconds, after a write to the ``-wal`` file, of checks until one sees the commit (a slow ``fsync``).
_COMMIT_WAIT_SECONDS = 1.0

#: Whether this process has logged that it polls (once is enough: every watcher polls for the same reason).
_fallback_logged = False


class _Inotify:
    """One inotify instance, through libc (non-blocking, closed on exec).

    Raises:
        OSError: on any failure, with the errno and never a path (the server log must not name files).
    """

    def __init__(self) -> None:
        if not sys.platform.startswith("linux"):
            raise OSError(errno.ENOSYS, "inotify needs Linux")
        libc = ctypes.CDLL(None, use_errno=True)
        try:
            self._init = libc.inotify_init1
            self._add = libc.inotify_add_watch
            self._remove = libc.inotify_rm_watch
        except AttributeError as exc:
            raise OSError(errno.ENOSYS, "no inotify in libc") from exc
        self._init.argtypes, self._init.restype = [ctypes.c_int], ctypes.c_int
        self._add.argtypes, self._add.restype = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32], ctypes.c_int
        self._remove.argtypes, self._remove.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
        self.fd = self._init(_IN_NONBLOCK | _IN_CLOEXEC)
        if self.fd < 0:
            raise _errno_error()

    def add(self, path: Path, mask: int) -> int:
        """Watch ``path`` for ``mask``; return the watch descriptor (the same one again for the same file)."""
        descriptor = int(self._add(self.fd, os.fsencode(path), mask))
        if descriptor < 0:
            raise _errno_error()
        return descriptor

    def remove(self, descriptor: int) -> None:
        """Stop a watch; one whose file is gone is already removed, so errors are ignored."""
        self._remove(self.fd, descriptor)

    def read(self) -> list[tuple[int, int, bytes]]:
        """Every pending event as ``(descriptor, mask, name)`` (``name`` empty for a watched file's own)."""
        events: list[tuple[int, int, bytes]] = []
        while True:
            try:
                data = os.read(self.fd, _READ_SIZE)
            except BlockingIOError:
                return events
            offset = 0
            while offset + _EVENT.size <= len(data):
                descriptor, mask, _, length = _EVENT.unpack_from(data, offset)
                offset += _EVENT.size
                events.append((descriptor, mask, data[offset : offset + length].rstrip(b"\0")))
                offset += length

    def close(self) -> None:
        os.close(self.fd)


def _errno_error() -> OSError:
    code = ctypes.get_errno()
    return OSError(code, os.strerror(code))


class _HeadReader:
    """The watcher's connection and what it last saw: ``PRAGMA data_version`` and the change log's head."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._conn: sqlite3.Connection | None = None
        self._version: int | None = None
        self._head: tuple[int, int] | None = None

    def read(self) -> tuple[bool, bool]:
        """Whether another connection committed since the last call, and whether the head moved (never on
        the first call: that one is the baseline).

        A database error closes the connection; the next call opens a new one and starts a new baseline.
        """
        try:
            if self._conn is None:
                self._conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
                self._version = self._head = None
            now = int(self._conn.execute("PRAGMA data_version").fetchone()[0])
            if now == self._version:
                return False, False
            self._version = now
            row = self._conn.execute(_HEAD).fetchall()[0]
        except sqlite3.Error as exc:
            logger.debug("keystore watcher: %s", exc)
            self.close()
            return False, False
        head, self._head = self._head, (int(row[0]), int(row[1]))
        return head is not None, head is not None and head != self._head

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None


class _InotifyUnavailable(Exception):
    """inotify cannot serve this watcher (its instance or a watch could not be had): poll instead."""


class DataVersionWatcher:
    """A daemon thread calling ``on_hint(None)`` (read the log) when another connection moved the change log
    (appended a number, or trimmed it).

    Two counters say what the thread did, for tests and for anyone measuring its cost: :attr:`wakes` (times
    it woke up, each one taking the GIL) and :attr:`checks` (``PRAGMA data_version`` checks made).
    :attr:`event_driven` is whether it sleeps on inotify (else it checks every :data:`HINT_INTERVAL`).

    Args:
        path: the database file.
        on_hint: called from the watcher thread; must be quick and thread-safe.
    """

    def __init__(self, path: Path, on_hint: Callable[[None], None]) -> None:
        self._path = path
        self._on_hint = on_hint
        self.wakes = 0
        self.checks = 0
        self.event_driven = False
        self._stop = threading.Event()
        # stop() writes a byte here to end the thread's poll(); the lock keeps it from writing once the
        # thread has closed the pipe (the descriptor's number could name another file by then).
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_write, False)
        self._pipe_lock = threading.Lock()
        self._pipe_open = True
        self._reader = _HeadReader(path)
        self._thread = threading.Thread(target=self._run, name="keystore-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            try:
                self._follow_events()
            except _InotifyUnavailable:
                self.event_driven = False
                self._poll()
        finally:
            self._reader.close()
            with self._pipe_lock:
                self._pipe_open = False
                os.close(self._wake_read)
                os.close(self._wake_write)

    def _check(self) -> bool:
        """Check once, hint if the head moved; return whether another connection had committed."""
        self.checks += 1
        committed, moved = self._reader.read()
        if moved:
            self._on_hint(None)
        return committed

    def _poll(self) -> None:
        """Check every :data:`HINT_INTERVAL` (no inotify)."""
        while not self._stop.wait(HINT_INTERVAL):
            self.wakes += 1
            self._check()

    def _follow_events(self) -> None:
        """Sleep in ``poll()`` until the database or its ``-wal`` file is written, then check until the
        writes have settled (see the module doc).

        Raises:
            _InotifyUnavailable: inotify, or one of the watches, cannot be had (logged once).
        """
        try:
            inotify = _Inotify()
        except OSError as exc:
            _log_fallback(exc)
            raise _InotifyUnavailable from exc
        try:
            watches = _Watches(inotify, self._path)
            # Asleep: until a write or stop(). A check scheduled: until it is due or stop(), the writes
            # meanwhile read when it is due (a burst of them is one wake, not one each).
            asleep, scheduled = select.poll(), select.poll()
            asleep.register(inotify.fd, select.POLLIN)
            for poller in (asleep, scheduled):
                poller.register(self._wake_read, select.POLLIN)
            self.event_driven = True
            self._check()  # the baseline, after the watches: any later commit raises an event
            last_check = last_write = last_wal_write = time.monotonic()
            awaiting = False  # the -wal file was written, and no check since has seen a commit
            due: float | None = None  # when the next check is due; None: sleep until a write
            spacing = _FIRST_SPACING_SECONDS  # between two checks, doubling up to HINT_INTERVAL
            while not self._stop.is_set():
                if due is None:
                    asleep.poll()
                else:
                    scheduled.poll(max(0, math.ceil((due - time.monotonic()) * 1000)))
                self.wakes += 1
                if self._stop.is_set():
                    return
                now = time.monotonic()
                written = watches.take(inotify.read())
                if written:
                    last_write = now
                    if written & _WAL:
                        awaiting, last_wal_write = True, now
                    if due is None:  # the first write after a quiet spell: at once
                        due, spacing = max(now, last_check + spacing), _FIRST_SPACING_SECONDS
                if due is None or now < due:
                    continue
                if self._check():
                    awaiting = False
                last_check = now
                settling = now - last_write < _SETTLE_SECONDS
                waiting = awaiting and now - last_wal_write < _COMMIT_WAIT_SECONDS
                due = now + spacing if settling or waiting else None
                spacing = min(2 * spacing, HINT_INTERVAL)
        except OSError as exc:
            _log_fallback(exc)
            raise _InotifyUnavailable from exc
        finally:
            inotify.close()

    def stop(self) -> None:
        """Stop the thread and wait for it. Idempotent."""
        self._stop.set()
        with self._pipe_lock:
            if self._pipe_open:
                with contextlib.suppress(BlockingIOError):
                    os.write(self._wake_write, b"\0")
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)


#: What a write event may mean (:meth:`_Watches.take`): the database file written, the ``-wal`` file written.
_DATABASE, _WAL = 1, 2


class _Watches:
    """The watches on a database's directory (its entries appearing), on the file and on its ``-wal`` file.

    Raises:
        OSError: a watch could not be added for another reason than its file being absent (the limit of
            watches reached, the directory gone).
    """

    def __init__(self, inotify: _Inotify, path: Path) -> None:
        self._inotify = inotify
        self._directory = path.parent
        #: The watched names in the directory, with what a write to each means.
        self._names = {os.fsencode(path.name): _DATABASE, os.fsencode(f"{path.name}-wal"): _WAL}
        #: Each name's current watch, while its file exists.
        self._current: dict[bytes, int] = {}
        #: Every live watch of a file (a replaced file's too, until it goes) and what a write to it means.
        self._kinds: dict[int, int] = {}
        self._directory_watch = inotify.add(self._directory, _DIRECTORY_EVENTS)
        for name in self._names:
            self._watch(name)

    def _watch(self, name: bytes) -> None:
        try:
            descriptor = self._inotify.add(self._directory / os.fsdecode(name), _FILE_EVENTS)
        except FileNotFoundError:  # not there (yet): its appearance in the directory adds the watch
            return
        old = self._current.get(name)
        if old is not None and old != descriptor:  # a new file under the name: the old one's watch goes
            self._inotify.remove(old)
        self._current[name] = descriptor
        self._kinds[descriptor] = self._names[name]

    def take(self, events: list[tuple[int, int, bytes]]) -> int:
        """Follow ``events`` (watch the files that appeared); return what may have been written: a mask of
        :data:`_DATABASE` and :data:`_WAL`, 0 for nothing.

        Raises:
            OSError: see the class; also when the directory's own watch went (the directory was removed).
        """
        written = 0
        for descriptor, mask, name in events:
            if mask & _IN_Q_OVERFLOW:  # events were lost: any of them may have been a write
                written |= _DATABASE | _WAL
            elif descriptor == self._directory_watch:
                if mask & _IN_IGNORED:
                    raise OSError(errno.ENOENT, "the database's directory is no longer watched")
                if name in self._names:  # created or renamed in, maybe written before it was watched
                    self._watch(name)
                    written |= self._names[name]
            elif mask & _IN_IGNORED:  # the file went (its last link and descriptor), or its watch was removed
                self._kinds.pop(descriptor, None)
                for watched, current in list(self._current.items()):
                    if current == descriptor:
                        del self._current[watched]
            else:
                written |= self._kinds.get(descriptor, _DATABASE | _WAL)
        return written


def _log_fallback(exc: OSError) -> None:
    """Say once per process that change hints come from polling (the errno's name only, never a path)."""
    global _fallback_logged
    if not _fallback_logged:
        _fallback_logged = True
        reason = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        logger.info(
            "keystore watcher: no inotify (%s): checking PRAGMA data_version every %.0f ms",
            reason,
            HINT_INTERVAL * 1000,
        )
