"""Several worker processes, each accepting on its own ``SO_REUSEPORT`` socket, under a small supervisor.

Why not uvicorn's ``workers=N``: its workers share one listening socket, and an idle worker woken by a burst
accepts every pending connection in one go (uvloop accepts until ``EAGAIN``). 16 connections opened at once
landed all on one worker in 9 of 20 runs with two workers. With one ``SO_REUSEPORT`` socket per worker the
kernel hashes each connection to one of the listening sockets, so a burst spreads (0 of 20 runs).

The supervisor first checks that nobody holds the port (a plain bind: another ``SO_REUSEPORT`` group of the
same user would otherwise silently share the traffic), then keeps a bound, non-listening ``SO_REUSEPORT``
socket so the port stays reserved (and port 0 resolves once). It starts a new worker when one dies, and on
SIGINT/SIGTERM asks every worker to shut down gracefully (SIGTERM; SIGKILL after the grace period).

Each worker also gets a private channel to the supervisor (a :func:`multiprocessing.Pipe`, inherited as a
file descriptor by the spawned process: :mod:`app.seal.handover`). With a seal that is unsealed by shares
(shamir) the worker that completes the threshold sends the rebuilt master key over it; the supervisor keeps
it in memory, hands it to every other worker and to each worker it starts later, so the whole server is
unsealed by one set of shares and a replacement comes back unsealed. Shares accepted below the threshold and
resets are passed on the same way, so every worker counts the same progress (the supervisor keeps none). A
worker that seals tells it too: the supervisor overwrites its copy and seals the others. Before it starts a
replacement, the supervisor reads every message still waiting, the dead worker's last ones included, so a
seal announced by a worker killed right after it answered is never lost, and no replacement is handed the
key that seal retired.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import multiprocessing
import os
import signal
import socket
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any

import uvicorn

from app.core.config import get_settings
from app.core.secret_memory import wipe_secret
from app.core.telemetry import release_process_metrics
from app.errors import StartupRefusedError
from app.seal.handover import SEALED, UNSEALED, install, read_message, send_message
from app.serving.malloc import fix_malloc_thresholds
from app.serving.protocol import BoundedHttpToolsProtocol
from app.serving.tls import ServerTls

logger = logging.getLogger("uvicorn.error")  # the logger uvicorn configures for its own messages
#: A worker that dies sooner than this after its start is restarted only after a pause (no crash loop).
#: The app factory every worker serves unless told otherwise: Keystream.
APP_FACTORY = "app.main:create_app"
_MIN_LIFETIME_SECONDS = 5.0
_RESTART_PAUSE_SECONDS = 1.0
_PR_SET_PDEATHSIG = 1


def _address(host: str, port: int) -> tuple[socket.AddressFamily, Any]:
    family, _, _, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    return family, address


def _bound_socket(host: str, port: int, *, reuse_port: bool) -> socket.socket:
    family, address = _address(host, port)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
    except BaseException:
        sock.close()
        raise
    return sock


def reserve_port(host: str, port: int) -> socket.socket:
    """A bound (not listening) ``SO_REUSEPORT`` socket on ``host:port`` that holds the port for the workers.

    Raises:
        OSError: the address is in use (by anyone, including another ``SO_REUSEPORT`` group) or invalid.
    """
    with _bound_socket(host, port, reuse_port=False) as probe:
        port = int(probe.getsockname()[1])
    return _bound_socket(host, port, reuse_port=True)


def address_refused(host: str, port: int, exc: OSError) -> StartupRefusedError:
    """The one-line start-up refusal for a listening address that cannot be bound (in use, not local...)."""
    reason = (exc.strerror or str(exc)).lower()
    hint = ""
    if exc.errno == errno.EADDRINUSE:
        hint = ": another process listens there (stop it, or choose another KEYSTREAM_PORT)"
    elif isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
        hint = ": KEYSTREAM_HOST must be an address of this machine (or 0.0.0.0 / :: for all of them)"
    where = f"KEYSTREAM_HOST {host} KEYSTREAM_PORT {port}"
    return StartupRefusedError(f"cannot listen on {where}: {reason}{hint}")


def listening_socket(host: str, port: int, backlog: int) -> socket.socket:
    """A listening socket on ``host:port`` for a single worker (bound without ``SO_REUSEPORT``, so another
    ``SO_REUSEPORT`` group on the port is refused too).

    Raises:
        StartupRefusedError: the address is in use or invalid (:func:`address_refused`).
    """
    try:
        sock = _bound_socket(host, port, reuse_port=False)
    except OSError as exc:
        raise address_refused(host, port, exc) from None
    sock.listen(backlog)
    return sock


def reserve_address(host: str, port: int) -> socket.socket:
    """:func:`reserve_port`, with a failure as the one-line start-up refusal.

    Raises:
        StartupRefusedError: the address is in use or invalid (:func:`address_refused`).
    """
    try:
        return reserve_port(host, port)
    except OSError as exc:
        raise address_refused(host, port, exc) from None


def _die_with_parent(parent: int) -> None:
    """Ask the kernel to SIGTERM this worker when the supervisor dies (Linux), so no worker is orphaned."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        raise SystemExit(0)  # the supervisor died before prctl took effect


