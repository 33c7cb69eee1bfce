#!/usr/bin/env bash
# Build the base images docker/compose.local.yml names, for machines that reach no image
# registry (but do reach a Debian mirror): a Debian 12 root file system from debootstrap, then
# python, RabbitMQ and PostgreSQL images on it from Debian packages. An image that exists
# already is kept (rebuilt when its Dockerfile changed), so a second run takes a second; `--rebuild` builds them all again.
# Needs root, podman and debootstrap.
set -euo pipefail

cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.."
rebuild=0
[[ "${1:-}" == --rebuild ]] && rebuild=1

have() { ((rebuild == 0)) && podman image exists "$1"; }

if ! have localhost/debian:bookworm; then
    command -v debootstrap >/dev/null || { echo "debootstrap is missing: apt-get install debootstrap" >&2; exit 1; }
    # The machine's own mirror: it is the one this machine can reach.
    mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    mirror=${mirror:-http://deb.debian.org/debian}
    rootfs=$(mktemp -d /tmp/warden-rootfs.XXXXXX)
    trap 'rm -rf "$rootfs"' EXIT
    echo "==> debootstrap bookworm (minbase) from $mirror"
    debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 \
        || { tail -n 30 "$rootfs.log" >&2; exit 1; }
    rm -f "$rootfs.log"
    tar -C "$rootfs" -c . | podman import - localhost/debian:bookworm >/dev/null
    rm -rf "$rootfs"
    trap - EXIT
    echo "    localhost/debian:bookworm imported"
fi

# Each image carries a digest of the files it is built from: a changed file rebuilds it.
for name in python rabbitmq postgres; do
    image=localhost/warden-$name:bookworm
    inputs=$({ cat "docker/local/$name.Dockerfile" "docker/local/$name-entrypoint.sh" 2>/dev/null || true; } | sha256sum | cut -c1-16)
    built=$(podman image inspect --format '{{index .Labels "warden.inputs"}}' "$image" 2>/dev/null || true)
    if ((rebuild)) || [[ "$built" != "$inputs" ]]; then
        echo "==> building $image (docker/local/$name.Dockerfile)"
        podman build --quiet --label "warden.inputs=$inputs" -f "docker/local/$name.Dockerfile" -t "$image" . >/dev/null
    fi
done
echo "base images ready: localhost/debian, localhost/warden-{python,rabbitmq,postgres}:bookworm"
