"""The SSH reader, shell and monitor against a real OpenSSH sshd on loopback
(tests/support/sshd.py).

The probe runs for real on this machine through sshd: /proc figures are the machine's own, GPUs
come from the fake nvidia-smi (tests/fixtures/bin) and the compute process is a real `sleep`
started by the test, so `ps` reports its real owner, command line and age. Nothing asserts how
long anything took, only that a dead host is reported within a generous deadline.
"""

from __future__ import annotations

import asyncio
import functools
import os
import pwd
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from services.monitor.monitor import Monitor
from services.monitor.probe import GpuStatus, HostReading
from services.monitor.readers import SshReader
from services.monitor.state import HostState
from services.shared.remote.ssh import HostUnreachable, SshHostShell, SshOptions
from tests.support import polling
from tests.support.processes import running
from tests.support.sshd import Sshd, generate_key

GPU_A = "GPU-aaaaaaaa-1111-4000-8000-000000000001"
GPU_B = "GPU-bbbbbbbb-2222-4000-8000-000000000002"
GPUS_CSV = (
    f"{GPU_A}, 0, NVIDIA A100-SXM4-80GB, 97, 41, 30215, 81920, 64, 371.88, 400.00, [N/A], "
    "1410, 1593\n"
    f"{GPU_B}, 1, NVIDIA A100-SXM4-80GB, 0, 0, 4, 81920, 33, 61.90, 400.00, [N/A], 210, 1593\n"
)
DEADLINE_S = 20.0  # generous: only a hang would reach it
READ_TIMEOUT_S = 10.0
ME = pwd.getpwuid(os.getuid()).pw_name


@pytest.fixture
def sleeper() -> Iterator[tuple[subprocess.Popen[bytes], datetime]]:
    """A real process to report as a GPU process, and when it was started."""
    started = datetime.now(UTC)
    with running("sleep", "300") as process:
        yield process, started


@pytest.fixture
def gpu_host(
    sshd: Sshd, sleeper: tuple[subprocess.Popen[bytes], datetime]
) -> tuple[Sshd, int, datetime]:
    """The sshd answering for two GPUs, the sleeper on GPU 1."""
    process, started = sleeper
    sshd.fake_smi("gpus.csv", GPUS_CSV)
    sshd.fake_smi("apps.csv", f"{process.pid}, {GPU_B}, 1024, sleep\n")
    return sshd, process.pid, started


def reader_for(sshd: Sshd, **options: Any) -> SshReader:
    known_hosts = options.pop("known_hosts", str(sshd.known_hosts))
    return SshReader(
        SshHostShell(sshd.host_config(), SshOptions(known_hosts=known_hosts, **options))
    )


until = functools.partial(polling.until, timeout=DEADLINE_S)


async def test_reads_gpus_a_real_process_and_cpu_over_sshd(
    gpu_host: tuple[Sshd, int, datetime],
) -> None:
    sshd, pid, started = gpu_host
    reader = reader_for(sshd)
    try:
        reading = await reader.read(READ_TIMEOUT_S)
    finally:
        await reader.close()

    assert reading.gpu_status is GpuStatus.OK and reading.gpu_error is None
    assert [(g.uuid, g.index, g.name) for g in reading.gpus] == [
        (GPU_A, 0, "NVIDIA A100-SXM4-80GB"),
        (GPU_B, 1, "NVIDIA A100-SXM4-80GB"),
    ]
    assert reading.gpus[0].utilization_gpu_percent == 97.0
    assert reading.gpus[0].fan_speed_percent is None  # [N/A], not 0
    assert reading.gpus[1].memory_used_mib == 4.0

    (process,) = reading.processes
    assert (process.pid, process.gpu_uuid, process.used_memory_mib) == (pid, GPU_B, 1024.0)
    assert process.user == ME
    assert process.command == "sleep 300"  # the full command line from ps, not "sleep"
    assert process.started_at is not None
    assert abs(process.started_at - started) <= timedelta(seconds=3)

    assert reading.cpu is not None and reading.cpu.total > 0
    assert reading.load is not None
    assert reading.memory_total_mib and reading.memory_used_mib is not None
    assert reading.host_time is not None
    assert abs(reading.host_time - datetime.now(UTC)) <= timedelta(seconds=5)


