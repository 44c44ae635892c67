"""The floors a Keystream request is measured against: a raw ASGI app on Keystream's server stack, and nginx.

* **raw ASGI** (:func:`create_app`, served by :func:`serve`): reads the whole request body and answers
  ``200`` with 1 KiB, nothing else. It runs under Keystream's serving code with Keystream's settings: the
  same :func:`app.server.uvicorn_options` (uvloop, the bounded httptools protocol, keep-alive), the same
  :class:`app.serving.Supervisor` with one ``SO_REUSEPORT`` socket per worker and the same number of
  workers. What a Keystream route costs above it is Keystream's own work (routing, authentication, the key,
  the cryptography, metrics, audit); what it costs itself is the Python server's floor.
* **nginx** (:func:`start_nginx`): ``return 200`` with the same 1 KiB, as many worker processes; the HTTP
  floor of the machine, when nginx is installed (Debian: ``nginx-light``).

``python -m bench.floor_app --port PORT [--workers N]`` serves the raw ASGI floor until SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import time
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from app.core.config import Settings
from app.server import uvicorn_options
from app.serving import Supervisor, listening_socket, reserve_address

__all__ = ["RESPONSE", "create_app", "serve", "start_nginx"]

#: What both floors answer: 1 KiB, as a 1 KiB sealed request's answer is about that size.
RESPONSE = b"k" * 1024
_FACTORY = "bench.floor_app:create_app"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def create_app() -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """The raw ASGI floor: read the body, answer 200 with :data:`RESPONSE` (a factory, as the workers use)."""
    length = str(len(RESPONSE)).encode()
    headers = [(b"content-type", b"application/octet-stream"), (b"content-length", length)]

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            more = message.get("more_body", False)
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": RESPONSE})

    return app


def serve(port: int, workers: int, host: str = "127.0.0.1") -> None:
    """Serve the raw ASGI floor with Keystream's uvicorn options and supervisor until SIGINT/SIGTERM."""
    settings = Settings(host=host, port=port, workers=workers)
    common = uvicorn_options(settings, None)
    if workers == 1:
        sock = listening_socket(host, port, 2048)
        try:
            uvicorn.Server(uvicorn.Config(create_app(), **common)).run(sockets=[sock])
        finally:
            sock.close()
        return
    reserved = reserve_address(host, port)
    try:
        host, port = common.pop("host"), common.pop("port")
        Supervisor(
            workers,
            host,
            port,
            common,
            settings.timeout_graceful_shutdown,
            reserved=reserved,
            app_factory=_FACTORY,
        ).run()
    finally:
        reserved.close()


def wait_until_answering(url: str, process: subprocess.Popen[bytes], log: Path, seconds: float = 60) -> None:
    """Wait until ``url`` answers a 1 KiB POST with 200 and :data:`RESPONSE`.

    Raises:
        RuntimeError: the process exited or did not answer in time (with the end of its log).
    """
    deadline = time.monotonic() + seconds
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"the floor server exited ({process.returncode}): {log.read_text()[-2000:]}")
        try:
            answer = httpx.post(url, content=bytes(1024), timeout=1)
            if answer.status_code == 200 and answer.content == RESPONSE:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            tail = log.read_text()[-2000:]
            raise RuntimeError(f"the floor server did not answer in {seconds:.0f} s: {tail}")
        time.sleep(0.1)


def nginx_config(work: Path, port: int, workers: int) -> str:
    """nginx's configuration: every request answered 200 with :data:`RESPONSE`; its files in ``work``."""
    temp = work / "nginx-temp"
    return f"""daemon off;
master_process on;
worker_processes {workers};
pid {work / "nginx.pid"};
error_log {work / "nginx-error.log"} warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {temp}/body;
    proxy_temp_path {temp}/proxy;
    fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi;
    scgi_temp_path {temp}/scgi;
    default_type application/octet-stream;
    server {{
        listen 127.0.0.1:{port};
        location / {{ return 200 "{RESPONSE.decode()}"; }}
    }}
}}
"""


def start_nginx(work: Path, port: int, workers: int) -> subprocess.Popen[bytes] | None:
    """nginx on ``127.0.0.1:port`` answering like the raw ASGI floor, or ``None`` when nginx is not installed.

    Raises:
        RuntimeError: nginx is installed but did not start (with its error log).
    """
    binary = shutil.which("nginx") or next(
        (path for path in ("/usr/sbin/nginx",) if Path(path).exists()), None
    )
    if binary is None:
        return None
    (work / "nginx-temp").mkdir(parents=True, exist_ok=True)
    config = work / "nginx.conf"
    config.write_text(nginx_config(work, port, workers))
    log = work / "nginx.log"
    with log.open("wb") as handle:
        process = subprocess.Popen(
            [binary, "-c", str(config), "-p", str(work), "-e", str(work / "nginx-error.log")],
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
    wait_until_answering(f"http://127.0.0.1:{port}/", process, work / "nginx-error.log")
    return process


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()
    serve(args.port, args.workers, args.host)


if __name__ == "__main__":
    main()
