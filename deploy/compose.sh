#!/usr/bin/env bash
# make compose-up / compose-down / compose-test: the docker-compose stack on a machine without an image
# registry (where `docker-compose up --build` cannot pull python:3.11-slim, prom/prometheus or grafana).
#
#   deploy/compose.sh up     build what is missing, then `docker-compose up -d` keystream and prometheus:
#                            - docker.io/debootstrap installed and dockerd started when missing (as root; the
#                              daemon keeps running for the stack, its pid in build/compose/dockerd.pid);
#                            - keystream:${KEYSTREAM_IMAGE_TAG:-latest} built as `make docker-test` builds it
#                              (debootstrap base local/bookworm, host-built wheelhouse, classic builder);
#                            - keystream-prometheus:local: Debian's prometheus on the same base
#                              (deploy/compose/prometheus.Dockerfile), swapped in by deploy/compose/offline.yml;
#                            - KEYSTREAM_ROOT_TOKEN from the environment, else from build/compose/root-token
#                              (made on first use, mode 0600);
#                            waits until both services are healthy and prints the URLs.
#   deploy/compose.sh down   `docker-compose down` (named volumes, and so the keys, stay) and stop the dockerd
#                            that `up` started.
#   deploy/compose.sh test   up, then /healthz, a key, a sealed round trip through the published port and
#                            Prometheus scraping keystream; then down (volumes removed). Exit 0 = pass.
#   deploy/compose.sh scaleout-up [--seal file|shamir|pkcs11]
#                            the scale-out stack (deploy/compose/scaleout.yml): PostgreSQL, three
#                            replicas, HAProxy, Prometheus; images built as for `up` plus keystream-postgres:local
#                            and keystream-haproxy:local (Debian's packages on the same base); secrets made on
#                            first use in build/scaleout (KEYSTREAM_SCALEOUT_SECRETS): keystream.env (database URL
#                            and root token), postgres.env (its password), and the seal's own (below). The seal
#                            (default file) is recorded in the secrets directory (`seal`): the database is
#                            sealed by it, so a later scaleout-up, scaleout-down or unseal uses the same, and
#                            another --seal for the same directory is refused.
#                            - file: master-key (uid 10001, mode 0600), mounted into every replica;
#                            - shamir (override deploy/compose/scaleout-shamir.yml): once, `keystream-server
#                              operator init --shares 3 --threshold 2 --json` against the database, its answer
#                              kept in shamir-init.json (mode 0600; a demo convenience: shares stored together
#                              are one key again). The replicas start sealed: up waits until they answer, not
#                              until they are healthy, and says to run `deploy/compose.sh unseal`;
#                            - pkcs11 (override deploy/compose/scaleout-pkcs11.yml): pkcs11-pin (uid 10001, mode
#                              0600) and the image keystream-softhsm:TAG (keystream:TAG plus Debian's SoftHSM2, a
#                              demo of the HSM path); the one-shot service hsm-init makes the token and the key in
#                              it, and the replicas unseal through it by themselves.
#   deploy/compose.sh unseal  (shamir stack) each replica in turn gets the shares of shamir-init.json through
#                            the client's `keystream operator unseal --url` (.venv/bin/keystream; a replica that
#                            is unsealed already is left alone); then waits until every service is healthy.
#   deploy/compose.sh scaleout-down   `docker-compose down` for it (add -v by hand to drop the database)
#   deploy/compose.sh scaleout-test [--seal file|shamir|pkcs11]
#                            scaleout-up on free ports in a project of its own, then the checks, then down -v.
#                            file: deploy/compose/scaleout/check.py (round trips through HAProxy, a rotation
#                            through one replica used through another, Prometheus scraping all three, one replica
#                            stopped under load and started again); shamir and pkcs11:
#                            deploy/compose/scaleout/check_seal.py (sealed start, unseal, round trips, a replica
#                            restarted). Exit 0 = pass.
#
# Grafana has no offline image and is not started; with registry access, plain `docker-compose up` runs it.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
# shellcheck source=deploy/docker-lib.sh
source "$repo/deploy/docker-lib.sh"

