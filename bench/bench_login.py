"""JWT login benchmark: ``POST /v1/auth/jwt/login`` against a real server (1 worker, then 2), the issuer's
JWKS served over HTTPS by a local server (``tests/jwt_issuer.py``, the one the tests use).

For each of RS256, ES256 and EdDSA it times sequential logins with the JWKS already cached (p50, p99, mean,
and the server's CPU time per login: every process of the server, from ``psutil``), and the first login
after the JWT configuration names a key source the workers have not fetched yet (a new query string on the
same JWKS URL), which pays the JWKS fetch: the TLS handshake to the issuer and the JWKS request.

The service limits login attempts per client address and role (``app/services/login.py``); the
benchmark spreads its logins over many loopback source addresses (``127.0.0.2`` onward: all of 127/8 is
loopback on Linux) so that the limiter is on the path, as it is for every login, but never answers 429.

The machine is shared: the report prints the CPU model, the date and the load average before and after each
series; compare figures taken at similar load. Run: ``.venv/bin/python -m bench.bench_login`` (``--logins``
per series, ``--json PATH`` to keep the figures).

``--baseline REPO`` (another checkout, built) compares two versions at the same load: a 1-worker server of
each, the logins of each algorithm in batches of :data:`BASELINE_BATCH` alternated between them
(``--rounds`` each), and per server the median of the batches' CPU time per login with p50 and p99 over all
its logins. Alternating makes the two share whatever else runs on the machine, which the separate series
above cannot.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import psutil

REPO = Path(__file__).resolve().parents[1]
# The tests' JWT issuer and its CA helper (tests/jwt_issuer.py imports tls_ca from the client's tests).
sys.path[:0] = [str(REPO), str(REPO / "clients" / "python" / "tests")]

from bench.bench_aescore import cpu_model  # noqa: E402
from bench.bench_peer import tree_cpu_seconds  # noqa: E402
from bench.report import percentile  # noqa: E402
from bench.service_process import Server, start_server, stop_server  # noqa: E402
from tests.jwt_issuer import AUDIENCE, ISSUER, Issuer, Signer, k8s_claims, serve_issuer  # noqa: E402

ROLE = "bench-login"
ALGORITHMS = ("RS256", "ES256", "EdDSA")
#: Loopback source addresses the logins are spread over (each has its own attempt buckets).
SOURCE_ADDRESSES = 200
WARMUP_LOGINS = 50
#: Logins per batch when a baseline checkout is compared (``--baseline``).
BASELINE_BATCH = 300


def signers() -> dict[str, Signer]:
    """One signing key per algorithm, all published in the issuer's JWKS."""
    return {"RS256": Signer.rsa(), "ES256": Signer.ec(), "EdDSA": Signer.ed25519()}


def configure(server: Server, issuer: Issuer, query: str = "") -> None:
    """Point the server's JWT method at ``issuer``'s JWKS (``query`` makes it a key source not yet fetched)
    and write the role the logins use."""
    config = {"jwks_url": issuer.jwks_url + query, "jwks_ca_pem": issuer.ca_pem, "bound_issuer": ISSUER}
    role = {
        "method": "jwt",
        "scopes": ["encrypt"],
        "key_patterns": ["bench-*"],
        "ttl": 3600,
        "bound_audiences": [AUDIENCE],
        "bound_claims": {"/kubernetes.io/namespace": "billing"},
    }
    with server.client() as admin:
        admin.post("/v1/auth/jwt/config", json=config).raise_for_status()
        admin.post(f"/v1/auth/roles/{ROLE}", json=role).raise_for_status()


class LoginClients:
    """Keep-alive connections to the server, one per loopback source address, used in turn."""

    def __init__(self, server: Server, count: int = SOURCE_ADDRESSES) -> None:
        self._clients = [
            httpx.Client(
                base_url=server.url,
                transport=httpx.HTTPTransport(local_address=f"127.0.0.{2 + index}"),
                timeout=30,
            )
            for index in range(count)
        ]
        self._next = 0

    def login(self, jwt: str) -> float:
        """One login's wall time in seconds.

        Raises:
            RuntimeError: the login was not answered 201.
        """
        client = self._clients[self._next]
        self._next = (self._next + 1) % len(self._clients)
        started = time.perf_counter()
        response = client.post("/v1/auth/jwt/login", json={"role": ROLE, "jwt": jwt})
        elapsed = time.perf_counter() - started
        if response.status_code != 201:
            raise RuntimeError(f"login answered {response.status_code}: {response.text[:300]}")
        return elapsed

    def close(self) -> None:
        for client in self._clients:
            client.close()


