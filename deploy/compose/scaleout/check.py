"""End-to-end check of the running scale-out stack (``deploy/compose.sh scaleout-test`` runs it).

    python deploy/compose/scaleout/check.py --env-file DIR/keystream.env --balancer URL \\
        --replica URL1 --replica URL2 --replica URL3 --prometheus URL \\
        -- docker-compose -f deploy/compose/scaleout.yml

1. Prometheus scrapes every replica (``up{job="keystream"}`` is 1 for all three).
2. Sealed round trips through HAProxy (0 B to 256 KiB); each ciphertext also opens through every replica.
   Then the console through HAProxy: ``/ui/config.json`` names this stack's Prometheus, the page's CSP
   allows connecting to it and to nothing else, and Prometheus answers the console's queries (its
   "replicas reporting" query counts three; the throughput chart has series) as the browser would ask them.
3. A rotation through replica 1 is used by encrypts through replica 2 (the new ``Keystream-Key-Version``)
   within 2 s, and what replica 2 sealed opens through replica 3 and the balancer.
4. Replica 2 is stopped (``docker-compose stop``) while three client threads loop round trips through the
   balancer: no 500, every 200 correct, at most one failed request per thread (only requests in flight on
   the stopped replica may fail, and cleanly: a connection error or a JSON 502/503/504), every request after
   the first second succeeds; Prometheus then reports the stopped replica down.
5. Replica 2 is started again, becomes ready and opens what was sealed while it was down.

Exits 0 when everything holds, else 1 with the reason. Needs httpx (the host's virtualenv has it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

OCTETS = {"Content-Type": "application/octet-stream"}
#: The console's charts and their PromQL (the dashboard reads it; a test compares it with Grafana's).
CHARTS = Path(__file__).resolve().parents[3] / "ui" / "src" / "charts.json"
SIZES = (0, 1, 1024, 65536 + 7, 256 * 1024)
THREADS = 3
CLEAN_FAILURES = {0, 502, 503, 504}  # 0: a connection error


class CheckFailed(Exception):
    """One of the checks did not hold."""


def read_env(path: Path) -> dict[str, str]:
    """``NAME=value`` lines of a compose env file."""
    values = {}
    for line in path.read_text().splitlines():
        name, sep, value = line.partition("=")
        if sep and not line.lstrip().startswith("#"):
            values[name.strip()] = value.strip()
    return values


def wait_for(condition: Callable[[], bool], seconds: float, what: str) -> float:
    """Poll ``condition`` until it holds; return how long it took. Raises CheckFailed after ``seconds``."""
    started = time.monotonic()
    while True:
        try:
            if condition():
                return time.monotonic() - started
        except httpx.HTTPError:
            pass
        if time.monotonic() - started > seconds:
            raise CheckFailed(f"{what}: not within {seconds:.0f} s")
        time.sleep(0.2)


def up_values(prometheus: str) -> dict[str, str]:
    """instance -> value of ``up{job="keystream"}``."""
    reply = httpx.get(f"{prometheus}/api/v1/query", params={"query": 'up{job="keystream"}'}, timeout=5)
    reply.raise_for_status()
    return {item["metric"]["instance"]: item["value"][1] for item in reply.json()["data"]["result"]}


def round_trip(client: httpx.Client, key: str, plaintext: bytes) -> bytes:
    sealed = client.post(f"/v1/keys/{key}/encrypt", content=plaintext, headers=OCTETS)
    sealed.raise_for_status()
    opened = client.post(f"/v1/keys/{key}/decrypt", content=sealed.content, headers=OCTETS)
    opened.raise_for_status()
    if opened.content != plaintext:
        raise CheckFailed(
            f"round trip of {len(plaintext)} bytes through {client.base_url} returned other bytes"
        )
    return sealed.content


def opens_everywhere(clients: list[httpx.Client], key: str, sealed: list[tuple[bytes, bytes]]) -> None:
    """Every ``(plaintext, ciphertext)`` of ``sealed`` opens through every client. Raises CheckFailed."""
    for client in clients:
        for plaintext, ciphertext in sealed:
            opened = client.post(f"/v1/keys/{key}/decrypt", content=ciphertext, headers=OCTETS)
            if opened.status_code != 200 or opened.content != plaintext:
                raise CheckFailed(
                    f"{len(plaintext)} bytes sealed through the balancer do not open through "
                    f"{client.base_url} (status {opened.status_code})"
                )


def round_trips_open_everywhere(
    balancer: httpx.Client, replicas: list[httpx.Client], key: str
) -> list[tuple[bytes, bytes]]:
    """Round trips of every size in SIZES through the balancer, each ciphertext then opened through every
    replica; returns the ``(plaintext, ciphertext)`` pairs. Raises CheckFailed."""
    sealed = [(plaintext, round_trip(balancer, key, plaintext)) for plaintext in map(os.urandom, SIZES)]
    opens_everywhere(replicas, key, sealed)
    return sealed


@dataclass
class Loop:
    """Client threads doing round trips through the balancer; outcomes as (start, end, status, detail)."""

    url: str
    headers: dict[str, str]
    key: str
    outcomes: list[tuple[float, float, int, str]] = field(default_factory=list)
    sealed: list[tuple[bytes, bytes]] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def worker(self) -> None:
        with httpx.Client(base_url=self.url, headers=self.headers, timeout=10) as client:
            while not self.stop.is_set():
                plaintext = os.urandom(2048)
                sealed = self.request(client, f"/v1/keys/{self.key}/encrypt", plaintext)
                if sealed is None:
                    continue
                opened = self.request(client, f"/v1/keys/{self.key}/decrypt", sealed)
                if opened is not None and opened != plaintext:
                    with self.lock:
                        self.wrong.append("a decrypt through the balancer returned other bytes")
                elif opened is not None:
                    with self.lock:
                        self.sealed.append((plaintext, sealed))

    def request(self, client: httpx.Client, path: str, body: bytes) -> bytes | None:
        started = time.monotonic()
        try:
            reply = client.post(path, content=body, headers=OCTETS)
        except httpx.TransportError as exc:
            with self.lock:
                self.outcomes.append((started, time.monotonic(), 0, type(exc).__name__))
            return None
        detail = "" if reply.is_success else reply.text[:200]
        if reply.status_code in (502, 503, 504) and not reply.headers.get("content-type", "").startswith(
            "application/json"
        ):
            detail = "not JSON: " + detail
        with self.lock:
            self.outcomes.append((started, time.monotonic(), reply.status_code, detail))
        return reply.content if reply.status_code == 200 else None


def console_reads_prometheus(balancer: httpx.Client, prometheus: str) -> None:
    """The console served through the balancer points its dashboard at this stack's Prometheus, which
    answers the console's own queries for all three replicas."""
    config = balancer.get("/ui/config.json")
    config.raise_for_status()
    if config.json().get("prometheus_url") != prometheus:
        raise CheckFailed(f"console: /ui/config.json names {config.json()!r}, not {prometheus}")
    page = balancer.get("/ui/")
    page.raise_for_status()
    directives = dict(
        part.strip().split(" ", 1)
        for part in page.headers["content-security-policy"].split(";")
        if part.strip()
    )
    if directives.get("connect-src") != f"'self' {prometheus}":
        raise CheckFailed(f"console: connect-src is {directives.get('connect-src')!r}")
    charts = json.loads(CHARTS.read_text())

    def values(expr: str) -> list[str]:
        """The instant values of ``expr``'s series, as Prometheus' HTTP API gives them to the console."""
        reply = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=5)
        reply.raise_for_status()
        return [str(series["value"][1]) for series in reply.json()["data"]["result"]]

    replicas = charts["replicas"]["queries"][0]["expr"]
    wait_for(lambda: values(replicas) == ["3"], 60, "console: 3 replicas reporting")
    throughput = next(chart for chart in charts["charts"] if chart["id"] == "throughput")
    expr = throughput["queries"][0]["expr"].replace("$backend", ".*")
    wait_for(lambda: bool(values(expr)), 90, "console: throughput series (recording rule)")


