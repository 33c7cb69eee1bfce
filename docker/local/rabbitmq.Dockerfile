# Stand-in for rabbitmq:3.13-management, built from Debian packages: the same port, volume,
# RABBITMQ_DEFAULT_USER/RABBITMQ_DEFAULT_PASS and health check command.
ARG BASE=localhost/debian:bookworm
FROM ${BASE}
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends rabbitmq-server \
    && rm -rf /var/lib/apt/lists/* \
    && rabbitmq-plugins --offline enable rabbitmq_management
COPY docker/local/rabbitmq-entrypoint.sh /usr/local/bin/rabbitmq-entrypoint
EXPOSE 5672 15672
VOLUME ["/var/lib/rabbitmq"]
ENTRYPOINT ["/usr/local/bin/rabbitmq-entrypoint"]
