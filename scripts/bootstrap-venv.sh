#!/usr/bin/env bash
# Create .venv on a fresh Debian machine that has only Python 3.11 and gcc, with the build tools (pip,
# setuptools, wheel, Cython) from the hash-pinned lock given as the second argument.
# Debian splits venv/ensurepip and the C headers out of python3; install them when missing (as root).
set -euo pipefail
PYTHON="${PYTHON:-python3}"
VENV="${1:-.venv}"
BUILD_LOCK="${2:-requirements/build.txt}"

need_apt=()
if ! "$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1; then
    need_apt+=("python3-venv")
fi
include_dir="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
if [ ! -f "$include_dir/Python.h" ]; then
    need_apt+=("python3-dev")
fi
if [ "${#need_apt[@]}" -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "bootstrap: installing ${need_apt[*]} from Debian"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
    else
        echo "bootstrap: please install ${need_apt[*]} (Debian packages) and re-run" >&2
        exit 1
    fi
fi
"$PYTHON" -m venv "$VENV"
# PyPI's files only: local wheels (PIP_FIND_LINKS, e.g. /opt/wheels) may carry other hashes than the lock's.
PIP_FIND_LINKS="" "$VENV/bin/python" -m pip install -q --require-hashes -r "$BUILD_LOCK"
