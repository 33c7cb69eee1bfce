"""From a job definition to the line of sh code each task runs, and what is wrong with one (pure).

The task's command is the owner's own shell code (it runs as their account), kept as written;
everything Warden adds around it (template words before, parameters after) is quoted so that
each value reaches the program as exactly one argv word, whatever it contains.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Collection, Mapping, Sequence

from services.jobs.domain import TF_ROLES, Job, Param, RenderedTask, Task
from services.jobs.templates import (
    Placement,
    apply_template,
    template_env_names,
    template_param_names,
    template_problems,
)

MAX_TASKS = 256
MAX_GPU_COUNT = 64
MAX_COMMAND_BYTES = 64 * 1024
SEPARATORS = (" ", "=")
GPU_ENV = "CUDA_VISIBLE_DEVICES"  # Warden's: the task sees the GPUs it was given, no others

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WHITESPACE = re.compile(r"\s")


class JobInvalid(ValueError):
    """A job definition Warden cannot run; `problems` maps a path to a reason (job_problems)."""

    def __init__(self, problems: Mapping[str, str]) -> None:
        self.problems = dict(problems)
        listed = "; ".join(f"{path}: {reason}" for path, reason in self.problems.items())
        super().__init__(f"the job cannot run: {listed}")


def render_params(params: Sequence[Param]) -> list[str]:
    """argv words: `--rank=0` is one word, `--rank 0` two, a flag its name, a positional its
    value."""
    words: list[str] = []
    for param in params:
        if not param.name:
            if param.value is None:
                raise ValueError("a positional parameter (empty name) needs a value")
            words.append(param.value)
        elif param.value is None:
            words.append(param.name)
        elif param.separator == "=":
            words.append(f"{param.name}={param.value}")
        else:
            words.extend((param.name, param.value))
    return words


def render_command(command: str, params: Sequence[Param], prefix: Sequence[str] = ()) -> str:
    """`prefix` words, the owner's `command` as written, then `params`: one line of sh code.

    Only Warden's words are quoted: the command is shell code the owner wrote for their own
    account, so quoting it would break their pipes and variables and protect nobody.
    """
    parts = [shlex.join(prefix)] if prefix else []
    parts.append(command)
    words = render_params(params)
    if words:
        parts.append(shlex.join(words))
    return " ".join(parts)


def job_problems(job: Job) -> dict[str, str]:
    """Everything wrong with a job definition, by path (`tasks[1].env.FOO`, `params[0].name`),
    each with a reason a person can act on. Empty: the job can be saved and run."""
    problems: dict[str, str] = {}
    reserved_env = template_env_names(job.template)
    reserved_params = template_param_names(job.template)
    template_kind = job.template.kind if job.template else ""

    if not job.tasks:
        problems["tasks"] = "a job needs at least one task"
    elif len(job.tasks) > MAX_TASKS:
        problems["tasks"] = f"a job has at most {MAX_TASKS} tasks, not {len(job.tasks)}"
    _params_problems("params", job.params, reserved_params, template_kind, problems)
    _env_problems("env", job.env, reserved_env, template_kind, problems)
    for position, task in enumerate(job.tasks):
        _task_problems(f"tasks[{position}]", position, task, problems)
        where = f"tasks[{position}]"
        _params_problems(f"{where}.params", task.params, reserved_params, template_kind, problems)
        _env_problems(f"{where}.env", task.env, reserved_env, template_kind, problems)
    for path, reason in template_problems(job).items():
        problems.setdefault(path, reason)
    return problems


def shared_gpus(job: Job) -> dict[str, list[int]]:
    """Each GPU (uuid, or `host:index` while unresolved) named by more than one task of the
    job, with those tasks' indexes; empty when the job says its tasks may share GPUs."""
    if job.shared_gpus:
        return {}
    users: dict[str, list[int]] = {}
    for task in job.tasks:
        for gpu in dict.fromkeys(task.gpus):
            users.setdefault(gpu, []).append(task.index)
    return {gpu: tasks for gpu, tasks in users.items() if len(tasks) > 1}


