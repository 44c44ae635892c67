#!/usr/bin/env bash
# make lock: refresh every hash-pinned lock file from the dependencies declared in the pyproject.toml files.
#
#   requirements/build.txt        pip, setuptools, wheel, Cython: what builds the extension and the wheels
#   requirements/server.txt       the server's runtime (pyproject.toml [project] dependencies): `make run`
#   requirements/image.txt        the runtime plus the PostgreSQL driver and the PKCS#11 binding (the postgres
#                                 and pkcs11 extras): the image
#   requirements/image-load.txt   the image's set plus Locust (Dockerfile EXTRAS=load, docker-compose's locust)
#   requirements/test.txt         the runtime, the postgres and test extras and the client: `make test`
#   clients/python/requirements.txt   the client's runtime (httpx, h11 and what they need)
#   requirements/lock-tools.txt   uv, whose `uv pip compile` this script runs from build/lock-venv
#
# Every file comes from ONE resolution (the union of all of them, newest versions allowed), so a package that
# two files share has the same version and hashes in both, and `pip install -r A -r B` is consistent. The
# hashes are PyPI's (from its simple index), of every file of each pinned version (all platforms). uv reads
# no PIP_* variable, so local wheels (PIP_FIND_LINKS, e.g. /opt/wheels) never put a hash PyPI does not know
# into a lock; every locked install empties PIP_FIND_LINKS for the same reason. pip-tools' pip-compile
# writes the same format but downloads every file of every pinned version to hash it here (over 30 min);
# uv takes about 30 s for all of them. The locks are for CPython 3.11 on Linux (Debian bookworm's python3,
# the image's base); the system CA store is used (--native-tls), as pip's PIP_CERT is here.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
python="${PYTHON:-python3}"
venv="$repo/build/lock-venv"
work="$repo/build/lock"
export PIP_FIND_LINKS=""

# The lock tool itself comes from its own lock (reinstalled when that changes).
if [ ! -x "$venv/bin/uv" ] || ! cmp -s requirements/lock-tools.txt "$venv/.lock-tools.txt"; then
    rm -rf "$venv"
    "$python" -m venv "$venv"
    if [ -s requirements/lock-tools.txt ]; then
        "$venv/bin/python" -m pip install -q --require-hashes -r requirements/lock-tools.txt
        cp requirements/lock-tools.txt "$venv/.lock-tools.txt"
    else
        "$venv/bin/python" -m pip install -q uv
    fi
fi

# The inputs, written from the pyproject.toml files (the one place dependencies are declared).
rm -rf "$work"
mkdir -p "$work"
"$venv/bin/python" - "$work" <<'EOF'
import pathlib, sys, tomllib

work = pathlib.Path(sys.argv[1])
server = tomllib.loads(pathlib.Path("pyproject.toml").read_text())
client = tomllib.loads(pathlib.Path("clients/python/pyproject.toml").read_text())
runtime = server["project"]["dependencies"]
extras = server["project"]["optional-dependencies"]
build = [*server["build-system"]["requires"], *client["build-system"]["requires"], "pip", "wheel"]
inputs = {
    "build": build,
    "server": runtime,
    "image": [*runtime, *extras["postgres"], *extras["pkcs11"]],
    "image-load": [*runtime, *extras["postgres"], *extras["pkcs11"], *extras["load"]],
    "test": [*runtime, *extras["postgres"], *extras["test"], *client["project"]["dependencies"]],
    "client": client["project"]["dependencies"],
    "lock-tools": ["uv"],
}
inputs["all"] = sorted({item for name, items in inputs.items() for item in items})
for name, items in inputs.items():
    (work / f"{name}.in").write_text("\n".join(items) + "\n")
EOF

compile() {
    "$venv/bin/uv" pip compile --quiet --native-tls --python-version 3.11 \
        --custom-compile-command "make lock" "$@"
}

echo "lock: resolving every dependency together (newest allowed versions)"
compile --upgrade --output-file "$work/all.txt" "$work/all.in"
# The files in parallel (each waits mostly on PyPI); each starts from nothing: its pins come from all.txt's
# one resolution, not from the old file.
pids=()
for name in build server image image-load test client lock-tools; do
    case "$name" in
        client) out=clients/python/requirements.txt ;;
        *) out="requirements/$name.txt" ;;
    esac
    echo "lock: $out"
    rm -f "$out"
    compile --generate-hashes --constraint "$work/all.txt" --output-file "$out" "$work/$name.in" \
        >"$work/$name.log" 2>&1 &
    pids+=("$!")
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
if [ "$status" -ne 0 ]; then
    tail -n 20 "$work"/*.log >&2
    echo "lock: FAILED (the logs above); the lock files are incomplete: fix and run make lock again" >&2
    exit 1
fi
echo "lock: done; check with: git diff --stat requirements clients/python/requirements.txt"
