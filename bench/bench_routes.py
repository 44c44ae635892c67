"""Server CPU per request of each small route, in process: the ASGI app alone, no HTTP parsing, no client.

Each route gets the same request ``--requests`` times in a row (after 300 warm-ups) through the app's ASGI
interface on a uvloop loop, and the figure is the process CPU time (every thread) per request: what the
service itself spends, which the HTTP server and the client would only add to. The routes: the streaming
sealed encrypt and decrypt of 1 KiB, the JSON routes (HMAC, verify, data key, random bytes, hash) and the
Transit API's data operations on 1 KiB. Every answer is checked (200) before anything is timed.

``--checkout NAME=PATH`` (repeatable; default: this repository) measures other built checkouts the same way:
each round starts one process per checkout, in turn, so they share whatever else runs on the machine, and
the report gives per route the median over ``--rounds`` of each checkout's figure and their ratio to the
first checkout. The machine is shared: the report prints the CPU model, the date and the load average.
Run: ``.venv/bin/python -m bench.bench_routes --checkout before=../old --checkout after=. --rounds 3``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TOKEN = "ks_0123456789abcdef_" + "x" * 32
#: Requests per route and round after the warm-up.
DEFAULT_REQUESTS = 2000
WARMUP = 300
ONE_KIB = bytes(range(256)) * 4


def _routes() -> list[tuple[str, str, dict[str, str], bytes]]:
    """(label, path, extra headers, body) of every timed request; ``{sealed}`` is filled in by the child."""
    text = base64.b64encode(ONE_KIB).decode()
    vault = {"x-vault-token": TOKEN, "content-type": "application/json"}
    native = {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
    raw = {"authorization": f"Bearer {TOKEN}", "content-type": "application/octet-stream"}
    return [
        ("sealed encrypt, 1 KiB", "/v1/keys/bench/encrypt", raw, ONE_KIB),
        ("sealed decrypt, 1 KiB", "/v1/keys/bench/decrypt", raw, b"{sealed}"),
        ("hmac, 1 KiB", "/v1/keys/bench/hmac", native, json.dumps({"input": text}).encode()),
        ("datakey", "/v1/keys/bench/datakey", native, b'{"type": "aes256", "plaintext": false}'),
        ("random, 32 bytes", "/v1/random", native, b'{"bytes": 32}'),
        ("hash, 1 KiB", "/v1/hash", native, json.dumps({"input": text}).encode()),
        (
            "Transit encrypt, 1 KiB",
            "/v1/transit/encrypt/bench",
            vault,
            json.dumps({"plaintext": text}).encode(),
        ),
        ("Transit decrypt, 1 KiB", "/v1/transit/decrypt/bench", vault, b"{transit}"),
        ("Transit rewrap, 1 KiB", "/v1/transit/rewrap/bench", vault, b"{transit}"),
        ("Transit hmac, 1 KiB", "/v1/transit/hmac/bench", vault, json.dumps({"input": text}).encode()),
    ]


def _child(requests: int) -> None:
    """Measure every route in this process (the checkout is the working directory) and print JSON."""
    sys.path.insert(0, os.getcwd())
    data = tempfile.mkdtemp(prefix="bench-routes-")
    os.environ.update(
        KEYSTREAM_DATA_DIR=data,
        KEYSTREAM_ROOT_TOKEN=TOKEN,
        KEYSTREAM_WORKERS="1",
        KEYSTREAM_METRICS_FLUSH_SECONDS="60",
    )
    import httpx
    import uvloop

    from app.core.config import Settings
    from app.main import create_app
    from app.server import bootstrap

    settings = Settings()
    with open(os.devnull, "w") as quiet:
        bootstrap(settings, out=quiet)
    app = create_app(settings)

    async def call(path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
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
            "headers": [
                (b"host", b"127.0.0.1:8000"),
                (b"content-length", str(len(body)).encode()),
                *((name.encode(), value.encode()) for name, value in headers.items()),
            ],
            "state": {},
        }
        await app(scope, receive, send)
        return sent[0]["status"], b"".join(event.get("body", b"") for event in sent[1:])

    async def main() -> dict[str, float]:
        inbox: asyncio.Queue[MutableMapping[str, Any]] = asyncio.Queue()
        outbox: asyncio.Queue[MutableMapping[str, Any]] = asyncio.Queue()
        await inbox.put({"type": "lifespan.startup"})
        lifespan = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
        started = asyncio.ensure_future(app(lifespan, inbox.get, outbox.put))
        assert (await outbox.get())["type"] == "lifespan.startup.complete"
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            auth = {"Authorization": f"Bearer {TOKEN}"}
            made = await client.post("/v1/keys", json={"name": "bench", "type": "aes256"}, headers=auth)
            assert made.status_code == 201, made.text
            sealed = (await client.post("/v1/keys/bench/encrypt", content=ONE_KIB, headers=auth)).content
            transit = await client.post(
                "/v1/transit/encrypt/bench",
                json={"plaintext": base64.b64encode(ONE_KIB).decode()},
                headers={"X-Vault-Token": TOKEN},
            )
            ciphertext = transit.json()["data"]["ciphertext"]
        figures: dict[str, float] = {}
        for label, path, headers, body in _routes():
            if body == b"{sealed}":
                body = sealed
            elif body == b"{transit}":
                body = json.dumps({"ciphertext": ciphertext}).encode()
            status, answer = await call(path, headers, body)
            if status != 200:
                raise RuntimeError(f"{label}: {status} {answer[:200]!r}")
            for _ in range(WARMUP):
                await call(path, headers, body)
            began = time.process_time()
            for _ in range(requests):
                await call(path, headers, body)
            figures[label] = (time.process_time() - began) / requests * 1e6
        started.cancel()
        return figures

    print(json.dumps(uvloop.run(main())))


def _measure(checkout: Path, requests: int) -> dict[str, float]:
    python = checkout / ".venv" / "bin" / "python"
    done = subprocess.run(
        [str(python), str(Path(__file__).resolve()), "--child", "--requests", str(requests)],
        cwd=checkout,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{checkout}: {done.stderr[-2000:]}")
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def _load() -> str:
    return "/".join(f"{value:.2f}" for value in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", action="append", default=[], help="NAME=PATH of a built checkout")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=DEFAULT_REQUESTS)
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.requests)
        return
    from bench.bench_aescore import cpu_model

    checkouts = dict(item.split("=", 1) for item in args.checkout) or {"this": str(REPO)}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in checkouts}
    load_before = _load()
    for _ in range(args.rounds):
        for name, path in checkouts.items():
            runs[name].append(_measure(Path(path).resolve(), args.requests))
    load_after = _load()
    medians = {
        name: {label: statistics.median(run[label] for run in rounds) for label in rounds[0]}
        for name, rounds in runs.items()
    }
    when = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    print(f"Route CPU in process, {when}, {cpu_model()}, load {load_before} -> {load_after}")
    print(f"medians of {args.rounds} rounds x {args.requests} requests, us of CPU per request")
    names = list(checkouts)
    first = names[0]
    header = " | ".join(names + [f"{name}/{first}" for name in names[1:]])
    print(f"| route | {header} |")
    print("|---" * (1 + 2 * len(names) - 1) + "|")
    for label in medians[first]:
        values = [f"{medians[name][label]:.0f}" for name in names]
        ratios = [f"{medians[name][label] / medians[first][label]:.2f}" for name in names[1:]]
        print(f"| {label} | {' | '.join(values + ratios)} |")
    if args.json:
        result = {"date": when, "cpu": cpu_model(), "load": [load_before, load_after], "medians": medians}
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
