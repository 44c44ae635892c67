"""Debian's HAProxy in front of Keystream replicas on 127.0.0.1 (the e2e fault tests, the scale-out bench).

:func:`haproxy_config` is the one home of the load balancer's settings (the reasons are in its comments):
``balance leastconn``, health checks on ``/readyz`` every 200 ms (down after 2 failures, up after 2
successes), ``option redispatch`` with ``retries`` so a connection refused by a dead replica is retried on
another one, timeouts long enough for streams, no request-body buffering (``option http-buffer-request`` is
left off), and the 502/503/504 answers HAProxy makes itself turned into the API's JSON error shape (503 with
``Retry-After``), so a client sees one error format whether a replica or the balancer answered. HAProxy sets
``X-Forwarded-For`` and ``X-Forwarded-Proto`` itself (a client's own are replaced), for replicas that list
its address in ``KEYSTREAM_FORWARDED_ALLOW_IPS``.

:func:`start_haproxy` checks the configuration with ``haproxy -c``, starts ``haproxy -db`` (foreground, no
daemon) and waits until a request through it reaches a ready replica.

``python -m bench.haproxy_process [--bind ADDR] [--port N] [--resolver ADDR:PORT] HOST:PORT...`` prints the
configuration for other replicas (docs/operations.md, "Scale-out behind HAProxy"); the docker-compose
scale-out stack's ``deploy/compose/scaleout/haproxy.cfg`` is its output (tests/deploy/test_deploy_scaleout.py
checks that).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.service_process import free_port

#: Health-check period; a dead replica is out after ``FALL`` checks, a recovered one in after ``RISE``.
CHECK_INTER_MS = 200
FALL = 2
RISE = 2
#: Connection attempts per request (the first and the retries); with ``option redispatch`` a retry goes
#: to another replica, so a connection refused by a dead one never reaches the client.
RETRIES = 3

#: HAProxy's own error answers in the API's shape (``app/api/errors.py``): a client handles one format.
_ERRORS = (
    (502, "bad_gateway", "the replica closed the connection before answering; the request may be retried"),
    (503, "unavailable", "no Keystream replica could be reached"),
    (504, "gateway_timeout", "the replica did not answer in time"),
)


#: The name of the resolvers section (``--resolver``).
RESOLVERS = "dns"


class HaproxyError(RuntimeError):
    """HAProxy is not installed, its configuration is invalid, or it did not start."""


def find_haproxy() -> str:
    """The ``haproxy`` binary (Debian puts it in /usr/sbin, which a non-root PATH may lack).

    Raises:
        HaproxyError: not installed (Debian's ``haproxy`` package, ``scripts/install-tools.sh``).
    """
    found = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/usr/local/sbin:/sbin")
    if found is None:
        raise HaproxyError(
            "haproxy is not installed (no haproxy on PATH or in /usr/sbin): install Debian's haproxy "
            "package (scripts/install-tools.sh, `make tools`)"
        )
    return found


def haproxy_config(
    servers: list[tuple[str, int]],
    port: int,
    stats_socket: Path | None = None,
    bind: str = "127.0.0.1",
    resolver: str | None = None,
) -> str:
    """The configuration: a frontend on ``bind:port`` balancing over ``servers`` (host, port).

    ``resolver`` (``ADDRESS:PORT``, e.g. Docker's ``127.0.0.11:53``) makes HAProxy resolve the server names at
    run time: it starts while a name does not resolve yet (the server is then down until it does) and follows
    a container that comes back with another address. Without it, names resolve once, at start.
    """
    lines = [
        "global",
        "    maxconn 4096",
    ]
    if stats_socket is not None:
        lines.append(f"    stats socket {stats_socket} mode 600 level admin")
    if resolver is not None:
        lines += [
            f"resolvers {RESOLVERS}",
            f"    nameserver dns {resolver}",
            "    hold valid 1s",  # a restarted replica's new address is used within a second
            "    hold obsolete 1s",
            "    accepted_payload_size 8192",
        ]
    lines += [
        "defaults",
        "    mode http",
        "    option redispatch 1",  # every retry after a refused connection goes to another replica
        f"    retries {RETRIES}",
        "    timeout connect 1s",  # replicas are near: a dead one refuses or times out fast
        "    timeout http-request 10s",  # the request head only; bodies stream under timeout client
        "    timeout client 5m",  # long streams: a slow client may pause between chunks
        "    timeout server 5m",  # a large encrypt answers only as the body streams through
        "    timeout http-keep-alive 30s",
        "    timeout queue 5s",
        "    timeout check 1s",
    ]
    for status, code, message in _ERRORS:
        retry = " hdr Retry-After 1" if status == 503 else ""
        body = json.dumps({"error": {"code": code, "message": message}}, separators=(",", ":"))
        lines.append(f"    http-error status {status} content-type application/json{retry} string '{body}'")
    lines += [
        "frontend keystream",
        f"    bind {bind}:{port}",
        # The client's address and scheme as HAProxy saw them, replacing whatever the client sent: a replica
        # believes these headers from the proxies in KEYSTREAM_FORWARDED_ALLOW_IPS only, and a passed-on
        # X-Forwarded-For would let the client choose the address its audit records hold.
        "    http-request set-header X-Forwarded-For %[src]",
        "    http-request set-header X-Forwarded-Proto %[ssl_fc,iif(https,http)]",
        "    default_backend replicas",
        "backend replicas",
        "    balance leastconn",
        "    option httpchk GET /readyz",
        "    http-check expect status 200",
        f"    default-server inter {CHECK_INTER_MS}ms fastinter {CHECK_INTER_MS}ms"
        f" downinter {CHECK_INTER_MS}ms fall {FALL} rise {RISE}"
        + (f" resolvers {RESOLVERS} init-addr last,libc,none resolve-prefer ipv4" if resolver else ""),
    ]
    lines += [
        f"    server r{index} {host}:{server_port} check" for index, (host, server_port) in enumerate(servers)
    ]
    # When every replica fails /readyz, the cause is shared (the keystore is down): send requests to the
    # replicas anyway, as unchecked backups, rather than answer 503 here. They still serve keys they have
    # cached (until their caches stop being trusted) and answer the rest with their own 503
    # keystore_unavailable + Retry-After (or 503 sealed). A dead backup refuses the connection and the retry
    # goes elsewhere. Resolved through DNS, a backup shares its replica's address, which HAProxy refuses by
    # default (the backup would stay without an address, "No IP for server"): allow-dup-ip.
    lines.append("    option allbackups")
    duplicate = " resolve-opts allow-dup-ip" if resolver else ""
    lines += [
        f"    server r{index}-fallback {host}:{server_port} backup{duplicate}"
        for index, (host, server_port) in enumerate(servers)
    ]
    return "\n".join(lines) + "\n"


@dataclass
class Haproxy:
    """A running HAProxy: its process, port, configuration and stats socket."""

    process: subprocess.Popen[bytes]
    port: int
    config: Path
    stats_socket: Path
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def server_states(self) -> dict[str, str]:
        """``{"r0": "UP", "r1": "DOWN", ...}`` from the stats socket (``show stat``)."""
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(2)
            sock.connect(str(self.stats_socket))
            sock.sendall(b"show stat\n")
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        text = b"".join(chunks).decode().lstrip("# ")
        return {
            row["svname"]: row["status"].split()[0]
            for row in csv.DictReader(io.StringIO(text))
            if row.get("pxname") == "replicas" and row["svname"] not in {"FRONTEND", "BACKEND"}
        }


def start_haproxy(directory: Path, servers: list[tuple[str, int]]) -> Haproxy:
    """Write the configuration into ``directory``, check it, start HAProxy, wait (<= 15 s) for a replica.

    Raises:
        HaproxyError: not installed, ``haproxy -c`` rejected the configuration, or it did not serve.
    """
    binary = find_haproxy()
    port = free_port()
    config = directory / "haproxy.cfg"
    stats_socket = directory / "haproxy.sock"
    config.write_text(haproxy_config(servers, port, stats_socket))
    check = subprocess.run([binary, "-c", "-f", str(config)], capture_output=True, text=True, check=False)
    if check.returncode != 0:
        raise HaproxyError(f"haproxy -c rejected {config}: {check.stdout}{check.stderr}")
    log = directory / "haproxy.log"
    with log.open("wb") as handle:
        process = subprocess.Popen(
            [binary, "-db", "-f", str(config)], stdout=handle, stderr=subprocess.STDOUT
        )
    haproxy = Haproxy(process, port, config, stats_socket, log)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise HaproxyError(f"haproxy exited with {process.returncode}: {log.read_text()[-2000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{haproxy.url}/readyz", timeout=1).status_code == 200:
                return haproxy
        time.sleep(0.1)
    stop_haproxy(haproxy)
    raise HaproxyError(f"haproxy did not reach a ready replica in 15 s: {log.read_text()[-2000:]}")


def stop_haproxy(haproxy: Haproxy) -> None:
    """SIGTERM (HAProxy's hard stop), then SIGKILL after 5 s."""
    haproxy.process.terminate()
    try:
        haproxy.process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        haproxy.process.kill()
        haproxy.process.wait(timeout=5)


def main(argv: list[str] | None = None) -> None:
    """Print the configuration for the replicas given as ``HOST:PORT``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench.haproxy_process", description=main.__doc__)
    parser.add_argument("--bind", default="127.0.0.1", help="address HAProxy listens on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="port HAProxy listens on (default 8080)")
    parser.add_argument(
        "--resolver",
        metavar="ADDRESS:PORT",
        help="resolve the replicas' names at run time with this DNS server (docker-compose: 127.0.0.11:53)",
    )
    parser.add_argument("replicas", nargs="+", metavar="HOST:PORT")
    args = parser.parse_args(argv)
    servers = [(host, int(port)) for host, _, port in (item.rpartition(":") for item in args.replicas)]
    print(haproxy_config(servers, args.port, bind=args.bind, resolver=args.resolver), end="")


if __name__ == "__main__":
    main()
