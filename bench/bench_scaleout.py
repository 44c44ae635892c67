"""Scale-out on one machine: 1, 2 and 3 Keystream replicas behind HAProxy on one PostgreSQL keystore.

Starts a throwaway PostgreSQL cluster (:mod:`tests.pg_cluster`, with ``pg_stat_statements`` preloaded),
three replica processes on 127.0.0.1 sharing it (:func:`bench.service_process.start_server`, one worker
each, the same master key) and three HAProxy processes (:mod:`bench.haproxy_process`, the configuration the
docs describe) in front of the first 1, 2 and 3 replicas. Then, with one client (wrk ``-t1``, the Lua driver
of :mod:`bench.bench_peer`) and an issued token (``encrypt`` scope on the key), in alternating rounds:

* 1 KiB sealed encrypt (``POST /v1/keys/bench/encrypt``, binary body) straight to one replica, and through
  HAProxy to 1, 2 and 3 replicas: requests/s (median and min-max of the rounds), p99, and the CPU each
  component used during the run (replicas, HAProxy, PostgreSQL, wrk, and everything else on the machine,
  from /proc/stat: other helpers' work shares these cores), with the load average before each run;
* database statements per encrypt with warm caches: ``pg_stat_statements`` calls (and ``pg_stat_database``
  commits) during a load run through 3 replicas, minus those of an idle window of the same length (the
  change-log poll every replica runs), divided by the requests; the statements seen are listed;
* propagation across the 3 replicas (:func:`bench.bench_propagation.measure_rotation` and
  ``measure_revocation``): a rotation through A used by encrypts through B, a revoked token refused by B and
  C, p50/p99 over ``--changes`` changes.

Writes ``--out`` JSON and a Markdown table next to it (``.md``):

    python -m bench.bench_scaleout --rounds 3 --seconds 10 --out bench/results/scaleout.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import psutil

from bench.bench_aescore import cpu_model
from bench.bench_peer import Target, run_wrk, tree_cpu_seconds
from bench.bench_propagation import Replica, delay_summary, measure_revocation, measure_rotation
from bench.haproxy_process import Haproxy, start_haproxy, stop_haproxy
from bench.service_process import REPO, ROOT_TOKEN, Server, start_server, stop_server

if TYPE_CHECKING:
    from tests.pg_cluster import PgCluster

KEY = "bench"
ITEM_BYTES = 1024
REPLICAS = 3
#: pg_stat_statements needs its library loaded at server start.
PG_OPTIONS = ("-c shared_preload_libraries=pg_stat_statements", "-c pg_stat_statements.track=all")
OCTETS = "application/octet-stream"


@dataclass
class Setup:
    """One configuration under test: where wrk sends its requests and how many replicas serve them."""

    name: str
    replicas: int
    target: Target


@dataclass
class Components:
    """The processes whose CPU time is recorded separately."""

    replicas: list[psutil.Process]
    haproxy: list[psutil.Process]
    postgres: psutil.Process

    def cpu_seconds(self) -> dict[str, float]:
        return {
            "replicas": sum(tree_cpu_seconds(process) for process in self.replicas),
            "haproxy": sum(tree_cpu_seconds(process) for process in self.haproxy),
            "postgres": tree_cpu_seconds(self.postgres),
            "wrk": _children_cpu_seconds(),  # wrk is a reaped child once run_wrk returns
            "bench": _self_cpu_seconds(),
            "machine": _machine_busy_seconds(),
        }


def _children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _self_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _machine_busy_seconds() -> float:
    """CPU seconds every core spent outside idle and iowait since boot."""
    times = psutil.cpu_times()
    return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))


def cpu_percent(before: dict[str, float], after: dict[str, float], wall: float) -> dict[str, float]:
    """Each component's CPU in % of one core over ``wall`` seconds; ``other``: the machine minus ours."""
    used = {name: 100 * (after[name] - before[name]) / wall for name in before}
    ours = sum(value for name, value in used.items() if name != "machine")
    used["other"] = max(0.0, used["machine"] - ours)
    return {name: round(value, 1) for name, value in used.items()}


