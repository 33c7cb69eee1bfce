"""What `nvidia-smi`, `ps` and `/proc` print on a simulated host: the monitor's probe and the
commands `warden hosts check` runs.

`render(host, now, shell)` is what `services.monitor.probe.PROBE_COMMAND` prints on such a host,
byte for byte as the real tools would print it: `nvidia-smi` CSV with ", " separators,
procps' right-aligned `pid`/`etimes` and 64-wide `user` columns, `/proc` lines in the kernel's
layout, and the real error texts when nvidia-smi is missing, failing or finds no GPU (the
host's `nvidia_smi` mode, or no GPU left). CPU counters are the integral of a smooth busy
fraction since boot, so they only grow.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

from services.monitor.probe import (
    APP_FIELDS,
    GPU_FIELDS,
    PROBE_COMMAND,
    PROBE_VERSION,
    probe_command,
)
from services.shared.topology import TopoGpu, Topology, render_topo_matrix
from services.shared.topology_shapes import shape
from services.sim.gpu_faults import LOST_RC, health_section, lost_line
from services.sim.gpus import GpuMetrics, SimGpu, SimProcess, gpu_metrics
from services.sim.host import SimHost
from services.sim.mig import instance_of, list_lines, smi_table_rows
from services.sim.shell import CommandResult, LoginShell, line_of

NA = "[N/A]"
NVIDIA_SMI_PATH = "/usr/bin/nvidia-smi"
NVIDIA_SMI_FAILED = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n\n"
)
NVIDIA_SMI_FAILED_RC = 9
NO_DEVICES = "No devices were found\n"
NO_DEVICES_RC = 6

# The commands `warden hosts check` runs, besides the probe.
CHECK_ECHO = "echo ok"
CHECK_WHICH = "command -v nvidia-smi"
CHECK_LIST = "nvidia-smi -L"

USER_HZ = 100  # /proc/stat ticks per second per core


def _fmt(value: float | int | None) -> str:
    return NA if value is None else str(value)


_GPU_FIELD_TEXT: dict[str, Callable[[GpuMetrics], str]] = {
    "uuid": lambda m: m.uuid,
    "index": lambda m: str(m.index),
    "name": lambda m: m.name,
    "utilization.gpu": lambda m: str(m.utilization_gpu_percent),
    "utilization.memory": lambda m: str(m.utilization_memory_percent),
    "memory.used": lambda m: str(m.memory_used_mib),
    "memory.total": lambda m: str(m.memory_total_mib),
    "memory.free": lambda m: str(m.memory_total_mib - m.memory_used_mib),
    "temperature.gpu": lambda m: str(m.temperature_c),
    "power.draw": lambda m: f"{m.power_draw_w:.2f}",
    "power.limit": lambda m: f"{m.power_limit_w:.2f}",
    "fan.speed": lambda m: _fmt(m.fan_speed_percent),
    "clocks.sm": lambda m: str(m.clock_sm_mhz),
    "clocks.mem": lambda m: str(m.clock_memory_mhz),
}
# One renderer per field PROBE_COMMAND asks for, in its order (a field the model does not know
# prints as [N/A], as nvidia-smi does for a field a board does not support).
_GPU_ROW = tuple(_GPU_FIELD_TEXT.get(f, lambda _m: NA) for f in GPU_FIELDS)
# A GPU in MIG mode reports no utilisation of its own (its instances' is not summed).
_SPLIT_GPU_ROW = tuple(
    (lambda _m: NA) if f.startswith("utilization.") else text
    for f, text in zip(GPU_FIELDS, _GPU_ROW, strict=True)
)
_APP_FIELD_TEXT: dict[str, Callable[[SimProcess, str], str]] = {
    "pid": lambda p, _uuid: str(p.pid),
    "gpu_uuid": lambda _p, uuid: uuid,
    "used_memory": lambda p, _uuid: _fmt(p.used_memory_mib),
    "used_gpu_memory": lambda p, _uuid: _fmt(p.used_memory_mib),
    "process_name": lambda p, _uuid: p.process_name,
    "name": lambda p, _uuid: p.process_name,
}
_APP_ROW = tuple(_APP_FIELD_TEXT.get(f, lambda _p, _uuid: NA) for f in APP_FIELDS)

_PROBE_GPU_LINE = line_of(PROBE_COMMAND, "nvidia-smi --query-gpu")
_PROBE_APPS_LINE = line_of(PROBE_COMMAND, "nvidia-smi --query-compute-apps")
_PROBE_HEALTH_LINE = line_of(PROBE_COMMAND, "nvidia-smi --query-gpu=pci.bus_id")
_PROBE_HEAD = f"@@warden-probe {PROBE_VERSION}\n"
_PROBE_TRIMMED = PROBE_COMMAND.rstrip("\n")  # as `ssh host "$(cat probe.sh)"` sends it
_PROBE_TOPOLOGY = probe_command(topology=True)
_PROBE_TOPOLOGY_TRIMMED = _PROBE_TOPOLOGY.rstrip("\n")
_PROBE_TOPO_LINE = line_of(_PROBE_TOPOLOGY, "nvidia-smi topo -m")


def answer(host: SimHost, command: str, now: float, shell: LoginShell) -> CommandResult | None:
    """What the probe or a `warden hosts check` command prints on `host`; None for others."""
    if command in (PROBE_COMMAND, _PROBE_TRIMMED):
        return CommandResult(render(host, now, shell), "", 0)
    if command in (_PROBE_TOPOLOGY, _PROBE_TOPOLOGY_TRIMMED):
        text = render(host, now, shell)
        assert text.endswith("@@end\n")
        return CommandResult(
            text[: -len("@@end\n")] + topology_section(host, shell) + "@@end\n", "", 0
        )
    if command == CHECK_ECHO:
        return CommandResult("ok\n", "", 0)
    if command == CHECK_WHICH:
        if host.nvidia_smi == "missing":
            return CommandResult("", "", 1 if shell == "bash" else 127)
        return CommandResult(NVIDIA_SMI_PATH + "\n", "", 0)
    if command == CHECK_LIST:
        failure = _nvidia_smi_failure(host, shell, 1)
        if failure is None:
            lines = list_lines(
                [(g.index, g.model.name, g.uuid, g.mig) for g in host.gpus if not g.removed]
            )
            return CommandResult(lines, "", 0)
        return _failed(host, failure)
    return None


def render(host: SimHost, now: float, shell: LoginShell) -> str:
    """Exactly what PROBE_COMMAND prints on `host` at `now` (seconds since the epoch)."""
    t = float(now)
    by_gpu, ends = host.by_gpu(t)
    nprocs = len({p.pid for procs in by_gpu.values() for p in procs})
    out = [
        _PROBE_HEAD,
        f"@@time {int(t)}\n@@stat\n",
        _cpu_line(host, t),
        "@@loadavg\n",
        _loadavg_line(host, t, nprocs),
        "@@meminfo\n",
        _meminfo(host, t, nprocs),
        "@@gpus\n",
    ]
    failure = _nvidia_smi_failure(host, shell, _PROBE_GPU_LINE)
    if failure is not None:
        text, rc = failure
        out.append(text)
        out.append(f"@@gpus-rc {rc}\n@@apps\n")
        apps_text, apps_rc = _nvidia_smi_failure(host, shell, _PROBE_APPS_LINE) or ("", 0)
        if apps_text.rstrip("\n"):  # $(...) drops trailing newlines; printf adds one
            out.append(apps_text.rstrip("\n") + "\n")
        out.append(f"@@apps-rc {apps_rc}\n@@ps\n@@mig\n@@health\n")
        health_text, health_rc = _nvidia_smi_failure(host, shell, _PROBE_HEALTH_LINE) or ("", 0)
        if health_text.rstrip("\n"):
            out.append(health_text.rstrip("\n") + "\n")
        out.append(f"@@health-rc {health_rc}\n@@end\n")
        return "".join(out)
    apps = []
    listed: dict[int, SimProcess] = {}
    rc = 0
    for gpu in host.gpus:
        if gpu.removed:
            continue
        if gpu.fault == "lost":  # its line in place of its row, in both queries
            out.append(lost_line(gpu))
            apps.append(lost_line(gpu))
            rc = LOST_RC
            continue
        procs = by_gpu[gpu.index]
        out.append(_gpu_row(gpu_metrics(gpu, t, procs, ends[gpu.index]), split=bool(gpu.mig)))
        for proc in procs:
            apps.append(_app_row(proc, gpu))
            listed[proc.pid] = proc
    out.append(f"@@gpus-rc {rc}\n@@apps\n")
    out.extend(apps)
    out.append(f"@@apps-rc {rc}\n@@ps\n")
    pid_width = max(5, len(str(host.pid_max - 1)))
    out.extend(_ps_row(listed[pid], t, pid_width) for pid in sorted(listed))
    out.append(_mig_sections(host, by_gpu))
    health, health_rc = health_section(g for g in host.gpus if not g.removed)
    out.append(f"@@health\n{health}@@health-rc {health_rc}\n")
    out.append("@@end\n")
    return "".join(out)


def _mig_sections(host: SimHost, by_gpu: dict[int, list[SimProcess]]) -> str:
    """`@@mig` and `@@mig-smi`: `nvidia-smi -L` and the plain nvidia-smi's table rows, on a host
    with a GPU split by MIG (only the marker on others, as the probe prints it)."""
    gpus = [g for g in host.gpus if not g.removed]
    if not any(g.mig for g in gpus):
        return "@@mig\n"
    used: dict[tuple[int, int], int] = {}
    rows = []
    for gpu in gpus:
        for m in gpu.mig:
            used[(gpu.index, m.device)] = 12  # what an instance with no process holds
        for proc in by_gpu[gpu.index]:
            instance = instance_of(gpu.mig, proc.pid, proc.mig) if gpu.mig else None
            if instance is not None:
                used[(gpu.index, instance.device)] += proc.used_memory_mib or 0
            rows.append((gpu.index, instance, proc.pid, proc.process_name, proc.used_memory_mib))
    listing = list_lines([(g.index, g.model.name, g.uuid, g.mig) for g in gpus])
    tables = smi_table_rows([(g.index, g.model.name, g.mig) for g in gpus], used, rows)
    return f"@@mig\n{listing}@@mig-smi\n{tables}"


def topology_section(host: SimHost, shell: LoginShell) -> str:
    """The probe's `@@topo` section: `nvidia-smi topo -m` of the host's present GPUs."""
    failure = _nvidia_smi_failure(host, shell, _PROBE_TOPO_LINE)
    if failure is not None:
        text, rc = failure
        return f"@@topo\n{text}@@topo-rc {rc}\n"
    present = [g.index for g in host.gpus if not g.removed]
    return f"@@topo\n{render_topo_matrix(topology_of(host, present))}@@topo-rc 0\n"


def topology_of(host: SimHost, present: list[int]) -> Topology:
    """The host's shape (`pcie` when none was given), limited to its present GPUs."""
    full = shape(host.topology or "pcie", len(host.gpus), host.cores)
    keep = [i for i, g in enumerate(full.gpus) if g.index in present]
    return Topology(
        tuple(
            TopoGpu(
                full.gpus[i].index,
                tuple(full.gpus[i].links[j] for j in keep),
                full.gpus[i].cpu_affinity,
                full.gpus[i].numa_node,
            )
            for i in keep
        )
    )


