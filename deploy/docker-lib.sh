# Sourced (not run) by deploy/docker-test.sh and deploy/compose.sh: build the Keystream image on a fresh
# Debian machine without an image registry, and stop again only what was started. Run from the repository.
#
#   docker_ensure_packages   apt-get install docker.io (dockerd) and debootstrap when missing (needs root)
#   docker_daemon_start LOG  start dockerd when no daemon answers, with the first storage driver that works
#                            ($KEYSTREAM_DOCKER_STORAGE_DRIVERS, default "overlay2 vfs"), and wait until it
#                            answers; sets DOCKERD_STARTED_PID (empty when a daemon was already running)
#   docker_daemon_stop PID   stop a dockerd started by docker_daemon_start (TERM, then wait up to 30 s)
#   docker_base_image IMAGE ROOTFS LOG
#                            when IMAGE is missing, debootstrap a minimal Debian bookworm into ROOTFS (kept as
#                            a cache) from the apt mirror in /etc/apt/sources.list* and `docker import` it
#   docker_wheelhouse PYTHON DIR WORK
#                            the files of the locked build tools and image dependencies (requirements/build.txt,
#                            requirements/image.txt: the postgres and pkcs11 extras are always in the image),
#                            downloaded hash-checked with the host's pip (pip inside a build may not reach or
#                            trust PyPI); downloaded again only when the locks change
#   docker_build_image IMAGE BASE WHEELHOUSE LOG
#                            classic builder (no BuildKit here); the image installs from the wheelhouse only
#
# Nothing here pipes into an early-exiting reader (grep -q, head): callers run under `set -o pipefail`.

# Seconds to wait for a freshly started dockerd to answer `docker info`.
DOCKERD_START_TIMEOUT_SECONDS="${KEYSTREAM_DOCKERD_START_TIMEOUT:-60}"
# The offline base image and the debootstrap tree it is imported from (kept as a cache).
DOCKER_BASE_IMAGE="${KEYSTREAM_BASE_IMAGE:-local/bookworm}"
DOCKER_ROOTFS="${KEYSTREAM_ROOTFS:-/var/tmp/keystream-rootfs}"

docker_ensure_packages() {
    local missing=()
    command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
    command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
    [ "${#missing[@]}" -eq 0 ] && return 0
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "docker: missing ${missing[*]}; run as root on Debian/Ubuntu: apt-get install ${missing[*]}" >&2
        return 1
    fi
    echo "docker: installing ${missing[*]} with apt-get" >&2
    # docker.io's maintainer scripts would start the daemon (and leave it running): forbid service starts
    # for the duration of the install (policy-rc.d exit 101), unless the machine already has a policy.
    local policy="${KEYSTREAM_POLICY_RC_D:-/usr/sbin/policy-rc.d}" created_policy=0 status=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod 0755 "$policy"
        created_policy=1
    fi
    local apt=(apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "${missing[@]}")
    # A fresh machine may have no package lists yet: update once and retry.
    DEBIAN_FRONTEND=noninteractive "${apt[@]}" \
        || { apt-get update -q && DEBIAN_FRONTEND=noninteractive "${apt[@]}"; } || status=$?
    if [ "$created_policy" -eq 1 ]; then rm -f "$policy"; fi
    [ "$status" -eq 0 ] || return "$status"
    command -v dockerd >/dev/null 2>&1 && command -v debootstrap >/dev/null 2>&1 \
        || { echo "docker: dockerd or debootstrap still missing after apt-get" >&2; return 1; }
}

# dockerd answers `docker info` within the timeout while the process PID lives.
_docker_daemon_wait() {
    local pid="$1" deadline=$((SECONDS + DOCKERD_START_TIMEOUT_SECONDS))
    while [ "$SECONDS" -lt "$deadline" ]; do
        docker info >/dev/null 2>&1 && return 0
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.5
    done
    return 1
}