async def test_one_connection_serves_every_read_and_the_second_read_gives_cpu_percent(
    gpu_host: tuple[Sshd, int, datetime],
) -> None:
    sshd, _, _ = gpu_host
    reader = reader_for(sshd)
    state = HostState("sshd")
    try:
        first = await reader.read(READ_TIMEOUT_S)
        state.on_reading(first, datetime.now(UTC))
        assert state.last_sample is not None and state.last_sample["cpu_percent"] is None
        assert first.cpu is not None

        async def ticked() -> HostReading | None:
            reading = await reader.read(READ_TIMEOUT_S)
            moved = reading.cpu is not None and reading.cpu.total > first.cpu.total
            return reading if moved else None

        second = await until(ticked, "the CPU counters moving", interval=0)
        state.on_reading(second, datetime.now(UTC))
        percent = state.last_sample["cpu_percent"]
        assert percent is not None and 0.0 <= percent <= 100.0
        for _ in range(3):
            await reader.read(READ_TIMEOUT_S)
    finally:
        await reader.close()
    assert sshd.accepted_logins() == 1, sshd.log()


async def test_a_dead_sshd_fails_fast_and_a_restarted_one_is_reconnected(
    gpu_host: tuple[Sshd, int, datetime],
) -> None:
    sshd, pid, _ = gpu_host
    reader = reader_for(sshd)
    try:
        await reader.read(READ_TIMEOUT_S)
        await sshd.astop()
        reasons = []
        for _ in range(2):  # the dropped connection, then the refused new one
            with pytest.raises(HostUnreachable) as failed:
                async with asyncio.timeout(5):  # far below the read's own 30 s: no hang
                    await reader.read(30)
            reasons.append(failed.value.details["reason"])
            assert failed.value.details["host"] == "sshd"
        assert reasons[-1] == "connection refused"

        await sshd.astart()
        reading = await reader.read(READ_TIMEOUT_S)
        assert [p.pid for p in reading.processes] == [pid]
    finally:
        await reader.close()
    assert sshd.accepted_logins() == 2


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    async def __call__(self, event_type: str, data: dict[str, Any]) -> None:
        self.events.append((event_type, data))

    def of(self, event_type: str) -> list[dict[str, Any]]:
        return [data for kind, data in self.events if kind == event_type]


async def test_monitor_over_sshd_publishes_samples_and_one_event_per_transition(
    gpu_host: tuple[Sshd, int, datetime],
) -> None:
    sshd, pid, _ = gpu_host
    published = Recorder()
    # 0.5 s rather than less: each command starts the login shell, and a shell whose rc files
    # do real work (pyenv, conda) takes ~0.1 s; the poll deadline is 95 % of the interval.
    monitor = Monitor([reader_for(sshd)], published, interval_s=0.5, poll_deadline_s=5.0)
    await monitor.start()
    try:

        def saw_our_process() -> bool:
            return any(
                p["pid"] == pid for e in published.of("processes.observed") for p in e["processes"]
            )

        await until(saw_our_process, "processes.observed with the sleeper")
        sample = published.of("host.sampled")[-1]
        assert sample["host"] == "sshd" and sample["gpu_status"] == "ok"
        assert [g["uuid"] for g in sample["gpus"]] == [GPU_A, GPU_B]
        observed = next(
            p for e in published.of("processes.observed") for p in e["processes"] if p["pid"] == pid
        )
        assert observed["user"] == ME and observed["command"] == "sleep 300"
        assert observed["gpu_uuid"] == GPU_B and observed["started_at"]
        assert {e["uuid"] for e in published.of("gpu.discovered")} == {GPU_A, GPU_B}

        await sshd.astop()
        await until(lambda: len(published.of("host.unreachable")) == 1, "host.unreachable")
        failures = monitor.stats.failures
        await until(lambda: monitor.stats.failures >= failures + 2, "more failed polls")
        assert len(published.of("host.unreachable")) == 1
        assert published.of("host.unreachable")[0]["reason"]
        assert published.of("host.recovered") == []

        await sshd.astart()
        await until(lambda: len(published.of("host.recovered")) == 1, "host.recovered")
        sampled = len(published.of("host.sampled"))
        await until(lambda: len(published.of("host.sampled")) >= sampled + 2, "more samples")
    finally:
        await monitor.stop()
    assert len(published.of("host.unreachable")) == 1
    assert len(published.of("host.recovered")) == 1
    assert monitor.snapshot("sshd")["hosts"][0]["reachable"] is True


# -- host keys -------------------------------------------------------------------------------


