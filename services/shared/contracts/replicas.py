"""The heartbeat every service replica publishes: who it is, its role, what it holds.

Every service publishes it on its own exchange (`<service>.events`, routing key
`replica.heartbeat`), so its source is whichever service sends it (`ANY_SOURCE`).
"""

from __future__ import annotations

from marshmallow import fields, validate

from services import SERVICE_NAMES
from services.shared.contracts.schema import Number, Str, Strict
from services.shared.contracts.validation import EventType

ANY_SOURCE = "*"

# active: one of several equals (monitor shards, gateway, reservations); leader / standby: of a
# service with single-writer work; stopping: its last heartbeat, sent when it stops cleanly.
REPLICA_ROLES = ("active", "leader", "standby", "stopping")


class ReplicaHeartbeat(Strict):
    service = Str(required=True, validate=validate.OneOf(SERVICE_NAMES))
    replica = Str(required=True, validate=validate.Length(min=1, max=200))
    role = Str(required=True, validate=validate.OneOf(REPLICA_ROLES))
    started_at = fields.AwareDateTime(required=True)
    interval_s = Number(required=True, validate=validate.Range(min=0.01))
    # Figures a service adds about itself (the monitor: hosts it polls), free-form.
    details = fields.Dict(keys=fields.String(), load_default=dict)


EVENTS: tuple[EventType, ...] = (
    EventType(
        "replica.heartbeat",
        1,
        ANY_SOURCE,
        ReplicaHeartbeat,
        "A service replica is alive (sent every [replicas] heartbeat_s on its service's "
        "exchange; `stopping` when it stops cleanly).",
    ),
)