@contextlib.contextmanager
def stack(work: Path, cluster: PgCluster) -> Iterator[tuple[list[Server], list[Haproxy]]]:
    """Three replicas on ``cluster`` and HAProxy in front of the first 1, 2 and 3 of them."""
    servers: list[Server] = []
    proxies: list[Haproxy] = []
    try:
        for index in range(REPLICAS):
            data = work / f"replica{index}"
            data.mkdir()
            servers.append(
                start_server(data, work / f"replica{index}.log", KEYSTREAM_DATABASE_URL=cluster.url())
            )
        for count in range(1, REPLICAS + 1):
            directory = work / f"haproxy{count}"
            directory.mkdir()
            proxies.append(start_haproxy(directory, [(s.host, s.port) for s in servers[:count]]))
        yield servers, proxies
    finally:
        for proxy in proxies:
            stop_haproxy(proxy)
        for server in servers:
            stop_server(server)


def prepare(servers: list[Server], proxies: list[Haproxy], work: Path) -> tuple[str, Path]:
    """Create the key and an ``encrypt`` token; check a round trip through every replica and balancer.

    Returns the token and the 1 KiB body file.
    """
    item = os.urandom(ITEM_BYTES)
    body = work / "item-1k.bin"
    body.write_bytes(item)
    with servers[0].client() as client:
        client.post("/v1/keys", json={"name": KEY, "type": "aes256"}).raise_for_status()
        created = client.post("/v1/tokens", json={"scopes": ["encrypt", "decrypt"], "key_patterns": [KEY]})
        created.raise_for_status()
        token = str(created.json()["token"])
    headers = {"Authorization": f"Bearer {token}", "Content-Type": OCTETS}
    urls = [server.url for server in servers] + [proxy.url for proxy in proxies]
    for url in urls:
        sealed = httpx.post(f"{url}/v1/keys/{KEY}/encrypt", content=item, headers=headers, timeout=30)
        sealed.raise_for_status()
        for other in urls:
            opened = httpx.post(f"{other}/v1/keys/{KEY}/decrypt", content=sealed.content, headers=headers)
            if opened.status_code != 200 or opened.content != item:
                raise RuntimeError(f"sealed through {url} did not open through {other}: {opened.text[:200]}")
    return token, body


#: The table every change-log read selects from (the follower's poll, a hint's read).
CHANGE_LOG_TABLE = "key_changes"


def statement_calls(cluster: PgCluster) -> list[dict[str, Any]]:
    """The statements executed since the last reset (``calls``, ``query``), most called first; the
    statistics queries themselves left out."""
    import psycopg

    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        rows = conn.execute(
            """SELECT calls, query FROM pg_stat_statements
               WHERE query NOT ILIKE '%pg_stat_statements%' ORDER BY calls DESC"""
        ).fetchall()
    return [{"calls": int(calls), "query": " ".join(str(query).split())[:160]} for calls, query in rows]


def statement_window(cluster: PgCluster, action: Callable[[], None]) -> dict[str, Any]:
    """Reset pg_stat_statements, run ``action``, read the statements: totals, change-log reads, the rest."""
    import psycopg

    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        conn.execute("SELECT pg_stat_statements_reset()")
    started = time.monotonic()
    action()
    statements = statement_calls(cluster)
    wall = time.monotonic() - started
    change_log = sum(s["calls"] for s in statements if CHANGE_LOG_TABLE in s["query"])
    total = sum(s["calls"] for s in statements)
    return {
        "seconds": round(wall, 2),
        "statements": total,
        "change_log_reads": change_log,
        "other_statements": total - change_log,
        "top": statements[:8],
    }


