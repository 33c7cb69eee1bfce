"""What one poll of a host reads, and the one shell command that reads it over SSH.

One round trip per host per tick: `PROBE_COMMAND` (POSIX sh, no `sleep`) prints sections, each
introduced by a marker line starting with `@@`:

    @@warden-probe 1
    @@time <host clock, seconds since the epoch>
    @@stat
    cpu  <user> <nice> <system> <idle> <iowait> <irq> <softirq> <steal> ...   (/proc/stat line 1)
    @@loadavg
    <1m> <5m> <15m> <running/total> <last pid>                                 (/proc/loadavg)
    @@meminfo
    MemTotal: <kB> kB
    MemAvailable: <kB> kB
    @@gpus
    <nvidia-smi --query-gpu=GPU_FIELDS --format=csv,noheader,nounits, stdout and stderr>
    @@gpus-rc <exit status of that nvidia-smi>
    @@apps
    <nvidia-smi --query-compute-apps=APP_FIELDS --format=csv,noheader,nounits, stdout and stderr>
    @@apps-rc <exit status>
    @@ps
    <ps -o pid=,user:64=,etimes=,args= -p <pids of the compute apps>>          (none: empty)
    @@mig
    <GPUs split into MIG instances: see `services.monitor.mig`>
    @@topo                                   (only in `probe_command(topology=True)`)
    <nvidia-smi topo -m, stdout and stderr>
    @@topo-rc <exit status>
    @@health
    <nvidia-smi --query-gpu=<health fields> --format=csv,nounits: see gpu_health.py>
    @@health-rc <exit status>
    @@end

The GPU interconnect rarely changes, so the `@@topo` section is asked for only now and then
(`probe_command(topology=True)`: the readers ask on a host's first poll, every
`TOPOLOGY_EVERY_S` and when its GPUs change).

CPU utilisation comes from the difference of two `@@stat` readings of consecutive ticks, so
the host is never asked to `sleep`. A process's start time is the host clock minus `etimes`
(no time zone involved). `parse_probe_output` turns the text into a `HostReading`; figures a
GPU does not report (`[N/A]`, `[Not Supported]`, ...) become None, never 0.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from services.monitor.gpu_health import HEALTH_SCRIPT, HealthReading, parse_health_section
from services.monitor.mig import MIG_PROBE_SECTIONS, apply_mig, parse_mig_sections
from services.shared.topology import Topology, parse_topo_matrix

GPU_FIELDS = (
    "uuid",
    "index",
    "name",
    "utilization.gpu",
    "utilization.memory",
    "memory.used",
    "memory.total",
    "temperature.gpu",
    "power.draw",
    "power.limit",
    "fan.speed",
    "clocks.sm",
    "clocks.mem",
)

# process_name last: it is the only field that might hold a comma.
APP_FIELDS = ("pid", "gpu_uuid", "used_memory", "process_name")

PROBE_VERSION = 1

PROBE_COMMAND = f"""\
export LC_ALL=C
echo '@@warden-probe {PROBE_VERSION}'
echo "@@time $(date +%s)"
echo '@@stat'; head -n 1 /proc/stat
echo '@@loadavg'; cat /proc/loadavg
echo '@@meminfo'; grep -E '^(MemTotal|MemAvailable):' /proc/meminfo
echo '@@gpus'
nvidia-smi --query-gpu={",".join(GPU_FIELDS)} --format=csv,noheader,nounits 2>&1
echo "@@gpus-rc $?"
echo '@@apps'
apps=$(nvidia-smi --query-compute-apps={",".join(APP_FIELDS)} --format=csv,noheader,nounits 2>&1)
rc=$?
[ -n "$apps" ] && printf '%s\\n' "$apps"
echo "@@apps-rc $rc"
echo '@@ps'
pids=$(printf '%s\\n' "$apps" | awk -F', *' '$1 ~ /^[0-9]+$/ {{print $1}}' | sort -u | paste -sd, -)
[ -n "$pids" ] && ps -o pid=,user:64=,etimes=,args= -p "$pids" 2>/dev/null
{MIG_PROBE_SECTIONS}{HEALTH_SCRIPT}echo '@@end'
"""

TOPOLOGY_SECTION = """\
echo '@@topo'
nvidia-smi topo -m 2>&1
echo "@@topo-rc $?"
"""
TOPOLOGY_EVERY_S = 600.0  # how often a host's interconnect is read again


def probe_command(topology: bool = False) -> str:
    """`PROBE_COMMAND`, with the `@@topo` section before `@@end` when `topology`."""
    if not topology:
        return PROBE_COMMAND
    head, _, tail = PROBE_COMMAND.rpartition("echo '@@end'")
    return head + TOPOLOGY_SECTION + "echo '@@end'" + tail


class GpuStatus(StrEnum):
    """What a host's GPU reading says about its GPUs as a whole."""

    OK = "ok"  # nvidia-smi (or NVML) answered; `gpus` may still be empty
    NO_GPU = "no_gpu"  # the driver answered that there is no GPU, or no NVML library
    NO_NVIDIA_SMI = "no_nvidia_smi"  # nvidia-smi is not installed on the host
    ERROR = "error"  # nvidia-smi failed; `gpu_error` says how