def summary(samples: list[float]) -> dict[str, float]:
    """p50, p99 and mean of ``samples`` (seconds), in milliseconds."""
    ordered = sorted(samples)
    return {
        "p50_ms": statistics.median(ordered) * 1e3,
        "p99_ms": percentile(ordered, 0.99) * 1e3,
        "mean_ms": statistics.fmean(ordered) * 1e3,
    }


def load() -> str:
    return "/".join(f"{value:.2f}" for value in os.getloadavg())


def cached_series(
    server: Server, clients: LoginClients, jwts: dict[str, str], logins: int
) -> dict[str, dict[str, Any]]:
    """Sequential logins per algorithm with the JWKS cached in every worker."""
    results: dict[str, dict[str, Any]] = {}
    for algorithm, jwt in jwts.items():
        for _ in range(WARMUP_LOGINS):
            clients.login(jwt)
        load_before = load()
        process = psutil.Process(server.process.pid)
        cpu_before = tree_cpu_seconds(process)
        samples = [clients.login(jwt) for _ in range(logins)]
        cpu = tree_cpu_seconds(process) - cpu_before
        results[algorithm] = {
            **summary(samples),
            "server_cpu_ms_per_login": cpu / logins * 1e3,
            "logins": logins,
            "load_before": load_before,
            "load_after": load(),
        }
    return results


def first_logins(
    server: Server, issuer: Issuer, clients: LoginClients, jwt: str, trials: int
) -> dict[str, Any]:
    """The first login after each change of key source: one JWKS fetch each (checked at the issuer)."""
    samples: list[float] = []
    load_before = load()
    for trial in range(trials):
        configure(server, issuer, f"?trial={trial}-{time.monotonic_ns()}")
        fetched = issuer.count("/openid/v1/jwks")
        samples.append(clients.login(jwt))
        if issuer.count("/openid/v1/jwks") != fetched + 1:
            raise RuntimeError("a first login did not fetch the JWKS exactly once")
    configure(server, issuer)
    return {**summary(samples), "trials": trials, "load_before": load_before, "load_after": load()}


@contextmanager
def running(workers: int, directory: Path, repo: Path = REPO, name: str = "") -> Iterator[Server]:
    """A server of the checkout ``repo`` with ``workers`` workers, its data and log under ``directory``."""
    data = directory / f"data{name}-{workers}"
    data.mkdir()
    server = start_server(
        data, directory / f"server{name}-{workers}.log", repo=repo, KEYSTREAM_WORKERS=str(workers)
    )
    try:
        yield server
    finally:
        stop_server(server)


def against_baseline(
    baseline: Path, directory: Path, issuer: Issuer, jwts: dict[str, str], rounds: int
) -> dict[str, dict[str, Any]]:
    """Per algorithm and server (``baseline``, ``this``): logins in alternated batches (the module doc)."""
    results: dict[str, dict[str, Any]] = {}
    with (
        running(1, directory, baseline, "-baseline") as before,
        running(1, directory, REPO, "-this") as after,
    ):
        servers = {"baseline": before, "this": after}
        clients = {name: LoginClients(server) for name, server in servers.items()}
        try:
            for server in servers.values():
                configure(server, issuer)
            for algorithm, jwt in jwts.items():
                cpu: dict[str, list[float]] = {name: [] for name in servers}
                samples: dict[str, list[float]] = {name: [] for name in servers}
                for name in servers:
                    for _ in range(WARMUP_LOGINS):
                        clients[name].login(jwt)
                load_before = load()
                for _ in range(rounds):
                    for name, server in servers.items():
                        process = psutil.Process(server.process.pid)
                        cpu_before = tree_cpu_seconds(process)
                        samples[name] += [clients[name].login(jwt) for _ in range(BASELINE_BATCH)]
                        cpu[name].append((tree_cpu_seconds(process) - cpu_before) / BASELINE_BATCH * 1e3)
                results[algorithm] = {
                    name: {
                        **summary(samples[name]),
                        "server_cpu_ms_per_login": statistics.median(cpu[name]),
                        "logins": len(samples[name]),
                    }
                    for name in servers
                } | {"load_before": load_before, "load_after": load()}
        finally:
            for client in clients.values():
                client.close()
    return results


