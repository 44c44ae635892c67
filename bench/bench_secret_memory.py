"""What keeping key material in locked memory costs: a key cache miss (unwrap, insert), a warm 1 KiB encrypt.

In-process, on the aesni backend, a SQLite keystore under a file seal:

* **miss**: a :class:`~app.keycache.KeyCache` of one entry alternating between two versions of a key, so every
  lookup reads the wrapped version, unwraps it with the seal, expands it, inserts it and evicts (and so
  zeroes) the other one. Metadata stays cached.
* **warm encrypt**: a cache hit, then one 1 KiB sealed message with the small-body route's crypto
  (:func:`app.formats.sealed.seal_many`).

``python -m bench.bench_secret_memory [--iterations N]`` prints microseconds per operation (median of 5 runs)
with the CPU model and the load average. Run with ``PYTHONPATH=<checkout>`` to measure another checkout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import aescore
from app.formats.sealed import seal_many
from app.keycache import KeyCache
from app.keystore import SqliteKeyStore


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def _per_call_us(function: object, iterations: int, runs: int = 5) -> float:
    """Median over ``runs`` of the mean microseconds per call of ``function()``."""
    assert callable(function)
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(iterations):
            function()
        samples.append((time.perf_counter() - start) / iterations * 1e6)
    return statistics.median(samples)


def run(iterations: int) -> dict[str, object]:
    backend = aescore.get_backend("aesni")
    with tempfile.TemporaryDirectory(prefix="bench-secret-memory-") as directory:
        store = SqliteKeyStore(Path(directory) / "keystore.db", os.urandom(32))
        try:
            store.create_key("bench")
            store.rotate_key("bench")
            cache = KeyCache(store, max_entries=1, metadata_ttl=3600)
            versions = iter(range(10**9))

            def miss() -> None:
                cache.resolve("bench", 1 + next(versions) % 2, backend)

            warm = KeyCache(store, max_entries=16, metadata_ttl=3600)
            plaintext = os.urandom(1024)

            def encrypt() -> None:
                key = warm.resolve("bench", None, backend)
                seal_many(key.material, key.parameters, (plaintext,), (b"",), backend)

            encrypt()
            results = {
                "miss_us": round(_per_call_us(miss, iterations), 2),
                "warm_encrypt_1kib_us": round(_per_call_us(encrypt, iterations * 4), 2),
            }
            assert cache.misses >= iterations and warm.misses == 1
        finally:
            store.close()
    return {
        **results,
        "iterations": iterations,
        "cpu": _cpu_model(),
        "load_average": [round(value, 2) for value in os.getloadavg()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=2000)
    args = parser.parse_args()
    print(json.dumps(run(args.iterations), indent=2))


if __name__ == "__main__":
    main()