python="${KEYSTREAM_HOST_PYTHON:-$repo/.venv/bin/python}"
state="$repo/build/compose"
export KEYSTREAM_IMAGE_TAG="${KEYSTREAM_IMAGE_TAG:-latest}"
compose=(docker-compose -f docker-compose.yml -f deploy/compose/offline.yml)
services=(keystream prometheus)
started_dockerd=""
remove_on_exit=""
# Absolute: docker-compose takes a relative path from deploy/compose/, this script from the repository root.
scaleout_secrets="$(realpath -m "${KEYSTREAM_SCALEOUT_SECRETS:-$repo/build/scaleout}")"
# The scale-out stack's seal (file, shamir or pkcs11): --seal, else the one recorded in $scaleout_secrets/seal.
scaleout_seal=""
# `operator init` of the shamir stack: how many shares, and how many unseal.
shamir_shares=3
shamir_threshold=2
t0=$SECONDS

log() { printf '[compose %3ds] %s\n' "$((SECONDS - t0))" "$*"; }

# KEYSTREAM_ROOT_TOKEN from the environment, else from (or first into) build/compose/root-token.
load_root_token() {
    [ -n "${KEYSTREAM_ROOT_TOKEN:-}" ] && return 0
    if [ ! -s "$state/root-token" ]; then
        local id secret
        id="$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
        secret="$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')"
        (umask 077 && echo "ks_${id}_${secret}" >"$state/root-token")
    fi
    KEYSTREAM_ROOT_TOKEN="$(cat "$state/root-token")"
    log "root token in ${state#"$repo"/}/root-token (set KEYSTREAM_ROOT_TOKEN to choose one)"
}

# Wait until every service in "${services[@]}" reports healthy (180 s at most), or fail with their logs.
wait_healthy() {
    local deadline=$((SECONDS + 180)) service id health unhealthy
    while :; do
        unhealthy=""
        for service in "${services[@]}"; do
            id="$("${compose[@]}" ps -q "$service")"
            health="$(docker inspect -f '{{.State.Health.Status}}' "$id" 2>/dev/null || echo missing)"
            [ "$health" = healthy ] || unhealthy="$unhealthy $service=$health"
        done
        [ -z "$unhealthy" ] && return 0
        if [ "$SECONDS" -ge "$deadline" ]; then
            echo "compose: not healthy after 180 s:$unhealthy" >&2
            "${compose[@]}" logs --tail 30 >&2 || true
            return 1
        fi
        sleep 2
    done
}

# An image made of Debian packages on the base image (Prometheus, PostgreSQL, HAProxy), built once.
build_local_image() {
    local image="$1" dockerfile="$2" context="$3" work="$4"
    docker image inspect "$image" >/dev/null 2>&1 && return 0
    echo "docker: docker build $image ($dockerfile on $DOCKER_BASE_IMAGE)" >&2
    DOCKER_BUILDKIT=0 docker build -q --build-arg "BASE_IMAGE=$DOCKER_BASE_IMAGE" -t "$image" \
        -f "$dockerfile" "$context" >"$work/${image%%:*}-build.log" 2>&1 \
        || { tail -n 40 "$work/${image%%:*}-build.log" >&2; return 1; }
}

# Tools, daemon, base image, wheelhouse and the Keystream image (shared by up and scaleout-up).
prepare_images() {
    local work="$1"
    docker_ensure_packages
    if ! docker info >/dev/null 2>&1; then
        docker_daemon_start "$state/dockerd.log"
        started_dockerd="$DOCKERD_STARTED_PID"
        # Recorded at once, so `down` also stops it after an `up` that failed later on.
        echo "$started_dockerd" >"$state/dockerd.pid"
    fi
    docker_base_image "$DOCKER_BASE_IMAGE" "$DOCKER_ROOTFS" "$work/debootstrap.log"
    docker_wheelhouse "$python" build/wheelhouse "$work"
    docker_build_image "keystream:$KEYSTREAM_IMAGE_TAG" "$DOCKER_BASE_IMAGE" build/wheelhouse "$work/build.log"
}