docker_daemon_start() {
    local log="$1" driver pid
    DOCKERD_STARTED_PID=""
    docker info >/dev/null 2>&1 && return 0
    command -v dockerd >/dev/null 2>&1 || { echo "docker: no daemon answers and dockerd is missing" >&2; return 1; }
    for driver in ${KEYSTREAM_DOCKER_STORAGE_DRIVERS:-overlay2 vfs}; do
        echo "docker: starting dockerd (storage driver $driver)" >&2
        # Own session: a Ctrl-C in the caller's terminal reaches the caller, whose cleanup stops the daemon.
        setsid dockerd --storage-driver="$driver" >>"$log" 2>&1 </dev/null &
        pid=$!
        if _docker_daemon_wait "$pid"; then
            DOCKERD_STARTED_PID="$pid"
            return 0
        fi
        echo "docker: dockerd with $driver did not come up" >&2
        docker_daemon_stop "$pid"
    done
    echo "docker: dockerd failed with every storage driver; its log ($log) ends:" >&2
    tail -n 20 "$log" >&2
    return 1
}

docker_daemon_stop() {
    local pid="$1"
    [ -n "$pid" ] || return 0
    kill "$pid" 2>/dev/null || return 0
    local deadline=$((SECONDS + 30))
    while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then
        echo "docker: dockerd (pid $pid) ignored TERM for 30 s; killing it" >&2
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}

# The first Debian archive URI configured for apt (one-line or deb822 format), else deb.debian.org.
docker_debian_mirror() {
    local uris
    uris="$(grep -hsE '^(deb |URIs:)' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
        /etc/apt/sources.list.d/*.sources | grep -oE 'https?://[^ ]+/debian/?( |$)' | grep -v security)" || true
    uris="${uris%%$'\n'*}"
    uris="${uris// /}"
    echo "${uris:-http://deb.debian.org/debian}"
}

docker_base_image() {
    local image="$1" rootfs="$2" log="$3" mirror
    docker image inspect "$image" >/dev/null 2>&1 && return 0
    if [ ! -x "$rootfs/bin/sh" ] || [ ! -e "$rootfs/.keystream-complete" ]; then
        command -v debootstrap >/dev/null 2>&1 || docker_ensure_packages
        mirror="$(docker_debian_mirror)"
        echo "docker: debootstrap bookworm (minbase) from $mirror into $rootfs" >&2
        rm -rf "$rootfs"
        debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$log" 2>&1 \
            || { tail -n 20 "$log" >&2; return 1; }
        touch "$rootfs/.keystream-complete"
    fi
    echo "docker: importing $rootfs as $image" >&2
    tar -C "$rootfs" --exclude=./.keystream-complete -c . | docker import - "$image" >/dev/null
}

docker_wheelhouse() {
    local python="$1" wheelhouse="$2" work="$3"
    local requirements="$work/requirements.txt" stamp="$wheelhouse/.requirements"
    # The image installs requirements/build.txt and requirements/image.txt with --require-hashes: download
    # exactly those files from PyPI (hash-checked here already), never local wheels with other hashes.
    cat requirements/build.txt requirements/image.txt >"$requirements"
    cmp -s "$requirements" "$stamp" 2>/dev/null && return 0
    echo "docker: downloading the locked wheelhouse $wheelhouse (host pip, cached)" >&2
    rm -rf "$wheelhouse"
    mkdir -p "$wheelhouse"
    PIP_FIND_LINKS="" "$python" -m pip download -q --require-hashes --dest "$wheelhouse" \
        -r requirements/build.txt -r requirements/image.txt
    cp "$requirements" "$stamp"
}

docker_build_image() {
    local image="$1" base="$2" wheelhouse="$3" log="$4"
    echo "docker: docker build $image (base $base, classic builder)" >&2
    DOCKER_BUILDKIT=0 docker build -q --force-rm \
        --build-arg "BASE_IMAGE=$base" --build-arg "WHEELHOUSE=$wheelhouse" \
        -t "$image" . >"$log" 2>&1 || { tail -n 40 "$log" >&2; return 1; }
}
