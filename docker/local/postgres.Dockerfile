# Stand-in for postgres:16, built from Debian packages (PostgreSQL 15): the same port, data
# volume, POSTGRES_USER/POSTGRES_PASSWORD/POSTGRES_DB and pg_isready health check.
ARG BASE=localhost/debian:bookworm
FROM ${BASE}
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /var/lib/postgresql/data /run/postgresql \
    && chown -R postgres:postgres /var/lib/postgresql /run/postgresql
COPY docker/local/postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint
ENV PGDATA=/var/lib/postgresql/data
EXPOSE 5432
VOLUME ["/var/lib/postgresql/data"]
# A fast shutdown (like the official image): SIGTERM would wait for every client to leave.
STOPSIGNAL SIGINT
USER postgres
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint"]