def run(
    logins: int, trials: int, worker_counts: list[int], baseline: Path | None = None, rounds: int = 6
) -> dict[str, Any]:
    """Every series, for each worker count; then, with ``baseline``, the comparison against it."""
    keys = signers()
    report: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "load_start": load(),
        "runs": {},
    }
    with tempfile.TemporaryDirectory(prefix="bench-login-") as scratch, ExitStack() as stack:
        directory = Path(scratch)
        issuer = stack.enter_context(serve_issuer(directory / "issuer", list(keys.values())))
        jwts = {
            name: signer.sign(k8s_claims("billing", "api", lifetime=86_400)) for name, signer in keys.items()
        }
        for workers in worker_counts:
            with running(workers, directory) as server:
                configure(server, issuer)
                clients = LoginClients(server)
                try:
                    report["runs"][f"{workers}_workers"] = {
                        "cached": cached_series(server, clients, jwts, logins),
                        "first_login_rs256": first_logins(server, issuer, clients, jwts["RS256"], trials),
                    }
                finally:
                    clients.close()
        if baseline is not None:
            report["baseline"] = {
                "repo": str(baseline),
                "rounds": rounds,
                "batch": BASELINE_BATCH,
                "cached": against_baseline(baseline, directory, issuer, jwts, rounds),
            }
    report["load_end"] = load()
    return report


def print_report(report: dict[str, Any]) -> None:
    print(f"JWT login benchmark, {report['date']}, {report['cpu']}, {report['cpus']} CPUs")
    print(f"load average (1/5/15 min): start {report['load_start']}, end {report['load_end']}")
    header = f"{'workers':>7}  {'series':<18} {'p50 ms':>7} {'p99 ms':>7} {'mean ms':>7} {'cpu ms':>7}  load"
    print(header)
    for run_name, run_data in report["runs"].items():
        workers = run_name.split("_")[0]
        for algorithm, figures in run_data["cached"].items():
            series = "cached " + algorithm
            print(
                f"{workers:>7}  {series:<18} {figures['p50_ms']:7.2f} {figures['p99_ms']:7.2f} "
                f"{figures['mean_ms']:7.2f} {figures['server_cpu_ms_per_login']:7.2f}  "
                f"{figures['load_before']} -> {figures['load_after']}"
            )
        first = run_data["first_login_rs256"]
        print(
            f"{workers:>7}  {'first login RS256':<18} {first['p50_ms']:7.2f} {first['p99_ms']:7.2f} "
            f"{first['mean_ms']:7.2f} {'':>7}  {first['load_before']} -> {first['load_after']}"
        )


def print_baseline(comparison: dict[str, Any]) -> None:
    print(
        f"against {comparison['repo']} (1 worker each, {comparison['rounds']} alternated batches of "
        f"{comparison['batch']} logins per algorithm)"
    )
    print(f"{'series':<14} {'server':<9} {'p50 ms':>7} {'p99 ms':>7} {'cpu ms':>7}  load")
    for algorithm, figures in comparison["cached"].items():
        for name in ("baseline", "this"):
            row = figures[name]
            print(
                f"{'cached ' + algorithm:<14} {name:<9} {row['p50_ms']:7.2f} {row['p99_ms']:7.2f} "
                f"{row['server_cpu_ms_per_login']:7.2f}  {figures['load_before']} -> {figures['load_after']}"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--logins", type=int, default=2000, help="timed logins per algorithm and worker count"
    )
    parser.add_argument("--trials", type=int, default=30, help="first logins (JWKS fetched) per worker count")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker counts to run")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--baseline", type=Path, help="another checkout (built) to compare against")
    parser.add_argument("--rounds", type=int, default=6, help="alternated batches per server (--baseline)")
    args = parser.parse_args(argv)
    report = run(args.logins, args.trials, args.workers, args.baseline, args.rounds)
    print_report(report)
    if "baseline" in report:
        print_baseline(report["baseline"])
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