def _worker_main(
    host: str,
    port: int,
    parent: int,
    config: dict[str, Any],
    index: int = 0,
    handover: Connection | None = None,
    app_factory: str = APP_FACTORY,
) -> None:
    """One worker: its own listening socket and a uvicorn server building the app from the environment.

    ``index`` (0 .. workers-1, kept by a replacement) reaches the app as ``KEYSTREAM_WORKER_INDEX``: it names
    the worker's own audit log file, so two processes never append to one file. ``handover`` is the worker's
    end of its channel to the supervisor (:mod:`app.seal.handover`).
    """
    _die_with_parent(parent)
    fix_malloc_thresholds()  # a spawned process starts with glibc's defaults
    if handover is not None:
        install(handover)
    os.environ["KEYSTREAM_WORKER_INDEX"] = str(index)
    # uvicorn re-raises the signal that stopped it after a graceful shutdown; an ignored SIGINT then ends the
    # process quietly instead of with a KeyboardInterrupt traceback (uvicorn handles it while serving).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = _bound_socket(host, port, reuse_port=True)
    sock.listen(config.get("backlog", 2048))
    sock.set_inheritable(True)
    server = uvicorn.Server(uvicorn.Config(app_factory, factory=True, **config))
    BoundedHttpToolsProtocol.use_tls(ServerTls.from_settings(get_settings()))
    server.run(sockets=[sock])


@dataclass
class _Slot:
    process: BaseProcess
    index: int
    #: The supervisor's end of the worker's handover channel; ``None`` once the worker closed it.
    channel: Connection | None = None
    started: float = field(default_factory=time.monotonic)


