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
    @@end

CPU utilisation comes from the difference of two `@@stat` readings of consecutive ticks, so
the host is never asked to `sleep`. A process's start time is the host clock minus `etimes`
(no time zone involved). `parse_probe_output` turns the text into a `HostReading`; figures a
GPU does not report (`[N/A]`, `[Not Supported]`, ...) become None, never 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

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
echo '@@end'
"""


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


def cpu_percent(previous: CpuCounters | None, current: CpuCounters | None) -> float | None:
    """CPU utilisation between two readings; None when unknown (first tick, counter reset)."""
    if previous is None or current is None:
        return None
    total = current.total - previous.total
    busy = current.busy - previous.busy
    if total <= 0 or busy < 0:
        return None
    return round(100.0 * min(busy, total) / total, 2)
