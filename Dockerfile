# Warden: one image for every service. `docker run IMAGE` runs all services in one process;
# `docker run IMAGE run gateway` (or monitor, reservations, jobs, violations) runs one of them
# against RabbitMQ; `docker run IMAGE db upgrade` migrates. See docker-compose.yml.
#
# Build arguments (the defaults pull public images; docker/compose.local.yml overrides them on
# machines without registry access, see docker/local/build-base-images.sh):
#   PYTHON_IMAGE  an image with python 3.11+ and its venv module   (python:3.11-slim)
#   NODE_IMAGE    an image with Node.js 20.19+ and npm               (node:20-bookworm-slim)
#   UI_PREBUILT   1: take frontend/dist from the build context (`make frontend` built it) instead
#                 of building the UI in NODE_IMAGE, which then needs no Node.js
#   PIP_OFFLINE   1: install only from the wheels in docker/wheels/ (`pip wheel` filled it)
#   WARDEN_VERSION  the version the image reports (`warden version`): the build context has no
#                 .git for setuptools-scm to read it from; e.g. the wheel's, or `git describe`
ARG PYTHON_IMAGE=python:3.11-slim
ARG NODE_IMAGE=node:20-bookworm-slim

# --- ui: build the web UI (frontend/) into static files the gateway serves ------------------
FROM ${NODE_IMAGE} AS ui
ARG UI_PREBUILT=0
WORKDIR /ui
COPY frontend/package.json frontend/package-lock.json ./
RUN if [ "$UI_PREBUILT" != 1 ]; then npm ci --no-audit --no-fund; fi
COPY frontend ./
RUN if [ "$UI_PREBUILT" = 1 ]; then \
        test -f dist/index.html \
            || { echo "UI_PREBUILT=1, but frontend/dist is not built: run make frontend" >&2; exit 1; }; \
    else \
        rm -rf dist && npm run build; \
    fi

# --- build: install the package and its dependencies into a virtual environment -------------
FROM ${PYTHON_IMAGE} AS build
ARG PIP_OFFLINE=0
ARG WARDEN_VERSION=0+unknown

# The runtime dependencies only (pyproject.toml's dependencies; no dev tools).
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore \
    SETUPTOOLS_SCM_PRETEND_VERSION_FOR_GPU_WARDEN=${WARDEN_VERSION}
WORKDIR /src
COPY docker/wheels ./wheels
RUN python3 -m venv /opt/warden \
    && if [ "$PIP_OFFLINE" != 1 ]; then /opt/warden/bin/pip install --upgrade pip; fi
COPY pyproject.toml setup.py MANIFEST.in README.md ./
COPY services ./services
RUN if [ "$PIP_OFFLINE" = 1 ]; then \
        /opt/warden/bin/pip install --no-index --find-links ./wheels .; \
    else \
        /opt/warden/bin/pip install .; \
    fi \
    && /opt/warden/bin/warden version

# --- runtime --------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}

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
