#!/usr/bin/env bash
# make docker-test: build the Keystream image for real and prove it serves.
#
# 1. install docker.io and debootstrap when missing (apt-get, as root); start dockerd when no daemon answers
#    (overlay2, else vfs) and stop it again at the end (deploy/docker-lib.sh does steps 1-4);
# 2. base image: $KEYSTREAM_BASE_IMAGE (default local/bookworm); when missing, debootstrap a minimal Debian
#    bookworm into $KEYSTREAM_ROOTFS (default /var/tmp/keystream-rootfs, kept as a cache) from the apt mirror in
#    /etc/apt/sources.list* and `docker import` it -- no registry is needed;
# 3. wheels of every dependency built on the host into build/wheelhouse (pip inside a build may not reach or
#    trust PyPI), so the image installs with --no-index;
# 4. classic builder (DOCKER_BUILDKIT=0); the builder stage compiles the extension into the wheel; then the
#    image's SBOM (CycloneDX 1.6: its Python distributions and Debian packages, deploy/sbom.py run inside
#    it) into build/sbom/keystream-image.cdx.json;
# 5. run the container on a free 127.0.0.1 port the way deploy/k8s does (read-only root, no capabilities, two
#    workers), wait for its HEALTHCHECK to say healthy, check it runs as a non-root user, then create a key
#    and do sealed and raw encrypt/decrypt round trips through the port on every backend;
# 6. remove the container and its volume, stop dockerd if this script started it. Images stay as a cache.
#
# Needs root (apt-get, dockerd, debootstrap) unless the tools, a daemon and the base image already exist.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
# shellcheck source=deploy/docker-lib.sh
source "$repo/deploy/docker-lib.sh"
image="${KEYSTREAM_TEST_IMAGE:-keystream:docker-test}"
python="${KEYSTREAM_HOST_PYTHON:-$repo/.venv/bin/python}"  # builds the wheelhouse (needs pip)
work="$(mktemp -d /tmp/keystream-docker-test.XXXXXX)"
container="keystream-docker-test-$$"
started_dockerd=""
t0=$SECONDS

log() { printf '[docker-test %3ds] %s\n' "$((SECONDS - t0))" "$*"; }

cleanup() {
    local status=$?
    if docker inspect "$container" >/dev/null 2>&1; then
        if [ "$status" -ne 0 ]; then
            log "container log (last 30 lines):"
            docker logs --tail 30 "$container" 2>&1 | sed 's/^/    /' || true
        fi
        docker rm -f -v "$container" >/dev/null 2>&1 || true
    fi
    if [ -n "$started_dockerd" ]; then
        log "stopping the dockerd this script started (pid $started_dockerd)"
        docker_daemon_stop "$started_dockerd"
    fi
    rm -rf "$work"
    if [ "$status" -eq 0 ]; then log "PASS"; else log "FAIL (exit $status)"; fi
}
trap cleanup EXIT

# --- 1. tools and daemon -------------------------------------------------------------------------------
docker_ensure_packages
docker_daemon_start "$work/dockerd.log"
started_dockerd="$DOCKERD_STARTED_PID"

# --- 2.-4. base image, wheelhouse, image -----------------------------------------------------------------
docker_base_image "$DOCKER_BASE_IMAGE" "$DOCKER_ROOTFS" "$work/debootstrap.log"
docker_wheelhouse "$python" build/wheelhouse "$work"
log "docker build ($image)"
docker_build_image "$image" "$DOCKER_BASE_IMAGE" build/wheelhouse "$work/build.log"

# --- the image's SBOM: deploy/sbom.py run inside it (its venv and its Debian packages), CycloneDX 1.6 JSON --
sbom="build/sbom/keystream-image.cdx.json"
mkdir -p build/sbom
image_id="$(docker image inspect -f '{{.Id}}' "$image")"
docker run --rm -i --network none --entrypoint /opt/keystream/venv/bin/python "$image" - \
    --name "${image%%:*}" --version "$image_id" <deploy/sbom.py >"$sbom.tmp"
mv "$sbom.tmp" "$sbom"
# The image holds exactly the locked distributions (and keystream itself), at the locked versions.
"$python" - "$sbom" requirements/image.txt <<'EOF'
import json, re, sys
components = json.load(open(sys.argv[1]))["components"]
image = {c["purl"].split("/", 1)[1].rsplit("@", 1)[0]: c["version"] for c in components if c["purl"].startswith("pkg:pypi/")}
locked = dict(re.findall(r"^([a-z0-9._-]+)==(\S+) \\$", open(sys.argv[2]).read(), re.M))
image.pop("keystream", None)
wrong = sorted(f"{n} {image.get(n)} (locked {locked.get(n)})" for n in set(image) | set(locked) if image.get(n) != locked.get(n))
if wrong:
    sys.exit("docker-test: the image's Python packages differ from requirements/image.txt: " + ", ".join(wrong))
