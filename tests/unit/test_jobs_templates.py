"""Distributed-training templates: torchrun, TF_CONFIG and TF1 cluster flags, the ports they
take, and the example jobs in examples/jobs run through a real /bin/sh."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.jobs.domain import Job, Param, Task, Template
from services.jobs.render import job_problems, render_job
from services.jobs.templates import NoFreePort, TemplatePart, apply_template

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "jobs"
RANGE = (29500, 29599)


def task(index: int, host: str | None = "gpu-01", role: str = "worker", **kw: Any) -> Task:
    return Task(index=index, host=host, command=kw.pop("command", "train.py"), role=role, **kw)


def job(*tasks: Task, kind: str, **options: Any) -> Job:
    return Job(id=7, owner="alice", name="dist", tasks=tasks, template=Template(kind, options))


def placed(the_job: Job, gpus: int = 1) -> dict[int, tuple[str, tuple[str, ...]]]:
    """Each task where its `host` says, with `gpus` made-up GPU uuids."""
    return {
        t.index: (t.host or "gpu-01", tuple(f"GPU-{t.index}-{g}" for g in range(gpus)))
        for t in the_job.tasks
    }


def apply(
    the_job: Job,
    placement: Mapping[int, tuple[str, tuple[str, ...]]] | None = None,
    addresses: Mapping[str, str] | None = None,
    taken: Mapping[str, set[int]] | None = None,
    port_range: tuple[int, int] = RANGE,
) -> dict[int, TemplatePart]:
    assert job_problems(the_job) == {}
    return apply_template(
        the_job,
        placement if placement is not None else placed(the_job),
        addresses or {},
        taken or {},
        port_range,
    )


# --- torchrun ---------------------------------------------------------------------------------


def test_torchrun_args_prefix_per_node() -> None:
    the_job = job(task(0, "gpu-01"), task(1, "gpu-02"), task(2, "gpu-03"), kind="torchrun")
    placement = {
        0: ("gpu-01", ("GPU-a", "GPU-b")),
        1: ("gpu-02", ("GPU-c", "GPU-d")),
        2: ("gpu-03", ("GPU-e", "GPU-f")),
    }
    parts = apply(
        the_job, placement, addresses={"gpu-01": "10.0.0.1"}, taken={"gpu-01": {29500, 29501}}
    )
    assert [parts[i].prefix for i in range(3)] == [
        (
            "torchrun",
            "--nnodes=3",
            "--nproc-per-node=2",
            f"--node-rank={i}",
            "--master-addr=10.0.0.1",
            "--master-port=29502",
        )
        for i in range(3)
    ]
    assert [parts[i].port for i in range(3)] == [29502, None, None]
    assert all(parts[i].env == {} and parts[i].params == () for i in range(3))


def test_torchrun_nproc_per_node_default_and_option() -> None:
    the_job = job(task(0), kind="torchrun")
    assert "--nproc-per-node=1" in apply(the_job, {0: ("gpu-01", ())})[0].prefix
    assert "--nproc-per-node=3" in apply(the_job, placed(the_job, gpus=3))[0].prefix
    four = job(task(0), kind="torchrun", nproc_per_node=4)
    assert "--nproc-per-node=4" in apply(four, placed(four, gpus=1))[0].prefix


def test_torchrun_master_is_task_zeros_host_name_without_an_address() -> None:
    the_job = job(task(0, "gpu-05"), task(1, "gpu-01"), kind="torchrun")
    parts = apply(the_job, taken={"gpu-01": {29500}})
    # gpu-01's taken port does not matter: the master port is on gpu-05.
    assert "--master-addr=gpu-05" in parts[1].prefix
    assert "--master-port=29500" in parts[1].prefix


def test_torchrun_env_style() -> None:
    the_job = job(task(0, "gpu-01"), task(1, "gpu-02"), kind="torchrun", style="env")
    parts = apply(the_job, addresses={"gpu-01": "10.0.0.1", "gpu-02": "10.0.0.2"})
    assert [parts[i].env for i in range(2)] == [
        {
            "MASTER_ADDR": "10.0.0.1",
            "MASTER_PORT": "29500",
            "RANK": str(i),
            "WORLD_SIZE": "2",
            "LOCAL_RANK": "0",
        }
        for i in range(2)
    ]
    assert [parts[i].prefix for i in range(2)] == [(), ()]
    assert [parts[i].port for i in range(2)] == [29500, None]
    rendered = render_job(the_job, placed(the_job), addresses={}, taken_ports={}, port_range=RANGE)
    assert [r.command for r in rendered] == ["train.py", "train.py"]


# --- tf_config --------------------------------------------------------------------------------


def test_tf_config_exact_cluster_and_task() -> None:
    the_job = job(
        task(0, "h1", "chief"),
        task(1, "h1", "worker"),
        task(2, "h2", "worker"),
        task(3, "h2", "ps"),
        task(4, "h1", "evaluator"),
        task(5, "h3", "ps"),
        kind="tf_config",
    )
    parts = apply(the_job, addresses={"h1": "10.0.0.1", "h2": "10.0.0.2"}, taken={"h2": {29500}})
    cluster = {
        "chief": ["10.0.0.1:29500"],
        "worker": ["10.0.0.1:29501", "10.0.0.2:29501"],
        "ps": ["10.0.0.2:29502", "h3:29500"],
    }
    expected_tasks = [
        ("chief", 0),
        ("worker", 0),
        ("worker", 1),
        ("ps", 0),
        ("evaluator", 0),
        ("ps", 1),
    ]
    for i, (role, index) in enumerate(expected_tasks):
        assert json.loads(parts[i].env["TF_CONFIG"]) == {
            "cluster": cluster,
            "task": {"type": role, "index": index},
        }
        assert set(parts[i].env) == {"TF_CONFIG"}
    assert [parts[i].port for i in range(6)] == [29500, 29501, 29501, 29502, None, 29500]
    # Compact JSON, roles in TF's order.
    assert parts[0].env["TF_CONFIG"] == (
        '{"cluster":{"chief":["10.0.0.1:29500"],"worker":["10.0.0.1:29501","10.0.0.2:29501"],'
        '"ps":["10.0.0.2:29502","h3:29500"]},"task":{"type":"chief","index":0}}'
    )


def test_tf_config_omits_empty_roles_and_brackets_ipv6() -> None:
    the_job = job(task(0, "h1"), task(1, "h2"), kind="tf_config")
    parts = apply(the_job, addresses={"h1": "fd00::1"})
    assert json.loads(parts[1].env["TF_CONFIG"]) == {
        "cluster": {"worker": ["[fd00::1]:29500", "h2:29500"]},
        "task": {"type": "worker", "index": 1},
    }


# --- tf_cluster_spec --------------------------------------------------------------------------


def test_tf_cluster_spec_params() -> None:
    the_job = job(
        task(0, "h1", "ps"),
        task(1, "h1", "worker"),
        task(2, "h2", "worker"),
        kind="tf_cluster_spec",
    )
    parts = apply(the_job)
    hosts = (
        Param("--ps_hosts", "h1:29500", "="),
        Param("--worker_hosts", "h1:29501,h2:29500", "="),
    )
    assert [parts[i].params for i in range(3)] == [
        (*hosts, Param("--job_name", "ps", "="), Param("--task_index", "0", "=")),
        (*hosts, Param("--job_name", "worker", "="), Param("--task_index", "0", "=")),
        (*hosts, Param("--job_name", "worker", "="), Param("--task_index", "1", "=")),
    ]
    rendered = render_job(the_job, placed(the_job), addresses={}, taken_ports={}, port_range=RANGE)
    assert rendered[2].command == (
        "train.py --ps_hosts=h1:29500 --worker_hosts=h1:29501,h2:29500 "
        "--job_name=worker --task_index=1"
    )
    assert [r.port for r in rendered] == [29500, 29501, 29500]


def test_tf_cluster_spec_without_ps_leaves_the_flag_out() -> None:
    the_job = job(task(0), kind="tf_cluster_spec")
    assert [p.name for p in apply(the_job)[0].params] == [
        "--worker_hosts",
        "--job_name",
        "--task_index",
    ]


# --- ports ------------------------------------------------------------------------------------


def test_no_free_port_names_the_host() -> None:
    the_job = job(task(0, "h1"), task(1, "h1"), task(2, "h1"), kind="tf_config")
    with pytest.raises(NoFreePort, match=r"no free port on host 'h1' in the jobs port range 10-12"):
        apply(the_job, taken={"h1": {11}}, port_range=(10, 12))
    # NoFreePort is a ValueError, and render_job lets it through.
    with pytest.raises(ValueError, match="no free port"):
        render_job(
            the_job,
            placed(the_job),
            addresses={},
            taken_ports={"h1": {10, 11, 12}},
            port_range=(10, 12),
        )
    # The range holds exactly three: fine.
    parts = apply(the_job, port_range=(10, 12))
    assert [parts[i].port for i in range(3)] == [10, 11, 12]


def test_a_bad_port_range_is_refused() -> None:
    with pytest.raises(ValueError, match="bad jobs port range"):
        apply(job(task(0), kind="torchrun"), port_range=(5, 4))


hosts_st = st.sampled_from(["h1", "h2", "h3"])


@given(
    hosts=st.lists(hosts_st, min_size=1, max_size=12),
    taken=st.dictionaries(hosts_st, st.sets(st.integers(100, 130), max_size=20)),
)
def test_ports_are_free_distinct_per_host_and_lowest_first(
    hosts: list[str], taken: dict[str, set[int]]
) -> None:
    the_job = job(*(task(i, host) for i, host in enumerate(hosts)), kind="tf_config")
    placement = placed(the_job)
    try:
        parts = apply(the_job, placement, taken=taken, port_range=(100, 130))
    except NoFreePort as err:
        need = hosts.count(err.host)
        assert len(set(range(100, 131)) - taken.get(err.host, set())) < need
        return
    for host in set(hosts):
        ports = [parts[i].port for i, h in enumerate(hosts) if h == host]
        free = sorted(set(range(100, 131)) - taken.get(host, set()))
        assert ports == free[: len(ports)]  # distinct, not taken, lowest first, in task order
    again = apply(the_job, placement, taken=taken, port_range=(100, 130))
    assert again == parts


# --- rules on templates -----------------------------------------------------------------------

TEMPLATE_CASES: list[tuple[str, Job, str, str]] = [
    ("unknown kind", job(task(0), kind="mpirun"), "template.kind", "unknown template 'mpirun'"),
    (
        "unknown option",
        job(task(0), kind="torchrun", nnodes=2),
        "template.options.nnodes",
        "torchrun has no option 'nnodes'",
    ),
    (
        "tf option",
        job(task(0), kind="tf_config", style="env"),
        "template.options.style",
        "takes no options",
    ),
    (
        "style",
        job(task(0), kind="torchrun", style="ENV"),
        "template.options.style",
        "not 'ENV'",
    ),
    (
        "nproc 0",
        job(task(0), kind="torchrun", nproc_per_node=0),
        "template.options.nproc_per_node",
        "at least 1",
    ),
    (
        "nproc string",
        job(task(0), kind="torchrun", nproc_per_node="2"),
        "template.options.nproc_per_node",
        "whole number",
    ),
    (
        "two chiefs",
        job(task(0, role="chief"), task(1, role="chief"), kind="tf_config"),
        "tasks[1].role",
        "at most one chief",
    ),
    (
        "no chief or worker",
        job(task(0, role="ps"), task(1, role="evaluator"), kind="tf_config"),
        "tasks",
        "chief or worker",
    ),
    (
        "TF1 chief",
        job(task(0, role="chief"), task(1), kind="tf_cluster_spec"),
        "tasks[0].role",
        "ps and worker only",
    ),
    (
        "TF1 evaluator",
        job(task(0), task(1, role="evaluator"), kind="tf_cluster_spec"),
        "tasks[1].role",
        "ps and worker only",
    ),
    ("TF1 no worker", job(task(0, role="ps"), kind="tf_cluster_spec"), "tasks", "role worker"),
]


@pytest.mark.parametrize(
    ("the_job", "path", "reason"),
    [c[1:] for c in TEMPLATE_CASES],
    ids=[c[0] for c in TEMPLATE_CASES],
)
def test_each_template_rule(the_job: Job, path: str, reason: str) -> None:
    problems = job_problems(the_job)
    assert path in problems, problems
    assert reason in problems[path]
    assert len(problems) == 1, problems


def test_torchrun_refuses_its_variables_in_either_style() -> None:
    for style in ("args", "env"):
        the_job = Job(
            1,
            "alice",
            "x",
            (task(0, env={"MASTER_PORT": "1"}),),
            env={"WORLD_SIZE": "2", "OTHER": "fine"},
            template=Template("torchrun", {"style": style}),
        )
        assert set(job_problems(the_job)) == {"tasks[0].env.MASTER_PORT", "env.WORLD_SIZE"}


# --- the examples -----------------------------------------------------------------------------


def job_from_dict(data: Mapping[str, Any], *, id: int = 1, owner: str = "alice") -> Job:
    """A Job from the JSON `create_job` takes (GPU indexes stand in for uuids here)."""
    template = data.get("template")
    return Job(
        id=id,
        owner=owner,
        name=data["name"],
        description=data.get("description", ""),
        params=tuple(Param.from_dict(p) for p in data.get("params", [])),
        env=dict(data.get("env", {})),
        template=Template(template["kind"], dict(template.get("options", {})))
        if template
        else None,
        tasks=tuple(
            Task(
                index=i,
                host=t.get("host"),
                command=t["command"],
                gpus=tuple(str(g) for g in t.get("gpus", [])),
                gpu_count=t.get("gpu_count"),
                cwd=t.get("cwd", ""),
                params=tuple(Param.from_dict(p) for p in t.get("params", [])),
                env=dict(t.get("env", {})),
                role=t.get("role", "worker"),
            )
            for i, t in enumerate(data["tasks"])
        ),
    )


# Stands in for torchrun: reads the options Warden renders and starts the script the way
# torchrun does (with Python, RANK = node rank * nproc + local rank, and so on).
FAKE_TORCHRUN = """\
import argparse, os, subprocess, sys
p = argparse.ArgumentParser(allow_abbrev=False)
for name in ("--nnodes", "--nproc-per-node", "--node-rank", "--master-port"):
    p.add_argument(name, type=int, required=True)
