"""A job definition (as `api.DefinitionSchema` loads it) as the domain's `Job`, and as the `spec`
column stores it (JSON).

The api's schemas check shapes and sizes; `render.job_problems` checks the rules (names, roles,
template options), and the engine checks what needs the world (hosts, GPUs, reservations).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from services.jobs.domain import Handback, Job, Param, Task, Template


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
        shared_gpus=bool(definition.get("shared_gpus", False)),
        handback=handback_of(definition),
        tasks=tuple(
            Task(
                index=i,
                host=raw.get("host"),
                command=raw["command"],
                gpus=(gpus_by_task or {}).get(i) or tuple(str(g) for g in raw.get("gpus", ())),
                gpu_count=raw.get("gpu_count"),
                labels=tuple(raw.get("labels") or ()),
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
        "shared_gpus": job.shared_gpus,
        **handback_dict(job.handback),
    }


def handback_of(definition: Mapping[str, Any]) -> Handback:
    """The hand-back fields of a definition (each left out: its default)."""
    default = Handback()
    signal = definition.get("handback_signal")
    on_time_limit = definition.get("on_time_limit")
    return Handback(
        signal=default.signal if signal is None else str(signal),
        grace_s=definition.get("handback_grace_s"),
        requeue=definition.get("requeue"),
        on_time_limit=default.on_time_limit if on_time_limit is None else str(on_time_limit),
    )


def handback_dict(handback: Handback) -> dict[str, Any]:
    return {
        "handback_signal": handback.signal,
        "handback_grace_s": handback.grace_s,
        "requeue": handback.requeue,
        "on_time_limit": handback.on_time_limit,
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
        "labels": list(task.labels),
        "cwd": task.cwd,
        "params": [p.to_dict() for p in task.params],
        "env": dict(task.env),
        "role": task.role,
    }


def from_spec(job_id: int, owner: str, name: str, description: str, spec: str) -> Job:
    data = json.loads(spec)
    return to_job(job_id, owner, {"name": name, "description": description, **data})