EOF
log "SBOM $sbom: $("$python" -c 'import json, sys; c = json.load(open(sys.argv[1]))["components"]; print(sum(x["purl"].startswith("pkg:pypi/") for x in c), "Python and", sum(x["purl"].startswith("pkg:deb/") for x in c), "Debian packages")' "$sbom")"

# --- 5. run and check ---------------------------------------------------------------------------------------
port="$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
token="ks_$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')_$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')"
log "running $container on 127.0.0.1:$port"
# As deploy/k8s runs it: read-only root filesystem with a tmpfs /tmp, no capabilities, no privilege
# escalation, two workers (multiprocess metrics in /tmp). Plain HTTP on the container's 0.0.0.0 needs
# KEYSTREAM_TLS_DISABLE=true (published on the host's loopback only, as a proxy would reach it).
docker run -d --name "$container" -p "127.0.0.1:$port:8000" \
    --read-only --tmpfs /tmp:rw,size=64m --cap-drop ALL --security-opt no-new-privileges \
    -e "KEYSTREAM_ROOT_TOKEN=$token" -e KEYSTREAM_WORKERS=2 -e KEYSTREAM_TLS_DISABLE=true "$image" >/dev/null
health=""
for _ in $(seq 1 90); do
    health="$(docker inspect -f '{{.State.Health.Status}}' "$container")"
    [ "$health" = "healthy" ] && break
    [ "$(docker inspect -f '{{.State.Running}}' "$container")" = "true" ] || break
    sleep 1
done
[ "$health" = "healthy" ] || { echo "docker-test: container not healthy (status: $health)" >&2; exit 1; }
log "healthy"

uid="$(docker exec "$container" id -u)"
[ "$uid" != "0" ] || { echo "docker-test: the container runs as root" >&2; exit 1; }

base="http://127.0.0.1:$port"
auth=(-H "Authorization: Bearer $token")
curl -fsS "${auth[@]}" -H 'Content-Type: application/json' -d '{"name": "docker-test"}' "$base/v1/keys" >/dev/null
curl -fsS "${auth[@]}" "$base/v1/backends" >"$work/backends.json"
head -c $((3 * 1024 * 1024 + 17)) /dev/urandom >"$work/plain"
for backend in $("$python" -c 'import json, sys; print(" ".join(b["name"] for b in json.load(open(sys.argv[1]))["backends"] if b["available"]))' "$work/backends.json"); do
    curl -fsS "${auth[@]}" -H 'Content-Type: application/octet-stream' --data-binary @"$work/plain" \
        "$base/v1/keys/docker-test/encrypt?backend=$backend" -o "$work/sealed"
    curl -fsS "${auth[@]}" -H 'Content-Type: application/octet-stream' --data-binary @"$work/sealed" \
        "$base/v1/keys/docker-test/decrypt?backend=$backend" -o "$work/opened"
    cmp -s "$work/plain" "$work/opened" || { echo "docker-test: sealed round trip differs ($backend)" >&2; exit 1; }
    curl -fsS "${auth[@]}" -H 'Content-Type: application/octet-stream' --data-binary @"$work/plain" -D "$work/headers" \
        "$base/v1/keys/docker-test/encrypt?format=raw&backend=$backend" -o "$work/raw"
    iv="$(tr -d '\r' <"$work/headers" | awk -F': ' 'tolower($1) == "keystream-iv" {print $2}')"
    curl -fsS "${auth[@]}" -H 'Content-Type: application/octet-stream' --data-binary @"$work/raw" \
        "$base/v1/keys/docker-test/decrypt?format=raw&iv=$iv&key_version=1&backend=$backend" -o "$work/raw-opened"
    cmp -s "$work/plain" "$work/raw-opened" || { echo "docker-test: raw round trip differs ($backend)" >&2; exit 1; }
    log "round trips through the published port OK ($backend, sealed and raw, $(stat -c %s "$work/plain") bytes)"
done
# Into a file, then grep: `curl | grep -q` under pipefail fails whenever grep exits at the first match before
# curl has written the rest (curl gets SIGPIPE, exit 23), which made a cold first run fail at random.
curl -fsS "$base/metrics" -o "$work/metrics"
grep -q '^keystream_crypto_seconds_count{' "$work/metrics" \
    || { echo "docker-test: /metrics has no keystream_crypto_seconds" >&2; exit 1; }
log "image $(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1 / 1e6}'), runs as uid $uid"
