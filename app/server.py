"""Run the service: first-start bootstrap, then uvicorn (uvloop + httptools).

``keystream-server serve`` (:mod:`app.admin`) calls :func:`serve`; without the CLI:
``python -c 'from app.server import serve; serve()'``.

The HTTP protocol with the service's limits is :class:`app.serving.BoundedHttpToolsProtocol`, importable
from here too: running uvicorn directly (Dockerfile, k8s) needs
``--http app.server:BoundedHttpToolsProtocol`` for the same protection.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any, TextIO

import uvicorn

from app.api.paths import transit_alias
from app.audit import check_writable, worker_paths
from app.core.config import Settings, get_settings
from app.core.secret_memory import disable_core_dumps
from app.keystore import open_keystore_for
from app.seal import open_seal
from app.services.security import install_root_token
from app.serving import (
    APP_FACTORY,
    BoundedHttpToolsProtocol,
    ConnectionLimits,
    ServerTls,
    StartupRefusedError,
    Supervisor,
    check_plain_http_bind,
    fix_malloc_thresholds,
    listening_socket,
    raise_open_file_limit,
    reserve_address,
)

__all__ = ["BoundedHttpToolsProtocol", "StartupRefusedError", "bootstrap", "serve", "uvicorn_options"]
#: The listen backlog of each worker's socket (uvicorn's default).
_BACKLOG = 2048


def bootstrap(settings: Settings, out: TextIO | None = None) -> str | None:
    """Open the seal (auto-unseal; for the file seal, create the data directory (0700) and master key (0600)),
    check it against the keystore, and install or generate the root token.

    A generated root token is printed once to ``out`` (default stdout) with a copy-paste ``curl`` example;
    it is never stored in clear or logged.

    Returns:
        The generated root token, or ``None`` when one already existed or ``KEYSTREAM_ROOT_TOKEN`` was set.

    Raises:
        app.keystore.master.MasterKeyError: the seal cannot be opened (a missing token, a wrong PIN: one line
            naming the setting) or does not open the keystore.
    """
    seal = open_seal(settings)
    try:
        keystore = open_keystore_for(settings, seal)
        try:
            root = settings.root_token.get_secret_value() if settings.root_token else None
            generated = install_root_token(keystore, root)
        finally:
            keystore.close()
    finally:
        seal.close()
    if generated is not None:
        stream = out if out is not None else sys.stdout
        host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host  # noqa: S104
        scheme = "https" if settings.tls_cert_file is not None else "http"
        base = f"{scheme}://{host}:{settings.port}"
        # curl's --data-binary defaults to application/x-www-form-urlencoded, which the service refuses (415).
        octets = "-H 'Content-Type: application/octet-stream'"
        tls_note = ""
        if scheme == "https":
            mtls = ", and --cert/--key with a client certificate" if settings.tls_client_ca_file else ""
            tls_note = f"(HTTPS: add --cacert CA.pem unless the system trusts the certificate's CA{mtls})\n"
        print(
            "\nKeystream root token (shown once; store it somewhere safe):\n"
            f"  {generated}\n\n"
            "Try it:\n"
            f"{tls_note}"
            f"  export KEYSTREAM_TOKEN={generated}\n"
            f'  curl -s -H "Authorization: Bearer $KEYSTREAM_TOKEN" -H "Content-Type: application/json" '
            f'-d \'{{"name": "demo"}}\' {base}/v1/keys\n'
            f'  echo hello | curl -s -H "Authorization: Bearer $KEYSTREAM_TOKEN" {octets} '
            f"--data-binary @- {base}/v1/keys/demo/encrypt | "
            f'curl -s -H "Authorization: Bearer $KEYSTREAM_TOKEN" {octets} --data-binary @- '
            f"{base}/v1/keys/demo/decrypt\n",
            file=stream,
            flush=True,
        )
    return generated


def _export_settings(settings: Settings) -> None:
    """Put the settings into ``KEYSTREAM_*`` variables so worker processes (``create_app()``) see them."""
    for name, value in settings.model_dump().items():
        if value is None:
            continue
        if hasattr(value, "get_secret_value"):
            value = value.get_secret_value()
        if isinstance(value, list):
            value = ",".join(value)
        os.environ[f"KEYSTREAM_{name.upper()}"] = str(value)


def _prepare_multiprocess_dir(settings: Settings) -> Path:
    """A fresh ``PROMETHEUS_MULTIPROC_DIR`` (stale files from an earlier run would add up)."""
    configured = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if configured:
        path = Path(configured)
        if path.exists():
            for child in path.glob("*.db"):
                child.unlink()
        path.mkdir(parents=True, exist_ok=True)
    else:
        path = Path(tempfile.mkdtemp(prefix="keystream-metrics-"))
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(path)
    return path


def serve(settings: Settings | None = None) -> None:
    """Bootstrap, then serve until interrupted.

    With ``workers > 1`` (the default on a machine with several usable CPUs) the workers are separate
    processes, each with its own ``SO_REUSEPORT`` socket, under :class:`app.serving.Supervisor`; they rebuild
    the app from the environment (the settings are exported as ``KEYSTREAM_*``) and metrics switch to
    prometheus-client's multiprocess mode.

    With ``tls_cert_file`` and ``tls_key_file`` every worker serves HTTPS (:mod:`app.serving.tls`); plain HTTP
    on a non-loopback host needs ``tls_disable`` and logs a WARNING.

    Raises:
        StartupRefusedError: a Transit mount over the service's own paths; a TLS file is unusable, or plain
            HTTP on a non-loopback host without ``tls_disable`` (checked before anything is created or bound);
            the listening address is in use or invalid (checked before the data directory or a root token is
            created); an audit log file (each worker's) cannot be opened for appending; the single worker did
            not start (its error is logged).
        app.keystore.master.MasterKeyError: bad master key (nothing is served).
    """
    settings = settings if settings is not None else get_settings()
    fix_malloc_thresholds()  # the one-worker server serves from this process
    if not settings.allow_core_dumps:  # the supervisor too: its bootstrap may create the master key
        disable_core_dumps()
    tls = ServerTls.from_settings(settings)
    if tls is not None:
        tls.context()  # a bad file stops the start here with one line, not in every worker
    plain_http_warning = check_plain_http_bind(settings.host, tls, settings.tls_disable)
    transit_alias(settings.transit_mount)  # a mount over the service's own paths stops the start here
    common = uvicorn_options(settings, tls)
    # A Config configures uvicorn's logging (as uvicorn.run does), so the warning below has its format.
    uvicorn.Config(APP_FACTORY, factory=True, **common)
    if plain_http_warning is not None:
        logging.getLogger("uvicorn.error").warning("%s", plain_http_warning)
    # The address before the first-start bootstrap: a second start on a busy port must not print a banner.
    if settings.workers == 1:
        sock = listening_socket(settings.host, settings.port, _BACKLOG)
    else:
        sock = reserve_address(settings.host, settings.port)
    try:
        if settings.audit_log is not None:  # one line now, rather than every /v1 request refused later
            for path in worker_paths(settings.audit_log, settings.workers):
                check_writable(path)
        bootstrap(settings)
        _run(settings, common, sock)
    finally:
        sock.close()


def uvicorn_options(settings: Settings, tls: ServerTls | None) -> dict[str, Any]:
    """uvicorn's options for every worker; also sets the protocol's limits for in-process use."""
    raise_open_file_limit()  # before the limits: the default connection cap follows the open-file limit
    BoundedHttpToolsProtocol.max_header_bytes = settings.max_header_bytes
    BoundedHttpToolsProtocol.connection_limits = ConnectionLimits.from_settings(settings)
    common: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "loop": "uvloop",
        "http": BoundedHttpToolsProtocol,
        "timeout_graceful_shutdown": settings.timeout_graceful_shutdown,
        "timeout_keep_alive": settings.idle_timeout,
        "log_level": settings.log_level,
        "access_log": settings.access_log,
        "server_header": False,
        # X-Forwarded-For names the client only when a configured proxy sent it: uvicorn's default believes
        # any local peer (and FORWARDED_ALLOW_IPS), so a client behind a proxy that passes the header on could
        # choose the address the audit log records.
        "proxy_headers": settings.forwarded_allow_ips is not None,
        "forwarded_allow_ips": settings.forwarded_allow_ips or [],
    }
    # The protocol does the handshake (each worker builds its own context): its limits cover handshakes.
    BoundedHttpToolsProtocol.use_tls(tls)
    return common


def _run(settings: Settings, common: dict[str, Any], sock: socket.socket) -> None:
    """Serve once the address is held: ``sock`` listens (one worker) or reserves the port (several)."""
    if settings.workers == 1:
        from app.main import create_app

        server = uvicorn.Server(uvicorn.Config(create_app(settings), **common))
        scheme = "https" if settings.tls_cert_file is not None else "http"
        host, port = sock.getsockname()[:2]
        logging.getLogger("uvicorn.error").info("serving on %s://%s:%d (1 worker)", scheme, host, port)
        with contextlib.suppress(KeyboardInterrupt):
            server.run(sockets=[sock])
        if not server.started:
            raise StartupRefusedError("the server did not start: its error is logged above")
        return
    metrics_dir = _prepare_multiprocess_dir(settings)
    _export_settings(settings)
    host, port = common.pop("host"), common.pop("port")
    try:
        Supervisor(
            settings.workers, host, port, common, settings.timeout_graceful_shutdown, reserved=sock
        ).run()
    finally:
        if metrics_dir.name.startswith("keystream-metrics-"):
            shutil.rmtree(metrics_dir, ignore_errors=True)