p.add_argument("--master-addr", required=True)
p.add_argument("script")
p.add_argument("args", nargs=argparse.REMAINDER)
a = p.parse_args()
for local in range(a.nproc_per_node):
    env = dict(os.environ, MASTER_ADDR=a.master_addr, MASTER_PORT=str(a.master_port),
               RANK=str(a.node_rank * a.nproc_per_node + local),
               WORLD_SIZE=str(a.nnodes * a.nproc_per_node), LOCAL_RANK=str(local))
    subprocess.run([sys.executable, a.script, *a.args], env=env, check=True)
"""


@pytest.fixture
def host_home(tmp_path: Path) -> Path:
    """A home with the example script where the examples expect it, and torchrun/python3."""
    (tmp_path / "warden-examples").mkdir()
    shutil.copy(EXAMPLES / "print_env.py", tmp_path / "warden-examples" / "print_env.py")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    torchrun = bin_dir / "torchrun"
    torchrun.write_text(f"#!{sys.executable}\n{FAKE_TORCHRUN}")
    torchrun.chmod(0o755)
    (bin_dir / "python3").symlink_to(sys.executable)
    return tmp_path


def run_task(home: Path, command: str, env: Mapping[str, str]) -> list[dict[str, Any]]:
    path = f"{home / 'bin'}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"
    out = subprocess.run(
        ["/bin/sh", "-c", command],
        env={"PATH": path, "HOME": str(home), **env},
        cwd=home,
        capture_output=True,
        text=True,
        check=True,
    )
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_there_is_an_example_per_template() -> None:
    kinds = {json.loads(path.read_text())["template"]["kind"] for path in EXAMPLES.glob("*.json")}
    assert kinds == {"torchrun", "tf_config", "tf_cluster_spec"}


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.json")))
def test_warden_submit_sends_each_example_as_post_jobs_takes_it(name: str) -> None:
    """examples/jobs/README.md says `warden submit examples/jobs/X.json`: the file as the CLI
    reads it is a body the gateway's POST /jobs accepts, every field of it kept."""
    from services.client.jobs import load_definition
    from services.gateway.routes.jobs import JobCreateBody

    sent = load_definition(EXAMPLES / name)
    loaded = JobCreateBody().load(sent)
    assert set(loaded) >= set(sent)
    assert len(loaded["tasks"]) == len(sent["tasks"])


