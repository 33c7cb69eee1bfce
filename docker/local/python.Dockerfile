# Stand-in for python:3.11-slim, built from Debian packages (Debian 12's python3 is 3.11).
ARG BASE=localhost/debian:bookworm
FROM ${BASE}
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        python3 python3-venv python-is-python3 ca-certificates \
    && rm -rf /var/lib/apt/lists/*