up() {
    mkdir -p "$state"
    local work
    work="$(mktemp -d /tmp/keystream-compose.XXXXXX)"
    prepare_images "$work"  # not in a || list: that would switch off set -e inside it
    build_local_image keystream-prometheus:local deploy/compose/prometheus.Dockerfile deploy/compose "$work" \
        || { rm -rf "$work"; return 1; }
    rm -rf "$work"
    load_root_token
    export KEYSTREAM_ROOT_TOKEN
    log "docker-compose up -d ${services[*]}"
    "${compose[@]}" up -d --no-build "${services[@]}"
    wait_healthy
    log "healthy: Keystream http://127.0.0.1:${KEYSTREAM_PORT:-8000}, Prometheus http://127.0.0.1:${PROMETHEUS_PORT:-9090}"
}

# The scale-out stack's secrets in $scaleout_secrets, made on first use (never overwritten).
scaleout_make_secrets() {
    local dir="$scaleout_secrets" password id secret
    mkdir -p "$dir"
    chmod 0700 "$dir"
    if [ ! -s "$dir/postgres.env" ] || [ ! -s "$dir/keystream.env" ]; then
        password="$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')"
        id="$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
        secret="$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')"
        (
            umask 077
            echo "POSTGRES_PASSWORD=$password" >"$dir/postgres.env"
            printf 'KEYSTREAM_DATABASE_URL=postgresql://keystream:%s@postgres:5432/keystream\nKEYSTREAM_ROOT_TOKEN=%s\n' \
                "$password" "ks_${id}_${secret}" >"$dir/keystream.env"
        )
        log "secrets in $dir (keystream.env: database URL and root token; postgres.env)"
    fi
    case "$scaleout_seal" in
        file)
            if [ ! -s "$dir/master-key" ]; then
                (umask 077 && head -c 32 /dev/urandom | base64 >"$dir/master-key")
                log "master key in $dir/master-key"
            fi
            owned_by_image_user "$dir/master-key" ;;
        pkcs11)
            if [ ! -s "$dir/pkcs11-pin" ]; then
                (umask 077 && od -An -N12 -tx1 /dev/urandom | tr -d ' \n' >"$dir/pkcs11-pin")
                log "SoftHSM2 user PIN in $dir/pkcs11-pin"
            fi
            owned_by_image_user "$dir/pkcs11-pin" ;;
    esac
}

# A file mounted as a compose secret (a bind mount) keeps its owner and mode: the image's user (uid 10001)
# must own it, mode 0600.
owned_by_image_user() {
    local file="$1"
    if [ "$(id -u)" -eq 0 ]; then
        chown 10001:10001 "$file"
    elif [ "$(stat -c %u "$file")" != 10001 ]; then
        echo "compose: $file must be owned by uid 10001 (the image's user): chown it as root" >&2
        return 1
    fi
}

# The seal of the stack whose secrets are in $scaleout_secrets: the recorded one (a directory made before seals
# were recorded holds a master key: file), else empty.
scaleout_recorded_seal() {
    if [ -s "$scaleout_secrets/seal" ]; then
        cat "$scaleout_secrets/seal"
    elif [ -s "$scaleout_secrets/master-key" ]; then
        echo file
    fi
}

