"""A simulated GPU split by MIG, read over real SSH by the monitor's probe: its instances are
GPUs of their own, each process on its instance, and the violations detector tells a booking of
one instance from a squat on another.

The fleet (1 host x 2 A100 80GB, no background churn) is served by `warden sim`'s server; the
monitor reads it with its own `SshReader` and turns the reading into its events (`HostState`),
and the detector sees the processes as the violations service gets them (`processes.observed`).
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from services.jobs.runner import TaskRunner
from services.monitor.readers import SshReader
from services.monitor.state import HostState
from services.shared.config import Settings
from services.shared.remote.ssh import SshHostShell, SshOptions
from services.shared.reservation_book import Holding
from services.sim.control import ControlApi
from services.sim.model import SimFleet
from services.violations.detector import SeenProcess, detect, with_mig_parents
from tests.integration import test_sim as sim_tests
from tests.support.fleet import ServedFleet, served_fleet

HOST = "sim-001"


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[ServedFleet]:
    fleet = SimFleet(1, 2, seed=7, churn=False)
    async with served_fleet(fleet, tmp_path) as running:
        yield running


async def poll(served: ServedFleet, state: HostState) -> list[tuple[str, dict[str, Any]]]:
    """One poll of the host, as the monitor makes it: its events."""
    options = SshOptions(known_hosts=str(served.known_hosts), connect_timeout_s=10.0)
    reader = SshReader(SshHostShell(served.host(HOST), options))
    try:
        reading = await reader.read(20.0)
    finally:
        await reader.close()
    return state.on_reading(reading, datetime.now(UTC))


def holding(reservation_id: int, owner: str, uuid: str, index: int) -> Holding:
    now = datetime.now(UTC)
    return Holding(
        reservation_id,
        owner,
        frozenset(),
        now - timedelta(hours=1),
        now + timedelta(hours=1),
        {uuid: (HOST, index)},
    )


def seen(observed: dict[str, Any]) -> list[SeenProcess]:
    return [
        SeenProcess(p["pid"], p["user"], p["command"], p["gpu_uuid"]) for p in observed["processes"]
    ]


async def test_a_split_gpu_shows_its_instances_through_the_control_api(
    served: ServedFleet,
) -> None:
    """`warden sim ctl split-gpu` and `start-process --mig` through the control API."""
    async with ControlApi(served.server) as control, aiohttp.ClientSession() as http:
        url = f"{control.url}/hosts/{HOST}"
        async with http.post(f"{url}/gpus/0/mig", json={"profiles": ["4g.40gb", "2g.20gb"]}) as r:
            assert r.status == 200
            instances = (await r.json())["instances"]
        async with http.post(
            f"{url}/processes", json={"gpu": 0, "user": "erin", "command": "python x", "mig": 1}
        ) as r:
            assert r.status == 201
            pid = (await r.json())["pid"]
        async with http.post(f"{url}/gpus/1/mig", json={"profiles": ["9g.99gb"]}) as r:
            assert r.status == 400
            assert "not a MIG profile" in (await r.json())["message"]
        async with http.post(f"{url}/gpus/0/mig", json={"profiles": ["4g.40gb"] * 2}) as r:
            assert r.status == 400  # 8 compute slices: more than one GPU holds

    events = await poll(served, HostState(HOST))
    found = {d["uuid"]: d for kind, d in events if kind == "gpu.discovered"}
    assert [(i["profile"], i["device"]) for i in instances] == [("4g.40gb", 0), ("2g.20gb", 1)]
    second = found[instances[1]["uuid"]]
    assert second["index"] == 1001
    assert second["name"] == "NVIDIA A100-SXM4-80GB MIG 2g.20gb"
    assert second["mig_parent_uuid"] in found
    [observed] = [d for kind, d in events if kind == "processes.observed"]
    assert [(p["pid"], p["gpu_uuid"]) for p in observed["processes"]] == [
        (pid, instances[1]["uuid"])
    ]


async def test_a_booking_of_one_instance_and_a_squat_on_another_are_told_apart(
    served: ServedFleet,
) -> None:
    fleet = served.server.fleet
    instances = fleet.split_gpu(HOST, 0, ["3g.40gb", "3g.40gb"])
    mig_a, mig_b = instances[0]["uuid"], instances[1]["uuid"]
    alice = fleet.start_process(HOST, 0, "alice", "python train.py", mig=0)
    bob_on_b = fleet.start_process(HOST, 0, "bob", "python serve.py", mig=1)
    bob_on_a = fleet.start_process(HOST, 0, "bob", "python squat.py", mig=0)
    whole = fleet.start_process(HOST, 1, "carol", "python other.py")

    state = HostState(HOST)
    events = await poll(served, state)
    gpus = {d["uuid"]: d for kind, d in events if kind == "gpu.discovered"}
    parent = gpus[mig_a]["mig_parent_uuid"]
    assert gpus[parent]["index"] == 0 and "mig_parent_uuid" not in gpus[parent]
    assert sorted(d["index"] for d in gpus.values()) == [0, 1, 1000, 1001]
    [observed] = [d for kind, d in events if kind == "processes.observed"]
    on = {p["pid"]: p["gpu_uuid"] for p in observed["processes"]}
    assert on[alice] == on[bob_on_a] == mig_a
    assert on[bob_on_b] == mig_b
    assert on[whole] not in (parent, mig_a, mig_b)

    # alice booked instance A; instance B is nobody's
    alices = holding(1, "alice", mig_a, 1000)
    books = {mig_a: alices}
    offences = detect(HOST, seen(observed), books.get, mode="reservations", allow=())
    assert [(o.offender, o.gpu_uuid, o.holding) for o in offences] == [("bob", mig_a, alices)]
    assert [p.pid for p in offences[0].processes] == [bob_on_a]  # not bob's on B

    # carol books B too: bob's process there squats on carol's instance, alice's stays fine
    carols = holding(2, "carol", mig_b, 1001)
    books[mig_b] = carols
    offences = detect(HOST, seen(observed), books.get, mode="reservations", allow=())
    assert [(o.offender, o.gpu_uuid, [p.pid for p in o.processes]) for o in offences] == [
        ("bob", mig_a, [bob_on_a]),
        ("bob", mig_b, [bob_on_b]),
    ]


async def test_a_gpu_back_from_mig_mode_is_whole_again(served: ServedFleet) -> None:
    fleet = served.server.fleet
    [first] = fleet.split_gpu(HOST, 1, ["7g.80gb"])
    state = HostState(HOST)
    await poll(served, state)
    fleet.split_gpu(HOST, 1, [])
    events = await poll(served, state)
    assert [(kind, d["uuid"]) for kind, d in events if kind == "gpu.disappeared"] == [
        ("gpu.disappeared", first["uuid"])
    ]


MIG_FAKE_SMI = """\
#!/bin/sh
case "$1" in
  --query-gpu=*) what=gpus ;;
  --query-compute-apps=*) what=apps ;;
  -L) what=list ;;
  "") what=smi ;;
  *) echo "fake nvidia-smi: unexpected $*" >&2; exit 2 ;;
