"""A job definition as the RPC takes it, checked, and as the `spec` column stores it (JSON).

The schemas check shapes and sizes; `render.job_problems` checks the rules (names, roles,
template options), and the engine checks what needs the world (hosts, GPUs, reservations).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from marshmallow import Schema, ValidationError, fields, validate, validates_schema

from services.jobs.domain import TEMPLATE_KINDS, Job, Param, Task, Template

_Str = fields.String
NAME_MAX = 255
MAX_TASKS = 256


class _GpuRef(fields.Field):
    """A GPU by index (an int, or a string of digits) or by uuid."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> int | str:
        if isinstance(value, bool):
            raise ValidationError("a GPU index (0, 1, ...) or uuid")
        if isinstance(value, int) and value >= 0:
            return value
        if isinstance(value, str) and value.isdigit() and len(value) < 4:
            return int(value)
        if isinstance(value, str) and 0 < len(value) <= 128 and value.isprintable():
            return value
        raise ValidationError("a GPU index (0, 1, ...) or uuid")


class ParamSchema(Schema):
    name = _Str(load_default="", validate=validate.Length(max=256))
    value = _Str(load_default=None, allow_none=True, validate=validate.Length(max=65536))
    separator = _Str(load_default=" ", validate=validate.OneOf((" ", "=")))


_Env = fields.Dict(
    keys=_Str(validate=validate.Length(min=1, max=256)),
    values=_Str(validate=validate.Length(max=65536)),
    load_default=dict,
)


class TemplateSchema(Schema):
    kind = _Str(required=True, validate=validate.OneOf(TEMPLATE_KINDS))
    options = fields.Dict(keys=_Str(), load_default=dict)


class TaskSchema(Schema):
    host = _Str(load_default=None, allow_none=True, validate=validate.Length(min=1, max=255))
    command = _Str(required=True, validate=validate.Length(min=1, max=65536))
    gpus = fields.List(_GpuRef(), load_default=list, validate=validate.Length(max=64))
    gpu_count = fields.Integer(
        load_default=None, allow_none=True, strict=True, validate=validate.Range(min=1, max=64)
    )
    cwd = _Str(load_default="", validate=validate.Length(max=4096))
    params = fields.List(fields.Nested(ParamSchema), load_default=list)
    env = _Env
    role = _Str(load_default="worker")


class DefinitionSchema(Schema):
    """What create_job and update_job take (beside actor and the job id)."""

    name = _Str(required=True, validate=validate.Length(min=1, max=NAME_MAX))
    description = _Str(load_default="", validate=validate.Length(max=10_000))
    params = fields.List(fields.Nested(ParamSchema), load_default=list)
    env = _Env
    template = fields.Nested(TemplateSchema, load_default=None, allow_none=True)
    tasks = fields.List(
        fields.Nested(TaskSchema), required=True, validate=validate.Length(min=1, max=MAX_TASKS)
    )
    # When it runs: start_at (a time), reservation_id (inside one of the owner's
    # reservations), queued (when its GPUs are free); none of them: on `start_job`.
    start_at = fields.AwareDateTime(load_default=None, allow_none=True)
    stop_at = fields.AwareDateTime(load_default=None, allow_none=True)
    reservation_id = fields.Integer(load_default=None, allow_none=True, strict=True)
    queued = fields.Boolean(load_default=False)
    max_runtime_s = fields.Float(
        load_default=None, allow_none=True, validate=validate.Range(min=1, max=366 * 86400)
    )

    @validates_schema
    def one_schedule(self, data: dict[str, Any], **_: Any) -> None:
        chosen = [
            key
            for key in ("start_at", "reservation_id", "queued")
            if data.get(key) not in (None, False)
        ]
        if len(chosen) > 1:
            raise ValidationError(f"choose one of start_at, reservation_id, queued (got {chosen})")
        start, stop = data.get("start_at"), data.get("stop_at")
        if start is not None and stop is not None and stop <= start:
            raise ValidationError("must be after start_at", "stop_at")


def _param(raw: Mapping[str, Any]) -> Param:
    return Param(raw["name"], raw["value"], raw["separator"])


def to_job(
    job_id: int,
    owner: str,
    definition: Mapping[str, Any],
    gpus_by_task: Mapping[int, tuple[str, ...]] | None = None,
) -> Job:
    """The model of a loaded definition; `gpus_by_task` holds each task's resolved uuids
    (default: the definition's, which must then be uuids already)."""
    template = definition.get("template")
    return Job(
        id=job_id,
        owner=owner,
        name=definition["name"],
        description=definition.get("description", ""),
        params=tuple(_param(p) for p in definition.get("params", ())),
        env=dict(definition.get("env") or {}),
        template=None if template is None else Template(template["kind"], template["options"]),
        tasks=tuple(
            Task(
                index=i,
                host=raw.get("host"),
                command=raw["command"],
                gpus=(gpus_by_task or {}).get(i) or tuple(str(g) for g in raw.get("gpus", ())),
                gpu_count=raw.get("gpu_count"),
                cwd=raw.get("cwd", ""),
                params=tuple(_param(p) for p in raw.get("params", ())),
                env=dict(raw.get("env") or {}),
                role=raw.get("role", "worker"),
            )
            for i, raw in enumerate(definition["tasks"])
        ),
    )


def definition_of(job: Job) -> dict[str, Any]:
    """What defines the job besides its name and schedule, as a definition (GPUs as uuids)."""
    return {
        "params": [p.to_dict() for p in job.params],
        "env": dict(job.env),
        "template": None
        if job.template is None
        else {"kind": job.template.kind, "options": dict(job.template.options)},
        "tasks": [task_dict(task) for task in job.tasks],
    }


def spec_json(job: Job) -> str:
    """The `spec` column."""
    return json.dumps(definition_of(job), separators=(",", ":"))


def task_dict(task: Task) -> dict[str, Any]:
    return {
        "host": task.host,
        "command": task.command,
        "gpus": list(task.gpus),
        "gpu_count": task.gpu_count,
        "cwd": task.cwd,
        "params": [p.to_dict() for p in task.params],
        "env": dict(task.env),
        "role": task.role,
    }


def from_spec(job_id: int, owner: str, name: str, description: str, spec: str) -> Job:
    data = json.loads(spec)
    return to_job(job_id, owner, {"name": name, "description": description, **data})
