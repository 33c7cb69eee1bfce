#!/bin/sh
# Like the official image: the first start of an empty volume creates RABBITMQ_DEFAULT_USER
# with RABBITMQ_DEFAULT_PASS (later starts keep the users the volume holds).
set -eu
conf=/etc/rabbitmq/conf.d/10-defaults.conf
mkdir -p /etc/rabbitmq/conf.d
{
    echo "loopback_users = none"
    echo "listeners.tcp.default = 5672"
    echo "default_user = ${RABBITMQ_DEFAULT_USER:-guest}"
    echo "default_pass = ${RABBITMQ_DEFAULT_PASS:-guest}"
} >"$conf"
chown -R rabbitmq:rabbitmq /var/lib/rabbitmq
chmod 600 "$conf"
chown rabbitmq:rabbitmq "$conf"
exec /usr/sbin/rabbitmq-server
