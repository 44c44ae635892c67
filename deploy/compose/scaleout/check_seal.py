"""End-to-end check of the scale-out stack under the shamir or the pkcs11 seal
(``deploy/compose.sh scaleout-test --seal shamir|pkcs11`` runs it, after ``scaleout-up --seal SEAL``).

    python deploy/compose/scaleout/check_seal.py shamir|pkcs11 --env-file DIR/keystream.env \\
        --balancer URL --replica URL1 --replica URL2 --replica URL3 --prometheus URL \\
        --unseal-command "deploy/compose.sh unseal" \\
        -- docker-compose -f deploy/compose/scaleout.yml -f deploy/compose/scaleout-SEAL.yml

shamir (``--unseal-command`` is run as the operator would run it):

0. The bring-up kept ``operator init``'s answer where ``--env-file`` is, in ``shamir-init.json``: mode 0600 in
   a 0700 directory, N shares of which K unseal, the stack's root token.
1. Every replica is sealed: seal-status ``sealed`` with no share given yet, ``/healthz`` 200, ``/readyz``
   503; a ``/v1`` request through HAProxy is answered 503 ``sealed`` (HAProxy has no ready replica and
   falls back to the unchecked ones, which answer for themselves); Prometheus reports ``keystream_sealed``
   1 for all three.
2. The unseal command exits 0; every replica is then unsealed and ready, and Prometheus reports
   ``keystream_sealed`` 0 for all three.
3. Sealed round trips through HAProxy (0 B to 256 KiB), each ciphertext opened through every replica.
4. ``docker-compose restart keystream-2``: it comes back sealed (not ready), and while it is, round trips
   through HAProxy all succeed (HAProxy sends the sealed replica nothing). The unseal command again: the
   replicas unsealed already are left alone, keystream-2 is unsealed, ready, and opens everything sealed
   before its restart and while it was sealed.

pkcs11 (no operator step):

1. The one-shot hsm-init initialised the token and sealed the database with a key in it (its log says
   so); every replica is unsealed (seal-status ``pkcs11``, not sealed) and ready; Prometheus reports
   ``keystream_sealed`` 0 for all three.
2. Sealed round trips through HAProxy, each ciphertext opened through every replica.
3. ``docker-compose restart keystream-2``: it unseals through the token by itself, is ready again and opens
   everything sealed before.

Exits 0 when everything holds, else 1 with the reason. Needs httpx (the host's virtualenv has it).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from check import (
    CheckFailed,
    opens_everywhere,
    read_env,
    round_trip,
    round_trips_open_everywhere,
    wait_for,
)

#: The replica restarted by both checks, and its index in --replica.
RESTARTED = "keystream-2"
RESTARTED_INDEX = 1
#: Round trips through HAProxy while the restarted replica is sealed (the shamir check).
WHILE_SEALED = 40


def seal_status(client: httpx.Client) -> dict[str, Any]:
    """The replica's ``GET /v1/sys/seal-status`` body."""
    reply = client.get("/v1/sys/seal-status")
    reply.raise_for_status()
    body: dict[str, Any] = reply.json()
    return body


def error_code(reply: httpx.Response) -> str | None:
    """The ``error.code`` of a JSON error body, else None."""
    if not reply.headers.get("content-type", "").startswith("application/json"):
        return None
    body = reply.json()
    error = body.get("error") if isinstance(body, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, str) else None


def sealed_gauges(prometheus: str) -> dict[str, str]:
    """instance -> ``max(keystream_sealed)`` as Prometheus last scraped it."""
    reply = httpx.get(
        f"{prometheus}/api/v1/query",
        params={"query": 'max by (instance) (keystream_sealed{job="keystream"})'},
        timeout=5,
    )
    reply.raise_for_status()
    return {item["metric"]["instance"]: item["value"][1] for item in reply.json()["data"]["result"]}


def wait_gauges(prometheus: str, value: str, instances: list[str]) -> float:
    """Wait until Prometheus reports ``keystream_sealed == value`` for each of ``instances``."""

    def holds() -> bool:
        gauges = sealed_gauges(prometheus)
        return all(gauges.get(instance) == value for instance in instances)

    return wait_for(holds, 60, f"Prometheus: keystream_sealed == {value} for {', '.join(instances)}")


def unseal(command: list[str]) -> float:
    """Run the operator's unseal command (its output shown); how long it took. Raises CheckFailed."""
    started = time.monotonic()
    result = subprocess.run(command, timeout=300, check=False)
    if result.returncode != 0:
        raise CheckFailed(f"{shlex.join(command)} exited {result.returncode}")
    return time.monotonic() - started


