"""The simulated fleet over real SSH: asyncssh clients against `SimServer` on free ports.

Each test builds its own fleet (3 hosts x 4 GPUs, no background churn unless it says so), its
own client key and known_hosts, and its own control API on a free port. The probe's output is
checked line by line, against the real PROBE_COMMAND run by `sh`/`bash` around the same
nvidia-smi output, and through the monitor's parser. Nothing asserts how long anything took,
only that a hung host "did not answer within" a short deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import shutil
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import asyncssh
import pytest

from services.monitor.probe import APP_FIELDS, GPU_FIELDS, PROBE_COMMAND
from services.sim.control import ControlApi
from services.sim.model import NVIDIA_SMI_FAILED, SimFleet
from services.sim.server import SimServer

HOSTS, GPUS = 3, 4
USER = "warden"
HUNG_DEADLINE_S = 0.5
DEADLINE_S = 20.0
MARKERS = [
    "@@warden-probe",
    "@@time",
    "@@stat",
    "@@loadavg",
    "@@meminfo",
    "@@gpus",
    "@@gpus-rc",
    "@@apps",
    "@@apps-rc",
    "@@ps",
    "@@mig",
    "@@health",
    "@@health-rc",
    "@@end",
]
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Sim:
    fleet: SimFleet
    server: SimServer
    key: asyncssh.SSHKey
    connections: list[asyncssh.SSHClientConnection] = field(default_factory=list)

    @property
    def known_hosts(self) -> asyncssh.SSHKnownHosts:
        return asyncssh.import_known_hosts("\n".join(self.server.known_hosts_lines()))

    async def connect(
        self, host: str, key: asyncssh.SSHKey | None = None
    ) -> asyncssh.SSHClientConnection:
        conn = await asyncssh.connect(
            "127.0.0.1",
            self.server.ports[host],
            username=USER,
            client_keys=[key or self.key],
            known_hosts=self.known_hosts,
            config=None,
            agent_path=None,
        )
        self.connections.append(conn)
        return conn

    async def run(self, host: str, command: str) -> asyncssh.SSHCompletedProcess:
        conn = await self.connect(host)
        return await conn.run(command, check=False)

    async def probe(self, host: str) -> str:
        result = await self.run(host, PROBE_COMMAND)
        assert result.exit_status == 0, result.stderr
        assert isinstance(result.stdout, str)
        return result.stdout


@pytest.fixture
async def sim() -> AsyncIterator[Sim]:
    fleet = SimFleet(HOSTS, GPUS, seed=11, churn=False)
    key = asyncssh.generate_private_key("ssh-ed25519")
    async with SimServer(fleet, authorized_keys=[key.export_public_key().decode()]) as server:
        state = Sim(fleet, server, key)
        try:
            yield state
        finally:
            for conn in state.connections:
                conn.close()


@pytest.fixture
async def control(sim: Sim) -> AsyncIterator[tuple[str, aiohttp.ClientSession]]:
    async with (
        ControlApi(sim.server, port=0) as api,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=DEADLINE_S)) as http,
    ):
        yield api.url, http


def sections(text: str) -> dict[str, list[str]]:
    """Lines under each `@@` marker, and the marker's argument under `name:arg`."""
    out: dict[str, list[str]] = {}
    current: list[str] = []
    for line in text.splitlines():
        if line.startswith("@@"):
            name, _, arg = line[2:].partition(" ")
            current = out[name] = []
            out[f"{name}:arg"] = [arg]
        else:
            current.append(line)
    return out


def markers(text: str) -> list[str]:
    return [line.split(" ")[0] for line in text.splitlines() if line.startswith("@@")]


# -- the probe over SSH -------------------------------------------------------------------