@dataclass(frozen=True)
class GpuReading:
    uuid: str
    index: int
    name: str | None = None
    utilization_gpu_percent: float | None = None
    utilization_memory_percent: float | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    temperature_c: float | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    fan_speed_percent: float | None = None
    clock_sm_mhz: float | None = None
    clock_memory_mhz: float | None = None
    mig_parent_uuid: str | None = field(default=None, kw_only=True)  # MIG instance: its GPU


@dataclass(frozen=True)
class ProcessReading:
    pid: int
    gpu_uuid: str
    used_memory_mib: float | None = None
    user: str | None = None  # None when the process ended before `ps` saw it
    command: str = ""  # full command line from ps (process_name if ps did not see it)
    started_at: datetime | None = None


@dataclass(frozen=True)
class CpuCounters:
    """Cumulative CPU time of the host (first line of /proc/stat), in clock ticks."""

    busy: int
    total: int


@dataclass(frozen=True)
class HostReading:
    """Everything one poll of one host returned."""

    host_time: datetime | None = None
    cpu: CpuCounters | None = None
    load: tuple[float, float, float] | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    gpu_status: GpuStatus = GpuStatus.OK
    gpu_error: str | None = None
    gpus: tuple[GpuReading, ...] = ()
    processes: tuple[ProcessReading, ...] = field(default=())
    topology_read: bool = False  # the `@@topo` section was asked for (and so `topology` is news)
    topology: Topology | None = None  # None: not asked, or no matrix (one GPU, old driver)
    health: HealthReading | None = None  # the GPUs' health signals; None: not read


def cpu_percent(previous: CpuCounters | None, current: CpuCounters | None) -> float | None:
    """CPU utilisation between two readings; None when unknown (first tick, counter reset)."""
    if previous is None or current is None:
        return None
    total = current.total - previous.total
    busy = current.busy - previous.busy
    if total <= 0 or busy < 0:
        return None
    return round(100.0 * min(busy, total) / total, 2)


# --- Parsing the probe's output ------------------------------------------------------------------
#
# `parse_probe_output` is pure and never raises on what a section holds: lines it cannot read are
# skipped. Only a text that is not this probe's output at all (no header, another version) raises.
#
# GPU status, decided from the `@@gpus` section and its exit status:
#   - no GPU row and "No devices were found" (nvidia-smi exits 6)        -> NO_GPU
#   - exit 127, or "nvidia-smi: not found" / "command not found"          -> NO_NVIDIA_SMI
#   - exit 12, "couldn't find libnvidia-ml.so" (driver not installed)    -> NO_GPU
#   - exit 0                                                             -> OK (no row: zero GPUs)
#   - anything else (exit 9 "NVIDIA-SMI has failed ...", 15 "GPU has fallen off the bus", a
#     missing exit status in truncated output)                           -> ERROR, with `gpu_error`
#     the first non-empty line that is not a GPU row (at most 200 characters)
# When the GPUs read fine but the compute-apps query failed, the status is ERROR too ("compute
# apps: ..."): a host whose processes are unknown must not look idle. GPU rows that were read are
# kept whatever the status (a GPU that fell off the bus leaves the others' rows intact).
# `gpu_error` is None unless the status is ERROR.
#
# MIG: with MIG enabled, `--query-gpu` lists the physical GPUs only, with `[N/A]` utilisation
# (so None here). Compute-app rows usually carry the parent GPU's uuid (`GPU-...`); some drivers
# report the MIG device's uuid instead (`MIG-<uuid>`, or `MIG-GPU-<uuid>/<gi>/<ci>` before R470).
# `services.monitor.mig` reads which instance each process runs on from the `@@mig` sections and
# makes each instance a GpuReading; a process it cannot place keeps the uuid it was reported with.