def check(args: argparse.Namespace, compose: list[str]) -> None:
    token = read_env(args.env_file)["KEYSTREAM_ROOT_TOKEN"]
    headers = {"Authorization": f"Bearer {token}"}
    balancer = httpx.Client(base_url=args.balancer, headers=headers, timeout=30)
    replicas = [httpx.Client(base_url=url, headers=headers, timeout=30) for url in args.replica]
    if len(replicas) != 3:
        raise CheckFailed("give three --replica URLs")

    # 1. Prometheus scrapes every replica.
    took = wait_for(
        lambda: sorted(up_values(args.prometheus).values()) == ["1", "1", "1"],
        90,
        "Prometheus: 3 replicas up",
    )
    print(f"check: Prometheus scrapes all 3 replicas (up == 1 after {took:.1f} s)")

    # 2. Round trips through the balancer, opened through every replica.
    key = f"scaleout-{os.urandom(4).hex()}"
    balancer.post("/v1/keys", json={"name": key}).raise_for_status()
    round_trips_open_everywhere(balancer, replicas, key)
    print(
        f"check: sealed round trips through HAProxy ({', '.join(map(str, SIZES))} bytes) "
        "open on every replica"
    )
    console_reads_prometheus(balancer, args.prometheus)
    print(
        "check: the console through HAProxy reads this Prometheus, which answers its queries for 3 replicas"
    )

    # 3. A rotation through replica 1, used through replica 2.
    round_trip(replicas[1], key, b"warm")  # replica 2 has the current version cached
    rotated = replicas[0].post(f"/v1/keys/{key}/rotate")
    rotated.raise_for_status()
    version = str(rotated.json()["latest_version"])
    holder: dict[str, bytes] = {}

    def new_version_through_2() -> bool:
        reply = replicas[1].post(f"/v1/keys/{key}/encrypt", content=b"after the rotation", headers=OCTETS)
        reply.raise_for_status()
        holder["sealed"] = reply.content
        return reply.headers["Keystream-Key-Version"] == version

    took = wait_for(new_version_through_2, 2, f"replica 2 encrypting with version {version}")
    for client in (replicas[2], balancer):
        opened = client.post(f"/v1/keys/{key}/decrypt", content=holder["sealed"], headers=OCTETS)
        if opened.status_code != 200 or opened.content != b"after the rotation":
            raise CheckFailed(
                f"version {version} sealed through replica 2 does not open through {client.base_url}"
            )
    print(
        f"check: rotation through replica 1 used through replica 2 after {1000 * took:.0f} ms; "
        "opens on 3 and HAProxy"
    )

    # 4. Replica 2 stopped under load.
    loop = Loop(args.balancer, headers, key)
    threads = [threading.Thread(target=loop.worker, daemon=True) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    stopped_at = time.monotonic()
    subprocess.run([*compose, "stop", "keystream-2"], check=True, capture_output=True, timeout=60)
    stop_returned = time.monotonic()
    time.sleep(3.0)
    loop.stop.set()
    for thread in threads:
        thread.join(timeout=15)
    failures = [o for o in loop.outcomes if o[2] != 200]
    if loop.wrong:
        raise CheckFailed(loop.wrong[0])
    if any(o[2] not in CLEAN_FAILURES or o[3].startswith("not JSON") for o in failures):
        raise CheckFailed(f"unclean failures while a replica stopped: {failures}")
    if len(failures) > THREADS:
        raise CheckFailed(
            f"{len(failures)} failed requests while a replica stopped (at most {THREADS}): {failures}"
        )
    late = [o for o in failures if o[0] > stop_returned + 1.0]
    if late:
        raise CheckFailed(f"requests failed more than 1 s after the replica stopped: {late}")
    after = [o for o in loop.outcomes if o[0] > stop_returned and o[2] == 200]
    if not after:
        raise CheckFailed("no request succeeded through HAProxy after the replica stopped")
    print(
        f"check: keystream-2 stopped under load ({stop_returned - stopped_at:.1f} s): "
        f"{len(loop.outcomes)} requests, {len(failures)} failed cleanly, {len(after)} succeeded after the "
        "stop, every answer correct"
    )
    took = wait_for(
        lambda: up_values(args.prometheus).get("keystream-2:8000") == "0", 30, "Prometheus: keystream-2 down"
    )
    print(f"check: Prometheus reports keystream-2 down ({took:.1f} s after the stop)")

    # 5. Back again: ready, and it opens what was sealed while it was down.
    subprocess.run([*compose, "start", "keystream-2"], check=True, capture_output=True, timeout=60)
    took = wait_for(lambda: replicas[1].get("/readyz").status_code == 200, 60, "keystream-2 ready again")
    plaintext, sealed = loop.sealed[-1]
    opened = replicas[1].post(f"/v1/keys/{key}/decrypt", content=sealed, headers=OCTETS)
    if opened.status_code != 200 or opened.content != plaintext:
        raise CheckFailed("the restarted replica does not open what was sealed while it was down")
    print(f"check: keystream-2 started again, ready after {took:.1f} s, opens what was sealed meanwhile")


def main() -> int:
    argv = sys.argv[1:]
    if "--" not in argv:
        print("usage: check.py OPTIONS -- COMPOSE-COMMAND...", file=sys.stderr)
        return 2
    split = argv.index("--")
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--env-file", type=Path, required=True, help="keystream.env (the root token)")
    parser.add_argument("--balancer", required=True)
    parser.add_argument("--replica", action="append", default=[])
    parser.add_argument("--prometheus", required=True)
    args = parser.parse_args(argv[:split])
    try:
        check(args, argv[split + 1 :])
    except (CheckFailed, httpx.HTTPError, subprocess.SubprocessError) as exc:
        print(f"check: FAILED: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