async def test_a_host_back_with_another_host_key_shows_that_its_key_changed(
    gpu_host: tuple[Sshd, int, datetime],
) -> None:
    """Reinstalled, or someone in between: the outage's reason becomes the changed key."""
    sshd, _, _ = gpu_host
    published = Recorder()
    monitor = Monitor([reader_for(sshd)], published, interval_s=0.5, poll_deadline_s=5.0)
    await monitor.start()

    def changed() -> list[dict[str, Any]]:
        return [
            data
            for data in published.of("host.unreachable")
            if data["reason"].startswith("host key changed")
        ]

    try:
        await until(lambda: published.of("host.sampled"), "a sample")
        await sshd.astop()
        await until(lambda: monitor.states["sshd"].reachable is False, "the host down")
        generate_key(sshd.host_key, "warden-test-reinstalled")
        await sshd.astart()
        logins = sshd.accepted_logins()
        await until(changed, "the changed key")
    finally:
        await monitor.stop()
    (event,) = changed()
    kinds = [kind for kind, _ in published.events]
    # The same outage (no recovery since it began), now with the changed key as its reason.
    began = max(i for i, kind in enumerate(kinds[:-1]) if kind == "host.unreachable")
    assert "host.recovered" not in kinds[began:]
    assert event["since"] == published.events[began][1]["since"]
    assert "man-in-the-middle" in event["reason"]
    assert "warden hosts check sshd" in event["reason"]
    assert monitor.snapshot("sshd")["hosts"][0]["down_reason"] == event["reason"]
    assert sshd.accepted_logins() == logins  # never logged in to the other key


async def run_echo(sshd: Sshd, known_hosts: Path, accept_new: bool) -> str:
    options = SshOptions(known_hosts=str(known_hosts), accept_new_host_keys=accept_new)
    shell = SshHostShell(sshd.host_config(), options)
    try:
        result = await shell.run("echo ok", READ_TIMEOUT_S)
    finally:
        await shell.close()
    return result.stdout


async def test_accept_new_host_keys_records_the_key_of_a_host_seen_first(
    sshd: Sshd, tmp_path: Path
) -> None:
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    assert await run_echo(sshd, known_hosts, accept_new=True) == "ok\n"
    assert known_hosts.read_text().splitlines() == [sshd.known_hosts_line]
    # The next connection checks against the recorded key and records nothing more.
    assert await run_echo(sshd, known_hosts, accept_new=True) == "ok\n"
    assert await run_echo(sshd, known_hosts, accept_new=False) == "ok\n"
    assert known_hosts.read_text().splitlines() == [sshd.known_hosts_line]


async def test_accept_new_host_keys_creates_a_missing_known_hosts_file(
    sshd: Sshd, tmp_path: Path
) -> None:
    known_hosts = tmp_path / "new" / "known_hosts"
    assert await run_echo(sshd, known_hosts, accept_new=True) == "ok\n"
    assert known_hosts.read_text().splitlines() == [sshd.known_hosts_line]


async def test_an_unknown_host_key_is_refused_by_default(sshd: Sshd, tmp_path: Path) -> None:
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    with pytest.raises(HostUnreachable) as refused:
        await run_echo(sshd, known_hosts, accept_new=False)
    assert refused.value.details["reason"].startswith("host key not verified")
    assert known_hosts.read_text() == ""
    assert sshd.accepted_logins() == 0


async def test_a_changed_host_key_is_refused_even_when_accepting_new_keys(
    sshd: Sshd, tmp_path: Path
) -> None:
    other_key = generate_key(tmp_path / "other_host_key")
    known_hosts = tmp_path / "known_hosts"
    recorded = f"[{sshd.host}]:{sshd.port} {other_key}\n"
    known_hosts.write_text(recorded)
    with pytest.raises(HostUnreachable) as refused:
        await run_echo(sshd, known_hosts, accept_new=True)
    assert refused.value.details["reason"].startswith("host key changed")
    assert refused.value.details["host_key"] == "changed"
    assert known_hosts.read_text() == recorded  # the wrong key is not replaced, nothing added
    assert sshd.accepted_logins() == 0


async def test_a_missing_known_hosts_file_trusts_no_key(
    sshd: Sshd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"  # a stand-in for the user's home: the real ~/.ssh is not touched
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "known_hosts").write_text(sshd.known_hosts_line + "\n")
    monkeypatch.setenv("HOME", str(home))
    with pytest.raises(HostUnreachable) as refused:
        await run_echo(sshd, tmp_path / "configured_known_hosts", accept_new=False)
    assert refused.value.details["reason"].startswith("host key not verified")
