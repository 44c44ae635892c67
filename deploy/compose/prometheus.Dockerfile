# Prometheus for docker-compose without an image registry: Debian's prometheus (and wget for the compose
# healthcheck) on the locally built base image. deploy/compose.sh builds it as keystream-prometheus:local;
# deploy/compose/offline.yml makes the compose file use it. Same entrypoint, flags and paths as
# prom/prometheus, so docker-compose.yml's command and mounts apply unchanged.
ARG BASE_IMAGE=local/bookworm
FROM ${BASE_IMAGE}
RUN set -eux; \
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod 0755 /usr/sbin/policy-rc.d; \
    apt-get update; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus wget; \
    rm -rf /var/lib/apt/lists/* /usr/sbin/policy-rc.d; \
    install -d -o prometheus -g prometheus -m 0755 /prometheus
USER prometheus
WORKDIR /prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
