"""Where a 1 KiB sealed request's server CPU goes: Keystream's app in a tight loop, the same app inside a
server, and the raw-ASGI floor beside it.

``bench.bench_peer`` gives the server CPU per request; ``bench.callgrind_routes`` the instructions the app
runs per request in process. This script ties the two together, on one worker each, so a cut in instructions
can be weighed against what the server actually spends:

* **in situ**: the raw-ASGI floor (:mod:`bench.floor_app`) and Keystream, each served by a child of this
  script (Keystream's uvicorn options, one worker) whose app is wrapped to time every HTTP request from its
  first to its last ASGI call: wall time and the serving thread's CPU time (everything the app does,
  including uvicorn's ``send`` and the ``writev`` it issues). Under ``wrk -t1 -c<connections>`` for
  ``--seconds``, rounds alternating between the servers: requests/s, the whole process's CPU per request
  (``/proc``) and the app's thread CPU per request (median).
* **tight loop**: the same Keystream app called back to back through ASGI in a fresh process, no server and
  no sockets (:func:`bench.callgrind_routes.drive`): thread CPU per request.
* ``--callgrind N``: the whole server's instructions per request (valgrind's callgrind on the worker,
  instrumentation switched on after a warm-up for ``N`` requests on one keep-alive connection and off
  again), floor and Keystream, every thread counted; the kernel's work is not.

The difference between the app's in-situ CPU and the floor app's is what Keystream's own work costs inside a
server; against the tight loop it shows how much of that is the code itself and how much the state (caches,
predictors) it finds after the kernel and the server ran between two requests.

Run: ``.venv/bin/python -m bench.server_insitu [--seconds 5] [--rounds 3] [--connections 16]
[--route encrypt|decrypt] [--callgrind 2000]``. Needs wrk (and valgrind for ``--callgrind``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import psutil

from bench.bench_peer import Target, run_wrk, tree_cpu_seconds
from bench.service_process import MASTER_KEY, ROOT_TOKEN, free_port, start_server, stop_server

REPO = Path(__file__).resolve().parents[1]
KEY = "bench"
ONE_KIB = bytes(range(256)) * 4
#: Requests a callgrind run sends before its instrumentation is switched on.
CALLGRIND_WARMUP = 300

Scope = MutableMapping[str, Any]
App = Callable[[Scope, Any, Any], Awaitable[None]]


# -- the serving child --------------------------------------------------------------------------------


def _timed(inner: App, report: Path) -> App:
    """``inner`` timed per HTTP request; SIGUSR1 writes the samples to ``report`` (JSON) and clears them."""
    samples: list[tuple[float, float]] = []

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await inner(scope, receive, send)
            return
        wall, cpu = time.perf_counter(), time.thread_time()
        await inner(scope, receive, send)
        samples.append((time.perf_counter() - wall, time.thread_time() - cpu))

    def write(*_: object) -> None:
        walls = [sample[0] for sample in samples]
        cpus = [sample[1] for sample in samples]
        figures = {
            "requests": len(samples),
            "wall_median_us": statistics.median(walls) * 1e6 if walls else None,
            "cpu_median_us": statistics.median(cpus) * 1e6 if cpus else None,
            "cpu_mean_us": statistics.fmean(cpus) * 1e6 if cpus else None,
        }
        samples.clear()
        partial = report.with_suffix(".part")
        partial.write_text(json.dumps(figures))
        partial.replace(report)

    signal.signal(signal.SIGUSR1, write)
    return app


def _serve(kind: str, port: int, report: Path | None) -> None:
    """Serve the floor or Keystream (settings from ``KEYSTREAM_*``) on one worker; timed with a ``report``."""
    import uvicorn

    from app.core.config import Settings, get_settings
    from app.server import bootstrap, uvicorn_options
    from app.serving import listening_socket

    app: App
    if kind == "floor":
        from bench import floor_app

        settings = Settings(host="127.0.0.1", port=port, workers=1)
        app = floor_app.create_app()
    else:
        from app.main import create_app

        settings = get_settings()
        with open(os.devnull, "w") as quiet:
            bootstrap(settings, out=quiet)
        app = create_app(settings)
    if report is not None:
        app = _timed(app, report)
    common = uvicorn_options(settings, None)
    sock = listening_socket("127.0.0.1", port, 2048)
    uvicorn.Server(uvicorn.Config(app, **common)).run(sockets=[sock])


# -- the parent ---------------------------------------------------------------------------------------


def _prepare(work: Path) -> tuple[dict[str, str], bytes]:
    """A Keystream data directory with key :data:`KEY` (made by a normal start), the children's environment
    and a 1 KiB sealed message."""
    server = start_server(work / "data", work / "prepare.log")
    try:
        with server.client() as client:
            client.post("/v1/keys", json={"name": KEY, "type": "aes256"}).raise_for_status()
            sealed = client.post(
                f"/v1/keys/{KEY}/encrypt",
                content=ONE_KIB,
                headers={"Content-Type": "application/octet-stream"},
            )
            sealed.raise_for_status()
    finally:
        stop_server(server)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEYSTREAM_")}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    env.update(
        KEYSTREAM_DATA_DIR=str(work / "data"),
        KEYSTREAM_HOST="127.0.0.1",
        KEYSTREAM_MASTER_KEY=MASTER_KEY,
        KEYSTREAM_ROOT_TOKEN=ROOT_TOKEN,
        KEYSTREAM_LOG_LEVEL="warning",
        KEYSTREAM_WORKERS="1",
    )
    return env, sealed.content


def _start(
    kind: str, env: dict[str, str], work: Path, *, timed: bool, wrapper: list[str] | None = None
) -> tuple[subprocess.Popen[bytes], int, Path]:
    """A serving child (``wrapper``: a command it runs under, e.g. valgrind); waits until it accepts."""
    port = free_port()
    report = work / f"{kind}.report.json"
    command = [sys.executable, "-m", "bench.server_insitu", "--serve", kind, "--port", str(port)]
    if timed:
        command += ["--report", str(report)]
    with (work / f"{kind}.log").open("ab") as log:
        process = subprocess.Popen(
            [*(wrapper or []), *command],
            cwd=REPO,
            env={**env, "KEYSTREAM_PORT": str(port)},
            stdout=log,
            stderr=log,
        )
    deadline = time.monotonic() + (300 if wrapper else 60)
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{kind} exited: {(work / f'{kind}.log').read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, port, report
        except OSError:
            if time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"{kind} did not start") from None
            time.sleep(0.2)


def _collect(process: subprocess.Popen[bytes], report: Path) -> dict[str, Any]:
    """Ask the child for its samples (and clear them). A request whose answer has just left may be counted in
    the next report: the app returns after its last ``send``."""
    report.unlink(missing_ok=True)
    process.send_signal(signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while not report.exists():
        if time.monotonic() > deadline:
            raise RuntimeError("the timed server wrote no report")
        time.sleep(0.02)
    figures: dict[str, Any] = json.loads(report.read_text())
    return figures


def _request(route: str, port: int, body: bytes) -> bytes:
    return (
        f"POST /v1/keys/{KEY}/{route} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Bearer {ROOT_TOKEN}\r\nContent-Type: application/octet-stream\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def _exchange(sock: socket.socket, request: bytes) -> None:
    """Send one request on a keep-alive connection and read its whole answer (200 expected)."""
    sock.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("connection closed")
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(head.decode(errors="replace"))
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    while len(rest) < length:
        rest += sock.recv(65536)


def _callgrind(kind: str, route: str, body: bytes, env: dict[str, str], work: Path, requests: int) -> float:
    """The whole server's instructions per request (all threads, user space), after a warm-up."""
    out = work / f"{kind}.callgrind"
    wrapper = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
    process, port, _ = _start(kind, env, work, timed=False, wrapper=wrapper)
    try:
        request = _request(route, port, body)
        with socket.create_connection(("127.0.0.1", port)) as sock:
            for _ in range(CALLGRIND_WARMUP):
                _exchange(sock, request)
            subprocess.run(
                ["callgrind_control", "-i", "on", str(process.pid)], check=True, capture_output=True
            )
            for _ in range(requests):
                _exchange(sock, request)
            subprocess.run(
                ["callgrind_control", "-i", "off", str(process.pid)], check=True, capture_output=True
            )
            subprocess.run(["callgrind_control", "-d", str(process.pid)], check=True, capture_output=True)
    finally:
        process.terminate()
        process.wait(120)
    for line in Path(f"{out}.1").read_text().splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1]) / requests
    raise RuntimeError(f"{out}.1: no totals line")


