"""The cost of the seal: an HSM unwrap with a cold key cache, and a warm encrypt, pkcs11 seal vs file seal.

1. **Unwrap, cold.** A SQLite keystore under each seal (``file``; ``pkcs11`` on a SoftHSM2 token made in the
   work directory) holds ``--keys`` keys. Each ``KeyStore.key_material`` call is what a key cache miss costs
   (the database read and the unwrap; the store caches nothing), and ``Seal.unwrap`` alone is the seal's
   part. p50/p99 over every call, in microseconds.
2. **Encrypt, warm.** One 1-worker server per seal (``keystream-server serve``; the pkcs11 one after
   ``operator init``), a key created and used once, then ``--requests`` sequential 1 KiB sealed encrypts on
   one kept-alive connection, alternating rounds between the servers. A warm encrypt never calls the seal, so
   the two should agree: the check that sealing moved no cost onto the hot path.
3. **Master key rotation.** A SQLite keystore under the file seal holding ``--rotation-versions`` key
   versions (keys of 10 versions each); ``operator rotate-master``'s work (:class:`MasterRotation`: a new
   generation, every version rewrapped in batches of 500, the old generation retired), timed whole, and
   per 1,000 versions.

Prints and writes ``--out`` JSON with the CPU model and the load average before and after.

    python -m bench.bench_seal --keys 500 --requests 2000 --rounds 3 --out bench/results/seal.json
    python -m bench.bench_seal --rotation-only --rotation-versions 5000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from app.keystore import SqliteKeyStore
from app.keystore.generations import MasterRotation
from app.keystore.master import key_associated_data
from app.seal import FileSeal, Seal
from app.seal.pkcs11 import Pkcs11Seal
from bench.bench_aescore import cpu_model
from bench.service_process import MASTER_KEY, REPO, ROOT_TOKEN, Server, start_server, stop_server
from tests.softhsm import SoftHsmToken, make_token

KEY_LABEL = "keystream-master"
BODY = b"\x5a" * 1024


def percentiles(samples: list[float]) -> dict[str, float]:
    """p50, p99 and mean of ``samples`` (seconds) in microseconds."""
    ordered = sorted(samples)

    def pick(fraction: float) -> float:
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]

    return {
        "p50_us": round(pick(0.50) * 1e6, 1),
        "p99_us": round(pick(0.99) * 1e6, 1),
        "mean_us": round(statistics.fmean(ordered) * 1e6, 1),
        "n": len(ordered),
    }


def unwrap_costs(seal: Seal, data: Path, keys: int) -> dict[str, Any]:
    """Time ``key_material`` (a cold cache miss) and ``Seal.unwrap`` for ``keys`` keys under ``seal``."""
    data.mkdir(mode=0o700)
    store = SqliteKeyStore(data / "keystore.db", seal)
    try:
        names = [f"key-{index:04d}" for index in range(keys)]
        for name in names:
            store.create_key(name)
        blobs = {key.info.name: key.wrapped[0] for key in store.export_keys()}
        miss: list[float] = []
        for name in names:
            start = time.perf_counter()
            store.key_material(name, 1)
            miss.append(time.perf_counter() - start)
        unwrap: list[float] = []
        for name in names:
            associated_data = key_associated_data(name, 1)
            start = time.perf_counter()
            seal.unwrap(blobs[name], associated_data)
            unwrap.append(time.perf_counter() - start)
    finally:
        store.close()
    return {"key_material_cold": percentiles(miss), "seal_unwrap": percentiles(unwrap)}


def rotation_cost(data: Path, versions: int) -> dict[str, Any]:
    """Seconds to rotate the master key of a SQLite keystore (file seal) holding ``versions`` key versions."""
    data.mkdir(mode=0o700)
    store = SqliteKeyStore(data / "keystore.db", FileSeal(os.urandom(32)))
    try:
        for index in range(0, versions, 10):
            name = f"key-{index // 10:05d}"
            store.create_key(name)
            for _ in range(min(10, versions - index) - 1):
                store.rotate_key(name)
        started = time.perf_counter()
        rotation = MasterRotation(store)
        rotation.begin()
        status = rotation.run()
        seconds = time.perf_counter() - started
    finally:
        store.close()
    assert status is not None and status.rewrapped == versions
    return {
        "versions": versions,
        "batch_size": rotation.batch_size,
        "seconds": round(seconds, 3),
        "seconds_per_1000_versions": round(seconds * 1000 / versions, 3),
    }


def admin(env: dict[str, str], *args: str) -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("KEYSTREAM_")}
    environment.update(env)
    subprocess.run([sys.executable, "-m", "app.admin", *args], cwd=REPO, env=environment, check=True)


def warm_encrypts(server: Server, requests: int) -> list[float]:
    """``requests`` sequential 1 KiB encrypts on one connection, after 200 to warm caches and the loop."""
    samples: list[float] = []
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {ROOT_TOKEN}"}) as client:
        for index in range(200 + requests):
            start = time.perf_counter()
            response = client.post("/v1/keys/bench/encrypt", content=BODY)
            elapsed = time.perf_counter() - start
            response.raise_for_status()
            if index >= 200:
                samples.append(elapsed)
    return samples


def start_servers(work: Path, token: SoftHsmToken) -> dict[str, Server]:
    pkcs11_env = {**token.environment(KEY_LABEL), "KEYSTREAM_DATA_DIR": str(work / "srv-pkcs11")}
    admin(pkcs11_env, "operator", "init")
    servers = {
        "file": start_server(work / "srv-file", work / "srv-file.log", KEYSTREAM_MASTER_KEY=MASTER_KEY),
        "pkcs11": start_server(work / "srv-pkcs11", work / "srv-pkcs11.log", settings=pkcs11_env),
    }
    for server in servers.values():
        with server.client() as client:
            client.post("/v1/keys", json={"name": "bench"}).raise_for_status()
    return servers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=500, help="keys unwrapped per seal (default 500)")
    parser.add_argument("--requests", type=int, default=2000, help="warm encrypts per round (default 2000)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per server (default 3)")
    parser.add_argument(
        "--rotation-versions", type=int, default=1000, help="key versions a master key rotation rewraps"
    )
    parser.add_argument("--rotation-only", action="store_true", help="measure the master key rotation only")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here too")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    result: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpu": cpu_model(),
        "cpus": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "load_average_before": [round(value, 2) for value in load_before],
    }
    with tempfile.TemporaryDirectory(prefix="bench-seal-") as directory:
        result["master_key_rotation_file_sqlite"] = rotation_cost(
            Path(directory) / "rotation", args.rotation_versions
        )
    if not args.rotation_only:
        result |= seal_costs(args)
    result["load_average_after"] = [round(value, 2) for value in os.getloadavg()]
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


def seal_costs(args: argparse.Namespace) -> dict[str, Any]:
    """Parts 1 and 2: the cold unwrap and the warm encrypt, file seal vs pkcs11 seal."""
    with tempfile.TemporaryDirectory(prefix="bench-seal-") as directory:
        work = Path(directory)
        token = make_token(work / "hsm")
        os.environ["SOFTHSM2_CONF"] = str(token.conf)  # before this process first loads the module
        hsm = Pkcs11Seal(str(token.library), token.label, token.pin, KEY_LABEL, create_key=True)
        try:
            unwrap = {
                "file": unwrap_costs(FileSeal(os.urandom(32)), work / "unwrap-file", args.keys),
                "pkcs11": unwrap_costs(hsm, work / "unwrap-pkcs11", args.keys),
            }
        finally:
            hsm.close()
        servers = start_servers(work, token)
        try:
            samples: dict[str, list[float]] = {name: [] for name in servers}
            for _ in range(args.rounds):
                for name, server in servers.items():
                    samples[name] += warm_encrypts(server, args.requests)
        finally:
            for server in servers.values():
                stop_server(server)
    encrypt = {
        name: {**percentiles(values), "req_per_s_one_connection": round(len(values) / sum(values))}
        for name, values in samples.items()
    }
    return {
        "hsm": "SoftHSM2 (software PKCS#11 token), AES-256-GCM in the token",
        "unwrap_cold": unwrap,
        "encrypt_1kib_warm": encrypt,
    }


if __name__ == "__main__":
    raise SystemExit(main())
