"""MIG instances read from recorded `nvidia-smi` outputs (tests/fixtures/nvidia_smi/mig/)."""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

from services.monitor.fleet_view import FleetView, transitions
from services.monitor.mig import (
    mig_index,
    mig_place,
    parse_mig_list,
    parse_mig_sections,
    parse_mig_smi,
)
from services.monitor.probe import PROBE_COMMAND, parse_probe_output
from services.monitor.state import HostState
from tests.unit.test_monitor_probe import FAKE_BIN

MIG = Path(__file__).parents[1] / "fixtures" / "nvidia_smi" / "mig"
PARENT = "GPU-d1e2f3a4-b5c6-4d7e-8f90-a1b2c3d4e5f6"
OTHER = "GPU-a0b1c2d3-e4f5-4a6b-7c8d-9e0f1a2b3c4d"
INSTANCE_0 = "MIG-5c3a1f2e-9d8b-5a4c-b7e6-0f1d2c3b4a59"
INSTANCE_1 = "MIG-0e7d6c5b-4a39-5281-9f0e-d1c2b3a49586"
INSTANCE_2 = "MIG-a4b5c6d7-e8f9-50a1-b2c3-d4e5f6a7b8c9"


def lines(name: str) -> list[str]:
    return (MIG / name).read_text().splitlines()


def test_the_list_names_each_instance_under_its_gpu() -> None:
    devices = parse_mig_list(lines("list.txt"))
    assert [(d.parent_index, d.parent_uuid, d.device, d.profile, d.uuid) for d in devices] == [
        (0, PARENT, 0, "3g.20gb", INSTANCE_0),
        (0, PARENT, 1, "2g.10gb", INSTANCE_1),
        (0, PARENT, 2, "1g.5gb", INSTANCE_2),
    ]
    assert [d.index for d in devices] == [1000, 1001, 1002]


def test_a_list_without_mig_devices_has_no_instances() -> None:
    assert parse_mig_list(lines("list.txt")[4:]) == []
    assert parse_mig_sections([], []).devices == ()


def test_the_plain_nvidia_smi_gives_instances_and_processes_their_place() -> None:
    table, pids = parse_mig_smi(lines("smi.txt"))
    assert table == {
        (0, 0): (2, 0, 9865, 19968),
        (0, 1): (3, 0, 8977, 9856),
        (0, 2): (9, 0, 12, 4864),
    }
    # the process on the whole GPU 1 (GI and CI N/A) is on no instance
    assert pids == [(0, 2, 0, 180223), (0, 3, 0, 180391)]


def test_instance_indexes_are_never_a_whole_gpus() -> None:
    assert mig_index(0, 1) == 1001
    assert mig_index(7, 6) == 8006
    assert mig_place(8006) == (7, 6)
    assert mig_place(7) is None


def test_the_probe_makes_each_instance_a_gpu_and_places_the_processes() -> None:
    reading = parse_probe_output((MIG / "probe_split.txt").read_text())
    by_uuid = {gpu.uuid: gpu for gpu in reading.gpus}
    assert [gpu.index for gpu in reading.gpus] == [0, 1, 1000, 1001, 1002]
    first = by_uuid[INSTANCE_0]
    assert first.name == "NVIDIA A100-SXM4-40GB MIG 3g.20gb"
    assert (first.memory_used_mib, first.memory_total_mib) == (9865, 19968)
    assert first.mig_parent_uuid == PARENT
    assert first.utilization_gpu_percent is None  # not reported per instance, not 0
    assert by_uuid[INSTANCE_2].utilization_gpu_percent == 0  # no process can run there
    assert by_uuid[PARENT].mig_parent_uuid is None
    assert by_uuid[PARENT].temperature_c == 45  # the board's figures stay on the parent
    placed = {p.pid: (p.gpu_uuid, p.user) for p in reading.processes}
    assert placed == {
        180223: (INSTANCE_0, "dave"),
        180391: (INSTANCE_1, "erin"),
        181004: (OTHER, "grace"),
    }


def test_a_process_reported_with_its_instance_uuid_keeps_it() -> None:
    text = (MIG / "probe_split.txt").read_text()
    text = text.replace(f"180391, {PARENT}", f"180391, {INSTANCE_1}")
    text = text.replace("|    0    3    0     180391", "|    9    9    9     180391")
    reading = parse_probe_output(text)
    assert {p.pid: p.gpu_uuid for p in reading.processes}[180391] == INSTANCE_1