TORCHRUN_ARGV = {"torchrun.json": ["--lr", "0.1"], "torchrun_env.json": ["--epochs=1"]}
EXAMPLE_FILES = sorted(p.name for p in EXAMPLES.glob("*.json"))


@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_example_is_valid_and_prints_what_its_template_gives(name: str, host_home: Path) -> None:
    data = json.loads((EXAMPLES / name).read_text())
    assert isinstance(data["queued"], bool)
    assert data["max_runtime_s"] is None or data["max_runtime_s"] > 0
    the_job = job_from_dict(data)
    assert job_problems(the_job) == {}
    placement = {
        t.index: (
            t.host or f"node-{t.index}",
            tuple(f"GPU-{t.index}-{g}" for g in range(t.gpu_count or len(t.gpus))),
        )
        for t in the_job.tasks
    }
    hosts = sorted({host for host, _ in placement.values()})
    addresses = {host: f"10.0.0.{n}" for n, host in enumerate(hosts, start=1)}
    rendered = render_job(
        the_job, placement, addresses=addresses, taken_ports={}, port_range=(29500, 29510)
    )
    outputs = [run_task(host_home, r.command, r.env) for r in rendered]
    assert all(len(out) == 1 for out in outputs)  # one GPU (or none) each: one process
    seen = [out[0] for out in outputs]
    for t, printed, r in zip(the_job.tasks, seen, rendered, strict=True):
        assert printed["env"]["CUDA_VISIBLE_DEVICES"] == ",".join(placement[t.index][1])
        assert r.env["CUDA_VISIBLE_DEVICES"] == printed["env"]["CUDA_VISIBLE_DEVICES"]
    kind = the_job.template.kind if the_job.template else None
    n = len(the_job.tasks)
    if kind == "torchrun":
        master = addresses[placement[0][0]]
        for i, printed in enumerate(seen):
            assert printed["env"] == {
                "MASTER_ADDR": master,
                "MASTER_PORT": "29500",
                "RANK": str(i),
                "WORLD_SIZE": str(n),
                "LOCAL_RANK": "0",
                "TF_CONFIG": None,
                "CUDA_VISIBLE_DEVICES": f"GPU-{i}-0",
            }
            assert printed["argv"] == TORCHRUN_ARGV[name]
    elif kind == "tf_config":
        assert [printed["argv"] for printed in seen] == [["--steps=10"]] * n
        # chief gpu-01, worker gpu-01, worker gpu-02, ps gpu-02
        cluster = {
            "chief": ["10.0.0.1:29500"],
            "worker": ["10.0.0.1:29501", "10.0.0.2:29500"],
            "ps": ["10.0.0.2:29501"],
        }
        roles = [("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0)]
        assert [printed["tf_config"] for printed in seen] == [
            {"cluster": cluster, "task": {"type": role, "index": index}} for role, index in roles
        ]
        assert seen[3]["env"]["CUDA_VISIBLE_DEVICES"] == ""  # the ps has no GPU
    elif kind == "tf_cluster_spec":
        hosts_args = ["--ps_hosts=10.0.0.1:29500", "--worker_hosts=10.0.0.1:29501,10.0.0.2:29500"]
        assert [printed["argv"] for printed in seen] == [
            [*hosts_args, "--job_name=ps", "--task_index=0"],
            ["--note", "first worker's own", *hosts_args, "--job_name=worker", "--task_index=0"],
            [*hosts_args, "--job_name=worker", "--task_index=1"],
        ]
    else:
        pytest.fail(f"{name}: no template")