_NOT_REPORTED = frozenset(
    {
        "",
        "n/a",
        "[n/a]",
        "[not supported]",
        "[unknown error]",
        "[insufficient permissions]",
        "[gpu requires reset]",
        "[gpu is lost]",
        "[not found]",
    }
)
_UNITS = frozenset({"MiB", "W", "%", "MHz", "C"})  # what older drivers print despite `nounits`
_GPU_TAIL = len(GPU_FIELDS) - 3  # the numeric fields after uuid, index, name
_ERROR_LINE_MAX = 200


class ProbeOutputError(ValueError):
    """The text is not the output of this version of `PROBE_COMMAND`."""


def parse_number(text: str) -> float | None:
    """A figure nvidia-smi printed: None for `[N/A]`, `[Not Supported]`, ... and for garbage."""
    try:
        value: float | None = float(text)
    except ValueError:
        value = _number_with_unit(text)
    return value if value is not None and math.isfinite(value) else None


def _number_with_unit(text: str) -> float | None:
    stripped = text.strip()
    if stripped.lower() in _NOT_REPORTED:
        return None
    number, _, unit = stripped.partition(" ")
    if not unit and number.endswith("%"):
        number, unit = number[:-1], "%"
    if unit.strip() not in _UNITS:
        return None
    try:
        return float(number)
    except ValueError:
        return None


def _parse_int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _reported_text(text: str) -> str | None:
    stripped = text.strip()
    return None if stripped.lower() in _NOT_REPORTED else stripped


def parse_gpu_row(line: str) -> GpuReading | None:
    """One `--query-gpu=GPU_FIELDS` CSV row; None when the line is not a GPU row (a warning).

    Fields are separated by ", ". The name is whatever lies between the first two fields and the
    last ten, so a name holding a comma survives.
    """
    parts = line.split(", ")
    if len(parts) < len(GPU_FIELDS):
        parts = [part.strip() for part in line.split(",")]  # a renderer without the space
        if len(parts) < len(GPU_FIELDS):
            return None
    uuid = _reported_text(parts[0])
    index = _parse_int(parts[1])
    if uuid is None or index is None or index < 0:
        return None
    tail = parts[-_GPU_TAIL:]
    name = _reported_text(", ".join(parts[2:-_GPU_TAIL]))
    return GpuReading(uuid, index, name, *map(parse_number, tail))


def parse_app_row(line: str) -> tuple[int, str, float | None, str] | None:
    """One `--query-compute-apps=APP_FIELDS` row: (pid, gpu_uuid, used MiB, process_name)."""
    parts = line.split(",", 3)
    if len(parts) < 4:
        return None
    pid = _parse_int(parts[0])
    gpu_uuid = _reported_text(parts[1])
    if pid is None or pid <= 0 or gpu_uuid is None:
        return None
    return pid, gpu_uuid, parse_number(parts[2]), _reported_text(parts[3]) or ""


def parse_ps_line(line: str) -> tuple[int, str, int | None, str] | None:
    """One `ps -o pid=,user:64=,etimes=,args=` line: (pid, user, elapsed seconds, args)."""
    parts = line.split(None, 3)
    if len(parts) < 3:
        return None
    pid = _parse_int(parts[0])
    if pid is None:
        return None
    etimes = _parse_int(parts[2])
    if etimes is not None and etimes < 0:
        etimes = None
    return pid, parts[1], etimes, parts[3].strip() if len(parts) == 4 else ""


