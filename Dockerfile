# Keystream image: a builder stage compiles the AES-NI/VAES extension into a wheel and installs it with its
# dependencies into a virtualenv; the runtime stage copies only that virtualenv onto a slim base and runs as a
# non-root user.
#
#   docker build -t keystream .                                   # python:3.11-slim, dependencies from PyPI
#   docker build --build-arg BASE_IMAGE=local/bookworm \
#                --build-arg WHEELHOUSE=build/wheelhouse -t keystream .   # offline (see deploy/docker-test.sh)
#   docker run -p 127.0.0.1:8000:8000 -v keystream-data:/var/lib/keystream \
#              -e KEYSTREAM_TLS_DISABLE=true keystream               # plain HTTP; TLS ends at a proxy
#   docker run -p 127.0.0.1:8443:8000 -v keystream-data:/var/lib/keystream -v "$PWD/tls:/etc/keystream/tls:ro" \
#              -e KEYSTREAM_TLS_CERT_FILE=/etc/keystream/tls/server.pem \
#              -e KEYSTREAM_TLS_KEY_FILE=/etc/keystream/tls/server.key keystream   # HTTPS in the container
#
# The image listens on 0.0.0.0, so it refuses to start without one of the two: TLS files, or
# KEYSTREAM_TLS_DISABLE=true to say that a proxy in front terminates TLS (docs/operations.md, TLS).
#
# Works with the classic builder (no BuildKit features). Any Debian-based image with Python 3.11+ (or none:
# Debian's python3 is installed then) can be the base.
ARG BASE_IMAGE=python:3.11-slim

# --- base: Python and the OpenMP runtime the extension links against ------------------------------------
FROM ${BASE_IMAGE} AS base
ENV LANG=C.UTF-8 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
RUN set -eux; \
    packages="libgomp1"; \
    command -v python3 >/dev/null 2>&1 || packages="$packages python3"; \
    apt-get update; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $packages; \
    rm -rf /var/lib/apt/lists/*; \
    python3 -c 'import sys; assert sys.version_info >= (3, 11), sys.version'

# --- builder: compile the wheel, install it and its dependencies into /opt/keystream/venv ---------------
FROM base AS builder
# Wheels to install from instead of PyPI: a directory inside the build context (empty = use PyPI).
ARG WHEELHOUSE=
# Extra dependency sets of the package to install too (e.g. "load" for the Locust image: requirements/
# image-load.txt); "postgres" (the PostgreSQL keystore's driver, KEYSTREAM_DATABASE_URL) and "pkcs11" (the
# PKCS#11 binding for KEYSTREAM_SEAL=pkcs11; the token's own module comes from its vendor) are always installed.
ARG EXTRAS=
RUN set -eux; \
    packages="gcc libc6-dev"; \
    python3 -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
        || packages="$packages python3-dev"; \
    python3 -m ensurepip --version >/dev/null 2>&1 || packages="$packages python3-venv"; \
    apt-get update; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $packages; \
    rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . /src
# Every dependency from a hash-pinned lock (requirements/, `make lock`): the build tools from build.txt, the
# runtime from image.txt (image-load.txt with EXTRAS=load); the keystream wheel itself without dependencies.
# The venv's own pip and setuptools (ensurepip's, not locked: Debian's setuptools 66.1.1 has known
# advisories) are removed at the end: nothing at run time needs them, and the image then holds only locked
# distributions (make docker-test compares its SBOM with image.txt).
RUN set -eux; \
    export PIP_FIND_LINKS=; \
    if [ -n "$WHEELHOUSE" ]; then export PIP_NO_INDEX=1 PIP_FIND_LINKS="/src/$WHEELHOUSE"; fi; \
    python3 -m venv /opt/build-venv; \
    /opt/build-venv/bin/pip install --require-hashes -r requirements/build.txt; \
    /opt/build-venv/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /dist .; \
    python3 -m venv /opt/keystream/venv; \
    wheel="$(ls /dist/keystream-*.whl)"; \
    /opt/keystream/venv/bin/pip install --require-hashes -r "requirements/image${EXTRAS:+-$EXTRAS}.txt"; \
    /opt/keystream/venv/bin/pip install --no-deps "$wheel"; \
    /opt/keystream/venv/bin/pip check; \
    cd / && /opt/keystream/venv/bin/python -c 'import aescore.ctr._aesni'; \
    /opt/keystream/venv/bin/pip uninstall -y setuptools pip

# --- runtime --------------------------------------------------------------------------------------------
FROM base AS runtime
RUN set -eux; \
    groupadd --system --gid 10001 keystream; \
    useradd --system --uid 10001 --gid keystream --home-dir /var/lib/keystream --no-create-home \
        --shell /usr/sbin/nologin keystream; \
    install -d -o keystream -g keystream -m 0700 /var/lib/keystream
COPY --from=builder /opt/keystream/venv /opt/keystream/venv
# Every setting is a KEYSTREAM_* variable (see docs/readme/operations.md); these make the container useful
# as is: listen on all interfaces inside the container, keep state in the volume.
ENV PATH=/opt/keystream/venv/bin:$PATH \
    KEYSTREAM_HOST=0.0.0.0 \
    KEYSTREAM_PORT=8000 \
    KEYSTREAM_DATA_DIR=/var/lib/keystream \
    KEYSTREAM_WORKERS=1
# The SQLite keystore and, unless KEYSTREAM_MASTER_KEY(_FILE) is set, the generated master key live here
# (with KEYSTREAM_DATABASE_URL the keys are in PostgreSQL; deploy/compose/scaleout.yml, deploy/k8s).
VOLUME ["/var/lib/keystream"]
WORKDIR /var/lib/keystream
EXPOSE 8000
USER 10001:10001
# Over https when the container serves TLS. The probe sends no token and reads only /healthz on loopback, so it
# does not verify the certificate (which names the service, not 127.0.0.1). Under mTLS
# (KEYSTREAM_TLS_CLIENT_CA_FILE) it has no client certificate: replace it (docs/operations.md, TLS).
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, ssl, urllib.request; tls = bool(os.environ.get('KEYSTREAM_TLS_CERT_FILE')); context = ssl.create_default_context(); context.check_hostname = False; context.verify_mode = ssl.CERT_NONE; urllib.request.urlopen('%s://127.0.0.1:%s/healthz' % ('https' if tls else 'http', os.environ.get('KEYSTREAM_PORT', '8000')), timeout=2, context=context if tls else None)"]
CMD ["keystream-server", "serve"]