def _tight_loop(route: str, requests: int) -> float:
    """Thread CPU µs per request of the app called back to back in a fresh process."""
    code = (
        "import time, sys\n"
        "from bench.callgrind_routes import drive\n"
        "marks = []\n"
        "drive(sys.argv[1], int(sys.argv[2]), lambda: marks.append(time.thread_time()),"
        " lambda: marks.append(time.thread_time()))\n"
        "print((marks[1] - marks[0]) / int(sys.argv[2]) * 1e6)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, route, str(requests)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--route", choices=("encrypt", "decrypt"), default="encrypt")
    parser.add_argument("--loop-requests", type=int, default=20000, help="requests of the tight loop")
    parser.add_argument(
        "--callgrind", type=int, default=0, metavar="N", help="also count N requests under callgrind"
    )
    parser.add_argument("--serve", choices=("floor", "keystream"), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--report", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        _serve(args.serve, args.port, args.report)
        return
    with tempfile.TemporaryDirectory(prefix="bench-insitu-") as scratch:
        work = Path(scratch)
        env, sealed = _prepare(work)
        body = ONE_KIB if args.route == "encrypt" else sealed
        (work / "body").write_bytes(body)
        servers = {kind: _start(kind, env, work, timed=True) for kind in ("floor", "keystream")}
        rows: dict[str, list[tuple[float, float, float]]] = {kind: [] for kind in servers}
        load_before = os.getloadavg()[0]
        try:
            targets = {
                kind: Target(
                    kind,
                    f"http://127.0.0.1:{port}",
                    "Authorization",
                    f"Bearer {ROOT_TOKEN}",
                    psutil.Process(process.pid),
                )
                for kind, (process, port, _) in servers.items()
            }
            route = f"/v1/keys/{KEY}/{args.route}"

            def load(kind: str, seconds: int) -> float:
                rate, _ = run_wrk(
                    targets[kind],
                    route,
                    "application/octet-stream",
                    work / "body",
                    args.connections,
                    seconds,
                    work,
                )
                return rate

            for kind in servers:
                load(kind, 1)  # warm-up
            for _ in range(args.rounds):
                for kind, (process, _, report) in servers.items():
                    _collect(process, report)
                    cpu = tree_cpu_seconds(targets[kind].process)
                    rate = load(kind, args.seconds)
                    cpu = tree_cpu_seconds(targets[kind].process) - cpu
                    figures = _collect(process, report)
                    rows[kind].append((rate, cpu / figures["requests"] * 1e6, figures["cpu_median_us"]))
        finally:
            for process, _, _ in servers.values():
                process.terminate()
                process.wait(30)
        load_after = os.getloadavg()[0]
        loop = _tight_loop(args.route, args.loop_requests)
        counts = (
            {
                kind: _callgrind(kind, args.route, body, env, work, args.callgrind)
                for kind in ("floor", "keystream")
            }
            if args.callgrind
            else {}
        )
    cpu_model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        "unknown CPU",
    )
    print(
        f"1 KiB {args.route}, one worker, {cpu_model}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"load {load_before:.2f} before / {load_after:.2f} after; medians of {args.rounds} rounds of "
        f"wrk -t1 -c{args.connections} -d{args.seconds}s"
    )
    print()
    print("| server | req/s | server CPU µs/request | app thread CPU µs/request, in situ | instr./request |")
    print("|---|---|---|---|---|")
    medians = {}
    for kind, samples in rows.items():
        rate, server_cpu, app_cpu = (statistics.median(column) for column in zip(*samples, strict=True))
        medians[kind] = app_cpu
        count = f"{counts[kind] / 1000:.1f}k" if kind in counts else "-"
        print(f"| {kind} | {rate:,.0f} | {server_cpu:.1f} | {app_cpu:.1f} | {count} |")
    own = medians["keystream"] - medians["floor"]
    print()
    print(
        f"Keystream's app above the floor's, in situ: {own:.1f} µs; the same app in a tight loop (no server, "
        f"{args.loop_requests} requests): {loop:.1f} µs per request ({own / loop:.2f}x in situ)."
    )


if __name__ == "__main__":
    main()
