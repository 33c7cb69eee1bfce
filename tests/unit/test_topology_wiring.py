"""How a host's topology travels: the reader asks for it now and then, the monitor's state
publishes it, the other services keep it; and the jobs' CPU affinity hints made of it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

from services.jobs.affinity import affinity_prefix, cpu_list, with_affinity
from services.jobs.domain import Job, Task
from services.jobs.supervisor import TaskSupervisor
from services.jobs.working_state import WorkingState
from services.monitor.probe import parse_probe_output, probe_command
from services.monitor.readers import SshReader
from services.monitor.state import HostState
from services.shared.cluster.topology_book import TopologyBook
from services.shared.config import HostConfig, JobSettings, Settings
from services.shared.contracts import make_envelope
from services.shared.remote.shell import CommandResult
from services.shared.remote.ssh import FakeHostShell
from services.shared.topology import render_topo_matrix
from services.shared.topology_shapes import shape

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia_smi"
BASE = (FIXTURES / "a_100x8.txt").read_text()
QUADS = shape("nvlink-quads", 8)
AT = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def with_topology(text: str) -> str:
    return text.replace("@@end", "@@topo\n" + render_topo_matrix(QUADS) + "@@topo-rc 0\n@@end")


def answer(command: str) -> CommandResult:
    text = with_topology(BASE) if "topo -m" in command else BASE
    return CommandResult(0, text)


def polls(reader: SshReader, count: int) -> list[bool]:
    async def run() -> list[bool]:
        return [(await reader.read(5)).topology_read for _ in range(count)]

    return asyncio.run(run())


def test_the_reader_asks_for_the_topology_first_then_now_and_then() -> None:
    shell = FakeHostShell("gpu-01", answer)
    assert polls(SshReader(shell, topology_every_s=3600), 3) == [True, False, False]
    assert shell.commands == [probe_command(True), probe_command(), probe_command()]
    assert polls(SshReader(shell, topology_every_s=0), 2) == [True, True]


def test_the_reader_asks_again_when_the_gpus_change() -> None:
    changed = BASE.replace("GPU-5a6b7c8d", "GPU-00000000")
    texts = iter([BASE, BASE, changed, changed])
    shell = FakeHostShell(
        "gpu-01",
        lambda command: CommandResult(
            0, with_topology(next(texts)) if "topo -m" in command else next(texts)
        ),
    )
    assert polls(SshReader(shell, topology_every_s=3600), 4) == [True, False, False, True]


def test_the_state_publishes_each_reading_of_the_topology() -> None:
    state = HostState("gpu-01")
    events = state.on_reading(parse_probe_output(with_topology(BASE)), AT)
    [(kind, data)] = [e for e in events if e[0] == "host.topology_read"]
    make_envelope(kind, data)  # the contract holds it
    assert data["topology"] == QUADS.to_dict() and state.topology == QUADS.to_dict()
    later = state.on_reading(parse_probe_output(BASE), AT + timedelta(seconds=5))
    assert not [e for e in later if e[0] == "host.topology_read"]
    assert state.topology == QUADS.to_dict()  # kept until read again


def test_the_book_keeps_the_latest_read_and_forgets_a_host_without_matrix() -> None:
    book = TopologyBook()
    book.apply({"host": "a", "read_at": AT.isoformat(), "topology": QUADS.to_dict()})
    assert book["a"] == QUADS
    older = {"host": "a", "read_at": (AT - timedelta(minutes=1)).isoformat(), "topology": None}
    book.apply(older)
    assert "a" in book  # an older event changes nothing
    book.apply({"host": "a", "read_at": (AT + timedelta(minutes=10)).isoformat(), "topology": None})
    assert "a" not in book


def test_cpu_affinity_hint() -> None:
    assert cpu_list(QUADS, [0, 1]) == "0-31"
    assert cpu_list(QUADS, [3, 4]) == "0-31,32-63"
    assert cpu_list(None, [0]) is None and cpu_list(QUADS, []) is None
    assert cpu_list(QUADS, [9]) is None  # not in the matrix
    prefix = affinity_prefix(QUADS, [4, 5])
    assert prefix == "taskset -cp 32-63 $$ >/dev/null 2>&1;"
    assert with_affinity("cd x && python t.py", prefix) == f"{prefix} cd x && python t.py"
    assert with_affinity("python t.py", None) == "python t.py"


def _supervisor(cpu_affinity: bool) -> TaskSupervisor:
    settings = Settings(
        jobs=JobSettings(cpu_affinity=cpu_affinity),
        hosts=(HostConfig(name="gpu-01", address="gpu-01"),),
    )
    working = WorkingState(None, settings)  # type: ignore[arg-type]  # render reads no row
    working.gpus = {f"u{i}": ("gpu-01", i) for i in range(8)}
    working.topologies = {"gpu-01": QUADS}
    return TaskSupervisor(working, None)  # type: ignore[arg-type]  # nothing is run


def test_a_task_is_bound_to_its_gpus_cpus_only_when_the_admin_says_so() -> None:
    job = Job(1, "ann", "train", (Task(0, None, "cd runs && python t.py", gpu_count=2),))
    placement = {0: ("gpu-01", ("u4", "u5"))}
    [bound] = _supervisor(True).render(job, placement)
    assert bound.command == "taskset -cp 32-63 $$ >/dev/null 2>&1; cd runs && python t.py"
    assert bound.env["CUDA_VISIBLE_DEVICES"] == "u4,u5"
    [plain] = _supervisor(False).render(job, placement)
    assert plain.command == "cd runs && python t.py"
    supervisor = _supervisor(True)
    supervisor.working.topologies = {}  # not read yet: unbound
    [unknown] = supervisor.render(job, placement)
    assert unknown.command == "cd runs && python t.py"