# Set scaleout_seal from --seal (or the recorded seal, else file) and the compose files that run it; a --seal
# other than the recorded one is refused: the stack's database is sealed by the recorded seal.
scaleout_choose_seal() {
    local requested="$1" recorded
    recorded="$(scaleout_recorded_seal)"
    case "$requested" in
        ""|file|shamir|pkcs11) ;;
        *) echo "compose: --seal must be file, shamir or pkcs11, not '$requested'" >&2; return 2 ;;
    esac
    if [ -n "$requested" ] && [ -n "$recorded" ] && [ "$requested" != "$recorded" ]; then
        echo "compose: the stack with secrets in $scaleout_secrets runs the $recorded seal and its database is" \
            "sealed by it; bring it up with --seal $recorded, or remove it first (deploy/compose.sh" \
            "scaleout-down, then docker-compose ... down -v: every key is lost) or give another" \
            "KEYSTREAM_SCALEOUT_SECRETS and COMPOSE_PROJECT_NAME" >&2
        return 2
    fi
    scaleout_seal="${requested:-${recorded:-file}}"
    compose=(docker-compose -f deploy/compose/scaleout.yml)
    if [ "$scaleout_seal" != file ]; then compose+=(-f "deploy/compose/scaleout-$scaleout_seal.yml"); fi
}

# The shamir stack's `operator init`, run once against its database (postgres started for it); the answer
# (shares, threshold, root token) goes to shamir-init.json, mode 0600 in the 0700 secrets directory.
scaleout_shamir_init() {
    local file="$scaleout_secrets/shamir-init.json"
    [ -s "$file" ] && return 0
    services=(postgres)
    "${compose[@]}" up -d --no-build postgres
    wait_healthy
    log "keystream-server operator init --shares $shamir_shares --threshold $shamir_threshold --json" \
        "(once: the shares and the root token go to $file)"
    if ! (umask 077 && "${compose[@]}" run --rm -T --no-deps keystream-1 keystream-server operator init \
        --shares "$shamir_shares" --threshold "$shamir_threshold" --json >"$file.tmp"); then
        rm -f "$file.tmp"
        echo "compose: operator init failed (above). If the database was initialised before, its shares are" \
            "not in $file any more: without them its keys cannot be opened; docker-compose ... down -v" \
            "drops it (and every key)" >&2
        return 1
    fi
    mv "$file.tmp" "$file"
}

# Wait until every replica of the shamir stack answers /v1/sys/seal-status (started, sealed or not; 180 s).
scaleout_wait_answering() {
    local deadline=$((SECONDS + 180)) replica address
    for replica in keystream-1 keystream-2 keystream-3; do
        until address="$("${compose[@]}" port "$replica" 8000 2>/dev/null)" && [ -n "$address" ] \
            && curl -fsS -o /dev/null "http://$address/v1/sys/seal-status"; do
            if [ "$SECONDS" -ge "$deadline" ]; then
                echo "compose: $replica does not answer /v1/sys/seal-status after 180 s" >&2
                "${compose[@]}" logs --tail 30 "$replica" >&2 || true
                return 1
            fi
            sleep 1
        done
    done
}

# `deploy/compose.sh unseal`: each replica in turn gets the stored shares (the CLI stops at the threshold).
scaleout_unseal() {
    local file="$scaleout_secrets/shamir-init.json" cli="${KEYSTREAM_HOST_CLI:-$(dirname "$python")/keystream}"
    local replica address shares
    if [ "$scaleout_seal" != shamir ]; then
        echo "compose: the stack with secrets in $scaleout_secrets runs the $scaleout_seal seal, which has no" \
            "shares: its replicas unseal by themselves" >&2
        return 2
    fi
    [ -s "$file" ] || { echo "compose: no shares in $file (made by scaleout-up --seal shamir)" >&2; return 1; }
    [ -x "$cli" ] || { echo "compose: $cli is missing: make run installs the client (or set KEYSTREAM_HOST_CLI)" >&2; return 1; }
    shares="$("$python" -c 'import json, sys; print("\n".join(json.load(open(sys.argv[1]))["shares"]))' "$file")"
    scaleout_wait_answering
    for replica in keystream-1 keystream-2 keystream-3; do
        address="$("${compose[@]}" port "$replica" 8000)"
        log "$replica: keystream operator unseal --url http://$address"
        printf '%s\n' "$shares" | "$cli" operator unseal --url "http://$address" | sed "s/^/    $replica: /"
    done
    services=(postgres keystream-1 keystream-2 keystream-3 haproxy prometheus)
    wait_healthy
    log "unsealed: every replica ready, Keystream through HAProxy http://127.0.0.1:${KEYSTREAM_PORT:-8000}"
}

