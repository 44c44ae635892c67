"""Batch throughput before/after: two checkouts' servers side by side under the same wrk client.

Starts one Keystream server (1 worker, defaults) per checkout given (``--checkout NAME=REPO[:PYTHON]``),
creates one aes256 key of the chosen ``--scheme`` (``ctr-hmac`` by default, or ``gcm``) in each, checks that a
batch round-trips, then runs wrk (``-t1``, a Lua script POSTing
a fixed body) on 100 x 1 KiB batch encrypt and decrypt at 1 and 16 connections, alternating servers within
each round, and reports medians (min-max) of the rounds as batch requests/s and items/s. Writes JSON next to
a Markdown table when ``--out`` is given.

    python -m bench.bench_batch --checkout before=/work/main --checkout after=. --rounds 3 --seconds 5
    python -m bench.bench_batch --checkout ctr-hmac=. --checkout gcm=.@gcm   # two schemes, one checkout

A checkout spec may end in ``@SCHEME`` to override ``--scheme`` for that server; ``@aes256-siv`` makes that
server's key an ``aes256-siv`` key instead (deterministic AES-SIV, no scheme):

    python -m bench.bench_batch --checkout sealed=. --checkout siv=.@aes256-siv
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.service_process import MASTER_KEY, ROOT_TOKEN, free_port

ITEMS = 100
ITEM_BYTES = 1024
#: The ``@SCHEME`` that makes a server's key an ``aes256-siv`` key.
DETERMINISTIC = "aes256-siv"
WORKLOADS = [("encrypt", 1), ("encrypt", 16), ("decrypt", 1), ("decrypt", 16)]
LUA = """wrk.method = "POST"
wrk.headers["Authorization"] = "Bearer {token}"
wrk.headers["Content-Type"] = "application/json"
local file = io.open("{body}", "rb")
wrk.body = file:read("*a")
file:close()
"""


def start(repo: Path, python: str, data_dir: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A 1-worker server of the checkout at ``repo`` on a free port; returns (process, url)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEYSTREAM_")}
    env.update(
        KEYSTREAM_DATA_DIR=str(data_dir),
        KEYSTREAM_PORT=str(port),
        KEYSTREAM_HOST="127.0.0.1",
        KEYSTREAM_MASTER_KEY=MASTER_KEY,
        KEYSTREAM_ROOT_TOKEN=ROOT_TOKEN,
        KEYSTREAM_LOG_LEVEL="warning",
        KEYSTREAM_WORKERS="1",
    )
    with log.open("wb") as handle:
        process = subprocess.Popen(
            [python, "-c", "from app.server import serve; serve()"],
            cwd=repo,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server at {repo} exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"server at {repo} did not start: {log.read_text()[-2000:]}")


def prepare(url: str, work: Path, name: str, scheme: str) -> dict[str, Path]:
    """Create the key (``scheme`` ``aes256-siv``: a key of that type), write the encrypt and decrypt bodies
    and Lua scripts; check the round trip."""
    auth = {"Authorization": f"Bearer {ROOT_TOKEN}"}
    with httpx.Client(base_url=url, headers=auth, timeout=60) as client:
        key = {"name": "bench", "type": "aes256", "scheme": scheme}
        if scheme == DETERMINISTIC:
            key = {"name": "bench", "type": DETERMINISTIC}
        client.post("/v1/keys", json=key).raise_for_status()
        plaintexts = [os.urandom(ITEM_BYTES) for _ in range(ITEMS)]
        encrypt_body = {"items": [{"plaintext": base64.b64encode(p).decode()} for p in plaintexts]}
        sealed = client.post("/v1/keys/bench/encrypt/batch", json=encrypt_body)
        sealed.raise_for_status()
        decrypt_body = {"items": [{"ciphertext": r["ciphertext"]} for r in sealed.json()["results"]]}
        opened = client.post("/v1/keys/bench/decrypt/batch", json=decrypt_body)
        opened.raise_for_status()
        if [base64.b64decode(r["plaintext"]) for r in opened.json()["results"]] != plaintexts:
            raise RuntimeError(f"{name}: batch round trip returned other plaintexts")
    scripts = {}
    for operation, body in (("encrypt", encrypt_body), ("decrypt", decrypt_body)):
        body_path = work / f"{name}-{operation}.json"
        body_path.write_text(json.dumps(body))
        script = work / f"{name}-{operation}.lua"
        script.write_text(LUA.format(token=ROOT_TOKEN, body=body_path))
        scripts[operation] = script
    return scripts


def run_wrk(url: str, operation: str, script: Path, connections: int, seconds: int) -> float:
    """Batch requests/s of one wrk run (fails on any non-2xx answer or socket error)."""
    output = subprocess.run(
        [
            "wrk",
            "-t1",
            f"-c{connections}",
            f"-d{seconds}s",
            "-s",
            str(script),
            f"{url}/v1/keys/bench/{operation}/batch",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    if "Non-2xx" in output or "Socket errors" in output:
        raise RuntimeError(f"wrk saw errors:\n{output}")
    match = re.search(r"Requests/sec:\s+([\d.]+)", output)
    if match is None:
        raise RuntimeError(f"no Requests/sec in wrk output:\n{output}")
    return float(match.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checkout", action="append", required=True, help="NAME=REPO[:PYTHON][@SCHEME]")
    parser.add_argument(
        "--scheme",
        default="ctr-hmac",
        choices=("ctr-hmac", "gcm", DETERMINISTIC),
        help=f"the key's scheme ({DETERMINISTIC}: a key of that type)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--out", type=Path, help="write results JSON here (and a .md table next to it)")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed (Debian: apt-get install wrk)")
    work = Path(tempfile.mkdtemp(prefix="bench-batch-"))
    servers: dict[str, tuple[subprocess.Popen[bytes], str, dict[str, Path]]] = {}
    try:
        for spec in args.checkout:
            name, _, location = spec.partition("=")
            location, _, scheme = location.partition("@")
            repo_text, _, python = location.partition(":")
            repo = Path(repo_text).resolve()
            python = python or str(repo / ".venv" / "bin" / "python")
            (work / name).mkdir()
            process, url = start(repo, python, work / name, work / f"{name}.log")
            servers[name] = (process, url, prepare(url, work, name, scheme or args.scheme))
        samples: dict[str, dict[str, list[float]]] = {name: {} for name in servers}
        for _ in range(args.rounds):
            for operation, connections in WORKLOADS:
                for name, (_, url, scripts) in servers.items():
                    rate = run_wrk(url, operation, scripts[operation], connections, args.seconds)
                    samples[name].setdefault(f"{operation} c{connections}", []).append(rate)
        rows = ["| workload | " + " | ".join(f"{name} req/s | {name} items/s" for name in servers) + " |"]
        rows.append("|---|" + "---|---|" * len(servers))
        for workload in samples[next(iter(servers))]:
            cells = []
            for name in servers:
                values = samples[name][workload]
                median = statistics.median(values)
                cells.append(f"{median:,.0f} ({min(values):,.0f}-{max(values):,.0f}) | {median * ITEMS:,.0f}")
            rows.append(f"| 100 x 1 KiB batch {workload} | " + " | ".join(cells) + " |")
        table = "\n".join(rows)
        print(table)
        if args.out is not None:
            args.out.write_text(
                json.dumps({"items": ITEMS, "item_bytes": ITEM_BYTES, "samples": samples}, indent=1)
            )
            args.out.with_suffix(".md").write_text(table + "\n")
    finally:
        for process, _, _ in servers.values():
            process.terminate()
            process.wait(timeout=15)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
