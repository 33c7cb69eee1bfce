# Warden: one image for every service. `docker run IMAGE` runs all services in one process;
# `docker run IMAGE run gateway` (or monitor, reservations, jobs, violations) runs one of them
# against RabbitMQ; `docker run IMAGE db upgrade` migrates. See docker-compose.yml.

# --- ui: build the web UI (frontend/) into static files the gateway serves ------------------
FROM node:20-bookworm-slim AS ui
WORKDIR /ui
COPY frontend/package.json frontend/package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY frontend ./
RUN npm run build

# --- build: install the package and its dependencies into a virtual environment -------------
FROM python:3.11-slim AS build

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore
RUN python -m venv /opt/warden && /opt/warden/bin/pip install --upgrade pip

WORKDIR /src
COPY pyproject.toml README.md ./
COPY services ./services
RUN /opt/warden/bin/pip install . && /opt/warden/bin/warden version

# --- runtime --------------------------------------------------------------------------------
FROM python:3.11-slim

RUN useradd --system --uid 10001 --user-group --create-home --home-dir /home/warden \
        --shell /usr/sbin/nologin warden \
    && mkdir -p /var/lib/warden \
    && chown warden:warden /var/lib/warden

COPY --from=build /opt/warden /opt/warden
COPY --from=ui /ui/dist /opt/warden/ui

ENV PATH=/opt/warden/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    WARDEN_STORAGE_DATA_DIR=/var/lib/warden \
    WARDEN_GATEWAY_FRONTEND_DIR=/opt/warden/ui \
    WARDEN_GATEWAY_HOST=0.0.0.0

USER warden
WORKDIR /home/warden
VOLUME ["/var/lib/warden"]
EXPOSE 8080

ENTRYPOINT ["warden"]
CMD ["run", "all"]
