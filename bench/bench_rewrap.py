"""Streaming rewrap against decrypt + encrypt done separately by the client (issue 12 item 4), one run.

Starts one server (workers=1, the default backend), seals ``--size-mib`` of plaintext under version 1 of a key
per scheme, rotates, then per round and in rotating order times over one connection each:

* ``rewrap``: the ciphertext through ``POST /rewrap`` (the plaintext never leaves the server);
* ``decrypt``, ``encrypt``: each alone;
* ``decrypt | encrypt``: what a client without rewrap does best: the decrypt response fed, as it arrives,
  into an encrypt request (two requests in flight; the plaintext crosses the network twice);
* ``decrypt; encrypt``: the two alone one after the other (the sum of their times).

Figures are MiB of plaintext per second, medians over ``--rounds``. Bodies come from memory (the client holds
the plaintext and the ciphertext), responses are counted and dropped. ``python -m bench.bench_rewrap`` writes
bench/results/rewrap.json and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

from bench.duplex_client import DuplexResult, duplex_request
from bench.service_process import REPO, Server, start_server, stop_server

RESULTS = REPO / "bench" / "results" / "rewrap.json"
MIB = 1 << 20
CHUNK = MIB


def _chunks(data: bytes) -> list[bytes]:
    view = memoryview(data)
    return [bytes(view[start : start + CHUNK]) for start in range(0, len(data), CHUNK)]


async def _post(server: Server, path: str, body: Any, length: int | None, sink: Any = None) -> DuplexResult:
    headers = {**server.auth, "Content-Type": "application/octet-stream"}
    result = await duplex_request(
        server.host, server.port, "POST", path, headers, body, content_length=length, sink=sink, timeout=900
    )
    if result.status != 200:
        raise RuntimeError(f"{path}: HTTP {result.status}")
    return result


async def _timed(work: Callable[[], Coroutine[Any, Any, object]]) -> float:
    start = time.perf_counter()
    await work()
    return time.perf_counter() - start


async def _piped(server: Server, key: str, ciphertext: list[bytes], ciphertext_length: int) -> None:
    """decrypt's response fed into encrypt's request as it arrives."""
    queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=16)

    async def decrypt() -> None:
        try:
            await _post(server, f"/v1/keys/{key}/decrypt", ciphertext, ciphertext_length, queue.put)
        finally:
            await queue.put(None)

    async def plaintext() -> AsyncIterator[bytes]:
        while (piece := await queue.get()) is not None:
            yield piece

    await asyncio.gather(decrypt(), _post(server, f"/v1/keys/{key}/encrypt", plaintext(), None))


async def _scheme_run(server: Server, scheme: str, size: int, rounds: int) -> dict[str, Any]:
    key = f"rewrap-{scheme}"
    with server.client() as client:
        created = client.post("/v1/keys", json={"name": key, "scheme": scheme})
        created.raise_for_status()
    plaintext = _chunks(os.urandom(size))
    collected: list[bytes] = []
    await _post(server, f"/v1/keys/{key}/encrypt", plaintext, size, collected.append)
    ciphertext = _chunks(b"".join(collected))
    del collected
    length = sum(map(len, ciphertext))
    with server.client() as client:
        client.post(f"/v1/keys/{key}/rotate").raise_for_status()

    def drop(_: bytes) -> None:
        return None

    runs: dict[str, Callable[[], Coroutine[Any, Any, object]]] = {
        "rewrap": lambda: _post(server, f"/v1/keys/{key}/rewrap", ciphertext, length, drop),
        "decrypt": lambda: _post(server, f"/v1/keys/{key}/decrypt", ciphertext, length, drop),
        "encrypt": lambda: _post(server, f"/v1/keys/{key}/encrypt", plaintext, size, drop),
        "decrypt | encrypt": lambda: _piped(server, key, ciphertext, length),
    }
    seconds: dict[str, list[float]] = {name: [] for name in [*runs, "decrypt; encrypt"]}
    names = list(runs)
    for index in range(rounds):
        order = names[index % len(names) :] + names[: index % len(names)]
        times = {name: await _timed(runs[name]) for name in order}
        for name, value in times.items():
            seconds[name].append(value)
        seconds["decrypt; encrypt"].append(times["decrypt"] + times["encrypt"])
    mib = size / MIB
    return {
        name: {
            "median_mib_s": round(mib / statistics.median(values), 1),
            "mib_s": [round(mib / value, 1) for value in values],
        }
        for name, values in seconds.items()
    }


async def _main(size_mib: int, rounds: int, schemes: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as base:
        server = start_server(Path(base) / "data", Path(base) / "server.log")
        try:
            results = {
                scheme: await _scheme_run(server, scheme, size_mib * MIB, rounds) for scheme in schemes
            }
        finally:
            stop_server(server)
    return {"size_mib": size_mib, "rounds": rounds, "cpus": os.cpu_count(), "results": results}


def table(report: dict[str, Any]) -> str:
    """The results as a Markdown table (MiB/s of plaintext, medians)."""
    lines = [
        f"{report['size_mib']} MiB, median of {report['rounds']} rounds, MiB/s of plaintext",
        "",
        "| scheme | rewrap | decrypt | encrypt | decrypt \\| encrypt (piped) | decrypt; encrypt (one after "
        "the other) | rewrap / piped |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for scheme, runs in report["results"].items():
        median = {name: values["median_mib_s"] for name, values in runs.items()}
        ratio = median["rewrap"] / median["decrypt | encrypt"]
        lines.append(
            f"| {scheme} | {median['rewrap']} | {median['decrypt']} | {median['encrypt']} | "
            f"{median['decrypt | encrypt']} | {median['decrypt; encrypt']} | {ratio:.2f}x |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--schemes", nargs="+", default=["ctr-hmac", "gcm"])
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    report = asyncio.run(_main(args.size_mib, args.rounds, args.schemes))
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(report, indent=2) + "\n")
    print(table(report))


if __name__ == "__main__":
    main()
