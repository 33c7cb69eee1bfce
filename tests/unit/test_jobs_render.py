"""Rendering a task's line of sh (every value one argv word, through a real /bin/sh) and the
rules a job definition is held to."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.jobs.domain import Job, Param, Task, Template
from services.jobs.render import (
    JobInvalid,
    job_problems,
    render_command,
    render_job,
    render_params,
    render_task,
    shared_gpus,
)

# The owner's command: prints the argv words it got as JSON.
ARGV = shlex.quote(sys.executable) + " -c 'import json,sys; print(json.dumps(sys.argv[1:]))'"
# ... and the same with the variables we look at.
ENV_NAMES = ("CUDA_VISIBLE_DEVICES", "FOO", "BAR", "ONLY_TASK")
SHOW = (
    shlex.quote(sys.executable)
    + " -c 'import json,os,sys; print(json.dumps([sys.argv[1:], "
    + "{k: os.environ.get(k) for k in "
    + repr(ENV_NAMES).replace("'", '"')
    + "}]))'"
)

NASTY = [
    "",
    " ",
    "two words",
    "  leading and trailing  ",
    "it's",
    'say "hi"',
    "'",
    '"',
    "''",
    "$HOME",
    "${HOME}",
    "$(echo pwned)",
    "`echo pwned`",
    "a;b",
    "; rm -rf /tmp/nothing-here",
    "a && b || c",
    "a|b",
    "a > out.txt",
    "<in",
    "line\nbreak",
    "\n",
    "tab\there",
    "back\\slash",
    "\\",
    "*",
    "?",
    "[a-z]",
    "~",
    "~/x",
    "#not a comment",
    "a#b",
    "--flag",
    "-",
    "=",
    "a=b=c",
    "!",
    "{a,b}",
    "%s %d",
    "üñíçødé ☃",
    "\r",
    "\x01\x7f",
]


def run_sh(line: str, env: dict[str, str] | None = None) -> Any:
    """Run one line with /bin/sh as a task would, and decode what the command printed."""
    full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONUTF8": "1", **(env or {})}
    out = subprocess.run(
        ["/bin/sh", "-c", line], env=full_env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def task(index: int = 0, **kw: Any) -> Task:
    fields: dict[str, Any] = {"host": "gpu-01", "command": "python3 train.py", "gpu_count": 1}
    fields.update(kw)
    return Task(index=index, **fields)


def job(*tasks: Task, **kw: Any) -> Job:
    return Job(id=1, owner="alice", name="demo", tasks=tasks or (task(),), **kw)


# --- render_params / render_command ---------------------------------------------------------


def test_render_params_words() -> None:
    params = [
        Param("--rank", "0", "="),
        Param("--rank", "0", " "),
        Param("--verbose"),
        Param("", "data.csv"),
        Param("-n", "", " "),
        Param("--empty", "", "="),
    ]
    assert render_params(params) == [
        "--rank=0",
        "--rank",
        "0",
        "--verbose",
        "data.csv",
        "-n",
        "",
        "--empty=",
    ]


def test_render_params_refuses_a_positional_without_value() -> None:
    with pytest.raises(ValueError, match="positional"):
        render_params([Param("")])


def test_render_command_exact_line() -> None:
    line = render_command(
        "python3 train.py",
        [Param("--lr", "0.1"), Param("--name", "my run", "=")],
        prefix=["torchrun", "--nnodes=2"],
    )
    assert line == "torchrun --nnodes=2 python3 train.py --lr 0.1 '--name=my run'"
    assert render_command("python3 train.py", []) == "python3 train.py"


def test_both_separators_through_sh() -> None:
    line = render_command(ARGV, [Param("--rank", "0", "="), Param("--rank", "0", " ")])
    assert run_sh(line) == ["--rank=0", "--rank", "0"]


@pytest.mark.parametrize("separator", [" ", "="])
def test_nasty_values_survive_sh_as_one_word_each(separator: str) -> None:
    params = [Param(f"--v{i}", value, separator) for i, value in enumerate(NASTY)]
    positional = [Param("", value) for value in NASTY]
    line = render_command(ARGV, [*params, *positional])
    got = run_sh(line, {"HOME": "/home/nobody"})
    assert got == render_params([*params, *positional])
    if separator == "=":
        assert got[: len(NASTY)] == [f"--v{i}={value}" for i, value in enumerate(NASTY)]
    else:
        assert got[1 : 2 * len(NASTY) : 2] == NASTY
    assert got[-len(NASTY) :] == NASTY


def test_prefix_words_are_quoted_too() -> None:
    prefix = [sys.executable, "-c", "import json,sys; print(json.dumps(sys.argv[1:]))", *NASTY]
    line = render_command("", [Param("", "$(id)")], prefix=prefix)
    assert run_sh(line) == [*NASTY, "$(id)"]


def test_the_owners_command_stays_shell_code() -> None:
    """Their variables expand and their quotes apply; only Warden's words are quoted."""
    command = ARGV + " \"$FOO\" '$BAR'"
    assert run_sh(render_command(command, [Param("--x", "$FOO")]), {"FOO": "foo value"}) == [
        "foo value",
        "$BAR",
        "--x",
        "$FOO",
    ]