async def test_probe_prints_every_section_and_each_gpu(sim: Sim) -> None:
    uuids = set()
    for host in sim.fleet.hosts:
        text = await sim.probe(host)
        assert markers(text) == MARKERS
        assert text.endswith("@@end\n")
        parts = sections(text)
        assert parts["warden-probe:arg"] == ["1"]
        assert parts["time:arg"][0].isdigit()
        assert re.fullmatch(r"cpu  \d+( \d+){9}", parts["stat"][0])
        assert re.fullmatch(r"\d+\.\d\d \d+\.\d\d \d+\.\d\d \d+/\d+ \d+", parts["loadavg"][0])
        assert re.fullmatch(r"MemTotal: +\d{8,} kB", parts["meminfo"][0])
        assert re.fullmatch(r"MemAvailable: +\d{8,} kB", parts["meminfo"][1])
        assert len(parts["meminfo"][0]) == len("MemTotal:       ") + len(
            parts["meminfo"][0].split()[1]
        ) + len(" kB")
        assert len(parts["gpus"]) == GPUS
        assert parts["gpus-rc:arg"] == ["0"] and parts["apps-rc:arg"] == ["0"]
        assert parts["apps"] == [] and parts["ps"] == []  # no churn, nothing started
        for index, row in enumerate(parts["gpus"]):
            values = dict(zip(GPU_FIELDS, row.split(", "), strict=True))
            assert values["index"] == str(index)
            assert values["name"] == "NVIDIA A100-SXM4-80GB"
            assert values["memory.total"] == "81920"
            assert values["fan.speed"] == "[N/A]"  # a passively cooled A100 reports none
            assert re.fullmatch(r"\d+\.\d\d", values["power.draw"])
            assert re.fullmatch(r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", values["uuid"])
            uuids.add(values["uuid"])
    assert len(uuids) == HOSTS * GPUS


async def test_started_process_shows_in_apps_and_ps_until_stopped(sim: Sim) -> None:
    host = "sim-002"
    command = "python train.py --config configs/a b.yaml --gpus 0,2"
    pid = sim.fleet.start_process(host, 2, "alice", command, used_memory_mib=2048)
    parts = sections(await sim.probe(host))
    uuid = parts["gpus"][2].split(", ")[0]
    assert parts["apps"] == [f"{pid}, {uuid}, 2048, python"]  # pid, gpu_uuid, memory, name
    assert APP_FIELDS == ("pid", "gpu_uuid", "used_memory", "process_name")
    (row,) = parts["ps"]
    # procps layout: pid right-aligned to the digits of pid_max, user padded to 64, etimes to 7
    assert row[:7] == f"{pid:>7}"
    assert row[8:72] == "alice".ljust(64)
    assert row[73:80].strip().isdigit() and row[72] == " " and row[80] == " "
    assert row[81:] == command
    gpu2 = parts["gpus"][2].split(", ")
    assert int(gpu2[GPU_FIELDS.index("memory.used")]) >= 2048

    sim.fleet.stop_process(host, pid)
    parts = sections(await sim.probe(host))
    assert parts["apps"] == [] and parts["ps"] == []


async def test_one_process_on_two_gpus_is_one_ps_row(sim: Sim) -> None:
    host = "sim-001"
    first = sim.fleet.start_process(host, [0, 1], "bob", "python ddp.py", used_memory_mib=None)
    second = sim.fleet.start_process(host, 3, "carol", "/usr/bin/python3 x.py")
    parts = sections(await sim.probe(host))
    assert [line.split(", ")[0] for line in parts["apps"]] == [str(first)] * 2 + [str(second)]
    assert parts["apps"][0].split(", ")[2] == "[N/A]"  # used memory the driver did not report
    assert parts["apps"][2].endswith(", /usr/bin/python3")
    ps_pids = [int(line.split()[0]) for line in parts["ps"]]
    assert ps_pids == sorted({first, second})
    assert [line.split()[1] for line in parts["ps"]] == [
        "bob" if p == first else "carol" for p in ps_pids
    ]


@pytest.mark.parametrize(
    ("mode", "gpus", "gpus_rc", "apps", "apps_rc"),
    [
        (
            "missing",
            ["bash: line 8: nvidia-smi: command not found"],
            "127",
            ["bash: line 11: nvidia-smi: command not found"],
            "127",
        ),
        ("failing", [NVIDIA_SMI_FAILED.strip(), ""], "9", [NVIDIA_SMI_FAILED.strip()], "9"),
        ("no_devices", ["No devices were found"], "6", ["No devices were found"], "6"),
    ],
)
async def test_nvidia_smi_modes(
    sim: Sim, mode: str, gpus: list[str], gpus_rc: str, apps: list[str], apps_rc: str
) -> None:
    sim.fleet.start_process("sim-003", 0, "dave", "python x.py")
    sim.fleet.set_nvidia_smi("sim-003", mode)
    text = await sim.probe("sim-003")
    assert markers(text) == MARKERS
    parts = sections(text)
    assert parts["gpus"] == gpus and parts["gpus-rc:arg"] == [gpus_rc]
    assert parts["apps"] == apps and parts["apps-rc:arg"] == [apps_rc]
    assert parts["ps"] == []
    sim.fleet.set_nvidia_smi("sim-003", "ok")
    assert len(sections(await sim.probe("sim-003"))["gpus"]) == GPUS


@pytest.mark.parametrize(
    ("mode", "which", "listing_rc", "listing"),
    [
        ("ok", ("/usr/bin/nvidia-smi\n", 0), 0, None),
        ("missing", ("", 1), 127, "bash: line 1: nvidia-smi: command not found\n"),
        ("failing", ("/usr/bin/nvidia-smi\n", 0), 9, NVIDIA_SMI_FAILED),
        ("no_devices", ("/usr/bin/nvidia-smi\n", 0), 6, "No devices were found\n"),
    ],
)
async def test_hosts_check_commands(
    sim: Sim, mode: str, which: tuple[str, int], listing_rc: int, listing: str | None
) -> None:
    sim.fleet.set_nvidia_smi("sim-001", mode)
    conn = await sim.connect("sim-001")
    echo = await conn.run("echo ok")
    assert (echo.stdout, echo.exit_status) == ("ok\n", 0)
    found = await conn.run("command -v nvidia-smi")
    assert (found.stdout, found.exit_status) == which
    listed = await conn.run("nvidia-smi -L")
    assert listed.exit_status == listing_rc
    if listing is None:
        lines = str(listed.stdout).splitlines()
        assert len(lines) == GPUS
        for index, line in enumerate(lines):
            assert re.fullmatch(
                rf"GPU {index}: NVIDIA A100-SXM4-80GB \(UUID: GPU-[0-9a-f-]{{36}}\)", line
            )
    else:
        assert listing in (listed.stdout, listed.stderr)
    other = await conn.run("uname -a")
    assert (other.exit_status, other.stdout, other.stderr) == (
        127,
        "",
        "sim: unsupported command\n",
    )


async def test_hung_host_does_not_answer_and_does_not_hold_up_others(sim: Sim) -> None:
    slow = await sim.connect("sim-001")
    sim.fleet.set_hang("sim-001", math.inf)
    hung = asyncio.ensure_future(slow.run(PROBE_COMMAND))
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(asyncio.shield(hung), HUNG_DEADLINE_S)
    assert len(sections(await sim.probe("sim-002"))["gpus"]) == GPUS  # the others answer
    sim.fleet.set_hang("sim-001", 60.0)  # still longer than anyone waits
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(slow.run("echo ok"), HUNG_DEADLINE_S)
    assert not hung.done()
    sim.fleet.set_hang("sim-001", None)  # the stuck command answers after all
    answered = await asyncio.wait_for(hung, DEADLINE_S)
    assert answered.exit_status == 0 and markers(str(answered.stdout)) == MARKERS
    assert (await slow.run("echo ok")).stdout == "ok\n"


async def test_down_host_drops_connections_and_refuses_new_ones(sim: Sim) -> None:
    conn = await sim.connect("sim-002")
    assert (await conn.run("echo ok")).stdout == "ok\n"
    sim.fleet.set_down("sim-002", True)
    await asyncio.wait_for(conn.wait_closed(), DEADLINE_S)
    with pytest.raises(ConnectionRefusedError):
        await sim.connect("sim-002")
    assert (await sim.run("sim-003", "echo ok")).stdout == "ok\n"
    sim.fleet.set_down("sim-002", False)
    await sim.server.settled()
    assert (await sim.run("sim-002", "echo ok")).stdout == "ok\n"  # same port again


async def test_removed_gpu_disappears(sim: Sim) -> None:
    before = sections(await sim.probe("sim-003"))["gpus"]
    sim.fleet.start_process("sim-003", 1, "erin", "python a.py")
    sim.fleet.remove_gpu("sim-003", 1)
    after = sections(await sim.probe("sim-003"))
    assert len(after["gpus"]) == GPUS - 1
    assert [row.split(", ")[0] for row in after["gpus"]] == [
        row.split(", ")[0] for i, row in enumerate(before) if i != 1
    ]
    assert [row.split(", ")[1] for row in after["gpus"]] == ["0", "2", "3"]
    assert after["apps"] == [] and after["ps"] == []  # its process went with it
    listing = await sim.run("sim-003", "nvidia-smi -L")
    assert len(str(listing.stdout).splitlines()) == GPUS - 1


async def test_unknown_client_key_is_refused(sim: Sim) -> None:
    with pytest.raises(asyncssh.PermissionDenied):
        await sim.connect("sim-001", key=asyncssh.generate_private_key("ssh-ed25519"))


async def test_many_concurrent_commands(sim: Sim) -> None:
    conns = [await sim.connect(host) for host in sim.fleet.hosts for _ in range(4)]
    results = await asyncio.gather(*(c.run(PROBE_COMMAND) for c in conns for _ in range(5)))
    assert all(markers(str(r.stdout)) == MARKERS for r in results)
    assert sim.server.requests >= len(results)


# -- the rendering against the real shell script ------------------------------------------

FAKE_SMI = """\
#!/bin/sh
case "$1" in
  --query-gpu=pci.bus_id,*) what=health ;;
  --query-gpu=*) what=gpus ;;
  --query-compute-apps=*) what=apps ;;
  *) echo "fake nvidia-smi: unexpected $*" >&2; exit 2 ;;
esac
cat "$SIM_DIR/$what.out"
exit "$(cat "$SIM_DIR/$what.rc")"
"""
FAKE_PS = """\
#!/bin/sh
# ps -o pid=,user:64=,etimes=,args= -p PIDS: the simulator's rows for those pids, in pid order
[ "$3" = -p ] || { echo "fake ps: unexpected $*" >&2; exit 2; }
echo "$4" >> "$SIM_DIR/ps.calls"
echo "$4" | tr , '\\n' | sort -n | while read -r pid; do
  grep -E "^ *$pid " "$SIM_DIR/ps.rows"
done
"""


def _real_probe(tmp_path: Path, shell: str, fleet: SimFleet, host: str, now: float) -> str:
    """Run the real PROBE_COMMAND with `shell`, nvidia-smi and ps answering as the simulator."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("date", "head", "cat", "grep", "awk", "sort", "paste", "tr"):
        found = shutil.which(tool)
        assert found, f"{tool} is needed to run the probe"
        with contextlib.suppress(FileExistsError):
            (bin_dir / tool).symlink_to(found)
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    if fleet.snapshot(host)["hosts"][0]["nvidia_smi"] != "missing":
        for what in ("gpus", "apps", "health"):
            result = fleet.nvidia_smi_query(host, what, now)
            (data / f"{what}.out").write_text(result.stdout + result.stderr)
            (data / f"{what}.rc").write_text(str(result.exit_status))
        for name, text in (("nvidia-smi", FAKE_SMI), ("ps", FAKE_PS)):
            (bin_dir / name).write_text(text)
            (bin_dir / name).chmod(0o755)
    rendered = fleet.render_probe_output(host, now)
    (data / "ps.rows").write_text("\n".join(sections(rendered)["ps"]) + "\n")
    done = subprocess.run(
        [shell, "-c", PROBE_COMMAND],  # argv[0] as sshd passes it: the shell's name
        executable=shutil.which(shell),
        capture_output=True,
        text=True,
        env={"PATH": str(bin_dir), "SIM_DIR": str(data)},
        timeout=DEADLINE_S,
        check=False,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return done.stdout


def _from_gpus(text: str) -> str:
    return text[text.index("@@gpus\n") :]


@pytest.mark.parametrize("shell", ["sh", "bash"])
@pytest.mark.parametrize("mode", ["ok", "missing", "failing", "no_devices"])
def test_rendering_matches_the_real_script(tmp_path: Path, shell: str, mode: str) -> None:
    if shutil.which(shell) is None:
        pytest.skip(f"no {shell} here")
    fleet = SimFleet(2, 8, seed=5, churn=True, login_shell=shell)  # type: ignore[arg-type]
    now = fleet.now() + 3600.0
    fleet.start_process("sim-001", [2, 3], "grace", "python big.py --shards 2,3", 30000)
    fleet.set_nvidia_smi("sim-001", mode)
    real = _real_probe(tmp_path, shell, fleet, "sim-001", now)
    assert markers(real) == MARKERS
    assert _from_gpus(real) == _from_gpus(fleet.render_probe_output("sim-001", now))
    if mode == "ok":  # ps was asked for exactly the pids of the apps section
        calls = (tmp_path / "data" / "ps.calls").read_text().split()
        apps_pids = {line.split(", ")[0] for line in sections(real)["apps"]}
        assert len(calls) == 1 and set(calls[0].split(",")) == apps_pids


def test_fleet_is_deterministic_and_changes_over_time() -> None:
    start = 1_800_000_000.0
    one = SimFleet(2, 8, seed=42, start_time=start, clock=lambda: start)
    two = SimFleet(2, 8, seed=42, start_time=start, clock=lambda: start)
    other = SimFleet(2, 8, seed=43, start_time=start, clock=lambda: start)
    times = [start + k * 600.0 for k in range(48)]
    assert [one.render_probe_output("sim-002", t) for t in times] == [
        two.render_probe_output("sim-002", t) for t in times
    ]
    assert one.render_probe_output("sim-002", start) != other.render_probe_output("sim-002", start)
    seen_pids: set[str] = set()
    previous = None
    for t in times:
        parts = sections(one.render_probe_output("sim-002", t))
        seen_pids.update(line.split(", ")[0] for line in parts["apps"])
        counters = [int(v) for v in parts["stat"][0].split()[1:]]
        if previous is not None:
            assert all(b >= a for a, b in zip(previous, counters, strict=True))
            assert sum(counters) > sum(previous)
        previous = counters
        assert len(parts["gpus"]) == 8
    assert len(seen_pids) > 8  # jobs came and went


# -- the monitor's parser reads it --------------------------------------------------------


async def test_parser_reads_the_simulator(sim: Sim) -> None:
    probe = pytest.importorskip("services.monitor.probe")
    parse = getattr(probe, "parse_probe_output", None)
    if parse is None:
        pytest.skip("services.monitor.probe.parse_probe_output does not exist yet")
    host = "sim-001"
    alice = sim.fleet.start_process(host, 0, "alice", "python train.py --lr 0.1", 4096)
    bob = sim.fleet.start_process(host, [1, 2], "bob", "/usr/bin/python3 ddp.py", 1000)
    reading = parse(await sim.probe(host))
    assert reading.gpu_status == probe.GpuStatus.OK and reading.gpu_error is None
    assert [g.index for g in reading.gpus] == list(range(GPUS))
    snapshot = sim.fleet.snapshot(host)["hosts"][0]
    for gpu, expected in zip(reading.gpus, snapshot["gpus"], strict=True):
        assert gpu.uuid == expected["uuid"] and gpu.name == "NVIDIA A100-SXM4-80GB"
        assert gpu.fan_speed_percent is None  # [N/A], not 0
        assert gpu.memory_total_mib == 81920
        assert gpu.power_limit_w == 400.0
        assert gpu.utilization_gpu_percent is not None and gpu.temperature_c is not None
    assert reading.gpus[0].memory_used_mib >= 4096
    assert reading.cpu is not None and reading.load is not None
    assert reading.memory_total_mib == snapshot["memory_total_kb"] / 1024
    by_pid = sorted((p.pid, p.gpu_uuid, p.user, p.command) for p in reading.processes)
    uuids = [g.uuid for g in reading.gpus]
    assert by_pid == sorted(
        [
            (alice, uuids[0], "alice", "python train.py --lr 0.1"),
            (bob, uuids[1], "bob", "/usr/bin/python3 ddp.py"),
            (bob, uuids[2], "bob", "/usr/bin/python3 ddp.py"),
        ]
    )
    assert {p.user for p in reading.processes} == {"alice", "bob"}
    assert all(p.started_at is not None for p in reading.processes)

    expected_status = {
        "missing": probe.GpuStatus.NO_NVIDIA_SMI,
        "failing": probe.GpuStatus.ERROR,
        "no_devices": probe.GpuStatus.NO_GPU,
    }
    for mode, status in expected_status.items():
        sim.fleet.set_nvidia_smi(host, mode)
        reading = parse(await sim.probe(host))
        assert reading.gpu_status == status and reading.gpus == () and reading.processes == ()
        assert reading.cpu is not None
    sim.fleet.set_nvidia_smi(host, "ok")
    sim.fleet.remove_gpu(host, 3)
    assert len(parse(await sim.probe(host)).gpus) == GPUS - 1


def test_parser_reads_a_churning_fleet() -> None:
    probe = pytest.importorskip("services.monitor.probe")
    parse = getattr(probe, "parse_probe_output", None)
    if parse is None:
        pytest.skip("services.monitor.probe.parse_probe_output does not exist yet")
    fleet = SimFleet(4, 8, seed=9, churn=True, churn_period_s=600.0)
    start = fleet.now()
    for k in range(30):
        t = start + k * 97.0
        for host in fleet.hosts:
            reading = parse(fleet.render_probe_output(host, t))
            snapshot = fleet.snapshot(host, now=t)["hosts"][0]
            assert len(reading.gpus) == 8
            expected = sorted((p["pid"], len(p["gpus"])) for p in snapshot["processes"])
            counted: dict[int, int] = {}
            for process in reading.processes:
                counted[process.pid] = counted.get(process.pid, 0) + 1
                assert process.user in {p["user"] for p in snapshot["processes"]}
            assert sorted(counted.items()) == expected


# -- the control API ----------------------------------------------------------------------
