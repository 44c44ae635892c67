"""Instructions per request of the 1 KiB sealed encrypt and decrypt (and, on request, of the Transit API's
encrypt and decrypt, single and 100-item batches), in process, under callgrind.

Instruction counts do not move with the machine's load, so a cut of a few hundred instructions on the
request path shows where wall-clock CPU figures (``bench.bench_routes``) drown it in noise. For each route a
child process builds the app as the server does (bootstrap, lifespan, one ``aes256`` key), sends the request
through the ASGI app directly (no sockets) 200 times to warm up, then ``--requests`` times with callgrind's
instrumentation on (``--instr-atstart=no``, switched on and off by callgrind's client requests in a small
library compiled on the spot from valgrind's ``callgrind.h``); the figure is the instructions of every thread
over that window divided by the requests. ``PYTHONHASHSEED=0`` keeps dictionary layouts alike from run to
run; what is left of the spread is about 1k instructions a request at 2,000 requests.

Note: valgrind hides SHA-NI from the CPU it emulates, so the native SHA-256 runs its AVX2 path here; the
figures show the Python side's share truthfully and the native sealing's as on a CPU without SHA-NI.
Needs valgrind, its headers and a C compiler.
Run: ``.venv/bin/python -m bench.callgrind_routes [--requests 2000] [--checkout NAME=PATH ...]``, and
``--route R`` (repeatable; one of :data:`ROUTES`) for others than the sealed pair. The Transit routes take
their key from ``POST /v1/transit/keys/bench-transit`` and send JSON: ``transit-encrypt`` one 1 KiB
plaintext, ``transit-encrypt-batch`` a ``batch_input`` of :data:`BATCH_ITEMS` of them, the decrypt routes
those answers' ciphertexts. With ``--keep DIR`` the callgrind files stay there for
``callgrind_annotate --inclusive=yes``.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TOKEN = "ks_0123456789abcdef_" + "x" * 32
ONE_KIB = bytes(range(256)) * 4
WARMUP = 200
#: Warm-up requests of a batch route (each carries :data:`BATCH_ITEMS` items).
BATCH_WARMUP = 20
#: Items in a Transit batch request.
BATCH_ITEMS = 100
#: The routes measured without ``--route``.
DEFAULT_ROUTES = ("encrypt", "decrypt")
ROUTES = (
    *DEFAULT_ROUTES,
    "transit-encrypt",
    "transit-decrypt",
    "transit-encrypt-batch",
    "transit-decrypt-batch",
)
#: What each route's column says.
LABELS = {
    "encrypt": "sealed encrypt, 1 KiB",
    "decrypt": "sealed decrypt, 1 KiB",
    "transit-encrypt": "Transit encrypt, 1 KiB",
    "transit-decrypt": "Transit decrypt, 1 KiB",
    "transit-encrypt-batch": f"Transit encrypt, {BATCH_ITEMS} x 1 KiB",
    "transit-decrypt-batch": f"Transit decrypt, {BATCH_ITEMS} x 1 KiB",
}
#: callgrind's client requests as two functions a Python process can call through ctypes.
_MARKER_SOURCE = """#include <valgrind/callgrind.h>
void ks_cg_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void ks_cg_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS; }
"""


def _child(route: str, requests: int, marker: str) -> None:
    """Drive ``route`` in this process (the checkout is the working directory) between the two markers."""
    marks = ctypes.CDLL(marker)
    drive(route, requests, marks.ks_cg_start, marks.ks_cg_stop)


def drive(route: str, requests: int, start: Callable[[], object], stop: Callable[[], object]) -> None:
    """Build the app as the server does (the checkout is the working directory), warm ``route`` up, then send
    it ``requests`` times through ASGI between ``start()`` and ``stop()``."""
    sys.path.insert(0, os.getcwd())
    os.environ.update(
        KEYSTREAM_DATA_DIR=tempfile.mkdtemp(prefix="bench-callgrind-"),
        KEYSTREAM_ROOT_TOKEN=TOKEN,
        KEYSTREAM_WORKERS="1",
        KEYSTREAM_METRICS_FLUSH_SECONDS="60",
    )
    import base64
    import json

    import httpx
    import uvloop

    from app.core.config import Settings
    from app.main import create_app
    from app.server import bootstrap

    settings = Settings()
    with open(os.devnull, "w") as quiet:
        bootstrap(settings, out=quiet)
    app = create_app(settings)
    authorization = (b"authorization", f"Bearer {TOKEN}".encode())
    content_type = b"application/json" if route.startswith("transit-") else b"application/octet-stream"
    headers = [authorization, (b"content-type", content_type)]

    async def call(path: str, body: bytes) -> int:
        sent: list[MutableMapping[str, Any]] = []
        message: MutableMapping[str, Any] = {"type": "http.request", "body": body, "more_body": False}

        async def receive() -> MutableMapping[str, Any]:
            return message

        async def send(event: MutableMapping[str, Any]) -> None:
            sent.append(event)

        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "server": ("127.0.0.1", 8000),
            "client": ("127.0.0.1", 50000),
            "scheme": "http",
            "method": "POST",
            "root_path": "",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "headers": [(b"host", b"127.0.0.1:8000"), (b"content-length", str(len(body)).encode()), *headers],
            "state": {},
        }
        await app(scope, receive, send)
        status: int = sent[0]["status"]
        return status

    async def main() -> None:
        inbox: asyncio.Queue[MutableMapping[str, Any]] = asyncio.Queue()
        outbox: asyncio.Queue[MutableMapping[str, Any]] = asyncio.Queue()
        await inbox.put({"type": "lifespan.startup"})
        lifespan = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
        started = asyncio.ensure_future(app(lifespan, inbox.get, outbox.put))
        assert (await outbox.get())["type"] == "lifespan.startup.complete"
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://bench"
        ) as client:
            auth = {"Authorization": f"Bearer {TOKEN}"}
            if route.startswith("transit-"):
                made = await client.post("/v1/transit/keys/bench-transit", json={}, headers=auth)
                assert made.status_code in (200, 204), made.text
                plaintext = base64.b64encode(ONE_KIB).decode()
                encrypt_body: dict[str, Any] = (
                    {"batch_input": [{"plaintext": plaintext}] * BATCH_ITEMS}
                    if route.endswith("-batch")
                    else {"plaintext": plaintext}
                )
                sealed = await client.post(
                    "/v1/transit/encrypt/bench-transit", json=encrypt_body, headers=auth
                )
                assert sealed.status_code == 200, sealed.text
                answer = sealed.json()["data"]
                decrypt_body: dict[str, Any] = (
                    {"batch_input": [{"ciphertext": r["ciphertext"]} for r in answer["batch_results"]]}
                    if route.endswith("-batch")
                    else {"ciphertext": answer["ciphertext"]}
                )
                operation = route.removeprefix("transit-").removesuffix("-batch")
                path = f"/v1/transit/{operation}/bench-transit"
                body = json.dumps(encrypt_body if operation == "encrypt" else decrypt_body).encode()
            else:
                made = await client.post("/v1/keys", json={"name": "bench", "type": "aes256"}, headers=auth)
                assert made.status_code == 201, made.text
                sealed_bytes = (
                    await client.post("/v1/keys/bench/encrypt", content=ONE_KIB, headers=auth)
                ).content
                path, body = f"/v1/keys/bench/{route}", ONE_KIB if route == "encrypt" else sealed_bytes
        if (status := await call(path, body)) != 200:
            raise RuntimeError(f"{route}: {status}")
        for _ in range(BATCH_WARMUP if route.endswith("-batch") else WARMUP):
            await call(path, body)
        start()
        for _ in range(requests):
            await call(path, body)
        stop()
        started.cancel()

    uvloop.run(main())


def _marker(folder: Path) -> Path:
    """The marker library, compiled into ``folder``."""
    source, library = folder / "marks.c", folder / "libmarks.so"
    source.write_text(_MARKER_SOURCE)
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return library


def measure(checkout: Path, route: str, requests: int, marker: Path, out: Path) -> float:
    """Instructions per request of ``route`` in ``checkout`` (run by its ``.venv``); the callgrind file is
    ``out`` with ``.1`` appended."""
    python = checkout / ".venv" / "bin" / "python"
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out}",
            str(python),
            str(Path(__file__).resolve()),
            "--child",
            route,
            "--requests",
            str(requests),
            "--marker",
            str(marker),
        ],
        cwd=checkout,
        env={**os.environ, "PYTHONHASHSEED": "0"},
        capture_output=True,
        text=True,
        check=False,
    )
    dumped = Path(f"{out}.1")
    if done.returncode != 0 or not dumped.exists():
        raise RuntimeError(f"{checkout} {route}: {done.stderr[-2000:]}")
    for line in dumped.read_text().splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1]) / requests
    raise RuntimeError(f"{dumped}: no totals line")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", action="append", default=[], help="NAME=PATH of a built checkout")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--keep", type=Path, help="leave the callgrind files in this folder")
    parser.add_argument("--route", action="append", choices=ROUTES, help="a route to measure (repeatable)")
    parser.add_argument("--child", choices=ROUTES, help=argparse.SUPPRESS)
    parser.add_argument("--marker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.requests, args.marker)
        return
    checkouts = dict(item.split("=", 1) for item in args.checkout) or {"this": str(REPO)}
    with tempfile.TemporaryDirectory(prefix="bench-callgrind-") as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        marker = _marker(Path(scratch))
        print(
            f"instructions per request, in process, {args.requests} requests after {WARMUP} warm-ups "
            f"({BATCH_WARMUP} for a batch)"
        )
        routes = tuple(args.route or DEFAULT_ROUTES)
        print("| checkout | " + " | ".join(LABELS[route] for route in routes) + " |")
        print("|---" * (1 + len(routes)) + "|")
        for name, path in checkouts.items():
            figures = [
                measure(Path(path).resolve(), route, args.requests, marker, folder / f"{name}.{route}.out")
                for route in routes
            ]
            print(f"| {name} | " + " | ".join(f"{figure / 1000:.1f}k" for figure in figures) + " |")


if __name__ == "__main__":
    main()
