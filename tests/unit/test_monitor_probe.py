"""Parsing the probe's output: recorded real-format outputs and garbage.

The recorded outputs live in tests/fixtures/nvidia_smi/ (see tests/fixtures/README.md). The real
PROBE_COMMAND run by `sh` is in test_monitor_probe_command.py.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.monitor.probe import (
    CpuCounters,
    GpuReading,
    GpuStatus,
    HostReading,
    ProbeOutputError,
    ProcessReading,
    cpu_percent,
    parse_app_row,
    parse_gpu_row,
    parse_loadavg,
    parse_meminfo,
    parse_number,
    parse_probe_output,
    parse_proc_stat_line,
    parse_ps_line,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RECORDED = FIXTURES / "nvidia_smi"
FAKE_BIN = FIXTURES / "bin"


def recorded(name: str) -> HostReading:
    return parse_probe_output((RECORDED / name).read_text())


def at(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, tz=UTC)


# --- Every recorded output, in summary ----------------------------------------------------------

SUMMARY = [
    # file, status, gpu_error, gpu indexes, (pid, user) of each process in (gpu_uuid, pid) order
    (
        "a_100x8.txt",
        GpuStatus.OK,
        None,
        [0, 1, 2, 3, 4, 5, 6, 7],
        [(2714877, "alice"), (2714033, "alice"), (3001212, "bob"), (2714033, "alice")],
    ),
    ("consumer_rtx3090_2x.txt", GpuStatus.OK, None, [0, 1], [(412907, "carol")]),
    ("tesla_k80_not_supported.txt", GpuStatus.OK, None, [0, 1, 2, 3], [(30571, "frank")]),
    (
        "mig_a100.txt",
        GpuStatus.OK,
        None,
        [0, 1],
        [(181004, "grace"), (180223, "dave"), (180391, "erin")],
    ),
    ("zero_gpus.txt", GpuStatus.NO_GPU, None, [], []),
    ("no_nvidia_smi.txt", GpuStatus.NO_NVIDIA_SMI, None, [], []),
    (
        "driver_failed.txt",
        GpuStatus.ERROR,
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.",
        [],
        [],
    ),
    (
        "gpu_disappeared_before.txt",
        GpuStatus.OK,
        None,
        [0, 1, 2, 3],
        [(77120, "heidi"), (78002, "ivan")],
    ),
    (
        "gpu_disappeared_after.txt",
        GpuStatus.ERROR,
        "Unable to determine the device handle for GPU0000:88:00.0: Unknown Error",
        [0, 1, 3],
        [(77120, "heidi")],
    ),
    ("process_exited_between.txt", GpuStatus.OK, None, [0], [(52110, "judy"), (52188, None)]),
    # with the health section (its signals: tests/unit/test_gpu_health.py)
    ("h200_health.txt", GpuStatus.OK, None, [0], []),
    ("health_faults_a100x4.txt", GpuStatus.OK, None, [0, 1, 2, 3], []),
    (
        "health_v100_before.txt",
        GpuStatus.OK,
        None,
        [0, 1, 2, 3],
        [(77120, "heidi"), (78002, "ivan")],
    ),
    (
        "health_v100_lost.txt",
        GpuStatus.ERROR,
        "Unable to determine the device handle for GPU0000:88:00.0: Unknown Error",
        [0, 1, 3],
        [(77120, "heidi")],
    ),
    ("health_k80_old_driver.txt", GpuStatus.OK, None, [0, 1, 2, 3], [(30571, "frank")]),
    ("health_query_refused.txt", GpuStatus.OK, None, [0, 1], [(412907, "carol")]),
]


def test_every_recorded_output_is_summarised() -> None:
    assert sorted(row[0] for row in SUMMARY) == sorted(p.name for p in RECORDED.glob("*.txt"))


@pytest.mark.parametrize(("name", "status", "error", "indexes", "processes"), SUMMARY)
def test_recorded_output(
    name: str,
    status: GpuStatus,
    error: str | None,
    indexes: list[int],
    processes: list[tuple[int, str | None]],
) -> None:
    reading = recorded(name)
    assert reading.gpu_status is status
    assert reading.gpu_error == error
    assert [gpu.index for gpu in reading.gpus] == indexes
    assert [(p.pid, p.user) for p in reading.processes] == processes
    assert [p.gpu_uuid for p in reading.processes] == sorted(p.gpu_uuid for p in reading.processes)
    # host figures are read whatever the GPUs say
    assert reading.host_time is not None
    assert reading.cpu is not None and 0 < reading.cpu.busy < reading.cpu.total
    assert reading.load is not None
    assert reading.memory_total_mib is not None and reading.memory_used_mib is not None
    assert 0 < reading.memory_used_mib < reading.memory_total_mib
    for gpu in reading.gpus:
        assert gpu.uuid.startswith("GPU-")
        assert gpu.memory_total_mib is not None and gpu.memory_total_mib > 0


# --- Exact readings ------------------------------------------------------------------------------

A100 = "NVIDIA A100-SXM4-80GB"
A100_UUID = {
    0: "GPU-4f1e6a2b-8c0d-3e5f-9a7b-1c2d3e4f5a60",
    1: "GPU-b7d3e1f0-22a4-47c1-8e5d-6f7a8b9c0d11",
    2: "GPU-0a9c8b7d-6e5f-4a3b-2c1d-0e9f8a7b6c52",
    5: "GPU-9d8c7b6a-5f4e-4d3c-2b1a-0f9e8d7c6b75",
    7: "GPU-5a6b7c8d-9e0f-4a1b-2c3d-4e5f6a7b8c97",
}


def test_a100x8_host_figures() -> None:
    reading = recorded("a_100x8.txt")
    assert reading.host_time == datetime(2024, 11, 1, 11, 0, tzinfo=UTC)
    busy = 184467233 + 2301 + 30418822 + 0 + 1290311 + 0
    assert reading.cpu == CpuCounters(busy=busy, total=busy + 1201837345 + 801234)
    assert reading.load == (9.87, 9.42, 8.96)
    assert reading.memory_total_mib == 2113554312 / 1024
    assert reading.memory_used_mib == (2113554312 - 1650221784) / 1024


def test_a100x8_gpus() -> None:
    gpus = recorded("a_100x8.txt").gpus
    assert len(gpus) == 8
    assert gpus[0] == GpuReading(
        uuid=A100_UUID[0],
        index=0,
        name=A100,
        utilization_gpu_percent=98.0,
        utilization_memory_percent=61.0,
        memory_used_mib=32711.0,
        memory_total_mib=81920.0,
        temperature_c=67.0,
        power_draw_w=389.41,
        power_limit_w=400.0,
        fan_speed_percent=None,  # SXM boards have no fan: [N/A], not 0
        clock_sm_mhz=1410.0,
        clock_memory_mhz=1593.0,
    )
    idle = gpus[7]
    assert (idle.uuid, idle.index, idle.name) == (A100_UUID[7], 7, A100)
    assert idle.utilization_gpu_percent == 0.0  # a reported 0 stays 0
    assert (idle.memory_used_mib, idle.power_draw_w, idle.clock_sm_mhz) == (4.0, 62.33, 210.0)
    assert all(gpu.fan_speed_percent is None for gpu in gpus)


def test_a100x8_processes_one_per_gpu_and_pid() -> None:
    host_time = 1730458800
    train = "/opt/conda/envs/llm/bin/python train.py --config configs/llama-7b.yaml --gpus 0,1"
    assert recorded("a_100x8.txt").processes == (
        ProcessReading(
            pid=2714877,
            gpu_uuid=A100_UUID[2],
            used_memory_mib=10506.0,
            user="alice",
            command="/opt/conda/envs/llm/bin/python eval.py --checkpoint runs/7b/step-12000",
            started_at=at(host_time - 5025),
        ),
        ProcessReading(2714033, A100_UUID[0], 32698.0, "alice", train, at(host_time - 93784)),
        ProcessReading(
            pid=3001212,
            gpu_uuid=A100_UUID[5],
            used_memory_mib=17394.0,
            user="bob",
            command="/usr/bin/python3 -m ipykernel_launcher "
            "-f /home/bob/.local/share/jupyter/runtime/kernel-4b1c.json",
            started_at=at(host_time - 600),
        ),
        ProcessReading(2714033, A100_UUID[1], 30202.0, "alice", train, at(host_time - 93784)),
    )


def test_consumer_card_reports_fan_and_zero_is_not_none() -> None:
    busy, idle = recorded("consumer_rtx3090_2x.txt").gpus
    assert busy.name == idle.name == "NVIDIA GeForce RTX 3090"
    assert (busy.fan_speed_percent, busy.power_draw_w, busy.power_limit_w) == (65.0, 341.27, 350.0)
    assert (busy.clock_sm_mhz, busy.clock_memory_mhz) == (1905.0, 9751.0)
    assert idle.fan_speed_percent == 0.0  # fans stopped: a real 0
    assert idle.power_draw_w is None  # [N/A]
    assert idle.power_limit_w == 350.0
    (process,) = recorded("consumer_rtx3090_2x.txt").processes
    assert process.command == "python train_diffusion.py --batch-size 16"
    assert process.started_at == at(1730458815 - 7230)


def test_not_supported_values_are_none_never_zero() -> None:
    reading = recorded("tesla_k80_not_supported.txt")
    assert reading.gpu_status is GpuStatus.OK  # the infoROM warning line is not a GPU row
    for gpu in reading.gpus:
        assert gpu.name == "Tesla K80"
        assert gpu.utilization_gpu_percent is None
        assert gpu.utilization_memory_percent is None
        assert gpu.power_draw_w is None
        assert gpu.fan_speed_percent is None
        assert gpu.power_limit_w == 149.0
        assert gpu.memory_total_mib == 11441.0
    assert reading.gpus[2].memory_used_mib == 0.0
    (process,) = reading.processes
    assert process.used_memory_mib is None
    assert process.started_at == at(1730458830 - 1209601)


def test_mig_rows_keep_the_reported_uuid() -> None:
    reading = recorded("mig_a100.txt")
    mig_gpu, plain_gpu = reading.gpus
    assert mig_gpu.utilization_gpu_percent is None and mig_gpu.utilization_memory_percent is None
    assert mig_gpu.memory_used_mib == 19843.0 and mig_gpu.power_draw_w == 118.21
    assert plain_gpu.utilization_gpu_percent == 87.0
    by_pid = {p.pid: p for p in reading.processes}
    assert by_pid[180223].gpu_uuid == mig_gpu.uuid  # the parent GPU's uuid
    assert by_pid[180391].gpu_uuid == "MIG-5c3a1f2e-9d8b-5a4c-b7e6-0f1d2c3b4a59"
    assert by_pid[180391].used_memory_mib is None
    assert (by_pid[180391].user, by_pid[180391].command) == (
        "erin",
        "/usr/bin/python3 serve.py --port 8080",
    )
    assert by_pid[181004].gpu_uuid == plain_gpu.uuid


def test_a_gpu_that_fell_off_the_bus() -> None:
    before = recorded("gpu_disappeared_before.txt")
    after = recorded("gpu_disappeared_after.txt")
    assert {g.uuid for g in before.gpus} - {g.uuid for g in after.gpus} == {
        "GPU-3c4d5e6f-7a8b-9c0d-1e2f-3a4b5c6d7e8f"
    }
    assert all(g.name == "Tesla V100-SXM2-32GB" for g in after.gpus)
    assert after.gpus[0].power_draw_w == 284.02
    assert [p.pid for p in before.processes] == [77120, 78002]


def test_process_that_exited_before_ps() -> None:
    seen, gone = recorded("process_exited_between.txt").processes
    assert (seen.user, seen.command, seen.started_at) == (
        "judy",
        "python worker.py --shard 0",
        at(1730459100 - 120),
    )
    assert gone == ProcessReading(
        pid=52188,
        gpu_uuid="GPU-6f5e4d3c-2b1a-4098-8f7e-6d5c4b3a2910",
        used_memory_mib=1496.0,
        user=None,
        command="python",
        started_at=None,
    )


# --- Rows and lines ------------------------------------------------------------------------------

UUID = "GPU-11111111-2222-3333-4444-555555555555"


def test_gpu_name_with_a_comma() -> None:
    row = f"{UUID}, 3, Odd GPU, Rev 2, 5, 6, 7, 8, 9, 10.5, 11, 12, 13, 14"
    gpu = parse_gpu_row(row)
    assert gpu is not None
    assert (gpu.uuid, gpu.index, gpu.name) == (UUID, 3, "Odd GPU, Rev 2")
    assert (gpu.utilization_gpu_percent, gpu.clock_memory_mhz) == (5.0, 14.0)


def test_gpu_row_with_units_from_an_older_driver() -> None:
    row = (
        f"{UUID}, 0, Tesla T4, 42 %, 7%, 1024 MiB, 15360 MiB, 40, 27.50 W, 70.00 W, [N/A], "
        "585 MHz, 5000 MHz"
    )
    assert parse_gpu_row(row) == GpuReading(
        UUID, 0, "Tesla T4", 42.0, 7.0, 1024.0, 15360.0, 40.0, 27.5, 70.0, None, 585.0, 5000.0
    )


def test_gpu_row_without_spaces_after_commas() -> None:
    gpu = parse_gpu_row(f"{UUID},1,Tesla T4,1,2,3,4,5,6,7,8,9,10")
    assert gpu is not None and (gpu.index, gpu.name, gpu.clock_memory_mhz) == (1, "Tesla T4", 10.0)


@pytest.mark.parametrize(
    "line",
    [
        "",
        "WARNING: infoROM is corrupted at gpu 0000:85:00.0",
        "No devices were found",
        f"{UUID}, 0, too, few, fields",
        f"{UUID}, zero, Tesla T4, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10",
        "[N/A], 0, Tesla T4, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10",
    ],
)
def test_lines_that_are_not_gpu_rows(line: str) -> None:
    assert parse_gpu_row(line) is None


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("250.00", 250.0),
        ("42", 42.0),
        (" 7 ", 7.0),
        ("250.00 W", 250.0),
        ("81920 MiB", 81920.0),
        ("42 %", 42.0),
        ("42%", 42.0),
        ("1410 MHz", 1410.0),
        ("0", 0.0),
        ("[N/A]", None),
        ("N/A", None),
        ("[Not Supported]", None),
        ("[Unknown Error]", None),
        ("[Insufficient Permissions]", None),
        ("[GPU requires reset]", None),
        ("[GPU is lost]", None),
        ("", None),
        ("nan", None),
        ("inf", None),
        ("12 parsecs", None),
    ],
)
def test_parse_number(text: str, value: float | None) -> None:
    assert parse_number(text) == value


def test_app_rows() -> None:
    assert parse_app_row(f"17, {UUID}, 512, python, with comma") == (
        17,
        UUID,
        512.0,
        "python, with comma",
    )
    old_mig = "MIG-GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77/1/0"
    assert parse_app_row(f"18, {old_mig}, [N/A], [Not Found]") == (18, old_mig, None, "")
    assert parse_app_row("No devices were found") is None
    assert parse_app_row(f"x, {UUID}, 1, python") is None


def test_ps_lines() -> None:
    assert parse_ps_line("   4242 alice     61 python -c 'import torch'") == (
        4242,
        "alice",
        61,
        "python -c 'import torch'",
    )
    assert parse_ps_line("4242 alice 61") == (4242, "alice", 61, "")
    assert parse_ps_line("4242 alice ?? python") == (4242, "alice", None, "python")
    assert parse_ps_line("pid user") is None


def test_empty_args_fall_back_to_the_process_name() -> None:
    text = (
        "@@warden-probe 1\n@@time 1000\n@@gpus\n"
        f"{UUID}, 0, T4, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10\n@@gpus-rc 0\n"
        f"@@apps\n99, {UUID}, 5, python\n@@apps-rc 0\n@@ps\n   99 zoe 10\n@@end\n"
    )
    (process,) = parse_probe_output(text).processes
    assert (process.user, process.command, process.started_at) == ("zoe", "python", at(990))


def test_proc_stat_lines() -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice
    assert parse_proc_stat_line("cpu  10 20 30 400 50 6 7 8 90 100") == CpuCounters(
        busy=10 + 20 + 30 + 6 + 7 + 8, total=10 + 20 + 30 + 6 + 7 + 8 + 400 + 50
    )
    assert parse_proc_stat_line("cpu  10 20 30 400") == CpuCounters(busy=60, total=460)  # old
    assert parse_proc_stat_line("cpu0 1 2 3 4 5 6 7 8") is None
    assert parse_proc_stat_line("cpu  1 2 x 4 5") is None
    assert parse_proc_stat_line("cpu  1 2") is None


def test_meminfo_and_loadavg() -> None:
    assert parse_meminfo(["MemTotal:  2048 kB", "MemAvailable:  1024 kB"]) == (1.0, 2.0)
    assert parse_meminfo(["MemTotal:  2048 kB"]) == (None, 2.0)  # kernel before 3.14
    assert parse_meminfo(["garbage", "MemAvailable: 5 kB"]) == (None, None)
    assert parse_loadavg("0.50 1.25 2.00 1/100 42") == (0.5, 1.25, 2.0)
    assert parse_loadavg("0.50 x 2.00") is None
    assert parse_loadavg("") is None


# --- Whole outputs that are odd ------------------------------------------------------------------


def test_missing_sections_give_none() -> None:
    reading = parse_probe_output("@@warden-probe 1\n")
    assert (reading.host_time, reading.cpu, reading.load) == (None, None, None)
    assert (reading.memory_used_mib, reading.memory_total_mib) == (None, None)
    assert reading.gpu_status is GpuStatus.ERROR
    assert reading.gpu_error is not None and "truncated" in reading.gpu_error
    assert (reading.gpus, reading.processes) == ((), ())


def test_output_cut_off_inside_the_gpu_section() -> None:
    full = (RECORDED / "a_100x8.txt").read_text()
    cut = full[: full.index("@@gpus-rc")]
    reading = parse_probe_output(cut)
    assert len(reading.gpus) == 8  # rows read so far are kept
    assert reading.gpu_status is GpuStatus.ERROR
    assert reading.cpu is not None


def test_failed_apps_query_makes_the_status_an_error() -> None:
    text = (
        "@@warden-probe 1\n@@gpus\n"
        f"{UUID}, 0, T4, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10\n@@gpus-rc 0\n"
        "@@apps\nUnable to determine the device handle for GPU0000:3B:00.0: Unknown Error\n"
        "@@apps-rc 15\n@@ps\n@@end\n"
    )
    reading = parse_probe_output(text)
    assert reading.gpu_status is GpuStatus.ERROR
    assert reading.gpu_error == (
        "compute apps: Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error"
    )
    assert len(reading.gpus) == 1


@pytest.mark.parametrize(
    ("gpus", "rc", "status", "error"),
    [
        ("", "0", GpuStatus.OK, None),
        ("No devices were found\n", "6", GpuStatus.NO_GPU, None),
        ("sh: 8: nvidia-smi: not found\n", "127", GpuStatus.NO_NVIDIA_SMI, None),
        ("", "127", GpuStatus.NO_NVIDIA_SMI, None),
        (
            "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure "
            "that the NVIDIA Display Driver is properly installed and present in your system.\n",
            "12",
            GpuStatus.NO_GPU,
            None,
        ),
        (
            "\n  Failed to initialize NVML: Driver/library version mismatch  \n",
            "18",
            GpuStatus.ERROR,
            "Failed to initialize NVML: Driver/library version mismatch",
        ),
        ("", "255", GpuStatus.ERROR, "nvidia-smi exited with status 255"),
        ("x" * 500 + "\n", "2", GpuStatus.ERROR, "x" * 200),
        ("", "", GpuStatus.ERROR, "no exit status for nvidia-smi in the probe output (truncated?)"),
    ],
)
def test_gpu_status(gpus: str, rc: str, status: GpuStatus, error: str | None) -> None:
    text = f"@@warden-probe 1\n@@gpus\n{gpus}@@gpus-rc {rc}\n@@apps\n@@apps-rc {rc}\n@@ps\n@@end\n"
    reading = parse_probe_output(text)
    assert (reading.gpu_status, reading.gpu_error) == (status, error)


def test_absurd_clock_or_elapsed_time_gives_none() -> None:
    def probe(time: str, etimes: str) -> str:
        return (
            f"@@warden-probe 1\n@@time {time}\n@@gpus\n@@gpus-rc 0\n"
            f"@@apps\n99, {UUID}, 5, python\n@@apps-rc 0\n@@ps\n   99 zoe {etimes} python\n"
        )

    far_future = parse_probe_output(probe("99999999999999999", "10"))
    assert far_future.host_time is None
    assert far_future.processes[0].started_at is None
    (process,) = parse_probe_output(probe("1000", str(10**15))).processes
    assert (process.user, process.started_at) == ("zoe", None)


def test_lines_before_the_header_are_ignored() -> None:
    text = "Welcome to node7!\nlast login: never\n" + (RECORDED / "zero_gpus.txt").read_text()
    assert parse_probe_output(text) == recorded("zero_gpus.txt")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "hello\n",
        "@@time 1\n@@stat\ncpu  1 2 3 4\n",
        "@@warden-probe 2\n@@end\n",
        "@@warden-probe\n",
    ],
)
def test_not_probe_output_raises(text: str) -> None:
    with pytest.raises(ProbeOutputError):
        parse_probe_output(text)
    assert issubclass(ProbeOutputError, ValueError)


# --- Garbage never raises ------------------------------------------------------------------------

junk_line = st.one_of(
    st.text(max_size=120).map(lambda s: s.replace("\n", " ").replace("\r", " ")),
    st.sampled_from(["@@gpus", "@@apps", "@@ps", "@@gpus-rc 9", "@@time 99999999999999", "@@end"]),
    st.lists(
        st.sampled_from(["GPU-x", "0", "-1", "[N/A]", "nan", "1e400", "", "a,b", " "]),
        min_size=1,
        max_size=16,
    ).map(", ".join),
    st.builds(
        lambda pid, user, etimes, args: f"{pid} {user} {etimes} {args}",
        st.integers(-5, 10**20),
        st.sampled_from(["root", "x"]),
        st.integers(-(10**20), 10**20),
        st.text(max_size=10),
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(p.name for p in RECORDED.glob("*.txt"))), st.data())
def test_garbage_inside_sections_never_raises(name: str, data: st.DataObject) -> None:
    lines = (RECORDED / name).read_text().splitlines()
    for _ in range(data.draw(st.integers(1, 6))):
        position = data.draw(st.integers(1, len(lines)))  # after the header
        lines.insert(position, data.draw(junk_line))
    reading = parse_probe_output("\n".join(lines))
    assert isinstance(reading, HostReading)
    assert all(isinstance(gpu.index, int) for gpu in reading.gpus)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_any_text_after_the_header_never_raises(text: str) -> None:
    assert isinstance(parse_probe_output("@@warden-probe 1\n" + text), HostReading)


@given(st.text())
def test_text_without_the_header_raises_probe_output_error(text: str) -> None:
    if any(line.startswith("@@warden-probe 1") for line in text.splitlines()):
        return
    with pytest.raises(ProbeOutputError):
        parse_probe_output(text)


@given(st.text())
def test_parse_number_never_raises(text: str) -> None:
    value = parse_number(text)
    assert value is None or isinstance(value, float)


# --- CPU utilisation -----------------------------------------------------------------------------


def test_cpu_percent() -> None:
    first = CpuCounters(busy=1000, total=4000)
    assert cpu_percent(None, first) is None  # first tick
    assert cpu_percent(first, None) is None
    assert cpu_percent(first, CpuCounters(busy=1250, total=5000)) == 25.0
    assert cpu_percent(first, first) is None  # no time passed
    assert cpu_percent(first, CpuCounters(busy=10, total=40)) is None  # host rebooted
    assert cpu_percent(first, CpuCounters(busy=900, total=5000)) is None


def test_cpu_percent_between_recorded_ticks() -> None:
    before = recorded("gpu_disappeared_before.txt").cpu
    after = recorded("gpu_disappeared_after.txt").cpu
    busy = (60223850 - 60223012) + 0 + (10223190 - 10223001) + (99020 - 99012)
    total = busy + (500113101 - 500112334) + (312010 - 312003)
    assert cpu_percent(before, after) == round(100 * busy / total, 2)


counters = st.builds(CpuCounters, busy=st.integers(0, 2**63), total=st.integers(0, 2**63))


@given(counters, counters)
def test_cpu_percent_is_none_or_between_0_and_100(a: CpuCounters, b: CpuCounters) -> None:
    value = cpu_percent(a, b)
    assert value is None or 0.0 <= value <= 100.0