def test_a_process_the_tables_do_not_place_stays_on_the_parent() -> None:
    text = (MIG / "probe_split.txt").read_text()
    kept = [line for line in text.splitlines() if "180391      C" not in line]
    reading = parse_probe_output("\n".join(kept) + "\n")
    assert {p.pid: p.gpu_uuid for p in reading.processes}[180391] == PARENT
    # it might run on any instance: none of them is claimed idle
    assert [g.utilization_gpu_percent for g in reading.gpus if g.mig_parent_uuid] == [None] * 3


def test_drivers_before_r470_name_instances_by_gpu_and_gi_ci() -> None:
    old = lines("list_r460.txt")
    mig = parse_mig_sections(old, [])
    assert [(d.uuid.rsplit("/", 2)[1:], d.gi, d.ci) for d in mig.devices] == [
        (["2", "0"], 2, 0),
        (["3", "0"], 3, 0),
        (["9", "0"], 9, 0),
    ]
    text = (MIG / "probe_split.txt").read_text()
    head, _, _ = text.partition("@@mig\n")
    text = head.replace(f"180391, {PARENT}", f"180391, MIG-{PARENT}/3/0")
    text += "@@mig\n" + "\n".join(old) + "\n@@end\n"
    reading = parse_probe_output(text)
    placed = {p.pid: p.gpu_uuid for p in reading.processes}
    assert placed[180391] == f"MIG-{PARENT}/3/0"
    assert placed[180223] == PARENT  # no process table: the parent
    assert f"MIG-{PARENT}/3/0" in {gpu.uuid for gpu in reading.gpus}


def test_the_probe_command_reads_mig_only_where_there_is_some() -> None:
    assert "echo '@@mig'" in PROBE_COMMAND
    assert PROBE_COMMAND.index("@@mig") < PROBE_COMMAND.index("@@end")


def test_the_probe_command_under_a_real_sh_reads_the_instances(tmp_path: Path) -> None:
    """PROBE_COMMAND for real against the fake nvidia-smi (tests/fixtures/bin) of a MIG host."""
    probe = (MIG / "probe_split.txt").read_text()
    gpus = probe.split("@@gpus\n")[1].split("@@gpus-rc")[0]
    (tmp_path / "gpus.csv").write_text(gpus)
    (tmp_path / "apps.csv").write_text(f"{os.getpid()}, {PARENT}, 9852, python\n")
    (tmp_path / "mig-list.txt").write_text((MIG / "list.txt").read_text())
    smi = (MIG / "smi.txt").read_text().replace("180223", str(os.getpid()))
    (tmp_path / "mig-smi.txt").write_text(smi)
    env = {"PATH": f"{FAKE_BIN}:{os.environ['PATH']}", "WARDEN_FAKE_SMI_DIR": str(tmp_path)}
    done = subprocess.run(
        ["/bin/sh", "-c", PROBE_COMMAND], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert "Driver Version" not in done.stdout  # only the table rows cross the network
    reading = parse_probe_output(done.stdout)
    assert [gpu.index for gpu in reading.gpus] == [0, 1, 1000, 1001, 1002]
    assert [(p.pid, p.gpu_uuid) for p in reading.processes] == [(os.getpid(), INSTANCE_0)]


def test_the_probe_command_on_a_host_without_mig_prints_an_empty_section(
    tmp_path: Path,
) -> None:
    (tmp_path / "gpus.csv").write_text(
        f"{OTHER}, 0, NVIDIA A100-SXM4-40GB, 5, 1, 4, 40960, 30, 60.00, 400.00, [N/A], 210, 1215\n"
    )
    env = {"PATH": f"{FAKE_BIN}:{os.environ['PATH']}", "WARDEN_FAKE_SMI_DIR": str(tmp_path)}
    done = subprocess.run(
        ["/bin/sh", "-c", PROBE_COMMAND], env=env, capture_output=True, text=True, timeout=30
    )
    assert "@@mig\n@@health\n" in done.stdout  # the next section follows at once
    assert [gpu.index for gpu in parse_probe_output(done.stdout).gpus] == [0]


def test_a_host_with_instances_moved_between_replicas_announces_them_once() -> None:
    reading = parse_probe_output((MIG / "probe_split.txt").read_text())
    before = HostState("h1")
    now = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
    found = [d for kind, d in before.on_reading(reading, now) if kind == "gpu.discovered"]
    assert {d["uuid"]: d.get("mig_parent_uuid") for d in found}[INSTANCE_2] == PARENT
    by_events, joined = FleetView(), FleetView()
    for data in found:
        by_events.apply("gpu.discovered", data)
    joined.load([transitions(before)])
    for view in (by_events, joined):
        after = view.seed("h1")
        assert after is not None
        events = after.on_reading(reading, now + timedelta(seconds=5))
        assert [kind for kind, _ in events] == ["host.sampled", "processes.observed"]