scaleout_up() {
    mkdir -p "$state"
    local work
    work="$(mktemp -d /tmp/keystream-compose.XXXXXX)"
    prepare_images "$work"  # not in a || list: that would switch off set -e inside it
    build_local_image keystream-prometheus:local deploy/compose/prometheus.Dockerfile deploy/compose "$work" \
        && build_local_image keystream-postgres:local deploy/compose/scaleout/postgres.Dockerfile \
            deploy/compose/scaleout "$work" \
        && build_local_image keystream-haproxy:local deploy/compose/scaleout/haproxy.Dockerfile \
            deploy/compose/scaleout "$work" \
        || { rm -rf "$work"; return 1; }
    if [ "$scaleout_seal" = pkcs11 ]; then
        # Always run: cached layers make it a second when keystream:TAG is unchanged, a rebuild when it changed.
        log "docker build keystream-softhsm:$KEYSTREAM_IMAGE_TAG (keystream:$KEYSTREAM_IMAGE_TAG plus SoftHSM2)"
        DOCKER_BUILDKIT=0 docker build -q --build-arg "KEYSTREAM_IMAGE=keystream:$KEYSTREAM_IMAGE_TAG" \
            -t "keystream-softhsm:$KEYSTREAM_IMAGE_TAG" -f deploy/compose/scaleout/softhsm.Dockerfile \
            deploy/compose/scaleout >"$work/softhsm-build.log" 2>&1 \
            || { tail -n 40 "$work/softhsm-build.log" >&2; rm -rf "$work"; return 1; }
    fi
    rm -rf "$work"
    scaleout_make_secrets
    echo "$scaleout_seal" >"$scaleout_secrets/seal"
    if [ "$scaleout_seal" = shamir ]; then scaleout_shamir_init; fi
    log "${compose[*]} up -d"
    if ! "${compose[@]}" up -d --no-build; then
        [ "$scaleout_seal" = pkcs11 ] && "${compose[@]}" logs --tail 30 hsm-init >&2
        return 1
    fi
    if [ "$scaleout_seal" = shamir ]; then
        # Sealed replicas are not ready (nor is HAProxy, which has no ready replica): wait for the rest, and
        # for the replicas to answer.
        services=(postgres prometheus)
        wait_healthy
        scaleout_wait_answering
        log "up, replicas SEALED: run deploy/compose.sh unseal (shares in $scaleout_secrets/shamir-init.json)"
        return 0
    fi
    wait_healthy
    log "healthy: Keystream through HAProxy http://127.0.0.1:${KEYSTREAM_PORT:-8000}, replicas on 127.0.0.1:" \
        "${KEYSTREAM_REPLICA_PORT_1:-8001} ${KEYSTREAM_REPLICA_PORT_2:-8002} ${KEYSTREAM_REPLICA_PORT_3:-8003}," \
        "Prometheus http://127.0.0.1:${PROMETHEUS_PORT:-9090}"
}