safe_text = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\0"))
names = st.text(
    st.characters(exclude_categories=("Cs", "Zs", "Zl", "Zp", "Cc"), exclude_characters="\0"),
    max_size=8,
)
params_st = st.lists(
    st.one_of(
        st.builds(Param, names.filter(bool), safe_text, st.sampled_from([" ", "="])),
        st.builds(Param, names.filter(bool)),
        st.builds(Param, st.just(""), safe_text),
    ),
    max_size=6,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(params=params_st, prefix=st.lists(safe_text, max_size=3))
def test_any_values_round_trip_through_sh(params: list[Param], prefix: list[str]) -> None:
    argv_prefix = [sys.executable, "-c", "import json,sys; print(json.dumps(sys.argv[1:]))"]
    line = render_command(ARGV, params)
    assert run_sh(line) == render_params(params)
    # And as template words before an (empty) command: each still exactly one word.
    assert run_sh(render_command("", params, prefix=[*argv_prefix, *prefix])) == [
        *prefix,
        *render_params(params),
    ]


# --- render_task ------------------------------------------------------------------------------


def test_render_task_orders_params_and_env_and_sets_the_gpus() -> None:
    the_job = job(
        task(command=SHOW, params=(Param("--task", "1"),), env={"BAR": "task", "ONLY_TASK": "t"}),
        params=(Param("--job", "j k", "="),),
        env={"FOO": "job", "BAR": "job"},
    )
    rendered = render_task(
        the_job,
        the_job.tasks[0],
        host="gpu-01",
        gpus=["GPU-aaa", "GPU-bbb"],
        template_params=[Param("--tpl", "x")],
        template_env={"FOO": "template"},
        prefix=(),
        port=2222,
    )
    assert rendered.env == {
        "FOO": "template",
        "BAR": "task",
        "ONLY_TASK": "t",
        "CUDA_VISIBLE_DEVICES": "GPU-aaa,GPU-bbb",
    }
    assert (rendered.index, rendered.host, rendered.gpus, rendered.port) == (
        0,
        "gpu-01",
        ("GPU-aaa", "GPU-bbb"),
        2222,
    )
    argv, env = run_sh(rendered.command, dict(rendered.env))
    assert argv == ["--job=j k", "--task", "1", "--tpl", "x"]
    assert env == {
        "CUDA_VISIBLE_DEVICES": "GPU-aaa,GPU-bbb",
        "FOO": "template",
        "BAR": "task",
        "ONLY_TASK": "t",
    }


def test_a_task_without_gpus_sees_none() -> None:
    the_job = job(task(command=SHOW, gpu_count=None))
    rendered = render_task(the_job, the_job.tasks[0], host="gpu-01", gpus=())
    assert rendered.env == {"CUDA_VISIBLE_DEVICES": ""}
    _, env = run_sh(rendered.command, {**rendered.env})
    assert env["CUDA_VISIBLE_DEVICES"] == ""


def test_render_job_without_template() -> None:
    the_job = job(
        task(0, command="python3 a.py", params=(Param("--n", "1"),)),
        task(1, host=None, command="python3 b.py"),
        params=(Param("--all"),),
    )
    placement = {0: ("gpu-01", ("GPU-1",)), 1: ("gpu-07", ("GPU-7",))}
    rendered = render_job(the_job, placement, addresses={}, taken_ports={}, port_range=(1, 2))
    assert [(r.index, r.host, r.command, r.port) for r in rendered] == [
        (0, "gpu-01", "python3 a.py --all --n 1", None),
        (1, "gpu-07", "python3 b.py --all", None),
    ]
    assert [r.env for r in rendered] == [
        {"CUDA_VISIBLE_DEVICES": "GPU-1"},
        {"CUDA_VISIBLE_DEVICES": "GPU-7"},
    ]


def test_render_job_refuses_an_invalid_job_with_its_problems() -> None:
    bad = job(task(env={"CUDA_VISIBLE_DEVICES": "0"}))
    with pytest.raises(JobInvalid) as caught:
        render_job(bad, {0: ("gpu-01", ())}, addresses={}, taken_ports={}, port_range=(1, 2))
    assert set(caught.value.problems) == {"tasks[0].env.CUDA_VISIBLE_DEVICES"}
    assert isinstance(caught.value, ValueError)


def test_render_job_needs_every_task_placed() -> None:
    with pytest.raises(ValueError, match=r"tasks \[1\] have no placement"):
        render_job(
            job(task(0), task(1)),
            {0: ("gpu-01", ())},
            addresses={},
            taken_ports={},
            port_range=(1, 2),
        )


# --- job_problems -----------------------------------------------------------------------------


def test_a_valid_job_has_no_problems() -> None:
    the_job = job(
        task(0, params=(Param("--a", "1", "="), Param("-v"), Param("", "pos")), env={"A_1": "x"}),
        task(1, host=None, gpus=(), gpu_count=None, cwd="/data/run 1", role="ps"),
        task(2, gpus=("GPU-1", "GPU-2"), gpu_count=None),
        params=(Param("--lr", "0.1"),),
        env={"_X": ""},
    )
    assert job_problems(the_job) == {}


def with_task(**kw: Any) -> Job:
    return job(task(**kw))


TOO_LONG = "x" * (64 * 1024 + 1)

CASES: list[tuple[str, Job, str, str]] = [
    ("no tasks", Job(1, "alice", "x", ()), "tasks", "at least one task"),
    ("257 tasks", job(*(task(i) for i in range(257))), "tasks", "at most 256"),
    ("bad env name", job(env={"1X": "v"}), "env.1X", "letters, digits"),
    ("dash in env name", with_task(env={"MY-VAR": "v"}), "tasks[0].env.MY-VAR", "letters"),
    (
        "CUDA_VISIBLE_DEVICES",
        job(env={"CUDA_VISIBLE_DEVICES": "0"}),
        "env.CUDA_VISIBLE_DEVICES",
        "Warden sets",
    ),
    ("NUL in env value", with_task(env={"A": "a\0b"}), "tasks[0].env.A", "NUL"),
    (
        "template variable",
        job(task(env={"RANK": "3"}), template=Template("torchrun")),
        "tasks[0].env.RANK",
        "torchrun template sets RANK",
    ),
    (
        "TF_CONFIG",
        job(env={"TF_CONFIG": "{}"}, template=Template("tf_config")),
        "env.TF_CONFIG",
        "tf_config template sets",
    ),
    ("NUL in value", job(params=(Param("--a", "\0"),)), "params[0].value", "NUL"),
    ("space in name", job(params=(Param("--a b", "1"),)), "params[0].name", "whitespace"),
    ("NUL in name", with_task(params=(Param("-\0", "1"),)), "tasks[0].params[0].name", "NUL"),
    (
        "positional without value",
        job(params=(Param("-a"), Param(""))),
        "params[1].value",
        "positional",
    ),
    ("bad separator", job(params=(Param("--a", "1", ":"),)), "params[0].separator", "' '"),
    ("= flag", job(params=(Param("--a", None, "="),)), "params[0].value", "needs a value"),
    (
        "template parameter",
        job(
            task(role="worker"),
            params=(Param("--job_name", "x", "="),),
            template=Template("tf_cluster_spec"),
        ),
        "params[0].name",
        "passes --job_name",
    ),
    ("empty command", with_task(command=" \n"), "tasks[0].command", "empty"),
    ("NUL in command", with_task(command="ls\0"), "tasks[0].command", "NUL"),
    ("long command", with_task(command=TOO_LONG), "tasks[0].command", "64 KiB"),
    ("newline in cwd", with_task(cwd="a\nb"), "tasks[0].cwd", "line break"),
    ("NUL in cwd", with_task(cwd="a\0"), "tasks[0].cwd", "NUL"),
    ("index order", job(task(0), task(2)), "tasks[1].index", "expected 1"),
    (
        "gpus and gpu_count",
        with_task(gpus=("GPU-1",), gpu_count=1),
        "tasks[0].gpu_count",
        "not both",
    ),
    ("gpu_count 0", with_task(gpu_count=0), "tasks[0].gpu_count", "between 1 and 64"),
    ("gpu_count 65", with_task(gpu_count=65), "tasks[0].gpu_count", "between 1 and 64"),
    ("duplicate gpu", with_task(gpus=("G", "G"), gpu_count=None), "tasks[0].gpus[1]", "twice"),
    ("comma in gpu", with_task(gpus=("G,H",), gpu_count=None), "tasks[0].gpus[0]", "comma"),
    ("empty host", with_task(host=""), "tasks[0].host", "host name"),
    ("role", with_task(role="boss"), "tasks[0].role", "unknown role 'boss'"),
]


@pytest.mark.parametrize(
    ("the_job", "path", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_each_rule_has_its_path_and_reason(the_job: Job, path: str, reason: str) -> None:
    problems = job_problems(the_job)
    assert path in problems, problems
    assert reason in problems[path]
    assert len(problems) == 1, problems


def test_command_of_exactly_64_kib_is_fine() -> None:
    assert job_problems(with_task(command="x" * 64 * 1024)) == {}
    assert job_problems(with_task(command="é" * (32 * 1024 + 1))) == {
        "tasks[0].command": "the command is longer than 64 KiB"
    }


def test_every_problem_is_reported_at_once() -> None:
    bad = job(
        replace(task(0), command="", cwd="\n"),
        task(1, env={"BAD NAME": "x"}, params=(Param("", None),)),
    )
    assert set(job_problems(bad)) == {
        "tasks[0].command",
        "tasks[0].cwd",
        "tasks[1].env.BAD NAME",
        "tasks[1].params[0].value",
    }


def test_shared_gpus_names_each_gpu_two_tasks_use_unless_the_job_allows_it() -> None:
    tasks = (
        Task(0, "h1", "x", gpus=("GPU-a", "GPU-b")),
        Task(1, "h1", "x", gpus=("GPU-b",)),
        Task(2, "h1", "x", gpus=("GPU-c",)),
        Task(3, "h1", "x", gpus=("GPU-a",)),
    )
    job = Job(1, "alice", "ddp", tasks)
    assert shared_gpus(job) == {"GPU-a": [0, 3], "GPU-b": [0, 1]}
    assert shared_gpus(replace(job, shared_gpus=True)) == {}
    assert shared_gpus(replace(job, tasks=tasks[2:3])) == {}
