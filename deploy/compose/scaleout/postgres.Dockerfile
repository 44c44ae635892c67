# PostgreSQL for the scale-out stack without an image registry: Debian's postgresql (15) on the locally built
# base image (deploy/compose.sh builds it as keystream-postgres:local). postgres-entrypoint.sh creates the
# cluster on first start (password authentication, POSTGRES_PASSWORD from the stack's env file) and runs the
# server in the foreground as the postgres user.
ARG BASE_IMAGE=local/bookworm
FROM ${BASE_IMAGE}
RUN set -eux; \
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod 0755 /usr/sbin/policy-rc.d; \
    apt-get update; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql-15; \
    rm -rf /var/lib/apt/lists/* /usr/sbin/policy-rc.d; \
    install -d -o postgres -g postgres -m 0700 /var/lib/postgresql/data
COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint.sh
ENV PGDATA=/var/lib/postgresql/data
USER postgres
VOLUME ["/var/lib/postgresql/data"]
EXPOSE 5432
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint.sh"]