class Supervisor:
    """Runs ``count`` workers on ``host:port`` until SIGINT or SIGTERM; replaces workers that die.

    Each worker serves the ASGI app ``app_factory`` builds (``module:function``): Keystream's by default; the
    benchmarks' raw-ASGI floor (:mod:`bench.floor_app`) runs under the same supervisor and uvicorn options.
    """

    def __init__(
        self,
        count: int,
        host: str,
        port: int,
        config: dict[str, Any],
        grace_seconds: float,
        reserved: socket.socket | None = None,
        app_factory: str = APP_FACTORY,
    ) -> None:
        self._reserved = reserved
        self._app_factory = app_factory
        self._count = count
        self._host = host
        self._port = port
        self._config = config
        self._grace = grace_seconds
        self._context = multiprocessing.get_context("spawn")
        self._stopping = False
        #: The master key a worker rebuilt from shares (in locked memory), while the server is unsealed.
        self._key: memoryview | None = None

    def _start(self, index: int) -> _Slot:
        channel, worker_end = self._context.Pipe(duplex=True)
        process = self._context.Process(
            target=_worker_main,
            args=(self._host, self._port, os.getpid(), self._config, index, worker_end, self._app_factory),
            name="keystream-worker",
        )
        process.start()
        worker_end.close()  # the worker holds its own copy now
        slot = _Slot(process, index, channel)
        if self._key is not None:
            self._send(slot, UNSEALED, self._key)  # a replacement comes back unsealed
        return slot

    def _send(self, slot: _Slot, kind: bytes, payload: bytes | memoryview | None = None) -> None:
        if slot.channel is None:
            return
        try:
            send_message(slot.channel, kind, b"" if payload is None else payload)
        except OSError:
            self._close_channel(slot)

    @staticmethod
    def _close_channel(slot: _Slot) -> None:
        if slot.channel is not None:
            slot.channel.close()
            slot.channel = None

    def _forget_key(self) -> None:
        if self._key is not None:
            wipe_secret(self._key)
        self._key = None

    def _relay(self, slots: list[_Slot]) -> None:
        """Hand every message waiting in the workers' channels to the other workers (module docstring).

        Each channel is read until it is empty, a dead worker's too: a worker killed right after it sealed
        (and answered 200) has its ``sealed`` message in the channel, and a replacement must not be handed
        the key that message retires.
        """
        for slot in slots:
            while slot.channel is not None:
                channel = slot.channel
                try:
                    if not channel.poll():
                        break
                    kind, payload = read_message(channel)
                except EOFError:
                    self._close_channel(slot)
                    break
                except ValueError as exc:
                    logger.warning("worker %s: %s", slot.process.pid, exc)
                    continue
                if kind == UNSEALED and isinstance(payload, memoryview):
                    self._forget_key()
                    self._key = payload
                elif kind == SEALED:
                    self._forget_key()
                for other in slots:
                    if other is not slot:
                        self._send(other, kind, payload)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stopping = True

    def run(self) -> None:
        """Start the workers and supervise them; return after every worker has exited.

        The port is held by ``reserved`` when one was given (the caller checked it before anything else),
        else reserved here.

        Raises:
            StartupRefusedError: the address is in use or invalid (no worker was started).
        """
        uvicorn.Config(self._app_factory, factory=True, **self._config)  # configures logging, as uvicorn.run
        reserved = self._reserved if self._reserved is not None else reserve_address(self._host, self._port)
        self._port = int(reserved.getsockname()[1])
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        slots: list[_Slot] = []
        try:
            slots = [self._start(index) for index in range(self._count)]
            scheme = "https" if get_settings().tls_cert_file is not None else "http"
            logger.info(
                "started %d workers on %s://%s:%d (SO_REUSEPORT)", self._count, scheme, self._host, self._port
            )
            while not self._stopping:
                channels: list[Any] = [slot.channel for slot in slots if slot.channel is not None]
                wait([slot.process.sentinel for slot in slots] + channels, timeout=0.5)
                self._relay(slots)
                for index, slot in enumerate(slots):
                    if self._stopping or slot.process.is_alive():
                        continue
                    slots[index] = self._replace(slot, slots)
        finally:
            self._stop(slots)
            self._forget_key()
            for slot in slots:
                self._close_channel(slot)
            reserved.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _replace(self, slot: _Slot, slots: list[_Slot]) -> _Slot:
        """A new worker in the place of ``slot``'s, which exited.

        What the workers said until now is relayed first, the dead worker's last words included, and again
        after a restart pause: the replacement is handed the key only if no worker sealed meanwhile.
        """
        pid, code = slot.process.pid, slot.process.exitcode
        logger.warning("worker %s exited with code %s: starting a new one", pid, code)
        if pid is not None:
            release_process_metrics(pid)  # its live gauges (in-flight, cache entries) leave the aggregate
        self._relay(slots)
        self._close_channel(slot)
        if time.monotonic() - slot.started < _MIN_LIFETIME_SECONDS:
            time.sleep(_RESTART_PAUSE_SECONDS)
            self._relay(slots)
        return self._start(slot.index)

    def _stop(self, slots: list[_Slot]) -> None:
        for slot in slots:
            if slot.process.is_alive() and slot.process.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(slot.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + self._grace + 5
        for slot in slots:
            slot.process.join(max(0.0, deadline - time.monotonic()))
            if slot.process.is_alive():
                logger.warning("worker %s did not stop in time: killed", slot.process.pid)
                slot.process.kill()
                slot.process.join(5)
