"""Health of the system and the live event stream."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiohttp import web
from marshmallow import Schema, fields, validate

from services import __version__
from services.gateway.context import REPLICAS, STREAM
from services.gateway.routing import Access, Call, Route
from services.gateway.stream import TOPICS
from services.notifications import api as notifications_api
from services.shared.bus import Bus
from services.shared.cluster.replicas import Replicas
from services.shared.contracts import HEALTH_METHOD
from services.shared.errors import ConfigError, NotFound, ServiceUnavailable, WardenError
from services.shared.remote.ssh import authorize_command, public_key_line

# The services the gateway asks for their health (it answers for itself).
BACKENDS = ("monitor", "reservations", "jobs", "violations")
# Roles of a service whose replicas elect a leader (the others say "active").
ELECTED_ROLES = ("leader", "standby")


class ReplicaSchema(Schema):
    id = fields.String(required=True, metadata={"description": "service@host:pid-random"})
    role = fields.String(
        required=True, metadata={"description": "active, or leader / standby where elected"}
    )
    started_at = fields.String(required=True)
    last_heard_s = fields.Float(
        required=True, metadata={"description": "seconds since its last heartbeat came"}
    )
    details = fields.Dict(
        required=True, metadata={"description": "figures it tells of itself (e.g. hosts)"}
    )


class ServiceHealthSchema(Schema):
    status = fields.String(
        required=True,
        metadata={"description": "ok, unreachable or error (its database: see detail)"},
    )
    version = fields.String(required=True, allow_none=True)
    detail = fields.String(metadata={"description": "why it is not ok"})
    replicas = fields.List(
        fields.Nested(ReplicaSchema),
        metadata={"description": "its live replicas, as the gateway hears their heartbeats"},
    )
    leader = fields.String(
        allow_none=True,
        metadata={
            "description": "the replica that leads, for a service that elects one (violations, "
            "jobs); null while none does"
        },
    )


class BusHealthSchema(Schema):
    status = fields.String(required=True, metadata={"description": "ok or down"})
    detail = fields.String()


class HealthSchema(Schema):
    status = fields.String(required=True, metadata={"description": "ok or degraded"})
    version = fields.String(required=True)
    bus = fields.Nested(BusHealthSchema, required=True)
    services = fields.Dict(
        keys=fields.String(), values=fields.Nested(ServiceHealthSchema), required=True
    )


class SshKeySchema(Schema):
    public_key = fields.String(required=True, metadata={"description": "one OpenSSH line"})
    instructions = fields.String(required=True)
    install_command = fields.String(
        required=True,
        metadata={"description": "a shell command that adds public_key to ~/.ssh/authorized_keys"},
    )


class GettingStartedSchema(Schema):
    alerts_configured = fields.Boolean(
        required=True,
        metadata={"description": "violations can reach someone by e-mail or chat"},
    )


class StreamQuery(Schema):
    topics = fields.List(
        fields.String(validate=validate.OneOf(TOPICS)),
        metadata={"description": "what to receive (default: everything you may see)"},
    )
    last_event_id = fields.String(
        validate=validate.Length(max=128),
        metadata={"description": "resume after this event's id (else the Last-Event-ID header)"},
    )


async def _probe(bus: Bus, service: str, timeout: float) -> dict[str, Any]:
    try:
        answer = await bus.call(service, HEALTH_METHOD, timeout=timeout)
    except ServiceUnavailable as err:
        return {"status": "unreachable", "version": None, "detail": err.message}
    except WardenError as err:
        return {"status": "error", "version": None, "detail": err.message}
    found = {"status": answer.get("status", "ok"), "version": answer.get("version")}
    if answer.get("detail"):
        found["detail"] = answer["detail"]  # e.g. "the database is unreachable"
    return found


def _replicas(replicas: Replicas, service: str) -> dict[str, Any]:
    """`replicas` of a service and, where it elects one, its `leader`."""
    now = time.monotonic()
    live = replicas.live(service)
    found: dict[str, Any] = {
        "replicas": [
            {
                "id": r.replica,
                "role": r.role,
                "started_at": r.started_at,
                "last_heard_s": round(max(0.0, now - r.heard_at), 3),
                "details": dict(r.details),
            }
            for r in live
        ]
    }
    if any(r.role in ELECTED_ROLES for r in live):
        found["leader"] = next((r.replica for r in live if r.role == "leader"), None)
    return found


async def health(call: Call) -> web.Response:
    """Each service with ok / unreachable and its version, within a bounded time; with its
    live replicas (and leader) when this gateway watches them."""
    timeout = call.settings.gateway.health_timeout_s
    answers = await asyncio.gather(*(_probe(call.bus, name, timeout) for name in BACKENDS))
    services: dict[str, dict[str, Any]] = {"gateway": {"status": "ok", "version": __version__}}
    services.update(zip(BACKENDS, answers, strict=True))
    replicas = call.request.app.get(REPLICAS)
    if replicas is not None:
        for name, found in services.items():
            found.update(_replicas(replicas, name))
    bus = (
        {"status": "ok"}
        if call.bus.connected
        else {
            "status": "down",
            "detail": "the message bus (RabbitMQ) is unreachable; reconnecting",
        }
    )
    healthy = bus["status"] == "ok" and all(s["status"] == "ok" for s in services.values())
    return web.json_response(
        {
            "status": "ok" if healthy else "degraded",
            "version": __version__,
            "bus": bus,
            "services": services,
        },
        status=200 if healthy else 503,
    )


async def ssh_key(call: Call) -> dict[str, Any]:
    """Warden's public key: jobs log in to the hosts as their owner with it."""
    try:
        line = await asyncio.to_thread(public_key_line, call.settings)
    except ConfigError as err:  # its details name a file on the server: not for the public
        raise NotFound(
            "Warden has no SSH key yet: an admin runs `warden init` (or `warden key --generate`)"
        ) from err
    return {
        "public_key": line,
        "instructions": "Add this line to ~/.ssh/authorized_keys on every GPU host where "
        "Warden should run your jobs, for example by running the command below there.",
        "install_command": authorize_command(line),
    }