def measure_queries(cluster: PgCluster, setup: Setup, body: Path, seconds: int, work: Path) -> dict[str, Any]:
    """Statements per encrypt with warm caches, from pg_stat_statements: a load window through ``setup``
    and an idle window of the same length (what the replicas' change-log polls cost at rest)."""
    idle = statement_window(cluster, lambda: time.sleep(seconds))
    rates: list[float] = []

    def load() -> None:
        rate, _ = run_wrk(setup.target, f"/v1/keys/{KEY}/encrypt", OCTETS, body, 16, seconds, work)
        rates.append(rate)

    busy = statement_window(cluster, load)
    requests = rates[0] * seconds  # wrk's rate is its request count over its duration
    at_rest = idle["statements"] / idle["seconds"]
    return {
        "through": setup.name,
        "requests": round(requests),
        "idle": idle,
        "load": busy,
        # Everything the load window ran beyond what the same time at rest runs, per encrypt.
        "statements_per_encrypt": round((busy["statements"] - at_rest * busy["seconds"]) / requests, 5),
        # Statements that are not change-log reads (a key, token or version lookup), per encrypt.
        "non_change_log_statements_per_encrypt": round(busy["other_statements"] / requests, 5),
        "change_log_reads_per_second_at_rest": round(idle["change_log_reads"] / idle["seconds"], 1),
    }


def measure_propagation(servers: list[Server], changes: int) -> dict[str, Any]:
    """Rotation A -> B and revocation A -> B, C across the three replicas (bench.bench_propagation)."""
    group = [
        Replica(
            server.process,
            httpx.Client(base_url=server.url, timeout=10, headers={"Authorization": f"Bearer {ROOT_TOKEN}"}),
        )
        for server in servers
    ]
    try:
        return {
            "changes": changes,
            "rotation": delay_summary(measure_rotation(group, changes)),
            "revocation": delay_summary(measure_revocation(group, changes)),
        }
    finally:
        for replica in group:
            replica.client.close()


def postmaster(cluster: PgCluster) -> psutil.Process:
    """The cluster's postmaster (its backends are its children)."""
    return psutil.Process(int((cluster.data_dir / "postmaster.pid").read_text().split()[0]))


def load_average() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=10, help="duration of each wrk run")
    parser.add_argument("--connections", type=int, default=16, help="wrk connections")
    parser.add_argument("--changes", type=int, default=200, help="rotations and revocations measured")
    parser.add_argument("--out", type=Path, help="results JSON (a .md table next to it)")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed (Debian: apt-get install wrk)")
    sys.path.insert(0, str(REPO))  # tests.pg_cluster: the throwaway PostgreSQL cluster the tests use
    from tests.pg_cluster import remove_cluster, start_cluster

    load_at_start = load_average()
    work = Path(tempfile.mkdtemp(prefix="bench-scaleout-"))
    cluster = start_cluster(PG_OPTIONS)
    try:
        cluster.execute("CREATE EXTENSION pg_stat_statements")
        with stack(work, cluster) as (servers, proxies):
            token, body = prepare(servers, proxies, work)
            components = Components(
                [psutil.Process(s.process.pid) for s in servers],
                [psutil.Process(p.process.pid) for p in proxies],
                postmaster(cluster),
            )

            def target(name: str, url: str, process: subprocess.Popen[bytes]) -> Target:
                return Target(name, url, "Authorization", f"Bearer {token}", psutil.Process(process.pid))

            setups = [Setup("1 replica, direct", 1, target("direct", servers[0].url, servers[0].process))]
            setups += [
                Setup(f"{count} replica{'s' if count > 1 else ''} + HAProxy", count,
                      target(f"lb{count}", proxy.url, proxy.process))
                for count, proxy in enumerate(proxies, start=1)
            ]  # fmt: skip
            route = f"/v1/keys/{KEY}/encrypt"
            for setup in setups:  # warm every cache (key, token, connections)
                run_wrk(setup.target, route, OCTETS, body, args.connections, 2, work)
            samples: dict[str, list[dict[str, Any]]] = {setup.name: [] for setup in setups}
            for _ in range(args.rounds):
                for setup in setups:
                    load = load_average()
                    before, started = components.cpu_seconds(), time.monotonic()
                    rate, p99 = run_wrk(
                        setup.target, route, OCTETS, body, args.connections, args.seconds, work
                    )
                    wall = time.monotonic() - started
                    samples[setup.name].append(
                        {
                            "rate": rate,
                            "p99_ms": p99,
                            "load_average_before": load,
                            "cpu_percent": cpu_percent(before, components.cpu_seconds(), wall),
                        }
                    )
            queries = measure_queries(cluster, setups[-1], body, args.seconds, work)
            propagation = measure_propagation(servers, args.changes)
    finally:
        remove_cluster(cluster)
        shutil.rmtree(work, ignore_errors=True)
    result = summarise(setups, samples, args, queries, propagation, load_at_start)
    table = markdown(result)
    print(table)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        args.out.with_suffix(".md").write_text(table + "\n")


