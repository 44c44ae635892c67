"""The cost of the audit log: 1 KiB sealed encrypt req/s with and without it, same run, alternating.

Starts two Keystream servers at their defaults (workers = usable CPUs, SQLite, sealed ``ctr-hmac``, aesni),
one with ``KEYSTREAM_AUDIT_LOG`` pointing at a file in the work directory (one file per worker) and one
without, then drives them in alternating rounds (off, on, off, on, ...) with wrk (``-t1``, 16 connections,
a Lua script POSTing a fixed 1 KiB body, as ``bench.bench_peer`` does). Each figure is the median of the
rounds with its min-max, plus p99 latency. After the run it checks that the audit log verifies and holds two
lines per request served. Writes ``--out`` JSON and a Markdown table next to it (``.md``).

    python -m bench.bench_audit --rounds 5 --seconds 10 --out bench/results/audit.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from app.admin import main as admin_main
from bench.bench_aescore import cpu_model
from bench.bench_peer import Target, run_wrk, tree_cpu_seconds
from bench.service_process import MASTER_KEY, ROOT_TOKEN, Server, start_server, stop_server

KEY = "bench"
ITEM_BYTES = 1024
CONNECTIONS = 16


def start(work: Path, name: str, audit_log: Path | None) -> tuple[Server, Target]:
    data = work / name
    data.mkdir()
    workers = str(len(os.sched_getaffinity(0)))
    if audit_log is None:
        server = start_server(data, work / f"{name}.log", KEYSTREAM_WORKERS=workers)
    else:
        server = start_server(
            data, work / f"{name}.log", KEYSTREAM_WORKERS=workers, KEYSTREAM_AUDIT_LOG=str(audit_log)
        )
    target = Target(
        name, server.url, "Authorization", f"Bearer {ROOT_TOKEN}", psutil.Process(server.process.pid)
    )
    with server.client() as client:
        client.post("/v1/keys", json={"name": KEY, "type": "aes256"}).raise_for_status()
        check = client.post(f"/v1/keys/{KEY}/encrypt", content=b"x" * ITEM_BYTES)
        check.raise_for_status()
    return server, target


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("bench/results/audit.json"))
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="ks-bench-audit-") as tmp:
        work = Path(tmp)
        log = work / "audit.log"
        body = work / "1k.bin"
        body.write_bytes(os.urandom(ITEM_BYTES))
        servers: dict[str, tuple[Server, Target]] = {}
        try:
            servers["off"] = start(work, "off", None)
            servers["on"] = start(work, "on", log)
            rates: dict[str, list[float]] = {"off": [], "on": []}
            cpu_us: dict[str, list[float]] = {"off": [], "on": []}
            p99s: dict[str, list[float]] = {"off": [], "on": []}
            route = f"/v1/keys/{KEY}/encrypt"
            for round_index in range(args.rounds):
                for name in ("off", "on"):
                    cpu_before = tree_cpu_seconds(servers[name][1].process)
                    rate, p99 = run_wrk(
                        servers[name][1],
                        route,
                        "application/octet-stream",
                        body,
                        CONNECTIONS,
                        args.seconds,
                        work,
                    )
                    cpu = tree_cpu_seconds(servers[name][1].process) - cpu_before
                    rates[name].append(rate)
                    p99s[name].append(p99)
                    cpu_us[name].append(cpu / (rate * args.seconds) * 1e6)
                    print(
                        f"round {round_index + 1} audit {name}: {rate:,.0f} req/s, p99 {p99:.2f} ms, "
                        f"server CPU {cpu_us[name][-1]:.0f} us/request"
                    )
        finally:
            for server, _ in servers.values():
                stop_server(server)
        files = sorted(work.glob("audit.log*"))
        lines = sum(len(path.read_bytes().splitlines()) for path in files)
        os.environ["KEYSTREAM_MASTER_KEY"] = MASTER_KEY
        verified = all(admin_main(["audit", "verify", str(path)]) == 0 for path in files)
        log_bytes = sum(path.stat().st_size for path in files)

    off, on = summary(rates["off"]), summary(rates["on"])
    result: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpu": cpu_model(),
            "cpus": len(os.sched_getaffinity(0)),
            "python": platform.python_version(),
        },
        "workload": f"1 KiB sealed encrypt, wrk -t1 -c{CONNECTIONS}, {args.seconds} s x {args.rounds} rounds",
        "req_per_s": {"off": off, "on": on},
        "p99_ms": {"off": summary(p99s["off"]), "on": summary(p99s["on"])},
        "server_cpu_us_per_request": {"off": summary(cpu_us["off"]), "on": summary(cpu_us["on"])},
        "cost_percent": round(100 * (1 - on["median"] / off["median"]), 1),
        # Each round runs off then on back to back: the median of those pairs' ratios is steadier than the
        # ratio of the medians when other work shares the machine.
        "paired_req_per_s_ratio": statistics.median(
            b / a for a, b in zip(rates["off"], rates["on"], strict=True)
        ),
        "paired_cpu_ratio": statistics.median(
            b / a for a, b in zip(cpu_us["off"], cpu_us["on"], strict=True)
        ),
        "rounds": {"req_per_s": rates, "cpu_us_per_request": cpu_us},
        "audit_lines": lines,
        "audit_bytes_per_line": round(log_bytes / max(1, lines)),
        "audit_verified": verified,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    table = [
        "| audit log | req/s (median, min-max) | p99 ms (median) | server CPU µs/request (median) |",
        "|---|---|---|---|",
    ]
    for name in ("off", "on"):
        r, p = result["req_per_s"][name], result["p99_ms"][name]
        c = result["server_cpu_us_per_request"][name]
        table.append(
            f"| {name} | {r['median']:,.0f} ({r['min']:,.0f}-{r['max']:,.0f}) | {p['median']:.2f} "
            f"| {c['median']:.0f} |"
        )
    table.append("")
    table.append(
        f"Cost: {result['cost_percent']}% of req/s (medians); paired rounds: req/s x "
        f"{result['paired_req_per_s_ratio']:.2f}, server CPU per request x {result['paired_cpu_ratio']:.2f}; "
        f"{lines} audit lines, {result['audit_bytes_per_line']} bytes each, verified: {verified}."
    )
    args.out.with_suffix(".md").write_text("\n".join(table) + "\n")
    print("\n".join(table))


if __name__ == "__main__":
    main()
