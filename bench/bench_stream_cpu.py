"""Server CPU per MiB of the streaming routes, in process: the ASGI app alone, no sockets, no client.

The body arrives as uvicorn hands it over (256 KiB ``http.request`` messages, a fresh ``bytes`` each) and
every output piece is written as uvicorn writes it: as it is under a declared Content-Length, else framed
as a chunk (one ``b"".join``), so the figure is
what the service spends per MiB beyond the kernel's socket work, which the server-level figure of
``bench.bench_service`` adds for every stream alike. Cases: ``/bench/echo`` (the baseline), sealed encrypt
and decrypt with a ``gcm`` and a ``ctr-hmac`` key of the default 1 MiB segments, and ``gcm`` with 64 KiB
segments; every case runs ``--rounds`` times, interleaved, and the median is kept (the first round warms up).
Decrypt reads its ciphertext from memory, colder than a socket's bytes: its figure is a little high.

Run: ``.venv/bin/python -m bench.bench_stream_cpu [--mib 128] [--rounds 5]``. The machine is shared: the
report prints the CPU model, the date and the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import statistics
import tempfile
import time
from collections.abc import MutableMapping
from typing import Any

TOKEN = "ks_0123456789abcdef_" + "x" * 32
MIB = 1 << 20
#: What uvicorn's httptools protocol hands over per ``receive()`` during a fast upload (its read size).
CHUNK = 256 * 1024
#: name -> (key name, key options, operation); ``echo`` has no key.
CASES: dict[str, tuple[str, dict[str, Any], str]] = {
    "echo": ("", {}, "echo"),
    "gcm encrypt": ("bench-gcm", {"scheme": "gcm"}, "encrypt"),
    "gcm decrypt": ("bench-gcm", {"scheme": "gcm"}, "decrypt"),
    "gcm 64 KiB segments encrypt": ("bench-gcm64", {"scheme": "gcm", "segment_size": 1 << 16}, "encrypt"),
    "ctr-hmac encrypt": ("bench", {}, "encrypt"),
    "ctr-hmac decrypt": ("bench", {}, "decrypt"),
}

Message = MutableMapping[str, Any]
#: The plaintext of every encrypt and echo stream, chunk after chunk.
_BLOCK = bytes(range(256)) * (CHUNK // 256)


def _scope(path: str, length: int) -> dict[str, Any]:
    return {
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
        "headers": [
            (b"host", b"bench"),
            (b"content-length", str(length).encode()),
            (b"authorization", f"Bearer {TOKEN}".encode()),
            (b"content-type", b"application/octet-stream"),
        ],
        "state": {},
    }


async def _stream(app: Any, path: str, body: bytes | int, keep: bool = False) -> bytes:
    """POST ``body`` to ``path`` in :data:`CHUNK` messages; the answer when ``keep`` (else ``b""``).

    An int ``body`` is that many bytes of one repeated :data:`CHUNK` block, copied from cache as a socket's
    bytes would be; a ``bytes`` body (a ciphertext) is read from memory.
    """
    length = body if isinstance(body, int) else len(body)
    view = memoryview(_BLOCK if isinstance(body, int) else body)
    position = 0
    status: list[int] = []
    kept: list[bytes] = []
    chunked = True

    async def receive() -> Message:
        nonlocal position
        size = min(CHUNK, length - position)
        start = 0 if isinstance(body, int) else position
        chunk = bytes(view[start : start + size])
        position += size
        return {"type": "http.request", "body": chunk, "more_body": position < length}

    async def send(message: Message) -> None:
        nonlocal chunked
        if message["type"] == "http.response.start":
            status.append(message["status"])
            chunked = all(name.lower() != b"content-length" for name, _ in message["headers"])
            return
        piece = message.get("body", b"")
        if piece and chunked:
            framed = b"".join([b"%x\r\n" % len(piece), piece, b"\r\n"])
            if keep:
                kept.append(framed[framed.index(b"\r\n") + 2 : -2])
        elif piece and keep:
            kept.append(bytes(piece))

    await app(_scope(path, length), receive, send)
    if status != [200]:
        raise RuntimeError(f"{path}: status {status}")
    return b"".join(kept)


async def _measure(app: Any, mib: int, rounds: int) -> dict[str, float]:
    import httpx

    inbox: asyncio.Queue[Message] = asyncio.Queue()
    outbox: asyncio.Queue[Message] = asyncio.Queue()
    await inbox.put({"type": "lifespan.startup"})
    lifespan = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
    started = asyncio.ensure_future(app(lifespan, inbox.get, outbox.put))
    if (await outbox.get())["type"] != "lifespan.startup.complete":
        raise RuntimeError("the app did not start")
    transport = httpx.ASGITransport(app=app)
    keys = {key: options for key, options, _ in CASES.values() if key}
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        for key, options in keys.items():
            made = await client.post(
                "/v1/keys", json={"name": key, **options}, headers={"Authorization": f"Bearer {TOKEN}"}
            )
            made.raise_for_status()
    plaintext = mib * MIB
    bodies: dict[str, tuple[str, bytes | int]] = {}
    for name, (key, _, operation) in CASES.items():
        if operation == "echo":
            bodies[name] = ("/bench/echo", plaintext)
        elif operation == "encrypt":
            bodies[name] = (f"/v1/keys/{key}/encrypt", plaintext)
        else:
            sealed = await _stream(app, f"/v1/keys/{key}/encrypt", plaintext, keep=True)
            bodies[name] = (f"/v1/keys/{key}/decrypt", sealed)
    figures: dict[str, list[float]] = {name: [] for name in CASES}
    for _ in range(rounds + 1):  # the first round warms up
        for name, (path, body) in bodies.items():
            began = time.process_time()
            await _stream(app, path, body)
            figures[name].append((time.process_time() - began) / mib * 1e3)
    started.cancel()
    return {name: statistics.median(values[1:]) for name, values in figures.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=128, help="MiB of plaintext per stream")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    os.environ.update(
        KEYSTREAM_DATA_DIR=tempfile.mkdtemp(prefix="bench-stream-cpu-"),
        KEYSTREAM_ROOT_TOKEN=TOKEN,
        KEYSTREAM_WORKERS="1",
        KEYSTREAM_METRICS_FLUSH_SECONDS="60",
        KEYSTREAM_BENCH_ECHO="1",
        KEYSTREAM_ENABLED_BACKENDS="aesni",
    )
    import uvloop

    from app.core.config import Settings
    from app.main import create_app
    from app.server import bootstrap
    from bench.bench_aescore import cpu_model

    settings = Settings()
    with open(os.devnull, "w") as quiet:
        bootstrap(settings, out=quiet)
    app = create_app(settings)
    load_before = "/".join(f"{value:.2f}" for value in os.getloadavg())
    medians = uvloop.run(_measure(app, args.mib, args.rounds))
    load_after = "/".join(f"{value:.2f}" for value in os.getloadavg())
    when = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    print(f"Stream CPU in process, {when}, {cpu_model()}, load {load_before} -> {load_after}")
    print(f"medians of {args.rounds} rounds x {args.mib} MiB, ms of CPU per MiB of plaintext")
    print("| stream | ms per MiB | x echo |")
    print("|---|---:|---:|")
    for name, value in medians.items():
        print(f"| {name} | {value:.3f} | {value / medians['echo']:.2f} |")


if __name__ == "__main__":
    main()
