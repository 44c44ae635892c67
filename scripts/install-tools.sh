#!/usr/bin/env bash
# Install the operations toolchain that `make test` checks deploy/ with: Debian's `prometheus` (the server
# and `promtool`), `docker-compose` (validates docker-compose.yml without a daemon), and `curl`, `jq` and
# `openssl` (the README's and docs/'s examples use them and are run as printed); and the real servers the tests start: `postgresql` (a throwaway cluster for
# the PostgreSQL keystore, see tests/pg_cluster.py), `haproxy` (the load balancer in front of replicas) and
# `softhsm2` (a real PKCS#11 token for the pkcs11 seal's tests, see tests/softhsm.py); and `gdb`, whose `gcore`
# takes the core images of a running server that tests/app/e2e/test_e2e_core_image.py searches for key material;
# and `nginx` (nginx-light), the HTTP floor bench/bench_peer.py measures Keystream against (tests/bench/test_floor_app.py);
# and `valgrind` (callgrind and its client-request header), which bench/callgrind_routes.py counts instructions with
# (tests/bench/test_callgrind_routes.py);
# and for the web console: `chromium`, the real browser its tests drive (tests/app/e2e/test_e2e_console.py), and
# `nodejs`/`npm`, which rebuild it to check the committed build (tests/app/ui/test_console_build.py).
# Idempotent: when every tool is on PATH it prints one line and exits at once.
# Installing needs root and apt-get (Debian/Ubuntu); elsewhere it says what is missing and fails.
set -euo pipefail

tools=(prometheus promtool docker-compose curl jq openssl haproxy initdb softhsm2-util gcore nginx valgrind chromium node npm)
declare -A package_of=([prometheus]=prometheus [promtool]=prometheus [docker-compose]=docker-compose [curl]=curl
    [jq]=jq [openssl]=openssl [haproxy]=haproxy [initdb]=postgresql [softhsm2-util]=softhsm2
    [gcore]=gdb [nginx]=nginx-light [valgrind]=valgrind [chromium]=chromium [node]=nodejs [npm]=npm)
# Debian keeps PostgreSQL's programs in /usr/lib/postgresql/<version>/bin, off PATH.
have() {
    command -v "$1" >/dev/null 2>&1 || { [ "$1" = initdb ] && compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; }
}
missing=()
for tool in "${tools[@]}"; do
    have "$tool" || missing+=("${package_of[$tool]}")
done
if [ "${#missing[@]}" -eq 0 ]; then
    echo "install-tools: prometheus, promtool, docker-compose, curl, jq, openssl, haproxy, postgresql, softhsm2, gdb, nginx, valgrind, chromium, node and npm present"
    exit 0
fi
# Unique package names, in a stable order.
mapfile -t packages < <(printf '%s\n' "${missing[@]}" | sort -u)

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "install-tools: missing Debian packages: ${packages[*]}" >&2
    echo "install-tools: run as root on Debian/Ubuntu: apt-get install ${packages[*]}" >&2
    exit 1
fi

echo "install-tools: installing ${packages[*]} with apt-get"
# The prometheus package would start a server on 0.0.0.0:9090 from its maintainer scripts (postgresql and
# haproxy their own servers too): forbid service starts for the duration of the install (policy-rc.d exit
# 101), unless the machine already has a policy.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 0755 "$policy"
    created_policy=1
fi
cleanup() { if [ "$created_policy" -eq 1 ]; then rm -f "$policy"; fi; }
trap cleanup EXIT

export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -q --no-install-recommends "${packages[@]}"; then
    # A fresh machine may have no package lists yet.
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${packages[@]}"
fi
for tool in "${tools[@]}"; do
    have "$tool" || { echo "install-tools: $tool still missing" >&2; exit 1; }
done
echo "install-tools: done"
