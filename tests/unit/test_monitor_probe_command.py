"""The probe's real command (PROBE_COMMAND) under a real `sh`, against the fake nvidia-smi in
tests/fixtures/bin: /proc/stat, /proc/meminfo and `ps` are the machine's own.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from services.monitor.probe import (
    APP_FIELDS,
    GPU_FIELDS,
    PROBE_COMMAND,
    GpuStatus,
    parse_probe_output,
)
from tests.unit.test_monitor_probe import (
    FAKE_BIN,
)

# --- The real command under a real sh ------------------------------------------------------------

GPU_A = "GPU-aaaaaaaa-0000-4000-8000-000000000001"
GPU_B = "GPU-bbbbbbbb-0000-4000-8000-000000000002"
NO_SUCH_PID = 4194305  # above the largest pid_max Linux allows


def run_probe(path: str, smi_dir: Path | None = None) -> str:
    env = {"PATH": path, "HOME": str(smi_dir or "/nonexistent")}
    if smi_dir is not None:
        env["WARDEN_FAKE_SMI_DIR"] = str(smi_dir)
    done = subprocess.run(
        ["/bin/sh", "-c", PROBE_COMMAND], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(["sleep", "60"])
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def test_fake_nvidia_smi_answers_only_the_two_queries(tmp_path: Path) -> None:
    (tmp_path / "gpus.csv").write_text("row\n")
    (tmp_path / "gpus.rc").write_text("6\n")
    env = {**os.environ, "WARDEN_FAKE_SMI_DIR": str(tmp_path)}
    smi = str(FAKE_BIN / "nvidia-smi")
    gpus = subprocess.run(
        [smi, f"--query-gpu={','.join(GPU_FIELDS)}", "--format=csv,noheader,nounits"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (gpus.stdout, gpus.returncode) == ("row\n", 6)
    apps = subprocess.run(
        [smi, f"--query-compute-apps={','.join(APP_FIELDS)}", "--format=csv,noheader,nounits"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (apps.stdout, apps.returncode) == ("", 0)
    other = subprocess.run([smi, "-q"], env=env, capture_output=True, text=True, check=False)
    assert other.returncode == 2 and "usage" in other.stderr


def test_probe_end_to_end_with_fake_nvidia_smi(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    (tmp_path / "gpus.csv").write_text(
        f"{GPU_A}, 0, NVIDIA A100-SXM4-80GB, 55, 20, 1024, 81920, 40, 120.50, 400.00, [N/A], "
        "1410, 1593\n"
        f"{GPU_B}, 1, NVIDIA A100-SXM4-80GB, [N/A], [N/A], 0, 81920, 30, 60.00, 400.00, [N/A], "
        "210, 1593\n"
    )
    (tmp_path / "apps.csv").write_text(
        f"{sleeper.pid}, {GPU_B}, 300, sleep\n"
        f"{sleeper.pid}, {GPU_A}, 1000, sleep\n"
        f"{NO_SUCH_PID}, {GPU_A}, 24, /usr/bin/python3\n"
    )
    before = datetime.now(UTC)
    reading = parse_probe_output(run_probe(f"{FAKE_BIN}:{os.environ['PATH']}", tmp_path))

    assert reading.host_time is not None
    assert abs(reading.host_time - before) < timedelta(seconds=5)
    assert reading.cpu is not None and 0 <= reading.cpu.busy <= reading.cpu.total
    assert reading.load is not None
    assert reading.memory_total_mib is not None and reading.memory_total_mib > 0
    assert reading.gpu_status is GpuStatus.OK and reading.gpu_error is None
    assert [(g.uuid, g.index, g.utilization_gpu_percent) for g in reading.gpus] == [
        (GPU_A, 0, 55.0),
        (GPU_B, 1, None),
    ]
    me = pwd.getpwuid(os.getuid()).pw_name
    on_a, gone, on_b = reading.processes
    assert (on_a.pid, on_a.gpu_uuid, on_a.used_memory_mib) == (sleeper.pid, GPU_A, 1000.0)
    assert (on_b.pid, on_b.gpu_uuid, on_b.used_memory_mib) == (sleeper.pid, GPU_B, 300.0)
    for process in (on_a, on_b):
        assert (process.user, process.command) == (me, "sleep 60")
        assert process.started_at is not None
        assert abs(process.started_at - before) < timedelta(seconds=10)
    assert (gone.pid, gone.user, gone.command, gone.started_at) == (
        NO_SUCH_PID,
        None,
        "/usr/bin/python3",
        None,
    )


def test_probe_end_to_end_driver_failure_on_stderr(tmp_path: Path) -> None:
    message = (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running."
    )
    for what in ("gpus", "apps"):
        (tmp_path / f"{what}.err").write_text(message + "\n\n")
        (tmp_path / f"{what}.rc").write_text("9\n")
    reading = parse_probe_output(run_probe(f"{FAKE_BIN}:{os.environ['PATH']}", tmp_path))
    assert (reading.gpu_status, reading.gpu_error) == (GpuStatus.ERROR, message)
    assert reading.cpu is not None


def test_probe_end_to_end_without_nvidia_smi(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("date", "head", "cat", "grep", "awk", "sort", "paste", "ps"):
        found = shutil.which(tool)
        assert found is not None, f"the probe needs {tool}"
        (bin_dir / tool).symlink_to(found)
    reading = parse_probe_output(run_probe(str(bin_dir)))
    assert reading.gpu_status is GpuStatus.NO_NVIDIA_SMI
    assert (reading.gpus, reading.processes) == ((), ())
    assert reading.cpu is not None and reading.cpu.total > 0
    assert reading.load is not None
    assert reading.memory_total_mib is not None and reading.memory_used_mib is not None
    assert reading.host_time is not None
