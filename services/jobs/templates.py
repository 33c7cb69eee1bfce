"""Distributed-training templates: what each task of a job adds to run as one cluster (pure).

A template turns a job's placement (task index -> host and GPUs) into, per task, argv words
before the command, parameters after it, variables to export and the port it listens on.
torchrun gets the rendezvous address of task 0; TensorFlow gets the whole cluster, every
member on a port of its own. Ports are picked here, lowest free first, so that a start can be
replayed and give the same command lines.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from services.jobs.domain import TEMPLATE_KINDS, TF_ROLES, Job, Param, Template

# task index -> (host, GPU uuids)
Placement = Mapping[int, tuple[str, tuple[str, ...]]]

TORCHRUN_STYLES = ("args", "env")
TEMPLATE_OPTIONS: dict[str, tuple[str, ...]] = {
    "torchrun": ("nproc_per_node", "style"),
    "tf_config": (),
    "tf_cluster_spec": (),
}
# What a template exports or passes: a task setting these itself would be overridden (or,
# for torchrun's "args" style, overwritten by torchrun in the training processes).
TORCHRUN_ENV = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")
TF_CLUSTER_SPEC_PARAMS = ("--ps_hosts", "--worker_hosts", "--job_name", "--task_index")
TF_CLUSTER_ROLES = ("chief", "worker", "ps")  # TF_CONFIG's cluster; evaluators stay outside
TF1_ROLES = ("ps", "worker")


@dataclass(frozen=True)
class TemplatePart:
    """What a template adds to one task: `prefix` argv words before the command, `params`
    after the job's and the task's own, `env` exported last, `port` the task listens on."""

    prefix: tuple[str, ...] = ()
    params: tuple[Param, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    port: int | None = None


class NoFreePort(ValueError):
    """Every port of the range is taken on `host`: free some, or widen the jobs port range."""

    def __init__(self, host: str, port_range: tuple[int, int]) -> None:
        self.host = host
        self.port_range = port_range
        low, high = port_range
        super().__init__(
            f"no free port on host {host!r} in the jobs port range {low}-{high}: "
            "every port there is taken by a running job or by another task of this job"
        )


def template_env_names(template: Template | None) -> tuple[str, ...]:
    """The variables `template` sets on every task (a task may not set them itself)."""
    if template is None:
        return ()
    if template.kind == "torchrun":
        return TORCHRUN_ENV
    if template.kind == "tf_config":
        return ("TF_CONFIG",)
    return ()


def template_param_names(template: Template | None) -> tuple[str, ...]:
    """The parameters `template` passes (the job's would come twice on the command line)."""
    if template is not None and template.kind == "tf_cluster_spec":
        return TF_CLUSTER_SPEC_PARAMS
    return ()


def template_problems(job: Job) -> dict[str, str]:  # noqa: C901 - one check per template rule, each naming its path
    """What is wrong with `job.template` and with the task roles it relies on, by path."""
    template = job.template
    if template is None:
        return {}
    problems: dict[str, str] = {}
    if template.kind not in TEMPLATE_KINDS:
        problems["template.kind"] = (
            f"unknown template {template.kind!r}; known: {', '.join(TEMPLATE_KINDS)}"
        )
        return problems
    known = TEMPLATE_OPTIONS[template.kind]
    for name in template.options:
        if name not in known:
            problems[f"template.options.{name}"] = f"{template.kind} has no option {name!r}" + (
                f"; known: {', '.join(known)}" if known else "; it takes no options"
            )
    if template.kind == "torchrun":
        _torchrun_problems(template.options, problems)
    elif template.kind == "tf_config":
        roles = [task.role for task in job.tasks]
        chiefs = [i for i, role in enumerate(roles) if role == "chief"]
        for i in chiefs[1:]:
            problems[f"tasks[{i}].role"] = (
                f"a second chief (task {chiefs[0]} is one); TF_CONFIG has at most one chief"
            )
        if job.tasks and not ({"chief", "worker"} & set(roles)):
            problems["tasks"] = "tf_config needs at least one task with role chief or worker"
    elif template.kind == "tf_cluster_spec":
        for i, task in enumerate(job.tasks):
            if task.role not in TF1_ROLES and task.role in TF_ROLES:
                problems[f"tasks[{i}].role"] = (
                    f"tf_cluster_spec knows roles ps and worker only, not {task.role!r} "
                    "(use the tf_config template for a chief or an evaluator)"
                )
        if job.tasks and not any(task.role == "worker" for task in job.tasks):
            problems["tasks"] = "tf_cluster_spec needs at least one task with role worker"
    return problems


def _torchrun_problems(options: Mapping[str, Any], problems: dict[str, str]) -> None:
    style = options.get("style", "args")
    if style not in TORCHRUN_STYLES:
        problems["template.options.style"] = (
            f"style must be 'args' (torchrun before the command) or 'env' (variables "
            f"exported), not {style!r}"
        )
    if "nproc_per_node" in options:
        nproc = options["nproc_per_node"]
        if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1:
            problems["template.options.nproc_per_node"] = (
                f"nproc_per_node must be a whole number of at least 1, not {nproc!r}"
            )


def apply_template(
    job: Job,
    placement: Placement,
    addresses: Mapping[str, str],
    taken_ports: Mapping[str, Collection[int]],
    port_range: tuple[int, int],
) -> dict[int, TemplatePart]:
    """Each task's part of `job.template` (an empty part for every task without one).

    `addresses` maps a host to the address other hosts reach it by (default: its name);
    `taken_ports` the ports already in use per host. Raises NoFreePort (a ValueError).
    """
    template = job.template
    if template is None or not job.tasks:
        return {task.index: TemplatePart() for task in job.tasks}
    ports = _PortPicker(taken_ports, port_range)
    if template.kind == "torchrun":
        return _torchrun(job, template, placement, addresses, ports)
    if template.kind == "tf_config":
        return _tf_config(job, placement, addresses, ports)
    if template.kind == "tf_cluster_spec":
        return _tf_cluster_spec(job, placement, addresses, ports)
    raise ValueError(f"unknown template {template.kind!r}; known: {', '.join(TEMPLATE_KINDS)}")


class _PortPicker:
    """Lowest free port per host: never a taken one, never one twice within the job."""

    def __init__(self, taken: Mapping[str, Collection[int]], port_range: tuple[int, int]) -> None:
        low, high = port_range
        if not 1 <= low <= high <= 65535:
            raise ValueError(f"bad jobs port range {low}-{high}: need 1 <= low <= high <= 65535")
        self.taken = taken
        self.range = port_range
        self.used: dict[str, set[int]] = {}
        self.next: dict[str, int] = {}

    def pick(self, host: str) -> int:
        low, high = self.range
        taken = self.taken.get(host, ())
        used = self.used.setdefault(host, set())
        port = self.next.get(host, low)  # ports below were taken or handed out already
        while port <= high and (port in taken or port in used):
            port += 1
        if port > high:
            raise NoFreePort(host, self.range)
        used.add(port)
        self.next[host] = port + 1
        return port


def _where(placement: Placement, index: int) -> tuple[str, tuple[str, ...]]:
    try:
        return placement[index]
    except KeyError:
        raise ValueError(f"task {index} has no placement (no host chosen for it)") from None


def _address(addresses: Mapping[str, str], host: str) -> str:
    return addresses.get(host) or host


def _host_port(address: str, port: int) -> str:
    """`address:port`, an IPv6 address in brackets (the form gRPC and TF parse)."""
    if ":" in address and not address.startswith("["):
        return f"[{address}]:{port}"
    return f"{address}:{port}"


def _torchrun(
    job: Job,
    template: Template,
    placement: Placement,
    addresses: Mapping[str, str],
    ports: _PortPicker,
) -> dict[int, TemplatePart]:
    style = template.options.get("style", "args")
    nproc_option = template.options.get("nproc_per_node")
    first = job.tasks[0].index
    master_host, _ = _where(placement, first)
    master_addr = _address(addresses, master_host)
    master_port = ports.pick(master_host)
    world = len(job.tasks)
    parts: dict[int, TemplatePart] = {}
    for rank, task in enumerate(job.tasks):
        _, gpus = _where(placement, task.index)
        port = master_port if task.index == first else None
        if style == "env":
            env = {
                "MASTER_ADDR": master_addr,
                "MASTER_PORT": str(master_port),
                "RANK": str(rank),
                "WORLD_SIZE": str(world),
                "LOCAL_RANK": "0",
            }
            parts[task.index] = TemplatePart(env=env, port=port)
        else:
            nproc = int(nproc_option) if nproc_option is not None else max(1, len(gpus))
            prefix = (
                "torchrun",
                f"--nnodes={world}",
                f"--nproc-per-node={nproc}",
                f"--node-rank={rank}",
                f"--master-addr={master_addr}",
                f"--master-port={master_port}",
            )
            parts[task.index] = TemplatePart(prefix=prefix, port=port)
    return parts


def _cluster(
    job: Job,
    roles: Iterable[str],
    placement: Placement,
    addresses: Mapping[str, str],
    ports: _PortPicker,
) -> tuple[dict[str, list[str]], dict[int, int], dict[int, int]]:
    """Members per role ("address:port" in task order), each task's port and role index."""
    members = set(roles)
    cluster: dict[str, list[str]] = {}
    port_of: dict[int, int] = {}
    index_in_role: dict[int, int] = {}
    counts: dict[str, int] = {}
    for task in job.tasks:
        index_in_role[task.index] = counts.get(task.role, 0)
        counts[task.role] = index_in_role[task.index] + 1
        if task.role not in members:
            continue
        host, _ = _where(placement, task.index)
        port = ports.pick(host)
        port_of[task.index] = port
        cluster.setdefault(task.role, []).append(_host_port(_address(addresses, host), port))
    return cluster, port_of, index_in_role


def _tf_config(
    job: Job, placement: Placement, addresses: Mapping[str, str], ports: _PortPicker
) -> dict[int, TemplatePart]:
    cluster, port_of, index_in_role = _cluster(job, TF_CLUSTER_ROLES, placement, addresses, ports)
    ordered = {role: cluster[role] for role in TF_CLUSTER_ROLES if role in cluster}
    parts: dict[int, TemplatePart] = {}
    for task in job.tasks:
        config = {
            "cluster": ordered,
            "task": {"type": task.role, "index": index_in_role[task.index]},
        }
        env = {"TF_CONFIG": json.dumps(config, separators=(",", ":"))}
        parts[task.index] = TemplatePart(env=env, port=port_of.get(task.index))
    return parts


def _tf_cluster_spec(
    job: Job, placement: Placement, addresses: Mapping[str, str], ports: _PortPicker
) -> dict[int, TemplatePart]:
    cluster, port_of, index_in_role = _cluster(job, TF1_ROLES, placement, addresses, ports)
    hosts: list[Param] = [
        Param(f"--{role}_hosts", ",".join(cluster[role]), "=")
        for role in TF1_ROLES
        if role in cluster  # no ps: leave the flag at its default, not an empty entry
    ]
    parts: dict[int, TemplatePart] = {}
    for task in job.tasks:
        params = (
            *hosts,
            Param("--job_name", task.role, "="),
            Param("--task_index", str(index_in_role[task.index]), "="),
        )
        parts[task.index] = TemplatePart(params=params, port=port_of.get(task.index))
    return parts