def parse_proc_stat_line(line: str) -> CpuCounters | None:
    """The aggregate `cpu` line of /proc/stat. Guest time is already counted in user/nice."""
    parts = line.split()
    if len(parts) < 5 or parts[0] != "cpu":
        return None
    values: list[int] = []
    for part in parts[1:9]:
        value = _parse_int(part)
        if value is None or value < 0:
            return None
        values.append(value)
    values.extend([0] * (8 - len(values)))  # old kernels print fewer columns
    user, nice, system, idle, iowait, irq, softirq, steal = values
    busy = user + nice + system + irq + softirq + steal
    return CpuCounters(busy=busy, total=busy + idle + iowait)


def parse_meminfo(lines: list[str]) -> tuple[float | None, float | None]:
    """(used MiB, total MiB) from MemTotal/MemAvailable lines; used = total - available."""
    total_kb = available_kb = None
    for line in lines:
        key, _, rest = line.partition(":")
        if key == "MemTotal":
            total_kb = _meminfo_kb(rest)
        elif key == "MemAvailable":
            available_kb = _meminfo_kb(rest)
    if total_kb is None:
        return None, None
    used = None if available_kb is None else max(total_kb - available_kb, 0) / 1024
    return used, total_kb / 1024


def _meminfo_kb(rest: str) -> int | None:
    parts = rest.split()
    if not parts:
        return None
    value = _parse_int(parts[0])
    return value if value is not None and value >= 0 else None


def parse_loadavg(line: str) -> tuple[float, float, float] | None:
    """The 1, 5 and 15 minute load averages from /proc/loadavg."""
    parts = line.split()
    if len(parts) < 3:
        return None
    loads = [parse_number(part) for part in parts[:3]]
    if loads[0] is None or loads[1] is None or loads[2] is None:
        return None
    return loads[0], loads[1], loads[2]