def summarise(
    setups: list[Setup],
    samples: dict[str, list[dict[str, Any]]],
    args: argparse.Namespace,
    queries: dict[str, Any],
    propagation: dict[str, Any],
    load_at_start: list[float],
) -> dict[str, Any]:
    rows = []
    base = statistics.median(run["rate"] for run in samples[setups[0].name])
    for setup in setups:
        runs = samples[setup.name]
        rates = [run["rate"] for run in runs]
        cpu = {
            name: round(statistics.median(run["cpu_percent"][name] for run in runs), 1)
            for name in runs[0]["cpu_percent"]
        }
        rows.append(
            {
                "setup": setup.name,
                "replicas": setup.replicas,
                "median": round(statistics.median(rates), 1),
                "min": round(min(rates), 1),
                "max": round(max(rates), 1),
                "ratio_to_direct": round(statistics.median(rates) / base, 3),
                "p99_ms": round(statistics.median(run["p99_ms"] for run in runs), 2),
                "cpu_percent": cpu,
                "runs": runs,
            }
        )
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu_model(),
        "cores": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "rounds": args.rounds,
        "seconds": args.seconds,
        "connections": args.connections,
        "client": f"wrk -t1 -c{args.connections} --latency, alternating rounds, an issued encrypt token",
        "load_average_at_start": load_at_start,
        "load_average_at_end": load_average(),
        "rows": rows,
        "queries": queries,
        "propagation": propagation,
    }


def markdown(result: dict[str, Any]) -> str:
    queries, propagation = result["queries"], result["propagation"]
    lines = [
        f"{result['cpu']}, {result['cores']} cores, {result['date']}; 1 KiB sealed encrypt, medians of "
        f"{result['rounds']} rounds (min-max), {result['client']}, {result['seconds']} s per run; "
        f"load average {_load(result['load_average_at_start'])} at the start, "
        f"{_load(result['load_average_at_end'])} at the end. "
        "CPU in % of one core (median of the runs); other: the rest of the machine (other work on "
        "the same cores).",
        "",
        "| setup | req/s | ratio to 1 direct | p99 ms "
        "| CPU %: replicas / HAProxy / PostgreSQL / wrk / other |",
        "|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        cpu = row["cpu_percent"]
        lines.append(
            f"| {row['setup']} | {row['median']:,.0f} ({row['min']:,.0f}-{row['max']:,.0f}) "
            f"| {row['ratio_to_direct']:.2f}x | {row['p99_ms']:.2f} "
            f"| {cpu['replicas']:.0f} / {cpu['haproxy']:.0f} / {cpu['postgres']:.0f} / {cpu['wrk']:.0f} "
            f"/ {cpu['other']:.0f} |"
        )
    lines += [
        "",
        f"Database statements per encrypt, warm caches, through {queries['through']} (pg_stat_statements): "
        f"{queries['non_change_log_statements_per_encrypt']:.4f} other than change-log reads; "
        f"{queries['statements_per_encrypt']:.4f} counting everything beyond the same time at rest "
        f"({queries['load']['statements']} statements during {queries['requests']:,} encrypts in "
        f"{queries['load']['seconds']} s; at rest the 3 replicas read the change log "
        f"{queries['change_log_reads_per_second_at_rest']} times/s).",
        "",
        f"Propagation across the 3 replicas ({propagation['changes']} changes each): rotation through A used "
        f"through B p50 {propagation['rotation']['p50_ms']} ms, p99 {propagation['rotation']['p99_ms']} ms; "
        f"revoked token refused by B and C p50 {propagation['revocation']['p50_ms']} ms, p99 "
        f"{propagation['revocation']['p99_ms']} ms.",
    ]
    return "\n".join(lines)


def _load(values: list[float]) -> str:
    return " / ".join(f"{value:.2f}" for value in values)


if __name__ == "__main__":
    main()
