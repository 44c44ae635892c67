"""Keystream against OpenBao's Transit engine, side by side, both at their defaults, one client.

Starts OpenBao's dev server (``bao server -dev``, in-memory storage, Transit enabled, one ``aes256-gcm96``
key) and a Keystream server (``app.server.serve`` with its defaults: every usable CPU, SQLite, sealed
``ctr-hmac``) on 127.0.0.1, checks that every request body used below round-trips on both, then runs the
workloads in alternating rounds (Keystream, OpenBao, Keystream, ...) with the same client:

* 1 KiB encrypt and decrypt: Keystream's streaming routes (binary body) against Transit's JSON routes;
* 1 KiB encrypt as a Keystream batch of one item (the issue's "batch of 1" target);
* 100 x 1 KiB batch encrypt and decrypt, at 16 connections (and Keystream at 1 connection, for the
  "requests/s must not fall as concurrency rises" target);
* a 16 MiB encrypt uploaded by curl with its defaults (``Expect: 100-continue`` included);
* the same Transit request bodies, byte for byte, sent to both servers' ``/v1/transit/`` (1 KiB encrypt and
  decrypt, 100 x 1 KiB batches): OpenBao's key ``bench-transit`` is made exportable and its material imported
  into Keystream (``KEYSTREAM_ALLOW_KEY_IMPORT``, which changes no request path), so OpenBao's ciphertexts
  are the decrypt bodies of both.

The 1 KiB encrypt and decrypt also run against two floors (:mod:`bench.floor_app`): a raw ASGI app served by
Keystream's own server stack (the same uvicorn options, supervisor and number of workers) and, when
installed, nginx answering ``return 200`` with 1 KiB. Keystream is reported as a fraction of the raw-ASGI
floor's requests/s, and each server's CPU per request in microseconds (``--no-floors`` leaves them out).

``--baseline CHECKOUT`` adds a second Keystream served from another built checkout (``make build`` there, or
``python setup.py build_ext --inplace`` with this venv's Python), for a before/after in the same run: it
starts first, on a keystore it creates (key ``bench`` and the imported ``bench-transit``); the keystore is
then copied (SQLite's backup) to the Keystream under test, which migrates the copy to its own schema, so both
hold the same keys and every Keystream request body is valid on both. Its rows are ``keystream-before``;
the Markdown gets a table of before and after.

wrk (``-t1``, a Lua script that POSTs a fixed body) drives the small workloads; curl the upload. Each
figure is the median of the rounds with its min-max; the servers' CPU (user + system, the process and its
children, as % of one core) and RSS (sum over the process tree, after the run) are recorded per run. Writes
``--out`` JSON, a Markdown table next to it (``.md``) and a plot (``.png``).

    python -m bench.bench_peer --openbao /work/openbao-bin/bao --rounds 3 --seconds 10 \\
        --out bench/results/peer.json

Build OpenBao as docs/benchmarks.md says (``go build`` from its public repository).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench import floor_app
from bench.bench_aescore import cpu_model
from bench.service_process import REPO, ROOT_TOKEN, Server, free_port, start_server, stop_server

ITEM_BYTES = 1024
BATCH_ITEMS = 100
UPLOAD_BYTES = 16 * 1024 * 1024
BAO_TOKEN = "root"
#: The workloads also run against the floors (:mod:`bench.floor_app`).
FLOOR_WORKLOADS = ("1 KiB encrypt", "1 KiB decrypt")
KEY = "bench"
#: The key both servers hold with the same material, for the Transit rows.
TRANSIT_KEY = "bench-transit"
LUA = """wrk.method = "POST"
wrk.headers["{auth_header}"] = "{auth_value}"
wrk.headers["Content-Type"] = "{content_type}"
local file = io.open("{body}", "rb")
wrk.body = file:read("*a")
file:close()
"""


@dataclass
class Target:
    """One server under test: where it answers, how to authenticate, and its process (for CPU and RSS)."""

    name: str
    url: str
    auth_header: str
    auth_value: str
    process: psutil.Process

    def headers(self) -> dict[str, str]:
        return {self.auth_header: self.auth_value}


@dataclass
class Workload:
    """A request repeated by wrk (or curl, for ``upload``): method POST, a fixed body, a route per target."""

    name: str
    unit: str  # "req/s", "items/s" or "MiB/s"
    per_request: int  # items (or MiB) per request, to turn req/s into the unit
    connections: int
    bodies: dict[str, tuple[str, str, Path]] = field(default_factory=dict)  # target -> (path, type, body)


def tree_cpu_seconds(process: psutil.Process) -> float:
    """User + system CPU seconds of ``process`` and its live children."""
    total = 0.0
    for member in [process, *process.children(recursive=True)]:
        try:
            times = member.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def tree_rss_mib(process: psutil.Process) -> float:
    """Resident memory of ``process`` and its children, MiB."""
    total = 0
    for member in [process, *process.children(recursive=True)]:
        try:
            total += member.memory_info().rss
        except psutil.Error:
            continue
    return total / 2**20


def start_openbao(binary: Path, work: Path) -> tuple[subprocess.Popen[bytes], Target]:
    """OpenBao's dev server on a free port with Transit enabled and one aes256-gcm96 key named ``bench``."""
    port = free_port()
    home = work / "bao-home"  # the dev server writes a token helper file into $HOME
    home.mkdir()
    log = (work / "openbao.log").open("wb")
    process = subprocess.Popen(
        [
            str(binary),
            "server",
            "-dev",
            f"-dev-root-token-id={BAO_TOKEN}",
            f"-dev-listen-address=127.0.0.1:{port}",
        ],
        env={"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    target = Target("openbao", url, "X-Vault-Token", BAO_TOKEN, psutil.Process(process.pid))
    deadline = time.monotonic() + 60
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"openbao exited: {(work / 'openbao.log').read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/v1/sys/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError("openbao did not become healthy in 60 s")
        time.sleep(0.2)
    with httpx.Client(base_url=url, headers=target.headers(), timeout=30) as client:
        client.post("/v1/sys/mounts/transit", json={"type": "transit"}).raise_for_status()
        client.post(f"/v1/transit/keys/{KEY}", json={"type": "aes256-gcm96"}).raise_for_status()
        client.post(
            f"/v1/transit/keys/{TRANSIT_KEY}", json={"type": "aes256-gcm96", "exportable": True}
        ).raise_for_status()
    return process, target


def start_keystream(work: Path, name: str = "keystream", repo: Path = REPO) -> tuple[Server, Target]:
    """Keystream from ``repo`` at its defaults (workers = usable CPUs), its data in ``work / name``, with one
    aes256 key named ``bench`` (created unless the data directory already holds it)."""
    data = work / name
    data.mkdir(exist_ok=True)
    workers = str(len(os.sched_getaffinity(0)))
    server = start_server(
        data,
        work / f"{name}.log",
        repo=repo,
        KEYSTREAM_WORKERS=workers,
        KEYSTREAM_ALLOW_KEY_IMPORT="true",
    )
    target = Target(
        name, server.url, "Authorization", f"Bearer {ROOT_TOKEN}", psutil.Process(server.process.pid)
    )
    with server.client() as client:
        if client.get(f"/v1/keys/{KEY}").status_code == 404:
            client.post("/v1/keys", json={"name": KEY, "type": "aes256"}).raise_for_status()
    return server, target


def copy_keystore(source: Path, destination: Path) -> None:
    """Copy the running baseline's SQLite keystore to ``destination`` (one consistent snapshot, 0600)."""
    destination.mkdir(mode=0o700, exist_ok=True)
    target = destination / "keystore.db"
    with sqlite3.connect(source / "keystore.db") as src, sqlite3.connect(target) as dst:
        src.backup(dst)
    target.chmod(0o600)


def check_baseline(baseline: Target, workloads: list[Workload]) -> None:
    """Give the baseline every Keystream body it answers 2xx (same keys; the upload by curl). A baseline
    without the Transit API (a checkout from before it: 404 to a Transit encrypt) runs no Transit workload;
    any other refusal stops the run."""
    with httpx.Client(base_url=baseline.url, headers=baseline.headers(), timeout=120) as client:
        probe = client.post(f"/v1/transit/encrypt/{TRANSIT_KEY}", json={"plaintext": b64(b"probe")})
        transit = probe.status_code != 404
        if not transit:
            print("the baseline has no Transit API: it runs no Transit workload", file=sys.stderr)
        for workload in workloads:
            if "keystream" not in workload.bodies:
                continue
            route, content_type, body = workload.bodies["keystream"]
            if route.startswith("/v1/transit/") and not transit:
                continue
            if workload.unit == "MiB/s":
                curl_post(baseline, route, content_type, body, body.with_suffix(".baseline"))
            else:
                answer = client.post(route, content=body.read_bytes(), headers={"Content-Type": content_type})
                if answer.status_code // 100 != 2:
                    raise RuntimeError(f"the baseline answered {answer.status_code} to {workload.name}")
            workload.bodies[baseline.name] = workload.bodies["keystream"]


def share_transit_key(keystream: Target, openbao: Target) -> None:
    """Import OpenBao's ``bench-transit`` version 1 into Keystream (docs/transit-compat.md, migrating)."""
    with httpx.Client(base_url=openbao.url, headers=openbao.headers(), timeout=30) as bao:
        exported = bao.get(f"/v1/transit/export/encryption-key/{TRANSIT_KEY}/1")
        exported.raise_for_status()
        material = exported.json()["data"]["keys"]["1"]
    with httpx.Client(base_url=keystream.url, headers=keystream.headers(), timeout=30) as ks:
        ks.post(f"/v1/keys/{TRANSIT_KEY}/import", json={"key": material}).raise_for_status()


def start_floors(work: Path, workers: int) -> tuple[list[subprocess.Popen[bytes]], list[Target]]:
    """The raw ASGI floor with ``workers`` workers and, when installed, nginx with as many; their targets."""
    processes: list[subprocess.Popen[bytes]] = []
    targets: list[Target] = []
    port = free_port()
    log = work / "floor.log"
    with log.open("wb") as handle:
        raw = subprocess.Popen(
            [sys.executable, "-m", "bench.floor_app", "--port", str(port), "--workers", str(workers)],
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
    processes.append(raw)
    url = f"http://127.0.0.1:{port}"
    floor_app.wait_until_answering(url + "/", raw, log)
    targets.append(Target("raw-asgi", url, "Authorization", "Bearer floor", psutil.Process(raw.pid)))
    nginx_port = free_port()
    nginx = floor_app.start_nginx(work, nginx_port, workers)
    if nginx is not None:
        processes.append(nginx)
        nginx_url = f"http://127.0.0.1:{nginx_port}"
        targets.append(Target("nginx", nginx_url, "Authorization", "Bearer floor", psutil.Process(nginx.pid)))
    return processes, targets


def add_floor_bodies(workloads: list[Workload], floors: list[Target]) -> None:
    """The floors get Keystream's 1 KiB encrypt and decrypt requests, byte for byte (they ignore the path)."""
    for workload in workloads:
        if workload.name in FLOOR_WORKLOADS:
            for floor in floors:
                workload.bodies[floor.name] = workload.bodies["keystream"]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def prepare(keystream: Target, openbao: Target, work: Path) -> list[Workload]:
    """Write every body and check that each one round-trips on its server."""
    item = os.urandom(ITEM_BYTES)
    items = [os.urandom(ITEM_BYTES) for _ in range(BATCH_ITEMS)]
    octets = "application/octet-stream"
    js = "application/json"

    def write(name: str, data: bytes) -> Path:
        path = work / name
        path.write_bytes(data)
        return path

    ks = httpx.Client(base_url=keystream.url, headers=keystream.headers(), timeout=120)
    bao = httpx.Client(base_url=openbao.url, headers=openbao.headers(), timeout=120)
    with ks, bao:
        # Keystream, streaming 1 KiB.
        sealed = ks.post(f"/v1/keys/{KEY}/encrypt", content=item, headers={"Content-Type": octets})
        sealed.raise_for_status()
        opened = ks.post(f"/v1/keys/{KEY}/decrypt", content=sealed.content, headers={"Content-Type": octets})
        check(opened.content == item, "keystream 1 KiB stream")
        # Keystream, batches of 100 and of 1.
        encrypt_batch = {"items": [{"plaintext": b64(p)} for p in items]}
        results = ks.post(f"/v1/keys/{KEY}/encrypt/batch", json=encrypt_batch).json()["results"]
        decrypt_batch = {"items": [{"ciphertext": r["ciphertext"]} for r in results]}
        back = ks.post(f"/v1/keys/{KEY}/decrypt/batch", json=decrypt_batch).json()["results"]
        check([base64.b64decode(r["plaintext"]) for r in back] == items, "keystream batch")
        one = {"items": [{"plaintext": b64(item)}]}
        single = ks.post(f"/v1/keys/{KEY}/encrypt/batch", json=one).json()["results"][0]["ciphertext"]
        single_back = ks.post(f"/v1/keys/{KEY}/decrypt/batch", json={"items": [{"ciphertext": single}]})
        check(base64.b64decode(single_back.json()["results"][0]["plaintext"]) == item, "keystream batch of 1")
        # OpenBao, one value and a batch of 100.
        value = bao.post(f"/v1/transit/encrypt/{KEY}", json={"plaintext": b64(item)}).json()["data"]
        plain = bao.post(f"/v1/transit/decrypt/{KEY}", json={"ciphertext": value["ciphertext"]}).json()
        check(base64.b64decode(plain["data"]["plaintext"]) == item, "openbao 1 KiB")
        bao_batch = {"batch_input": [{"plaintext": b64(p)} for p in items]}
        bao_sealed = bao.post(f"/v1/transit/encrypt/{KEY}", json=bao_batch).json()["data"]["batch_results"]
        bao_open_body = {"batch_input": [{"ciphertext": r["ciphertext"]} for r in bao_sealed]}
        bao_open = bao.post(f"/v1/transit/decrypt/{KEY}", json=bao_open_body).json()["data"]["batch_results"]
        check([base64.b64decode(r["plaintext"]) for r in bao_open] == items, "openbao batch")
        # The 16 MiB upload: binary for Keystream, base64 in JSON for Transit (its only form).
        # curl, not httpx: Keystream answers while it still reads the body, and httpx sends the whole body
        # before it reads anything, so a large body deadlocks (docs/service-api.md, full duplex).
        upload = os.urandom(UPLOAD_BYTES)
        upload_path = write("ks-16m.bin", upload)
        sealed_path, opened_path = work / "ks-16m.sealed", work / "ks-16m.opened"
        curl_post(keystream, f"/v1/keys/{KEY}/encrypt", octets, upload_path, sealed_path)
        curl_post(keystream, f"/v1/keys/{KEY}/decrypt", octets, sealed_path, opened_path)
        check(opened_path.read_bytes() == upload, "keystream 16 MiB")
        bao_big = bao.post(f"/v1/transit/encrypt/{KEY}", json={"plaintext": b64(upload)}).json()["data"]
        bao_big_back = bao.post(f"/v1/transit/decrypt/{KEY}", json={"ciphertext": bao_big["ciphertext"]})
        check(base64.b64decode(bao_big_back.json()["data"]["plaintext"]) == upload, "openbao 16 MiB")
        # The Transit rows: OpenBao's ciphertexts under the shared key, opened by both servers.
        shared_enc, shared_dec = f"/v1/transit/encrypt/{TRANSIT_KEY}", f"/v1/transit/decrypt/{TRANSIT_KEY}"
        shared_one = bao.post(shared_enc, json={"plaintext": b64(item)}).json()["data"]["ciphertext"]
        shared_sealed = bao.post(shared_enc, json=bao_batch).json()["data"]["batch_results"]
        shared_open_body = {"batch_input": [{"ciphertext": r["ciphertext"]} for r in shared_sealed]}
        for client, name in ((ks, "keystream"), (bao, "openbao")):
            mine = client.post(shared_enc, json={"plaintext": b64(item)}).json()["data"]["ciphertext"]
            for ciphertext in (shared_one, mine):
                back_one = client.post(shared_dec, json={"ciphertext": ciphertext}).json()["data"][
                    "plaintext"
                ]
                check(base64.b64decode(back_one) == item, f"{name} Transit 1 KiB")
            back_many = client.post(shared_dec, json=shared_open_body).json()["data"]["batch_results"]
            check([base64.b64decode(r["plaintext"]) for r in back_many] == items, f"{name} Transit batch")

    enc, dec = f"/v1/keys/{KEY}/encrypt", f"/v1/keys/{KEY}/decrypt"
    t_enc, t_dec = f"/v1/transit/encrypt/{KEY}", f"/v1/transit/decrypt/{KEY}"
    workloads = [
        Workload("1 KiB encrypt", "req/s", 1, 16),
        Workload("1 KiB decrypt", "req/s", 1, 16),
        Workload("1 KiB encrypt, batch of 1", "req/s", 1, 16),
        Workload("100 x 1 KiB batch encrypt", "items/s", BATCH_ITEMS, 16),
        Workload("100 x 1 KiB batch decrypt", "items/s", BATCH_ITEMS, 16),
        Workload("100 x 1 KiB batch encrypt, 1 connection", "items/s", BATCH_ITEMS, 1),
        Workload("100 x 1 KiB batch decrypt, 1 connection", "items/s", BATCH_ITEMS, 1),
        Workload("16 MiB encrypt, curl defaults", "MiB/s", UPLOAD_BYTES // 2**20, 1),
        Workload("Transit: 1 KiB encrypt, same body", "req/s", 1, 16),
        Workload("Transit: 1 KiB decrypt, same body", "req/s", 1, 16),
        Workload("Transit: 100 x 1 KiB batch encrypt, same body", "items/s", BATCH_ITEMS, 16),
        Workload("Transit: 100 x 1 KiB batch decrypt, same body", "items/s", BATCH_ITEMS, 16),
    ]
    by_name = {w.name: w for w in workloads}
    by_name["1 KiB encrypt"].bodies = {
        "keystream": (enc, octets, write("ks-1k.bin", item)),
        "openbao": (t_enc, js, write("bao-1k-enc.json", json.dumps({"plaintext": b64(item)}).encode())),
    }
    by_name["1 KiB decrypt"].bodies = {
        "keystream": (dec, octets, write("ks-1k.sealed", sealed.content)),
        "openbao": (
            t_dec,
            js,
            write("bao-1k-dec.json", json.dumps({"ciphertext": value["ciphertext"]}).encode()),
        ),
    }
    by_name["1 KiB encrypt, batch of 1"].bodies = {
        "keystream": (enc + "/batch", js, write("ks-batch1.json", json.dumps(one).encode())),
    }
    ks_enc_batch = write("ks-batch-enc.json", json.dumps(encrypt_batch).encode())
    ks_dec_batch = write("ks-batch-dec.json", json.dumps(decrypt_batch).encode())
    bao_enc_batch = write("bao-batch-enc.json", json.dumps(bao_batch).encode())
    bao_dec_batch = write("bao-batch-dec.json", json.dumps(bao_open_body).encode())
    for suffix in ("", ", 1 connection"):
        by_name["100 x 1 KiB batch encrypt" + suffix].bodies = {
            "keystream": (enc + "/batch", js, ks_enc_batch),
            "openbao": (t_enc, js, bao_enc_batch),
        }
        by_name["100 x 1 KiB batch decrypt" + suffix].bodies = {
            "keystream": (dec + "/batch", js, ks_dec_batch),
            "openbao": (t_dec, js, bao_dec_batch),
        }
    by_name["16 MiB encrypt, curl defaults"].bodies = {
        "keystream": (enc, octets, upload_path),
        "openbao": (t_enc, js, write("bao-16m.json", json.dumps({"plaintext": b64(upload)}).encode())),
    }
    shared_bodies = {
        "Transit: 1 KiB encrypt, same body": (shared_enc, "t-1k-enc.json", {"plaintext": b64(item)}),
        "Transit: 1 KiB decrypt, same body": (shared_dec, "t-1k-dec.json", {"ciphertext": shared_one}),
        "Transit: 100 x 1 KiB batch encrypt, same body": (shared_enc, "t-batch-enc.json", bao_batch),
        "Transit: 100 x 1 KiB batch decrypt, same body": (shared_dec, "t-batch-dec.json", shared_open_body),
    }
    for name, (route, filename, request) in shared_bodies.items():
        shared = write(filename, json.dumps(request).encode())
        by_name[name].bodies = {"keystream": (route, js, shared), "openbao": (route, js, shared)}
    return workloads


def curl_post(target: Target, route: str, content_type: str, body: Path, output: Path) -> None:
    """POST ``body`` with curl (which reads the answer while it sends) and write the answer to ``output``."""
    subprocess.run(
        [
            "curl",
            "-sS",
            "--fail",
            "-o",
            str(output),
            "-H",
            f"{target.auth_header}: {target.auth_value}",
            "-H",
            f"Content-Type: {content_type}",
            "--data-binary",
            f"@{body}",
            target.url + route,
        ],
        check=True,
    )


def check(ok: bool, what: str) -> None:
    if not ok:
        raise RuntimeError(f"{what}: the round trip returned other bytes")


def run_wrk(
    target: Target, route: str, content_type: str, body: Path, connections: int, seconds: int, work: Path
) -> tuple[float, float]:
    """(requests/s, p99 ms) of one wrk run; fails on any non-2xx answer or socket error."""
    script = work / f"{target.name}-{body.stem}.lua"
    script.write_text(
        LUA.format(
            auth_header=target.auth_header, auth_value=target.auth_value, content_type=content_type, body=body
        )
    )
    output = subprocess.run(
        [
            "wrk",
            "-t1",
            f"-c{connections}",
            f"-d{seconds}s",
            "--latency",
            "-s",
            str(script),
            target.url + route,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    if "Non-2xx" in output or "Socket errors" in output:
        raise RuntimeError(f"wrk saw errors against {target.name} {route}:\n{output}")
    rate = re.search(r"Requests/sec:\s+([\d.]+)", output)
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)\b", output)
    if rate is None or p99 is None:
        raise RuntimeError(f"unexpected wrk output:\n{output}")
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[p99.group(2)]
    return float(rate.group(1)), float(p99.group(1)) * scale


def run_curl(target: Target, route: str, content_type: str, body: Path, repeats: int) -> tuple[float, float]:
    """(requests/s, p99 ms ~ slowest) of ``repeats`` sequential curl uploads with curl's default headers."""
    times = []
    for _ in range(repeats):
        output = subprocess.run(
            [
                "curl",
                "-sS",
                "--fail",
                "-o",
                "/dev/null",
                "-w",
                "%{time_total}",
                "-H",
                f"{target.auth_header}: {target.auth_value}",
                "-H",
                f"Content-Type: {content_type}",
                "--data-binary",
                f"@{body}",
                target.url + route,
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        times.append(float(output))
    return len(times) / sum(times), max(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--openbao", type=Path, required=True, help="OpenBao's bao binary")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=10, help="duration of each wrk run")
    parser.add_argument("--uploads", type=int, default=5, help="16 MiB uploads per round and server")
    parser.add_argument("--out", type=Path, help="results JSON (a .md table and a .png plot next to it)")
    parser.add_argument(
        "--no-floors", action="store_true", help="leave out the raw-ASGI and nginx floors (bench.floor_app)"
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another built checkout of Keystream to run beside this one (before/after)",
    )
    args = parser.parse_args()
    if args.baseline is not None and not (args.baseline / "app" / "server.py").is_file():
        sys.exit(f"{args.baseline}: not a Keystream checkout")
    for tool in ("wrk", "curl"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed (Debian: apt-get install {tool})")
    if not os.access(args.openbao, os.X_OK):
        sys.exit(f"{args.openbao}: not an executable OpenBao binary (see docs/benchmarks.md to build one)")
    work = Path(tempfile.mkdtemp(prefix="bench-peer-"))
    bao_process: subprocess.Popen[bytes] | None = None
    server: Server | None = None
    baseline_server: Server | None = None
    floor_processes: list[subprocess.Popen[bytes]] = []
    try:
        bao_process, openbao = start_openbao(args.openbao, work)
        if args.baseline is not None:
            baseline_server, baseline = start_keystream(work, "keystream-before", args.baseline)
            share_transit_key(baseline, openbao)
            copy_keystore(work / "keystream-before", work / "keystream")
        server, keystream = start_keystream(work)
        targets = [keystream, openbao]
        if args.baseline is None:
            share_transit_key(keystream, openbao)
        workloads = prepare(keystream, openbao, work)
        if args.baseline is not None:
            check_baseline(baseline, workloads)
            targets.insert(1, baseline)
        if not args.no_floors:
            floor_processes, floors = start_floors(work, len(os.sched_getaffinity(0)))
            add_floor_bodies(workloads, floors)
            targets += floors
        samples: dict[str, dict[str, list[dict[str, float]]]] = {}
        for _ in range(args.rounds):
            for workload in workloads:
                for target in targets:
                    if target.name not in workload.bodies:
                        continue
                    route, content_type, body = workload.bodies[target.name]
                    cpu_before, wall_before = tree_cpu_seconds(target.process), time.monotonic()
                    if workload.unit == "MiB/s":
                        rate, p99 = run_curl(target, route, content_type, body, args.uploads)
                    else:
                        rate, p99 = run_wrk(
                            target, route, content_type, body, workload.connections, args.seconds, work
                        )
                    cpu = (tree_cpu_seconds(target.process) - cpu_before) / (time.monotonic() - wall_before)
                    samples.setdefault(workload.name, {}).setdefault(target.name, []).append(
                        {
                            "value": rate * workload.per_request,
                            "p99_ms": p99,
                            "cpu_percent": 100 * cpu,
                            "cpu_us_per_request": cpu / rate * 1e6,
                            "rss_mib": tree_rss_mib(target.process),
                        }
                    )
        result = summarise(workloads, samples, args)
        table = markdown(result)
        print(table)
        if args.out is not None:
            args.out.write_text(json.dumps(result, indent=1) + "\n")
            args.out.with_suffix(".md").write_text(table + "\n")
            plot(result, args.out.with_suffix(".png"))
    finally:
        for process in floor_processes:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
        for started in (server, baseline_server):
            if started is not None:
                stop_server(started)
        if bao_process is not None:
            bao_process.terminate()
            try:
                bao_process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                bao_process.kill()
        shutil.rmtree(work, ignore_errors=True)


def summarise(
    workloads: list[Workload], samples: dict[str, dict[str, list[dict[str, float]]]], args: argparse.Namespace
) -> dict[str, Any]:
    rows = []
    for workload in workloads:
        row: dict[str, Any] = {
            "workload": workload.name,
            "unit": workload.unit,
            "connections": workload.connections,
        }
        for target, runs in samples[workload.name].items():
            values = [run["value"] for run in runs]
            row[target] = {
                "median": statistics.median(values),
                "min": min(values),
                "max": max(values),
                "p99_ms": statistics.median(run["p99_ms"] for run in runs),
                "cpu_percent": statistics.median(run["cpu_percent"] for run in runs),
                "cpu_us_per_request": statistics.median(run["cpu_us_per_request"] for run in runs),
                "rss_mib": max(run["rss_mib"] for run in runs),
                "runs": runs,
            }
        if "openbao" in row:
            row["ratio"] = row["keystream"]["median"] / row["openbao"]["median"]
        if "raw-asgi" in row:
            row["of_raw_asgi"] = row["keystream"]["median"] / row["raw-asgi"]["median"]
        if "keystream-before" in row:
            before = row["keystream-before"]["median"]
            row["after_over_before"] = row["keystream"]["median"] / before
            if "openbao" in row:
                row["ratio_before"] = before / row["openbao"]["median"]
            if "raw-asgi" in row:
                row["of_raw_asgi_before"] = before / row["raw-asgi"]["median"]
        rows.append(row)
    baseline = None
    if args.baseline is not None:
        commit = subprocess.run(
            ["git", "-C", str(args.baseline), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        baseline = {"path": str(args.baseline), "commit": commit or "unknown"}
    return {
        "baseline": baseline,
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu_model(),
        "cores": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        # The interpreter serving Keystream and the raw-ASGI floor (this one): builds differ by 10-20%
        # (Debian's python3.11 against a plain --enable-shared build, for instance).
        "interpreter": os.path.realpath(sys.executable),
        "rounds": args.rounds,
        "seconds": args.seconds,
        "uploads": args.uploads,
        "client": "wrk -t1 --latency (curl for the upload), alternating rounds",
        "rows": rows,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"{result['cpu']}, {result['cores']} cores, {result['date']}; Keystream and the raw-ASGI floor on "
        f"Python {result['python']} ({result['interpreter']}); medians of {result['rounds']} rounds "
        f"(min-max); wrk -t1, {result['seconds']} s per run; server CPU in % of one core, RSS after the run.",
        "",
        "| workload | conns | OpenBao | Keystream | ratio | p99 ms (OpenBao / Keystream) "
        "| CPU % (OpenBao / Keystream) | RSS MiB (OpenBao / Keystream) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        ks = row["keystream"]
        bao = row.get("openbao")

        ratio = f"{row['ratio']:.2f}x" if "ratio" in row else "-"
        p99 = f"{bao['p99_ms']:.2f} / {ks['p99_ms']:.2f}" if bao else f"- / {ks['p99_ms']:.2f}"
        cpu = f"{bao['cpu_percent']:.0f} / {ks['cpu_percent']:.0f}" if bao else f"- / {ks['cpu_percent']:.0f}"
        rss = f"{bao['rss_mib']:.0f} / {ks['rss_mib']:.0f}" if bao else f"- / {ks['rss_mib']:.0f}"
        lines.append(
            f"| {row['workload']} | {row['connections']} | {cell(bao, row['unit'])} "
            f"| {cell(ks, row['unit'])} | {ratio} "
            f"| {p99} | {cpu} | {rss} |"
        )
    floor_rows = [row for row in result["rows"] if "of_raw_asgi" in row]
    if floor_rows:
        lines += [
            "",
            "Floors: a raw ASGI app on Keystream's server stack (same uvicorn options, supervisor, workers) "
            "and nginx `return 200`, both answering 1 KiB; server CPU per request in microseconds.",
            "",
            "| workload | nginx | raw ASGI | Keystream | Keystream / raw ASGI "
            "| CPU us/request (nginx / raw ASGI / Keystream / OpenBao) |",
            "|---|---|---|---|---|---|",
        ]
        for row in floor_rows:
            cpu = " / ".join(
                f"{row[name]['cpu_us_per_request']:.0f}" if name in row else "-"
                for name in ("nginx", "raw-asgi", "keystream", "openbao")
            )
            lines.append(
                f"| {row['workload']} | {cell(row.get('nginx'), row['unit'])} "
                f"| {cell(row['raw-asgi'], row['unit'])} | {cell(row['keystream'], row['unit'])} "
                f"| {100 * row['of_raw_asgi']:.0f}% | {cpu} |"
            )
    if result.get("baseline"):
        lines += [
            "",
            f"Before and after in this run: before = {result['baseline']['commit']}, after = this checkout "
            "(same keys, same request bodies, rounds alternating with the other servers).",
            "",
            "| workload | before | after | after / before | x OpenBao (before -> after) "
            "| of raw ASGI (before -> after) | CPU us/request (before -> after) | p99 ms (before -> after) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for row in result["rows"]:
            if "keystream-before" not in row:
                continue
            before, after = row["keystream-before"], row["keystream"]
            peer = f"{row['ratio_before']:.2f}x -> {row['ratio']:.2f}x" if "ratio" in row else "-"
            floor = (
                f"{100 * row['of_raw_asgi_before']:.0f}% -> {100 * row['of_raw_asgi']:.0f}%"
                if "of_raw_asgi" in row
                else "-"
            )
            lines.append(
                f"| {row['workload']} | {cell(before, row['unit'])} | {cell(after, row['unit'])} "
                f"| {row['after_over_before']:.2f}x | {peer} | {floor} "
                f"| {before['cpu_us_per_request']:.0f} -> {after['cpu_us_per_request']:.0f} "
                f"| {before['p99_ms']:.2f} -> {after['p99_ms']:.2f} |"
            )
    return "\n".join(lines)


def cell(figures: dict[str, Any] | None, unit: str) -> str:
    """``median (min-max) unit``, or ``-`` for a workload a server was not given."""
    if figures is None:
        return "-"
    return f"{figures['median']:,.1f} ({figures['min']:,.1f}-{figures['max']:,.1f}) {unit}"


def plot(result: dict[str, Any], path: Path) -> None:
    """Keystream / OpenBao per workload (log scale), with the issue's 1.5x and 5x targets marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [row for row in result["rows"] if "ratio" in row]
    names = [row["workload"] for row in rows]
    ratios = [row["ratio"] for row in rows]
    low = [row["ratio"] - row["keystream"]["min"] / row["openbao"]["max"] for row in rows]
    high = [row["keystream"]["max"] / row["openbao"]["min"] - row["ratio"] for row in rows]
    figure, axes = plt.subplots(figsize=(9, 5.4))
    positions = range(len(rows))
    axes.barh(positions, ratios, xerr=[low, high], color="#3a7ca5", capsize=3)
    axes.set_yticks(list(positions), names)
    axes.invert_yaxis()
    axes.set_xscale("log")
    axes.axvline(1.0, color="black", linewidth=1, label="OpenBao = 1")
    axes.axvline(1.5, color="#d1495b", linestyle="--", linewidth=1, label="target 1.5x (small messages)")
    axes.axvline(5.0, color="#edae49", linestyle=":", linewidth=1.5, label="target 5x (16 MiB upload)")
    for position, ratio, above in zip(positions, ratios, high, strict=True):
        # Right of the error bar, so that the bar does not cross the label.
        axes.text((ratio + above) * 1.06, position, f"{ratio:.2f}x", va="center", fontsize=8)
    axes.set_xlabel("Keystream / OpenBao (median of rounds; bars: min-max cross ratios), log scale")
    axes.set_title(
        f"Keystream vs OpenBao Transit, both at defaults\n{result['cpu']}, {result['date']}", fontsize=10
    )
    axes.set_xlim(min(0.5, min(ratios) / 1.5), max(10.0, max(ratios) * 1.8))  # room for the labels
    left, right = axes.get_xlim()
    ticks = [t for t in (0.25, 0.5, 1, 1.5, 2, 5, 10, 20, 50) if left <= t <= right]
    axes.set_xticks(ticks, [f"{t:g}x" for t in ticks])
    axes.minorticks_off()
    # Below the axes, so that it hides no bar or label.
    axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, fontsize=8, frameon=False)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


if __name__ == "__main__":
    main()