scaleout_check() {
    if [ "$scaleout_seal" != file ]; then
        "$python" deploy/compose/scaleout/check_seal.py "$scaleout_seal" \
            --env-file "$scaleout_secrets/keystream.env" \
            --balancer "http://127.0.0.1:$KEYSTREAM_PORT" \
            --replica "http://127.0.0.1:$KEYSTREAM_REPLICA_PORT_1" \
            --replica "http://127.0.0.1:$KEYSTREAM_REPLICA_PORT_2" \
            --replica "http://127.0.0.1:$KEYSTREAM_REPLICA_PORT_3" \
            --prometheus "http://127.0.0.1:$PROMETHEUS_PORT" \
            --unseal-command "deploy/compose.sh unseal" \
            -- "${compose[@]}"
        return
    fi
    "$python" deploy/compose/scaleout/check.py \
        --env-file "$scaleout_secrets/keystream.env" \
        --balancer "http://127.0.0.1:$KEYSTREAM_PORT" \
        --replica "http://127.0.0.1:$KEYSTREAM_REPLICA_PORT_1" \
        --replica "http://127.0.0.1:$KEYSTREAM_REPLICA_PORT_2" \
        --replica "http://127.0.0.1:$KEYSTREAM_REPLICA_PORT_3" \
        --prometheus "http://127.0.0.1:$PROMETHEUS_PORT" \
        -- "${compose[@]}"
}

compose_down() {
    KEYSTREAM_ROOT_TOKEN="${KEYSTREAM_ROOT_TOKEN:-unused-by-down}"
    export KEYSTREAM_ROOT_TOKEN
    if docker info >/dev/null 2>&1; then
        log "docker-compose down $*"
        "${compose[@]}" down "$@"
    fi
}

down() {
    compose_down
    if [ -s "$state/dockerd.pid" ]; then
        local pid
        pid="$(cat "$state/dockerd.pid")"
        rm -f "$state/dockerd.pid"
        # Only a dockerd that `up` started: the pid must still be a dockerd.
        if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ]; then
            log "stopping the dockerd that compose.sh up started (pid $pid)"
            kill "$pid"
            local deadline=$((SECONDS + 30))
            while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.5; done
        fi
    fi
}

check() {
    local base="http://127.0.0.1:${KEYSTREAM_PORT:-8000}" prometheus="http://127.0.0.1:${PROMETHEUS_PORT:-9090}"
    local work auth
    work="$(mktemp -d /tmp/keystream-compose-test.XXXXXX)"
    auth=(-H "Authorization: Bearer $KEYSTREAM_ROOT_TOKEN")
    curl -fsS "$base/healthz" -o "$work/healthz"
    log "/healthz: $(cat "$work/healthz")"
    curl -fsS "${auth[@]}" -H 'Content-Type: application/json' -d '{"name": "compose-test"}' "$base/v1/keys" \
        -o /dev/null
    head -c 1048593 /dev/urandom >"$work/plain"
    curl -fsS "${auth[@]}" -H 'Content-Type: application/octet-stream' --data-binary @"$work/plain" \
        "$base/v1/keys/compose-test/encrypt" -o "$work/sealed"
    curl -fsS "${auth[@]}" -H 'Content-Type: application/octet-stream' --data-binary @"$work/sealed" \
        "$base/v1/keys/compose-test/decrypt" -o "$work/opened"
    cmp -s "$work/plain" "$work/opened" || { echo "compose: the round trip differs" >&2; return 1; }
    log "sealed round trip through the published port OK ($(stat -c %s "$work/plain") bytes)"
    local deadline=$((SECONDS + 60))
    until curl -fsS "$prometheus/api/v1/query?query=up%7Bjob%3D%22keystream%22%7D" -o "$work/up" \
        && grep -q '"value":\[[0-9.]*,"1"\]' "$work/up"; do
        [ "$SECONDS" -lt "$deadline" ] || { echo "compose: Prometheus does not scrape keystream: $(cat "$work/up")" >&2; return 1; }
        sleep 2
    done
    log "Prometheus scrapes keystream (up == 1)"
    rm -rf "$work"
}

finish_test() {
    local status=$?
    compose_down -v || true
    if [ -n "$started_dockerd" ]; then
        log "stopping the dockerd this test started (pid $started_dockerd)"
        docker_daemon_stop "$started_dockerd"
        rm -f "$state/dockerd.pid"
    fi
    if [ -n "$remove_on_exit" ]; then rm -rf "$remove_on_exit"; fi
    if [ "$status" -eq 0 ]; then log "PASS"; else log "FAIL (exit $status)"; fi
    exit "$status"
}

