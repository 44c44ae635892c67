#!/bin/sh
# First start: initdb with the superuser $POSTGRES_USER (default keystream) and password $POSTGRES_PASSWORD,
# scram-sha-256 for every TCP client, and the database $POSTGRES_DB (default keystream). Then the server,
# in the foreground (it gets the container's signals: SIGTERM is PostgreSQL's smart shutdown).
set -eu
bin=/usr/lib/postgresql/15/bin
user="${POSTGRES_USER:-keystream}"
database="${POSTGRES_DB:-keystream}"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    if [ -z "${POSTGRES_PASSWORD:-}" ]; then
        echo "postgres-entrypoint: set POSTGRES_PASSWORD (the stack's env file) for the first start" >&2
        exit 1
    fi
    pwfile="$(mktemp)"
    printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
    "$bin/initdb" -D "$PGDATA" -U "$user" --pwfile="$pwfile" -A scram-sha-256 -E UTF8 --locale=C.UTF-8 >/dev/null
    rm -f "$pwfile"
    echo "host all all 0.0.0.0/0 scram-sha-256" >>"$PGDATA/pg_hba.conf"
    echo "CREATE DATABASE \"$database\"" | "$bin/postgres" --single -D "$PGDATA" postgres >/dev/null
fi
exec "$bin/postgres" -D "$PGDATA" -c listen_addresses='*'