def _parse_host_time(arg: str | None) -> datetime | None:
    seconds = None if arg is None else _parse_int(arg)
    if seconds is None:
        return None
    try:
        return datetime.fromtimestamp(seconds, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _split_sections(text: str) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Lines per section and the argument of each marker; the first of a repeated marker wins."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("@@warden-probe")), None)
    if start is None:
        raise ProbeOutputError("not the output of the Warden probe: no '@@warden-probe' line")
    version = lines[start][len("@@warden-probe") :].strip()
    if version != str(PROBE_VERSION):
        raise ProbeOutputError(
            f"probe output version {version[:20]!r}, this parser reads version {PROBE_VERSION}"
        )
    sections: dict[str, list[str]] = {}
    args: dict[str, str] = {}
    current: list[str] | None = None
    for line in lines[start + 1 :]:
        if line.startswith("@@"):
            name, _, arg = line[2:].partition(" ")
            if name in args:
                current = None
                continue
            args[name] = arg.strip()
            current = sections[name] = []
        elif current is not None:
            current.append(line)
    return sections, args


def _first_line(lines: list[str]) -> str | None:
    for line in lines:
        stripped = line.strip()
        if stripped:
            return stripped[:_ERROR_LINE_MAX]
    return None


def _gpu_status(
    rc: int | None, other_lines: list[str], have_rows: bool
) -> tuple[GpuStatus, str | None]:
    """Status of the `@@gpus` query from its exit status and the lines that are not GPU rows."""
    if not have_rows and any("No devices were found" in line for line in other_lines):
        return GpuStatus.NO_GPU, None
    if rc == 0:
        return GpuStatus.OK, None
    if rc == 127 or any(
        "nvidia-smi" in line and "not found" in line.lower() for line in other_lines
    ):
        return GpuStatus.NO_NVIDIA_SMI, None
    if rc == 12 or any("libnvidia-ml.so" in line for line in other_lines):
        return GpuStatus.NO_GPU, None
    message = _first_line(other_lines)
    if message is None:
        message = (
            "no exit status for nvidia-smi in the probe output (truncated?)"
            if rc is None
            else f"nvidia-smi exited with status {rc}"
        )
    return GpuStatus.ERROR, message


class HealthMemo:
    """One host's last `@@health` section and what it read: the section rarely changes between
    polls, and reading it again cost about half of parsing a poll of 8 GPUs."""

    def __init__(self) -> None:
        self.lines: list[str] | None = None
        self.reading: HealthReading | None = None

    def read(self, lines: list[str]) -> HealthReading:
        if lines != self.lines or self.reading is None:
            self.lines, self.reading = lines, parse_health_section(lines)
        return self.reading


def parse_probe_output(text: str, health_memo: HealthMemo | None = None) -> HostReading:
    """Read the whole output of `PROBE_COMMAND` (see the module docstring and the notes above).
    `health_memo`: the host's, to read an unchanged health section only once."""
    sections, args = _split_sections(text)

    host_time = _parse_host_time(args.get("time"))
    cpu = None
    for line in sections.get("stat", ()):
        if line.startswith("cpu "):
            cpu = parse_proc_stat_line(line)
            break
    load_lines = sections.get("loadavg")
    load = parse_loadavg(load_lines[0]) if load_lines else None
    memory_used, memory_total = parse_meminfo(sections.get("meminfo", []))

    gpus: list[GpuReading] = []
    other_lines: list[str] = []
    for line in sections.get("gpus", ()):
        gpu = parse_gpu_row(line)
        if gpu is None:
            other_lines.append(line)
        else:
            gpus.append(gpu)
    if "gpus" in sections:
        status, error = _gpu_status(_parse_int(args.get("gpus-rc", "")), other_lines, bool(gpus))
    else:
        status, error = GpuStatus.ERROR, "no GPU reading in the probe output (truncated?)"

    apps: list[tuple[int, str, float | None, str]] = []
    app_other: list[str] = []
    for line in sections.get("apps", ()):
        app = parse_app_row(line)
        if app is None:
            app_other.append(line)
        else:
            apps.append(app)
    if status is GpuStatus.OK:
        apps_rc = _parse_int(args.get("apps-rc", ""))
        if apps_rc != 0:
            status = GpuStatus.ERROR
            detail = _first_line(app_other) or (
                "no exit status (truncated?)" if apps_rc is None else f"exit status {apps_rc}"
            )
            error = f"compute apps: {detail}"[:_ERROR_LINE_MAX]

    reading = HostReading(
        host_time=host_time,
        cpu=cpu,
        load=load,
        memory_used_mib=memory_used,
        memory_total_mib=memory_total,
        gpu_status=status,
        gpu_error=error,
        gpus=tuple(gpus),
        processes=_join_processes(apps, sections.get("ps", ()), host_time),
        topology_read="topo" in sections,
        topology=_topology(sections, args),
        health=_health(sections, status, health_memo),
    )
    mig = parse_mig_sections(sections.get("mig", []), sections.get("mig-smi", []))
    return apply_mig(reading, mig)


def _topology(sections: dict[str, list[str]], args: dict[str, str]) -> Topology | None:
    if "topo" not in sections or _parse_int(args.get("topo-rc", "")) != 0:
        return None
    return parse_topo_matrix("\n".join(sections["topo"]))


def _health(
    sections: dict[str, list[str]], status: GpuStatus, memo: HealthMemo | None
) -> HealthReading | None:
    """The `@@health` section, when there is one and nvidia-smi ran at all."""
    if "health" not in sections or status in (GpuStatus.NO_GPU, GpuStatus.NO_NVIDIA_SMI):
        return None
    if memo is None:
        return parse_health_section(sections["health"])
    return memo.read(sections["health"])


def _join_processes(
    apps: list[tuple[int, str, float | None, str]],
    ps_lines: Iterable[str],
    host_time: datetime | None,
) -> tuple[ProcessReading, ...]:
    """One ProcessReading per compute-app row, with owner and start time from `ps`."""
    if not apps:
        return ()
    seen: dict[int, tuple[int, str, int | None, str]] = {}
    for line in ps_lines:
        row = parse_ps_line(line)
        if row is not None:
            seen.setdefault(row[0], row)
    processes = []
    for pid, gpu_uuid, used_mib, process_name in apps:
        ps_row = seen.get(pid)
        if ps_row is None:
            processes.append(ProcessReading(pid, gpu_uuid, used_mib, None, process_name))
            continue
        _, user, etimes, command = ps_row
        started_at = None
        if host_time is not None and etimes is not None:
            try:
                started_at = host_time - timedelta(seconds=etimes)
            except OverflowError:
                started_at = None
        processes.append(
            ProcessReading(pid, gpu_uuid, used_mib, user, command or process_name, started_at)
        )
    processes.sort(key=lambda process: (process.gpu_uuid, process.pid))
    return tuple(processes)