free_port() {
    "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

case "${1:-}" in
    up|down|test) export COMPOSE_PROJECT_NAME="${COMPOSE_PROJECT_NAME:-keystream}" ;;
esac
case "${1:-}" in
    up) up ;;  # a dockerd it started keeps serving the stack; `down` stops it
    down) down ;;
    test)
        # Free ports and a project of its own, so a stack already running here is not touched.
        KEYSTREAM_PORT="$(free_port)" PROMETHEUS_PORT="$(free_port)"
        COMPOSE_PROJECT_NAME="keystream-compose-test-$$"
        export KEYSTREAM_PORT PROMETHEUS_PORT COMPOSE_PROJECT_NAME
        trap finish_test EXIT
        up
        check ;;
    scaleout-up|scaleout-down|scaleout-test|unseal)
        command="$1"
        shift
        seal_option=""
        case "$command:${1:-}" in
            scaleout-up:--seal|scaleout-test:--seal)
                seal_option="${2:-}"
                [ -n "$seal_option" ] && shift 2 ;;
            scaleout-up:--seal=*|scaleout-test:--seal=*)
                seal_option="${1#--seal=}"
                [ -n "$seal_option" ] && shift ;;
        esac
        if [ "$#" -ne 0 ]; then
            echo "usage: deploy/compose.sh scaleout-up|scaleout-test [--seal file|shamir|pkcs11]," \
                "deploy/compose.sh scaleout-down|unseal" >&2
            exit 2
        fi
        services=(postgres keystream-1 keystream-2 keystream-3 haproxy prometheus)
        # The names deploy/compose/.env gives a bare `docker-compose -f deploy/compose/scaleout.yml ps|stop`.
        export COMPOSE_PROJECT_NAME="${COMPOSE_PROJECT_NAME:-keystream-scaleout}"
        case "$command" in
            scaleout-up)
                export KEYSTREAM_SCALEOUT_SECRETS="$scaleout_secrets"
                scaleout_choose_seal "$seal_option"
                scaleout_up ;;
            scaleout-down)
                export KEYSTREAM_SCALEOUT_SECRETS="$scaleout_secrets"
                scaleout_choose_seal ""
                down ;;
            unseal)
                export KEYSTREAM_SCALEOUT_SECRETS="$scaleout_secrets"
                scaleout_choose_seal ""
                scaleout_unseal ;;
            scaleout-test)
                # Free ports, fresh secrets and a project of its own: a running stack is not touched.
                KEYSTREAM_PORT="$(free_port)" PROMETHEUS_PORT="$(free_port)"
                KEYSTREAM_REPLICA_PORT_1="$(free_port)" KEYSTREAM_REPLICA_PORT_2="$(free_port)"
                KEYSTREAM_REPLICA_PORT_3="$(free_port)"
                COMPOSE_PROJECT_NAME="keystream-scaleout-test-$$"
                scaleout_secrets="$(mktemp -d /tmp/keystream-scaleout-test.XXXXXX)"
                remove_on_exit="$scaleout_secrets"
                KEYSTREAM_SCALEOUT_SECRETS="$scaleout_secrets"
                export KEYSTREAM_PORT PROMETHEUS_PORT KEYSTREAM_REPLICA_PORT_1 KEYSTREAM_REPLICA_PORT_2 \
                    KEYSTREAM_REPLICA_PORT_3 COMPOSE_PROJECT_NAME KEYSTREAM_SCALEOUT_SECRETS
                scaleout_choose_seal "$seal_option"
                trap finish_test EXIT
                scaleout_up
                scaleout_check ;;
        esac ;;
    *)
        echo "usage: deploy/compose.sh up|down|test|scaleout-up|scaleout-down|scaleout-test|unseal" >&2
        exit 2 ;;
esac