def nvidia_smi_query(
    host: SimHost, what: Literal["gpus", "apps", "health"], now: float, shell: LoginShell
) -> CommandResult:
    """What `nvidia-smi --query-gpu=...` (gpus), `--query-compute-apps=...` (apps) or the
    health query alone prints (when nvidia-smi is missing, the shell's message, on stderr)."""
    t = float(now)
    failure = _nvidia_smi_failure(host, shell, 1)
    if failure is not None:
        return _failed(host, failure)
    if what == "health":
        text, rc = health_section(g for g in host.gpus if not g.removed)
        return CommandResult(text, "", rc)
    by_gpu, ends = host.by_gpu(t)
    rows = []
    for gpu in host.gpus:
        if gpu.removed:
            continue
        procs = by_gpu[gpu.index]
        if what == "gpus":
            metrics = gpu_metrics(gpu, t, procs, ends[gpu.index])
            rows.append(_gpu_row(metrics, split=bool(gpu.mig)))
        else:
            rows.extend(_app_row(proc, gpu) for proc in procs)
    return CommandResult("".join(rows), "", 0)


def _nvidia_smi_failure(host: SimHost, shell: LoginShell, line: int) -> tuple[str, int] | None:
    """(output, exit status) when nvidia-smi, on line `line` of a `-c` script, cannot list GPUs;
    None when it can."""
    mode = host.nvidia_smi
    if mode == "missing":
        return _not_found_line(shell, line), 127
    if mode == "failing":
        return NVIDIA_SMI_FAILED, NVIDIA_SMI_FAILED_RC
    if mode == "no_devices" or not any(not g.removed for g in host.gpus):
        return NO_DEVICES, NO_DEVICES_RC
    return None


