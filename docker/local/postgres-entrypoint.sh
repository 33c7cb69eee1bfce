#!/bin/sh
# Like the official image: an empty data volume is initialised with POSTGRES_USER (superuser),
# POSTGRES_PASSWORD and database POSTGRES_DB; connections from the network need the password.
set -eu
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
user=${POSTGRES_USER:-postgres}
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    : "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}"
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
    "$bin/initdb" -D "$PGDATA" -U "$user" --pwfile="$pwfile" --auth-local=trust \
        --auth-host=scram-sha-256 >/dev/null
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
    "$bin/pg_ctl" -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
    db=${POSTGRES_DB:-$user}
    if [ "$db" != postgres ]; then
        "$bin/psql" -v ON_ERROR_STOP=1 -U "$user" -d postgres -qc "CREATE DATABASE \"$db\""
    fi
    "$bin/pg_ctl" -D "$PGDATA" -m fast -w stop >/dev/null
    echo "initialised $PGDATA: user $user, database $db"
fi
exec "$bin/postgres" -D "$PGDATA" -c listen_addresses='*'