def ready(client: httpx.Client) -> bool:
    """The replica answers ``/readyz`` 200 and reports itself unsealed."""
    return client.get("/readyz").status_code == 200 and seal_status(client)["sealed"] is False


def restart(compose: list[str]) -> float:
    """``docker-compose restart keystream-2``; how long it took."""
    started = time.monotonic()
    subprocess.run([*compose, "restart", RESTARTED], check=True, capture_output=True, timeout=120)
    return time.monotonic() - started


def stored_shares(secrets: Path, root_token: str) -> dict[str, Any]:
    """``shamir-init.json`` in the secrets directory, checked private and complete. Raises CheckFailed."""
    path = secrets / "shamir-init.json"
    for item, mode in ((secrets, 0o700), (path, 0o600)):
        actual = stat.S_IMODE(item.stat().st_mode)
        if actual != mode:
            raise CheckFailed(f"{item} has mode {actual:#o}, not {mode:#o}")
    stored: dict[str, Any] = json.loads(path.read_text())
    shares, threshold = stored.get("shares"), stored.get("threshold")
    if not (isinstance(shares, list) and isinstance(threshold, int) and 0 < threshold <= len(shares)):
        raise CheckFailed(f"{path} does not hold the shares and the threshold")
    if stored.get("root_token") != root_token:
        raise CheckFailed(f"{path}: operator init did not install the stack's root token (keystream.env)")
    return stored


def check_shamir(args: argparse.Namespace, compose: list[str], headers: dict[str, str]) -> None:
    stored = stored_shares(args.env_file.parent, read_env(args.env_file)["KEYSTREAM_ROOT_TOKEN"])
    print(
        f"check: {stored['threshold']} of {len(stored['shares'])} shares and the root token kept in "
        f"shamir-init.json, mode 0600 in a 0700 directory"
    )
    balancer = httpx.Client(base_url=args.balancer, headers=headers, timeout=30)
    replicas = [httpx.Client(base_url=url, headers=headers, timeout=30) for url in args.replica]
    instances = [f"keystream-{number}:8000" for number in range(1, len(replicas) + 1)]
    unseal_command = shlex.split(args.unseal_command)

    # 1. Sealed at start: alive, not ready, answering 503 sealed through HAProxy.
    for replica in replicas:
        status = seal_status(replica)
        expected = (True, 0, stored["threshold"], len(stored["shares"]))
        if (status["sealed"], status["progress"], status["threshold"], status["shares"]) != expected:
            raise CheckFailed(f"{replica.base_url} is not sealed with no share given at start: {status}")
        if replica.get("/healthz").status_code != 200 or replica.get("/readyz").status_code != 503:
            raise CheckFailed(f"{replica.base_url}: sealed, /healthz must be 200 and /readyz 503")
    answer = balancer.post("/v1/keys", json={"name": "while-sealed"})
    if answer.status_code != 503 or error_code(answer) != "sealed" or "retry-after" not in answer.headers:
        raise CheckFailed(
            f"a request through HAProxy to sealed replicas: {answer.status_code} {answer.text[:200]}"
        )
    took = wait_gauges(args.prometheus, "1", instances)
    print(
        f"check: all {len(replicas)} replicas sealed ({status['threshold']} of {status['shares']} shares "
        f"needed), /readyz 503, HAProxy answers 503 sealed; Prometheus keystream_sealed 1 ({took:.1f} s)"
    )

    # 2. The operator's unseal command.
    took = unseal(unseal_command)
    for replica in replicas:
        if not ready(replica):
            raise CheckFailed(f"{replica.base_url} is not unsealed and ready after the unseal command")
    gauges_took = wait_gauges(args.prometheus, "0", instances)
    print(
        f"check: {shlex.join(unseal_command)} unsealed every replica in {took:.1f} s; all ready, "
        f"Prometheus keystream_sealed 0 ({gauges_took:.1f} s)"
    )

    # 3. Round trips through HAProxy, opened through every replica.
    key = f"shamir-{os.urandom(4).hex()}"
    balancer.post("/v1/keys", json={"name": key}).raise_for_status()
    sealed = round_trips_open_everywhere(balancer, replicas, key)
    print(f"check: sealed round trips through HAProxy ({len(sealed)} sizes) open on every replica")

    # 4. A restarted replica comes back sealed; HAProxy serves from the others; unsealed again, nothing lost.
    restarted = replicas[RESTARTED_INDEX]
    took = restart(compose)
    wait_for(lambda: seal_status(restarted)["sealed"] is True, 60, f"{RESTARTED} answering, sealed")
    if restarted.get("/readyz").status_code != 503:
        raise CheckFailed(f"{RESTARTED} is sealed after its restart but /readyz is not 503")
    meanwhile = [
        (plaintext, round_trip(balancer, key, plaintext))
        for plaintext in (os.urandom(2048) for _ in range(WHILE_SEALED))
    ]
    if not seal_status(restarted)["sealed"]:
        raise CheckFailed(f"{RESTARTED} was unsealed while the check relied on it being sealed")
    print(
        f"check: {RESTARTED} restarted ({took:.1f} s), back sealed and not ready; {WHILE_SEALED} round trips "
        "through HAProxy meanwhile, all correct"
    )
    took = unseal(unseal_command)
    wait_for(lambda: ready(restarted), 60, f"{RESTARTED} ready after the second unseal")
    opens_everywhere(replicas, key, sealed + meanwhile)
    print(
        f"check: unsealed again in {took:.1f} s; {RESTARTED} opens everything sealed before its restart and "
        "while it was sealed"
    )