def _failed(host: SimHost, failure: tuple[str, int]) -> CommandResult:
    """nvidia-smi's failure as a command's result: the shell's not-found message on stderr."""
    text, rc = failure
    if host.nvidia_smi == "missing":
        return CommandResult("", text, rc)
    return CommandResult(text, "", rc)


def _not_found_line(shell: LoginShell, line: int) -> str:
    """What the login shell prints when `nvidia-smi` on line `line` of `-c` is not found."""
    if shell == "sh":
        return f"sh: {line}: nvidia-smi: not found\n"
    return f"bash: line {line}: nvidia-smi: command not found\n"


def _cpu_line(host: SimHost, t: float) -> str:
    elapsed = max(0.0, t - host.boot_time)
    hz = host.cores * USER_HZ
    total = hz * elapsed
    busy = hz * (
        host.cpu_base * elapsed
        - host.cpu_amp
        / host.cpu_w
        * (
            math.cos(host.cpu_w * t + host.cpu_phi)
            - math.cos(host.cpu_w * host.boot_time + host.cpu_phi)
        )
    )
    busy = min(max(busy, 0.0), total)
    iowait = 0.004 * total
    idle = total - busy - iowait
    return (
        f"cpu  {int(0.82 * busy)} {int(0.01 * busy)} {int(0.13 * busy)} {int(idle)} "
        f"{int(iowait)} 0 {int(0.04 * busy)} 0 0 0\n"
    )


