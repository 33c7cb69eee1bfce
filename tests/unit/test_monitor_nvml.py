"""This machine's GPUs through NVML (FakeNvml here), and its CPU and memory from the real /proc.

Owners, command lines and start times of processes are checked against `ps`, an independent
reader of the same facts, for real processes of this machine.
"""

from __future__ import annotations

import os
import pwd
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from services.monitor.nvml import FakeGpu, FakeNvml, FakeNvmlError, ProcInfo, load_nvml, read_gpus
from services.monitor.probe import GpuReading, GpuStatus
from services.monitor.readers import LocalNvmlReader
from tests.support.processes import running

NO_SUCH_PID = 4194305  # above the largest pid_max Linux allows
GIB = 2**30
MIB = 2**20
ME = pwd.getpwuid(os.geteuid()).pw_name


def ps(pid: int, column: str) -> str:
    done = subprocess.run(
        ["ps", "-ww", "-o", f"{column}=", "-p", str(pid)],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return done.stdout.strip()


@pytest.fixture
def sleeper() -> Iterator[tuple[int, datetime]]:
    started = datetime.now(UTC)
    with running("sleep", "60") as process:
        yield process.pid, started


def test_figures_with_units_and_none_for_what_is_not_reported() -> None:
    nvml = FakeNvml(
        [
            FakeGpu("GPU-0"),  # an A100: no fan
            FakeGpu(
                "GPU-1",
                name="NVIDIA GeForce RTX 3090",
                utilization=None,
                memory=(512 * MIB, 24 * GIB),
                power_mw=None,
                fan=0,  # a real 0 stays 0
                clocks=None,
                temperature=None,
                power_limit_mw=350_500,
            ),
        ]
    )
    reading = read_gpus(nvml, ProcInfo())
    assert reading.status is GpuStatus.OK and reading.error is None
    a100, rtx = reading.gpus
    assert a100 == GpuReading(
        uuid="GPU-0",
        index=0,
        name="NVIDIA A100-SXM4-80GB",  # bytes from the bindings, decoded
        utilization_gpu_percent=50.0,
        utilization_memory_percent=20.0,
        memory_used_mib=10240.0,
        memory_total_mib=81920.0,
        temperature_c=40.0,
        power_draw_w=250.0,
        power_limit_w=400.0,
        fan_speed_percent=None,
        clock_sm_mhz=1410.0,
        clock_memory_mhz=1593.0,
    )
    assert (rtx.index, rtx.name) == (1, "NVIDIA GeForce RTX 3090")
    assert rtx.utilization_gpu_percent is None and rtx.utilization_memory_percent is None
    assert (rtx.memory_used_mib, rtx.memory_total_mib) == (512.0, 24576.0)
    assert rtx.power_draw_w is None and rtx.power_limit_w == 350.5
    assert rtx.fan_speed_percent == 0.0
    assert rtx.temperature_c is None
    assert rtx.clock_sm_mhz is None and rtx.clock_memory_mhz is None
    assert reading.processes == ()


def test_unknown_memory_is_none_not_zero() -> None:
    (gpu,) = read_gpus(FakeNvml([FakeGpu("GPU-0", memory=None)])).gpus
    assert gpu.memory_used_mib is None and gpu.memory_total_mib is None


def test_processes_get_owner_command_and_start_from_proc(sleeper: tuple[int, datetime]) -> None:
    pid, started = sleeper
    me = os.getpid()
    nvml = FakeNvml(
        [
            FakeGpu("GPU-b", processes=[(pid, 300 * MIB), (NO_SUCH_PID, None)]),
            FakeGpu("GPU-a", processes=[(me, 1024 * MIB)]),
        ]
    )
    reading = read_gpus(nvml, ProcInfo())
    assert [(p.gpu_uuid, p.pid) for p in reading.processes] == [
        ("GPU-a", me),
        ("GPU-b", pid),
        ("GPU-b", NO_SUCH_PID),
    ]
    mine, sleeping, gone = reading.processes

    assert (mine.user, mine.used_memory_mib) == (ME, 1024.0)
    assert mine.user == ps(me, "user:64")
    assert mine.command == ps(me, "args")
    assert mine.started_at is not None
    age_s = int(ps(me, "etimes"))
    assert abs(mine.started_at - (datetime.now(UTC) - timedelta(seconds=age_s))) <= timedelta(
        seconds=3
    )

    assert (sleeping.user, sleeping.command, sleeping.used_memory_mib) == (ME, "sleep 60", 300.0)
    assert sleeping.started_at is not None
    assert abs(sleeping.started_at - started) <= timedelta(seconds=3)

    assert (gone.user, gone.command, gone.started_at) == (None, "", None)
    assert gone.used_memory_mib is None


def test_proc_info_for_a_process_that_does_not_exist(tmp_path: Path) -> None:
    for proc in (ProcInfo(), ProcInfo(str(tmp_path))):
        assert proc.user(NO_SUCH_PID) is None
        assert proc.command(NO_SUCH_PID) == ""
        assert proc.started_at(NO_SUCH_PID) is None


def test_gpu_count_that_fails_is_an_error_not_no_gpu() -> None:
    class Broken(FakeNvml):
        def nvmlDeviceGetCount(self) -> int:
            raise FakeNvmlError("Driver Not Loaded")

    reading = read_gpus(Broken([]))
    assert reading.status is GpuStatus.ERROR
    assert reading.error == "NVML: Driver Not Loaded"
    assert reading.gpus == () and reading.processes == ()


def test_no_gpu_is_ok_with_nothing() -> None:
    reading = read_gpus(FakeNvml([]))
    assert (reading.status, reading.gpus, reading.processes) == (GpuStatus.OK, (), ())


async def test_local_reader_without_nvml_reports_no_gpu_and_real_cpu_and_memory() -> None:
    reader = LocalNvmlReader("here", nvml=None)
    first = await reader.read(5.0)
    assert first.gpu_status is GpuStatus.NO_GPU and first.gpu_error is None
    assert first.gpus == () and first.processes == ()
    assert first.cpu is not None and 0 <= first.cpu.busy <= first.cpu.total
    assert first.load is not None and all(value >= 0 for value in first.load)
    assert first.memory_total_mib is not None and first.memory_total_mib > 0
    assert first.memory_used_mib is not None
    assert 0 <= first.memory_used_mib <= first.memory_total_mib
    assert first.host_time is not None
    assert abs(first.host_time - datetime.now(UTC)) <= timedelta(seconds=5)
    second = await reader.read(5.0)
    assert second.cpu is not None and second.cpu.total >= first.cpu.total


async def test_local_reader_with_nvml_reports_gpus_and_processes() -> None:
    nvml = FakeNvml([FakeGpu("GPU-0", processes=[(os.getpid(), None)]), FakeGpu("GPU-1")])
    reading = await LocalNvmlReader("here", nvml=nvml).read(5.0)
    assert reading.gpu_status is GpuStatus.OK
    assert [gpu.uuid for gpu in reading.gpus] == ["GPU-0", "GPU-1"]
    (process,) = reading.processes
    assert (process.pid, process.user) == (os.getpid(), ME)
    assert reading.cpu is not None and reading.memory_total_mib


async def test_local_reader_reads_another_proc_root(tmp_path: Path) -> None:
    (tmp_path / "stat").write_text("cpu  10 0 5 80 5 0 0 0 0 0\ncpu0 10 0 5 80 5 0 0 0 0 0\n")
    (tmp_path / "loadavg").write_text("0.50 0.25 0.10 1/100 4242\n")
    (tmp_path / "meminfo").write_text("MemTotal: 2048 kB\nMemAvailable: 1024 kB\n")
    reading = await LocalNvmlReader("here", nvml=None, proc_root=str(tmp_path)).read(5.0)
    assert reading.cpu is not None and (reading.cpu.busy, reading.cpu.total) == (15, 100)
    assert reading.load == (0.5, 0.25, 0.1)
    assert (reading.memory_used_mib, reading.memory_total_mib) == (1.0, 2.0)


def test_load_nvml_does_not_raise() -> None:
    nvml = load_nvml()
    if not Path("/proc/driver/nvidia").exists():
        assert nvml is None  # no driver here: "no GPU", not an error
    else:
        assert nvml is None or hasattr(nvml, "nvmlDeviceGetCount")