def check_pkcs11(args: argparse.Namespace, compose: list[str], headers: dict[str, str]) -> None:
    balancer = httpx.Client(base_url=args.balancer, headers=headers, timeout=30)
    replicas = [httpx.Client(base_url=url, headers=headers, timeout=30) for url in args.replica]
    instances = [f"keystream-{number}:8000" for number in range(1, len(replicas) + 1)]

    # 1. The token and the key in it made by hsm-init; every replica unsealed through it at start, ready.
    init_log = subprocess.run(
        [*compose, "logs", "--no-color", "hsm-init"], check=True, capture_output=True, text=True, timeout=60
    ).stdout
    for said in (
        "initialised the SoftHSM2 token",
        "sealed by the pkcs11 seal",
        "created the master key in it",
    ):
        if said not in init_log:
            raise CheckFailed(f"hsm-init did not say {said!r}: {init_log[-500:]}")
    for replica in replicas:
        status = seal_status(replica)
        if status.get("type") != "pkcs11" or status["sealed"] is not False:
            raise CheckFailed(f"{replica.base_url} is not unsealed by the pkcs11 seal: {status}")
        if replica.get("/readyz").status_code != 200:
            raise CheckFailed(f"{replica.base_url} is not ready")
    took = wait_gauges(args.prometheus, "0", instances)
    print(
        f"check: all {len(replicas)} replicas unsealed through the token and ready; "
        f"keystream_sealed 0 ({took:.1f} s)"
    )

    # 2. Round trips through HAProxy, opened through every replica.
    key = f"pkcs11-{os.urandom(4).hex()}"
    balancer.post("/v1/keys", json={"name": key}).raise_for_status()
    sealed = round_trips_open_everywhere(balancer, replicas, key)
    print(f"check: sealed round trips through HAProxy ({len(sealed)} sizes) open on every replica")

    # 3. A restarted replica unseals by itself.
    restarted = replicas[RESTARTED_INDEX]
    took = restart(compose)
    ready_after = wait_for(lambda: ready(restarted), 60, f"{RESTARTED} ready again by itself")
    opens_everywhere([restarted], key, sealed)
    print(
        f"check: {RESTARTED} restarted ({took:.1f} s), unsealed through the token and ready "
        f"{ready_after:.1f} s later, opens everything sealed before"
    )


def main() -> int:
    argv = sys.argv[1:]
    if "--" not in argv:
        print("usage: check_seal.py shamir|pkcs11 OPTIONS -- COMPOSE-COMMAND...", file=sys.stderr)
        return 2
    split = argv.index("--")
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("seal", choices=["shamir", "pkcs11"])
    parser.add_argument("--env-file", type=Path, required=True, help="keystream.env (the root token)")
    parser.add_argument("--balancer", required=True)
    parser.add_argument("--replica", action="append", default=[])
    parser.add_argument("--prometheus", required=True)
    parser.add_argument("--unseal-command", default="deploy/compose.sh unseal", help="shamir: how to unseal")
    args = parser.parse_args(argv[:split])
    compose = argv[split + 1 :]
    if len(args.replica) != 3:
        parser.error("give three --replica URLs")
    try:
        headers = {"Authorization": f"Bearer {read_env(args.env_file)['KEYSTREAM_ROOT_TOKEN']}"}
        if args.seal == "shamir":
            check_shamir(args, compose, headers)
        else:
            check_pkcs11(args, compose, headers)
    except (CheckFailed, httpx.HTTPError, subprocess.SubprocessError, OSError, ValueError, KeyError) as exc:
        print(f"check: FAILED: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