def _busy_fraction(host: SimHost, t: float) -> float:
    return host.cpu_base + host.cpu_amp * math.sin(host.cpu_w * t + host.cpu_phi)


def _loadavg_line(host: SimHost, t: float, nprocs: int) -> str:
    loads = [host.cores * _busy_fraction(host, t - lag) for lag in (0.0, 150.0, 450.0)]
    running = 1 + int(loads[0] / 4) % max(1, host.cores)
    total = 700 + host.number % 200 + 12 * nprocs
    last_pid = (host.pid_origin + int(t * 3)) % (host.pid_max - 300) + 300
    return f"{loads[0]:.2f} {loads[1]:.2f} {loads[2]:.2f} {running}/{total} {last_pid}\n"


def _meminfo(host: SimHost, t: float, nprocs: int) -> str:
    total = host.memory_total_kb
    share = 0.08 + 0.1 * (0.5 + 0.5 * math.sin(host.cpu_w * 0.7 * t + host.cpu_phi))
    available = int(total * (1.0 - share)) - nprocs * 6 * 1024 * 1024
    available = max(int(total * 0.05), available)
    return f"{'MemTotal:':<16}{total:>8} kB\n{'MemAvailable:':<16}{available:>8} kB\n"


def _gpu_row(metrics: GpuMetrics, *, split: bool = False) -> str:
    row = _SPLIT_GPU_ROW if split else _GPU_ROW
    return ", ".join([text(metrics) for text in row]) + "\n"


def _app_row(proc: SimProcess, gpu: SimGpu) -> str:
    return ", ".join([text(proc, gpu.uuid) for text in _APP_ROW]) + "\n"


def _ps_row(proc: SimProcess, t: float, pid_width: int) -> str:
    etimes = max(0, int(t - proc.started_at))
    user = proc.user if len(proc.user) <= 64 else proc.user[:63] + "+"
    return f"{proc.pid:>{pid_width}} {user:<64} {etimes:>7} {proc.command}\n"