def _task_problems(where: str, position: int, task: Task, problems: dict[str, str]) -> None:  # noqa: C901 - one check per field of a task, each naming its path
    def problem(path: str, reason: str) -> None:
        problems.setdefault(f"{where}.{path}", reason)

    if task.index != position:
        problem("index", f"task indexes count from 0 in order: expected {position}")
    if task.host is not None and (
        not task.host or _WHITESPACE.search(task.host) or "\0" in task.host
    ):
        problem("host", "a host name is not empty and has no whitespace")
    if not task.command.strip():
        problem("command", "the command is empty")
    elif "\0" in task.command:
        problem("command", "the command contains a NUL character")
    elif len(task.command.encode()) > MAX_COMMAND_BYTES:
        problem("command", f"the command is longer than {MAX_COMMAND_BYTES // 1024} KiB")
    if "\0" in task.cwd or "\n" in task.cwd or "\r" in task.cwd:
        problem("cwd", "the working directory contains a NUL or a line break")
    if task.gpus and task.gpu_count is not None:
        problem("gpu_count", "give either gpus (these GPUs) or gpu_count (any that many), not both")
    elif task.gpu_count is not None and not (
        not isinstance(task.gpu_count, bool) and 1 <= task.gpu_count <= MAX_GPU_COUNT
    ):
        problem("gpu_count", f"gpu_count is between 1 and {MAX_GPU_COUNT}, not {task.gpu_count}")
    seen: set[str] = set()
    for i, gpu in enumerate(task.gpus):
        if not gpu or "," in gpu or _WHITESPACE.search(gpu) or "\0" in gpu:
            problem(f"gpus[{i}]", "a GPU id is not empty and has no comma or whitespace")
        elif gpu in seen:
            problem(f"gpus[{i}]", f"GPU {gpu} is listed twice")
        seen.add(gpu)
    if task.role not in TF_ROLES:
        problem("role", f"unknown role {task.role!r}; known: {', '.join(TF_ROLES)}")


def _params_problems(
    where: str,
    params: Sequence[Param],
    reserved: Collection[str],
    template_kind: str,
    problems: dict[str, str],
) -> None:
    for i, param in enumerate(params):

        def problem(path: str, reason: str, i: int = i) -> None:
            problems.setdefault(f"{where}[{i}].{path}", reason)

        if _WHITESPACE.search(param.name) or "\0" in param.name:
            problem("name", "a parameter name has no whitespace or NUL (put values in value)")
        elif param.name in reserved:
            problem("name", f"the {template_kind} template passes {param.name} itself")
        if param.separator not in SEPARATORS:
            problem(
                "separator",
                f"the separator is ' ' (--rank 0) or '=' (--rank=0), not {param.separator!r}",
            )
        if param.value is None:
            if not param.name:
                problem("value", "a positional parameter (empty name) needs a value")
            elif param.separator == "=":
                problem("value", f"{param.name}= needs a value; a flag has separator ' '")
        elif "\0" in param.value:
            problem("value", "the value contains a NUL character")


def _env_problems(
    where: str,
    env: Mapping[str, str],
    reserved: Collection[str],
    template_kind: str,
    problems: dict[str, str],
) -> None:
    for name, value in env.items():
        path = f"{where}.{name}"
        if not _ENV_NAME.fullmatch(name):
            problems.setdefault(
                path, "a variable name is letters, digits and _, not starting with a digit"
            )
        elif name == GPU_ENV:
            problems.setdefault(path, f"Warden sets {GPU_ENV} to the GPUs the task was given")
        elif name in reserved:
            problems.setdefault(path, f"the {template_kind} template sets {name}")
        elif "\0" in value:
            problems.setdefault(path, "the value contains a NUL character")


def render_task(
    job: Job,
    task: Task,
    *,
    host: str,
    gpus: Sequence[str],
    template_params: Sequence[Param] = (),
    template_env: Mapping[str, str] | None = None,
    prefix: Sequence[str] = (),
    port: int | None = None,
) -> RenderedTask:
    """One task on `host` with `gpus` (uuids): the job's, then the task's, then the template's
    parameters and variables, later ones winning; CUDA_VISIBLE_DEVICES last, empty for none
    (so that a task without GPUs sees none rather than all)."""
    params = (*job.params, *task.params, *template_params)
    env = {**job.env, **task.env, **(template_env or {}), GPU_ENV: ",".join(gpus)}
    return RenderedTask(
        index=task.index,
        host=host,
        command=render_command(task.command, params, prefix),
        env=env,
        gpus=tuple(gpus),
        port=port,
    )


def render_job(
    job: Job,
    placement: Placement,
    *,
    addresses: Mapping[str, str],
    taken_ports: Mapping[str, Collection[int]],
    port_range: tuple[int, int],
) -> list[RenderedTask]:
    """Every task of `job`, in order, on the host and GPUs `placement` gives it, with the
    job's template applied. Raises JobInvalid or NoFreePort (both ValueError)."""
    problems = job_problems(job)
    if problems:
        raise JobInvalid(problems)
    missing = [task.index for task in job.tasks if task.index not in placement]
    if missing:
        raise ValueError(f"tasks {missing} have no placement (no host chosen for them)")
    parts = apply_template(job, placement, addresses, taken_ports, port_range)
    rendered: list[RenderedTask] = []
    for task in job.tasks:
        host, gpus = placement[task.index]
        part = parts[task.index]
        rendered.append(
            render_task(
                job,
                task,
                host=host,
                gpus=gpus,
                template_params=part.params,
                template_env=part.env,
                prefix=part.prefix,
                port=part.port,
            )
        )
    return rendered
