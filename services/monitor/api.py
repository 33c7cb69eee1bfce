"""The monitor's public call contract: its RPC methods, their arguments and answers, and the
errors they raise (see `services.shared.rpc`). Its events are in `services.shared.contracts`.
"""

from __future__ import annotations

from marshmallow import Schema, fields, validate

from services.shared.contracts import HostRecord
from services.shared.errors import AlreadyExists, InvalidRequest, NotFound, StateConflict
from services.shared.rpc import Answer, methods_of

SERVICE = "monitor"
_method = methods_of(SERVICE)

# A series may not ask for more buckets than this (range / step).
MAX_BUCKETS = 10_000

_Str = fields.String
_Num = fields.Float
_Time = fields.AwareDateTime


# --- arguments ----------------------------------------------------------------------------------


class SnapshotArgs(Schema):
    host = _Str(load_default=None, allow_none=True)


class SeriesArgs(Schema):
    host = _Str(required=True, validate=validate.Length(min=1, max=255))
    metric = _Str(
        required=True,
        validate=validate.Length(min=1, max=64),
        metadata={
            "description": "a host metric (cpu_percent, load_1m, memory_used_mib, ...) or, "
            "with gpu_uuid, a GPU metric (utilization_gpu_percent, temperature_c, ...)"
        },
    )
    start = _Time(required=True)
    end = _Time(required=True)
    step_s = _Num(
        required=True,
        validate=validate.Range(min=1, max=366 * 86400),
        metadata={"description": "seconds per bucket, at least 1"},
    )
    gpu_uuid = _Str(
        allow_none=True,
        validate=validate.Length(min=1, max=128),
        metadata={"description": "the GPU, for a GPU metric"},
    )


class StatsArgs(Schema):
    reset = fields.Boolean(
        load_default=False, metadata={"description": "start the counters again after answering"}
    )


HOST_NAME = validate.Regexp(
    r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$",
    error="letters, digits, '.', '_' and '-' (up to 63), starting with a letter or digit",
)


class HostFields(Schema):
    """What an admin sets on a host (as a [[hosts]] table says it)."""

    address = _Str(
        validate=validate.Length(max=255),
        metadata={"description": 'name or address; required when probe is "ssh"'},
    )
    port = fields.Integer(validate=validate.Range(min=1, max=65535))
    user = _Str(
        validate=validate.Length(max=64),
        metadata={"description": 'the user Warden logs in as; required when probe is "ssh"'},
    )
    key_file = _Str(
        validate=validate.Length(max=4096),
        metadata={"description": "private key on the head node; empty: agent and default keys"},
    )
    probe = _Str(validate=validate.OneOf(("ssh", "nvml")))
    labels = fields.List(_Str(validate=HOST_NAME), validate=validate.Length(max=32))
    host_key = _Str(
        allow_none=True,
        validate=validate.Length(max=16_384),
        metadata={
            "description": "the host's public key to trust (`ssh-ed25519 AAAA...`, as `check` "
            "shows it); null or absent: [ssh] known_hosts decides"
        },
    )


class HostNameArgs(Schema):
    name = _Str(required=True, validate=HOST_NAME)


class AddHostArgs(HostFields, HostNameArgs):
    pass


class UpdateHostArgs(HostFields, HostNameArgs):
    """`name` and only the fields that change."""


class CheckHostArgs(HostFields):
    """A host of the inventory by `name` (fields given override its own), or a candidate
    described by the fields alone."""

    name = _Str(validate=HOST_NAME)


class ProveLoginArgs(Schema):
    username = _Str(
        required=True,
        # The reservations service's username rule: checked before any SSH.
        validate=validate.Regexp(
            r"^[a-z_][a-z0-9_-]{0,31}$",
            error="1-32 characters: lowercase letters, digits, '_' or '-', starting with a "
            "letter or '_' (the user's UNIX username on the GPU hosts)",
        ),
    )
    host = _Str(
        load_default=None,
        allow_none=True,
        validate=HOST_NAME,
        metadata={"description": "the host to log in to; null: every SSH host of the inventory"},
    )


# --- answers ------------------------------------------------------------------------------------


class SeriesBucketSchema(Answer):
    start = _Time(required=True)
    min = _Num(required=True, allow_none=True)
    avg = _Num(required=True, allow_none=True)
    max = _Num(required=True, allow_none=True)
    count = fields.Integer(required=True)


