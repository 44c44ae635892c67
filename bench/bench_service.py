"""Service benchmark: Keystream's HTTP paths against a plain echo route on the same server, in one run.

Client and server share this machine (the server is ``app.server.serve`` in a subprocess with
``KEYSTREAM_BENCH_ECHO=1``); every case is repeated, interleaved with its baseline, and the median is kept.

Cases (targets from issue 3):
* streaming raw encrypt vs ``POST /bench/echo`` (target >= 0.85x), sealed encrypt vs echo (>= 0.6x);
* the same sealed stream with a key of scheme ``gcm`` (issue 13: >= 0.9x of echo);
* the server's CPU milliseconds per MiB of each stream (load-independent: what each path costs the server);
* 1 KiB sealed encrypt requests/s vs ``/healthz`` requests/s over keep-alive connections (>= 0.6x), with a
  ``ctr-hmac`` and a ``gcm`` key (issue 13: gcm at least the ctr-hmac rate);
* batch items/s for 100 x 1 KiB items (both schemes);
* server RSS growth during a 1 GiB sealed encrypt -> decrypt round trip (< 64 MiB);
* per-backend latency samples of a 1 KiB sealed encrypt, for a CDF plot.

Ratios are medians of per-round ratios (case / baseline of the same round), which keeps them meaningful on
a machine whose load drifts; values are medians of the raw figures.

Writes ``bench/results/service.json``: ``{"cpu", "date", "results": [{"case", "value", "unit", "ratio"}],
"latency_samples": {"aesni": [seconds...], "python": [...]}}``, a CDF of those samples
(``service_latency_cdf.png``), and prints a Markdown table.

Usage: ``python -m bench.bench_service [--quick]``
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime
import json
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench.bench_aescore import cpu_model
from bench.duplex_client import duplex_request
from bench.service_process import Server, start_server, stop_server

MIB = 1 << 20
RESULTS = Path(__file__).resolve().parent / "results" / "service.json"


# -- streaming --


async def stream_once(server: Server, path: str, size: int) -> float:
    """Upload ``size`` bytes (Content-Length) and read the streamed answer; bytes/s of the upload."""
    block = bytes(range(256)) * (MIB // 256)

    async def body() -> AsyncIterator[bytes]:
        for _ in range(size // MIB):
            yield block

    headers = {**server.auth, "Content-Type": "application/octet-stream"}
    start = time.perf_counter()
    result = await duplex_request(
        server.host, server.port, "POST", path, headers, body(), content_length=size
    )
    elapsed = time.perf_counter() - start
    if result.status != 200 or result.received < size:
        raise RuntimeError(f"{path}: status {result.status}, {result.received} bytes")
    return size / elapsed


# -- request rates over keep-alive connections --


async def _read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    lower = head.lower()
    if b"transfer-encoding: chunked" in lower:
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    else:
        index = lower.index(b"content-length:")
        length = int(lower[index + 15 : lower.index(b"\r\n", index)])
        await reader.readexactly(length)
    return status


async def request_rate(server: Server, raw_request: bytes, seconds: float, connections: int = 16) -> float:
    """Requests/s of one pre-built request, sent back to back on ``connections`` keep-alive connections."""
    done = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done
        reader, writer = await asyncio.open_connection(server.host, server.port)
        try:
            while time.perf_counter() < deadline:
                writer.write(raw_request)
                if await _read_response(reader) != 200:
                    raise RuntimeError(f"unexpected status for {raw_request[:60]!r}")
                done += 1
        finally:
            writer.close()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(connections)))
    return done / (time.perf_counter() - start)


def build_request(method: str, path: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: bench"] + [f"{k}: {v}" for k, v in headers.items()]
    if method != "GET":
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def server_cpu_seconds(server: Server) -> float:
    """User + system CPU seconds of the server process and its live children (workers) so far."""
    process = psutil.Process(server.process.pid)
    total = 0.0
    for member in (process, *process.children(recursive=True)):
        try:
            times = member.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


# -- batch, RSS, latency --


def batch_rate(server: Server, seconds: float, key: str = "bench") -> float:
    items = [{"plaintext": base64.b64encode(bytes([i]) * 1024).decode()} for i in range(100)]
    processed = 0
    with httpx.Client(base_url=server.url, headers=server.auth, timeout=30) as client:
        client.post(f"/v1/keys/{key}/encrypt/batch", json={"items": items[:1]})
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            response = client.post(f"/v1/keys/{key}/encrypt/batch", json={"items": items})
            if response.status_code != 200 or len(response.json()["results"]) != 100:
                raise RuntimeError(f"batch failed: {response.status_code}")
            processed += 100
        return processed / (time.perf_counter() - start)


async def rss_round_trip(server: Server, size: int) -> tuple[float, float]:
    """Sealed encrypt of ``size`` bytes piped into decrypt.

    Returns (peak server RSS growth in MiB, round-trip bytes/s).
    """
    process = psutil.Process(server.process.pid)
    baseline = process.memory_info().rss
    peak = baseline
    queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=8)
    headers = {**server.auth, "Content-Type": "application/octet-stream"}
    block = bytes(range(256)) * (MIB // 256)
    received = 0
    running = True

    async def sample() -> None:
        nonlocal peak
        while running:
            peak = max(peak, process.memory_info().rss)
            await asyncio.sleep(0.05)

    async def plain() -> AsyncIterator[bytes]:
        for _ in range(size // MIB):
            yield block

    async def encrypt() -> None:
        try:
            await duplex_request(
                server.host,
                server.port,
                "POST",
                "/v1/keys/bench/encrypt",
                headers,
                plain(),
                size,
                sink=queue.put,
            )
        finally:
            await queue.put(None)

    async def cipher() -> AsyncIterator[bytes]:
        while (piece := await queue.get()) is not None:
            yield piece

    def count(piece: bytes) -> None:
        nonlocal received
        received += len(piece)

    sampler = asyncio.create_task(sample())
    start = time.perf_counter()
    await asyncio.gather(
        encrypt(),
        duplex_request(
            server.host, server.port, "POST", "/v1/keys/bench/decrypt", headers, cipher(), sink=count
        ),
    )
    elapsed = time.perf_counter() - start
    running = False
    await sampler
    if received != size:
        raise RuntimeError(f"round trip returned {received} of {size} bytes")
    return (peak - baseline) / MIB, size / elapsed


def latency_samples(server: Server, backend: str, count: int) -> list[float]:
    samples = []
    body = bytes(1024)
    with httpx.Client(base_url=server.url, headers=server.auth, timeout=30) as client:
        client.post(f"/v1/keys/bench/encrypt?backend={backend}", content=body)
        for _ in range(count):
            start = time.perf_counter()
            response = client.post(f"/v1/keys/bench/encrypt?backend={backend}", content=body)
            samples.append(time.perf_counter() - start)
            if response.status_code != 200:
                raise RuntimeError(f"{backend}: {response.status_code} {response.text}")
    return samples


# -- driver --


def interleaved(
    cases: dict[str, Callable[[], Coroutine[Any, Any, float]]], repeats: int
) -> dict[str, list[float]]:
    values: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, make in cases.items():
            values[name].append(asyncio.run(make()))
    return values


def plot_latency_cdf(samples: dict[str, list[float]], path: Path) -> None:
    """Write a CDF of the per-backend latency samples (needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4))
    for name, values in sorted(samples.items()):
        ordered = sorted(value * 1e3 for value in values)
        axes.plot(ordered, [(index + 1) / len(ordered) for index in range(len(ordered))], label=name)
    axes.set_xscale("log")
    axes.set_xlabel("latency of a 1 KiB sealed encrypt over HTTP (ms, log scale)")
    axes.set_ylabel("fraction of requests")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(title="backend")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def paired_ratio(values: list[float], baselines: list[float]) -> float:
    """Median of per-round ratios: each case ran right after its baseline, so load drift cancels out."""
    return statistics.median(value / baseline for value, baseline in zip(values, baselines, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats (~1 minute)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    stream_size = 128 * MIB if args.quick else 256 * MIB
    repeats = 3 if args.quick else 7
    rate_seconds = 1.5 if args.quick else 3.0
    rss_size = 256 * MIB if args.quick else 1024 * MIB

    results: list[dict[str, Any]] = []

    def record(case: str, value: float, unit: str, ratio: float | None = None) -> None:
        results.append(
            {"case": case, "value": round(value, 4), "unit": unit, "ratio": ratio and round(ratio, 3)}
        )
        shown = f"  ({ratio:.2f}x)" if ratio is not None else ""
        print(f"{case:45s} {value:12.3f} {unit}{shown}", flush=True)

    with tempfile.TemporaryDirectory(prefix="keystream-bench-") as tmp:
        server = start_server(Path(tmp) / "data", Path(tmp) / "server.log", KEYSTREAM_BENCH_ECHO="1")
        try:
            with server.client() as client:
                client.post("/v1/keys", json={"name": "bench"}).raise_for_status()
                client.post("/v1/keys", json={"name": "bench-gcm", "scheme": "gcm"}).raise_for_status()
                backends = {b["name"]: b for b in client.get("/v1/backends").json()["backends"]}
            default = next(name for name, b in backends.items() if b["default"])
            print(f"server backend {default} ({backends[default]['isa']}); cpu {cpu_model()}", flush=True)

            # Server CPU per MiB of each stream: unlike throughput it hardly moves with the machine's load, so
            # it shows what a case costs the server beyond the echo route even on a busy shared machine.
            cpu_per_mib: dict[str, list[float]] = {}

            def streamed(name: str, path: str) -> Callable[[], Coroutine[Any, Any, float]]:
                async def run() -> float:
                    before = server_cpu_seconds(server)
                    rate = await stream_once(server, path, stream_size)
                    spent = server_cpu_seconds(server) - before
                    cpu_per_mib.setdefault(name, []).append(spent / (stream_size / MIB) * 1e3)
                    return rate

                return run

            streams = interleaved(
                {
                    "echo": streamed("echo", "/bench/echo"),
                    "raw": streamed("raw", "/v1/keys/bench/encrypt?format=raw"),
                    "sealed": streamed("sealed", "/v1/keys/bench/encrypt"),
                    "sealed gcm": streamed("sealed gcm", "/v1/keys/bench-gcm/encrypt"),
                },
                repeats,
            )
            record("stream echo (baseline)", statistics.median(streams["echo"]) / 1e9, "GB/s")
            for name, case in (
                ("raw", "raw"),
                ("sealed", "sealed [ctr-hmac key]"),
                ("sealed gcm", "sealed [gcm key]"),
            ):
                record(
                    f"stream {case} encrypt",
                    statistics.median(streams[name]) / 1e9,
                    "GB/s",
                    paired_ratio(streams[name], streams["echo"]),
                )
            for name, case in (
                ("echo", "echo"),
                ("raw", "raw"),
                ("sealed", "sealed [ctr-hmac key]"),
                ("sealed gcm", "sealed [gcm key]"),
            ):
                record(f"server CPU per MiB, stream {case}", statistics.median(cpu_per_mib[name]), "ms")

            health = build_request("GET", "/healthz", {})
            encrypt = build_request(
                "POST",
                "/v1/keys/bench/encrypt",
                {**server.auth, "Content-Type": "application/octet-stream"},
                bytes(1024),
            )
            encrypt_gcm = build_request(
                "POST",
                "/v1/keys/bench-gcm/encrypt",
                {**server.auth, "Content-Type": "application/octet-stream"},
                bytes(1024),
            )
            rates = interleaved(
                {
                    "healthz": lambda: request_rate(server, health, rate_seconds),
                    "encrypt": lambda: request_rate(server, encrypt, rate_seconds),
                    "encrypt gcm": lambda: request_rate(server, encrypt_gcm, rate_seconds),
                },
                repeats,
            )
            record("GET /healthz", statistics.median(rates["healthz"]), "req/s")
            for name, case in (("encrypt", "ctr-hmac key"), ("encrypt gcm", "gcm key")):
                record(
                    f"1 KiB sealed encrypt [{case}]",
                    statistics.median(rates[name]),
                    "req/s",
                    paired_ratio(rates[name], rates["healthz"]),
                )
            record(
                "1 KiB sealed encrypt, gcm / ctr-hmac key",
                statistics.median(rates["encrypt gcm"]) / statistics.median(rates["encrypt"]),
                "x",
                paired_ratio(rates["encrypt gcm"], rates["encrypt"]),
            )

            for key, case in (("bench", "ctr-hmac key"), ("bench-gcm", "gcm key")):
                batch = statistics.median(batch_rate(server, rate_seconds, key) for _ in range(repeats))
                record(f"batch encrypt, 100 x 1 KiB items [{case}]", batch, "items/s")

            growth, round_trip = asyncio.run(rss_round_trip(server, rss_size))
            record(f"RSS growth, {rss_size // MIB} MiB sealed round trip", growth, "MiB")
            record(f"{rss_size // MIB} MiB encrypt->decrypt pipe", round_trip / 1e9, "GB/s")

            samples: dict[str, list[float]] = {}
            for name, backend in backends.items():
                if backend["available"]:
                    samples[name] = latency_samples(server, name, 100 if name == "python" else 400)
                    record(
                        f"1 KiB sealed encrypt p50 latency [{name}]",
                        statistics.median(samples[name]) * 1e3,
                        "ms",
                    )
        finally:
            stop_server(server)

    output = {
        "cpu": cpu_model(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "quick": args.quick,
        "results": results,
        "latency_samples": {name: [round(s, 6) for s in values] for name, values in samples.items()},
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(output, indent=1) + "\n")
    plot_latency_cdf(samples, args.output.with_name(args.output.stem + "_latency_cdf.png"))
    print("\n| case | value | unit | ratio |\n|---|---:|---|---:|")
    for row in results:
        print("| {} | {} | {} | {} |".format(row["case"], row["value"], row["unit"], row["ratio"] or ""))
    print(f"\nwritten to {args.output}")


if __name__ == "__main__":
    main()