async def getting_started(call: Call) -> dict[str, Any]:
    """What the empty dashboard's checklist needs that the UI cannot read elsewhere: whether a
    violation reaches anyone by e-mail or chat, saved on the Settings page or in the file."""
    delivery = await call.rpc(notifications_api.DELIVERY_SETTINGS, {})
    return {"alerts_configured": not delivery["reaches_nobody"]}


async def stream(call: Call) -> web.StreamResponse:
    resume = call.query.get("last_event_id") or call.request.headers.get("Last-Event-ID")
    topics = frozenset(call.query.get("topics") or TOPICS)
    return await call.request.app[STREAM].serve(call.request, call.user, topics, resume)


ROUTES = (
    Route(
        "GET",
        "/health",
        health,
        Access.PUBLIC,
        "Health of every service",
        "system",
        raw=True,
        response=HealthSchema,
        extra={
            "responses": {
                "503": {
                    "description": "a service does not answer",
                    "content": {"application/json": {"schema": HealthSchema}},
                }
            }
        },
        description="200 when every service answers, 503 (same body) when one does not.",
    ),
    Route(
        "GET",
        "/ssh-key",
        ssh_key,
        Access.PUBLIC,
        "The SSH public key users add to authorized_keys",
        "system",
        response=SshKeySchema,
        description="404 when Warden has no key for logging in as users (`ssh.key_file`, "
        "made by `warden init` in the data directory when none is configured).",
    ),
    Route(
        "GET",
        "/getting-started",
        getting_started,
        Access.ADMIN,
        "What the first run's checklist needs",
        "system",
        response=GettingStartedSchema,
        description="Whether violations reach anyone by e-mail or chat (an SMTP server or a "
        "webhook, on the Settings page or in the configuration file); the dashboard ticks its "
        "getting-started steps by it and by the hosts, "
        "users and reservations.",
    ),
    Route(
        "GET",
        "/stream",
        stream,
        Access.USER,
        "Live events (Server-Sent Events)",
        "system",
        query=StreamQuery,
        raw=True,
        produces="text/event-stream",
        description="Host samples, GPU processes, reservation, job and violation changes that "
        "you may see. Each event's `id` is `<epoch>-<seq>-<event_id>` (a replica's epoch, its "
        "arrival number there, the event's own id); reconnect with `Last-Event-ID` to resume. "
        "On the same gateway replica you get exactly what you missed; on another one "
        "(several replicas behind one address) what you missed and some events of the few "
        "seconds before (`[gateway] stream_resume_window_s`) again: drop an event whose "
        "`event_id` (in its data line) you have seen. When the events since your last one "
        "cannot be vouched for you get one `reset` event instead: reload your state. "
        "Browsers (EventSource) may pass the token as `access_token`.",
    ),
)