class SeriesSchema(Answer):
    host = _Str(required=True)
    gpu_uuid = _Str(required=True, allow_none=True)
    metric = _Str(required=True)
    step_s = _Num(required=True)
    buckets = fields.List(fields.Nested(SeriesBucketSchema), required=True)


class HostsSchema(Answer):
    hosts = fields.List(fields.Nested(HostRecord), required=True)


class HostKeySchema(Answer):
    line = _Str(required=True, metadata={"description": "as known_hosts holds it"})
    fingerprint = _Str(required=True, metadata={"description": "SHA256:..., as ssh shows it"})
    status = _Str(
        required=True,
        validate=validate.OneOf(("trusted", "new", "changed")),
        metadata={
            "description": "trusted: known_hosts or the host's accepted key has it; new: not "
            "known yet (accept it by sending `line` as host_key); changed: another key is "
            "trusted for this host (refused)"
        },
    )


class FoundGpuSchema(Answer):
    index = fields.Integer(required=True)
    name = _Str(required=True)
    uuid = _Str(required=True)


class TerminalWritesSchema(Answer):
    ok = fields.Boolean(required=True)
    detail = _Str(required=True, metadata={"description": "why, and how to fix it, in words"})


class HostCheckSchema(Answer):
    ok = fields.Boolean(required=True)
    detail = _Str(required=True, metadata={"description": "ok, or why not, in words"})
    host_key = fields.Nested(HostKeySchema, required=True, allow_none=True)
    gpus = fields.List(fields.Nested(FoundGpuSchema), required=True)
    terminals = fields.Nested(
        TerminalWritesSchema,
        required=True,
        allow_none=True,
        metadata={
            "description": "whether the host's login writes the violation warning on "
            "offenders' terminals (root, or group tty); null when it could not be asked"
        },
    )


class LoginOutcomeSchema(Answer):
    host = _Str(required=True, allow_none=True)
    outcome = _Str(
        required=True,
        validate=validate.OneOf(
            ("proven", "key_not_installed", "unknown_user", "refused", "unreachable")
        ),
    )
    reason = _Str(required=True, metadata={"description": "in words a person can act on"})


class ProveLoginSchema(LoginOutcomeSchema):
    proven = fields.Boolean(required=True)
    tried = fields.List(fields.Nested(LoginOutcomeSchema), required=True)


# --- methods ------------------------------------------------------------------------------------

SNAPSHOT = _method(
    "snapshot",
    "Latest state of every host (or `host`): figures, GPUs, processes, reachability",
    SnapshotArgs,
    raises=(InvalidRequest, NotFound),
)
SERIES = _method(
    "series",
    "Buckets (min/avg/max/count) of one metric of a host or GPU over a time range",
    SeriesArgs,
    answer=SeriesSchema,
    raises=(InvalidRequest,),
)
STATS = _method(
    "stats",
    "Polls, failures, missed ticks and sample age (tick to published event)",
    StatsArgs,
    raises=(InvalidRequest,),
)

LIST_HOSTS = _method("list_hosts", "Every host of the inventory, by name", answer=HostsSchema)
ADD_HOST = _method(
    "add_host",
    "Add a host to the inventory; it is polled within one interval (event host.added)",
    AddHostArgs,
    answer=HostRecord,
    raises=(InvalidRequest, AlreadyExists),
)
UPDATE_HOST = _method(
    "update_host",
    "Change a host's fields (event host.updated); polled with them from the next interval",
    UpdateHostArgs,
    answer=HostRecord,
    raises=(InvalidRequest, NotFound, StateConflict),
)
REMOVE_HOST = _method(
    "remove_host",
    "Stop watching a host (event host.removed); its reservations and history stay",
    HostNameArgs,
    answer=HostRecord,
    raises=(InvalidRequest, NotFound, StateConflict),
)
CHECK_HOST = _method(
    "check_host",
    "Log in to a host (of the inventory or a candidate): its host key and the GPUs found",
    CheckHostArgs,
    answer=HostCheckSchema,
    raises=(InvalidRequest, NotFound),
    timeout_s=40.0,
)

PROVE_LOGIN = _method(
    "prove_login",
    "Log in as a user with Warden's user key (SSH self-signup): proven, or why not",
    ProveLoginArgs,
    answer=ProveLoginSchema,
    raises=(InvalidRequest, NotFound),
    timeout_s=60.0,
)

HOST_METHODS = (LIST_HOSTS, ADD_HOST, UPDATE_HOST, REMOVE_HOST, CHECK_HOST)
METHODS = (SNAPSHOT, SERIES, STATS, *HOST_METHODS, PROVE_LOGIN)