esac
cat "$SIM_DIR/$what.out"
exit "$(cat "$SIM_DIR/$what.rc")"
"""


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_rendering_of_a_split_gpu_matches_the_real_script(
    tmp_path: Path, shell: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real PROBE_COMMAND, with nvidia-smi answering as the simulator does: the MIG
    sections come out as the simulator renders them (the shell's case, printf and grep)."""
    if shutil.which(shell) is None:
        pytest.skip(f"no {shell} here")
    fleet = SimFleet(1, 4, seed=3, churn=True, login_shell=shell)  # type: ignore[arg-type]
    now = fleet.now() + 3600.0
    fleet.split_gpu(HOST, 1, ["3g.40gb", "2g.20gb", "1g.10gb"])
    fleet.start_process(HOST, 1, "grace", "python small.py", 5000, mig=2)
    rendered = fleet.render_probe_output(HOST, now)
    data = tmp_path / "data"
    data.mkdir()
    listing = fleet.run_command(HOST, "nvidia-smi -L", now, login="warden")
    smi = rendered.split("@@mig-smi\n")[1].split("@@health\n")[0]
    for what, text in (("list", listing.stdout), ("smi", smi)):
        (data / f"{what}.out").write_text(text)
        (data / f"{what}.rc").write_text("0")
    monkeypatch.setattr(sim_tests, "FAKE_SMI", MIG_FAKE_SMI)
    real = sim_tests._real_probe(tmp_path, shell, fleet, HOST, now)
    after_mig = sim_tests.MARKERS.index("@@mig") + 1
    expected = [*sim_tests.MARKERS[:after_mig], "@@mig-smi", *sim_tests.MARKERS[after_mig:]]
    assert sim_tests.markers(real) == expected

    # Up to the health section (this fake nvidia-smi does not answer the health query).
    def mig_part(text: str) -> str:
        return text[text.index("@@gpus\n") : text.index("@@health\n")]

    assert mig_part(real) == mig_part(rendered)


async def test_a_job_task_given_an_instance_runs_on_it(served: ServedFleet) -> None:
    """A task whose CUDA_VISIBLE_DEVICES is `MIG-<uuid>` (what the jobs service exports for an
    instance) runs its GPU process on that instance, as the probe sees it."""
    fleet = served.server.fleet
    instances = fleet.split_gpu(HOST, 0, ["3g.40gb", "3g.40gb"])
    settings = Settings(ssh=served.ssh_settings(connect_timeout_s=5.0), hosts=(served.host(HOST),))
    runner = TaskRunner(settings)
    env = {"CUDA_VISIBLE_DEVICES": instances[1]["uuid"]}
    try:
        started = await runner.start(served.host(HOST), "alice", "warden-9-0", "", "python t", env)
    finally:
        await runner.close()
    assert started.status == "started"
    events = await poll(served, HostState(HOST))
    [observed] = [d for kind, d in events if kind == "processes.observed"]
    assert [(p["user"], p["gpu_uuid"]) for p in observed["processes"]] == [
        ("alice", instances[1]["uuid"])
    ]


async def test_a_booking_of_the_whole_gpu_made_before_the_split_covers_its_instances(
    served: ServedFleet,
) -> None:
    fleet = served.server.fleet
    parent = fleet.snapshot(HOST)["hosts"][0]["gpus"][0]["uuid"]
    instances = fleet.split_gpu(HOST, 0, ["3g.40gb", "3g.40gb"])
    bob = fleet.start_process(HOST, 0, "bob", "python squat.py", mig=1)
    alice = fleet.start_process(HOST, 0, "alice", "python train.py", mig=0)
    events = await poll(served, HostState(HOST))
    parents = {
        d["uuid"]: d["mig_parent_uuid"]
        for kind, d in events
        if kind == "gpu.discovered" and "mig_parent_uuid" in d
    }
    [observed] = [d for kind, d in events if kind == "processes.observed"]
    alices = holding(1, "alice", parent, 0)
    books = with_mig_parents({parent: alices}.get, parents)
    offences = detect(HOST, seen(observed), books, mode="reservations", allow=())
    assert [
        (o.offender, o.gpu_uuid, o.holding, [p.pid for p in o.processes]) for o in offences
    ] == [("bob", instances[1]["uuid"], alices, [bob])]
    assert alice not in {p.pid for o in offences for p in o.processes}
