"""A slow backend must not stall the server; several workers share metrics (multiprocess mode)."""

from __future__ import annotations

import asyncio
import shutil
import statistics
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from bench.duplex_client import duplex_request
from bench.service_process import Server, start_server, stop_server

pytestmark = [pytest.mark.e2e, pytest.mark.serial]  # a p99 limit under load: alone
PROMTOOL = shutil.which("promtool") or ("/usr/bin/promtool" if Path("/usr/bin/promtool").exists() else None)


def _probe_healthz(url: str, stop: threading.Event, samples: list[float]) -> None:
    with httpx.Client(base_url=url, timeout=5) as client:
        client.get("/healthz")
        while not stop.is_set():
            start = time.perf_counter()
            response = client.get("/healthz")
            samples.append(time.perf_counter() - start)
            assert response.status_code == 200
            time.sleep(0.005)


async def test_healthz_p99_under_python_backend_load(server: Server) -> None:
    headers = {**server.auth, "Content-Type": "application/octet-stream"}
    body = bytes(1 << 20)  # ~0.25 s of pure-Python AES per request
    completed = 0

    async def load(deadline: float) -> None:
        nonlocal completed
        while time.monotonic() < deadline:
            result = await duplex_request(
                server.host,
                server.port,
                "POST",
                "/v1/keys/stream/encrypt?format=raw&backend=python",
                headers,
                body,
            )
            assert result.status == 200 and result.received == len(body)
            completed += 1

    # warm the process pool, then measure while three python requests are always running
    await duplex_request(
        server.host, server.port, "POST", "/v1/keys/stream/encrypt?backend=python", headers, b"x"
    )
    # Other jobs share this machine: take up to three 3-second windows and pass on the first good one. A
    # python backend on the event loop would fail every window (each 1 MiB call holds the GIL ~0.25 s).
    p99s: list[float] = []
    for _ in range(3):
        samples: list[float] = []
        stop = threading.Event()
        prober = threading.Thread(target=_probe_healthz, args=(server.url, stop, samples))
        completed = 0
        deadline = time.monotonic() + 3
        prober.start()
        try:
            await asyncio.gather(*(load(deadline) for _ in range(3)))
        finally:
            stop.set()
            prober.join()
        assert completed >= 3
        assert len(samples) >= 30
        p99s.append(statistics.quantiles(samples, n=100)[98])
        if p99s[-1] < 0.050:
            break
    assert p99s[-1] < 0.050, (
        f"/healthz p99 under python-backend load, per window: {[f'{p * 1000:.1f} ms' for p in p99s]}"
    )


async def test_two_workers_aggregate_metrics(tmp_path: Path) -> None:
    server = await asyncio.to_thread(start_server, tmp_path / "data", tmp_path / "log", KEYSTREAM_WORKERS="2")
    try:
        async with httpx.AsyncClient(base_url=server.url, headers=server.auth, timeout=30) as client:
            assert (await client.post("/v1/keys", json={"name": "mp"})).status_code == 201
            for _ in range(8):
                response = await client.post(
                    "/v1/keys/mp/encrypt?format=raw", content=bytes(1000), headers={"Connection": "close"}
                )
                assert response.status_code == 200
            # Each worker applies its buffered metric updates every metrics_flush_seconds (1 s by default):
            # a scrape answered by one worker shows the other's requests within that interval (or busy loop).
            sent = time.monotonic()
            while True:
                text = (await client.get("/metrics")).text
                total = sum(
                    float(line.split()[-1])
                    for line in text.splitlines()
                    if line.startswith("keystream_crypto_bytes_total{") and 'operation="encrypt"' in line
                )
                if total >= 8000 or time.monotonic() - sent > 5:
                    break
                await asyncio.sleep(0.05)
        assert total == 8000, f"{total} bytes counted {time.monotonic() - sent:.1f} s after the last request"
        assert 'route="/v1/keys/{name}/encrypt"' in text
        if PROMTOOL is not None:
            result = subprocess.run(
                [PROMTOOL, "check", "metrics"], input=text.encode(), capture_output=True, timeout=30
            )
            assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    finally:
        await asyncio.to_thread(stop_server, server)


async def test_two_workers_decrypt_right_after_a_rotation(tmp_path: Path) -> None:
    """One worker rotates; ciphertexts sealed right after it, through fresh connections that the kernel
    spreads over both workers (one SO_REUSEPORT socket each), all decrypt on either worker. A worker that has
    not yet applied the rotation from the change log (docs/operations.md bounds how long) may still seal with
    version 1; the long metadata TTL shows that the change log, not the TTL, ends that.
    ``tests/app/api/test_two_workers.py`` pins the stale-worker case in process."""
    server = await asyncio.to_thread(
        start_server,
        tmp_path / "data",
        tmp_path / "log",
        KEYSTREAM_WORKERS="2",
        KEYSTREAM_KEY_METADATA_TTL="600",
    )
    fresh = {"Connection": "close"}
    try:
        async with httpx.AsyncClient(base_url=server.url, headers=server.auth, timeout=30) as client:
            assert (await client.post("/v1/keys", json={"name": "rot"})).status_code == 201
            # Concurrent fresh connections: one busy worker makes the kernel hand the next one to the other.
            warm = await asyncio.gather(
                *(client.post("/v1/keys/rot/encrypt", content=b"warm", headers=fresh) for _ in range(16))
            )
            assert {response.headers["Keystream-Key-Version"] for response in warm} == {"1"}
            assert (await client.post("/v1/keys/rot/rotate", headers=fresh)).json()["latest_version"] == 2
            # Without key_version, the rotating worker seals with version 2, a stale one still with 1.
            by_version: dict[str, list[tuple[bytes, bytes]]] = {"1": [], "2": []}
            for round_ in range(30):
                plaintexts = [b"round %d.%d " % (round_, n) * 1000 for n in range(4)]
                sealed = await asyncio.gather(
                    *(client.post("/v1/keys/rot/encrypt", content=text, headers=fresh) for text in plaintexts)
                )
                for plaintext, response in zip(plaintexts, sealed, strict=True):
                    by_version[response.headers["Keystream-Key-Version"]].append(
                        (plaintext, response.content)
                    )
                if len(by_version["2"]) >= 8:
                    break
            # Coherent caches: a 600 s metadata TTL no longer keeps a worker on version 1 for long.
            assert len(by_version["2"]) >= 8, f"{len(by_version['1'])} seals still used version 1"
            sealed_pairs = (by_version["1"] + by_version["2"]) * 2
            opened = await asyncio.gather(
                *(
                    client.post("/v1/keys/rot/decrypt", content=ciphertext, headers=fresh)
                    for _, ciphertext in sealed_pairs
                )
            )
            failures = [
                (response.status_code, response.text[:120])
                for (plaintext, _), response in zip(sealed_pairs, opened, strict=True)
                if response.status_code != 200 or response.content != plaintext
            ]
            assert failures == []
    finally:
        await asyncio.to_thread(stop_server, server)
