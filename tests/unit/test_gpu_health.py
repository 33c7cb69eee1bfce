"""GPU health: the probe's health section over recorded outputs, the rules, the state machine.

The recorded outputs are in tests/fixtures/nvidia_smi/ (the H200's are real values from
/work/shared/reference/nvidia-h200; the faults are the documented shapes of nvidia-smi).
"""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from services.monitor.gpu_health import (
    HEALTH_FIELDS,
    LEGACY_HEALTH_FIELDS,
    GpuHealth,
    HealthRules,
    HealthState,
    HostHealth,
    Signal,
    bus_id,
    next_health,
    parse_health_section,
    row_signals,
)
from services.monitor.probe import PROBE_COMMAND, HealthMemo, HostReading, parse_probe_output

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia_smi"
T0 = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def recorded(name: str) -> HostReading:
    return parse_probe_output((RECORDED / name).read_text())


def signals_of(reading: HostReading) -> dict[str | None, set[Signal]]:
    assert reading.health is not None
    return {gpu.uuid: {signal for signal, _ in gpu.signals} for gpu in reading.health.gpus}


def test_the_probe_reads_health_in_the_same_command() -> None:
    # the health query, and once more without the row remapper when a driver refuses a field
    assert PROBE_COMMAND.count(f"--query-gpu={','.join(HEALTH_FIELDS)} ") == 1
    assert PROBE_COMMAND.count(f"--query-gpu={','.join(LEGACY_HEALTH_FIELDS)} ") == 1
    assert "@@health-rc" in PROBE_COMMAND
    # the main query is untouched: a field an old driver refuses never breaks it
    main = next(line for line in PROBE_COMMAND.splitlines() if "--query-gpu=uuid," in line)
    assert "remapped_rows" not in main


def test_a_hosts_memo_reads_an_unchanged_health_section_once() -> None:
    memo = HealthMemo()
    before = (RECORDED / "health_v100_before.txt").read_text()
    lost = (RECORDED / "health_v100_lost.txt").read_text()
    first = parse_probe_output(before, memo)
    again = parse_probe_output(before, memo)
    assert again.health is first.health  # the same section: the reading kept
    assert first.health == parse_probe_output(before).health
    changed = parse_probe_output(lost, memo)
    assert changed.health == parse_probe_output(lost).health != first.health
    assert parse_probe_output(before, memo).health == first.health  # and back


def test_h200_at_rest_is_healthy() -> None:
    reading = recorded("h200_health.txt")
    assert signals_of(reading) == {"GPU-10bbc3d4-f7e4-6c3a-73b1-cc8cae19c807": set()}
    assert reading.health is not None
    assert reading.health.gpus[0].bus_id == "0000:00:06.0"


def test_each_fault_shape_is_its_signal() -> None:
    reading = recorded("health_faults_a100x4.txt")
    uuid = "GPU-a1000000-0000-4000-8000-00000000000{}".format
    assert signals_of(reading) == {
        uuid(0): {Signal.ECC_UNCORRECTABLE},
        uuid(1): {Signal.ROW_REMAP_PENDING},
        uuid(2): {Signal.THERMAL_SLOWDOWN},
        uuid(3): {Signal.PCIE_LINK_DEGRADED},
    }
    assert reading.health is not None
    details = [detail for gpu in reading.health.gpus for _, detail in gpu.signals]
    assert details == [
        "2 uncorrectable ECC error(s)",
        "row remapping pending (needs a GPU reset)",
        "HW thermal clock slowdown",
        "PCIe link x8 of x16",
    ]


def test_old_driver_without_row_remapper() -> None:
    reading = recorded("health_k80_old_driver.txt")
    signals = signals_of(reading)
    assert signals["GPU-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"] == {Signal.RETIRED_PAGES_PENDING}
    assert sum(bool(s) for s in signals.values()) == 1


def test_a_refused_health_query_leaves_the_gpus_and_reads_no_health() -> None:
    reading = recorded("health_query_refused.txt")
    assert len(reading.gpus) == 2
    assert reading.health is not None and reading.health.gpus == ()


def test_outputs_without_a_health_section_have_no_health() -> None:
    assert recorded("a_100x8.txt").health is None
    assert recorded("no_nvidia_smi.txt").health is None


def test_a_lost_gpu_row_and_the_drivers_line() -> None:
    reading = recorded("health_v100_lost.txt")
    assert reading.health is not None
    lost = [gpu for gpu in reading.health.gpus if gpu.signals]
    assert len(lost) == 1 and lost[0].uuid is None and lost[0].bus_id == "0000:88:00.0"
    assert lost[0].signals[0][0] is Signal.LOST
    section = parse_health_section(
        ["Unable to determine the device handle for GPU 0000:3B:00.0: GPU is lost."]
    )
    assert section.lost_bus_ids == ("0000:3b:00.0",)


def test_bus_ids_in_every_form_are_one() -> None:
    assert bus_id("00000000:3B:00.0") == bus_id("0000:3b:00.0") == "0000:3b:00.0"


def test_row_signals_ignore_not_reported_values() -> None:
    row = {
        "ecc.errors.uncorrected.volatile.total": "[N/A]",
        "remapped_rows.pending": "[Not Supported]",
        "pcie.link.width.current": "[N/A]",
        "pcie.link.width.max": "16",
    }
    assert row_signals(row) == ()


def test_numbers_and_bus_ids_that_are_none_are_not_read() -> None:
    row = {
        "ecc.errors.uncorrected.volatile.total": "inf",
        "pcie.link.width.current": "nan",
        "pcie.link.width.max": "16",
    }
    assert row_signals(row) == ()
    section = ["pci.bus_id, uuid", "GPU-x:3b:00.0, GPU-1", "0000:3b:00.0, GPU-2"]
    assert [(g.uuid, g.bus_id) for g in parse_health_section(section).gpus] == [
        ("GPU-1", None),
        ("GPU-2", "0000:3b:00.0"),
    ]


# --- rules and state machine ------------------------------------------------------------------

RULES = HealthRules(healthy_for=timedelta(minutes=10))
ECC = ((Signal.ECC_UNCORRECTABLE, "2 uncorrectable ECC error(s)"),)
HOT = ((Signal.THERMAL_SLOWDOWN, "HW thermal clock slowdown"),)


def test_rules_judge_failed_before_degraded_and_ignore_the_rest() -> None:
    assert RULES.judge(ECC + HOT) == (HealthState.FAILED, "2 uncorrectable ECC error(s)")
    assert RULES.judge(HOT) == (HealthState.DEGRADED, "HW thermal clock slowdown")
    assert RULES.judge(()) == (HealthState.OK, None)
    lenient = HealthRules.from_names(["lost"], ["ecc_uncorrectable"], 60)
    assert lenient.judge(ECC)[0] is HealthState.DEGRADED
    assert lenient.judge(HOT) == (HealthState.OK, None)
    # a signal named in both lists is failed
    both = HealthRules.from_names(["xid"], ["xid", "thermal_slowdown"], 60)
    assert Signal.XID not in both.degraded


def test_a_failed_gpu_returns_only_after_reading_healthy_for_the_whole_time() -> None:
    health = next_health(None, ECC, T0, RULES)
    assert (health.state, health.since) == (HealthState.FAILED, T0)
    health = next_health(health, (), T0 + timedelta(minutes=1), RULES)
    assert health.state is HealthState.FAILED and health.since == T0
    assert health.healthy_since == T0 + timedelta(minutes=1)
    # a bad reading in between starts the wait again
    health = next_health(health, ECC, T0 + timedelta(minutes=5), RULES)
    assert health.healthy_since is None
    health = next_health(health, (), T0 + timedelta(minutes=6), RULES)
    health = next_health(health, (), T0 + timedelta(minutes=15, seconds=59), RULES)
    assert health.state is HealthState.FAILED
    health = next_health(health, HOT, T0 + timedelta(minutes=16), RULES)
    assert health == GpuHealth(
        HealthState.DEGRADED, "HW thermal clock slowdown", T0 + timedelta(minutes=16)
    )
    assert next_health(health, (), T0 + timedelta(minutes=17), RULES).state is HealthState.OK


def test_same_state_keeps_its_since() -> None:
    health = next_health(None, HOT, T0, RULES)
    later = next_health(health, (*HOT, (Signal.PCIE_LINK_DEGRADED, "x8")), T0 + timedelta(1), RULES)
    assert later.since == T0 and later.reason == "HW thermal clock slowdown; x8"


# --- one host, poll after poll ----------------------------------------------------------------

V100 = {
    "GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d": 0,
    "GPU-2b3c4d5e-6f7a-8b9c-0d1e-2f3a4b5c6d7e": 1,
    "GPU-3c4d5e6f-7a8b-9c0d-1e2f-3a4b5c6d7e8f": 2,
    "GPU-4d5e6f7a-8b9c-0d1e-2f3a-4b5c6d7e8f90": 3,
}


def observe(host: HostHealth, name: str, at: datetime) -> list[tuple[str, dict[str, object]]]:
    reading = recorded(name)
    return host.observe(
        V100, [gpu.uuid for gpu in reading.gpus], reading.health, reading.gpu_error, at
    )


def test_a_gpu_lost_mid_poll_fails_and_comes_back_after_the_healthy_time() -> None:
    host = HostHealth("dgx", HealthRules(healthy_for=timedelta(seconds=30)))
    # Healthy GPUs read the first time are not announced: consumers take a GPU as ok.
    assert observe(host, "health_v100_before.txt", T0) == []
    events = observe(host, "health_v100_lost.txt", T0 + timedelta(seconds=10))
    assert events == [
        (
            "gpu.health_changed",
            {
                "host": "dgx",
                "uuid": "GPU-3c4d5e6f-7a8b-9c0d-1e2f-3a4b5c6d7e8f",
                "index": 2,
                "state": "failed",
                "reason": "not answering: Unable to determine the device handle for "
                "GPU0000:88:00.0: Unknown Error",
                "since": (T0 + timedelta(seconds=10)).isoformat(),
                "previous": "ok",
            },
        )
    ]
    assert observe(host, "health_v100_lost.txt", T0 + timedelta(seconds=20)) == []
    assert observe(host, "health_v100_before.txt", T0 + timedelta(seconds=30)) == []
    assert observe(host, "health_v100_before.txt", T0 + timedelta(seconds=50)) == []
    back = observe(host, "health_v100_before.txt", T0 + timedelta(seconds=60))
    assert [(e[1]["uuid"], e[1]["state"], e[1]["previous"]) for e in back] == [
        ("GPU-3c4d5e6f-7a8b-9c0d-1e2f-3a4b5c6d7e8f", "ok", "failed")
    ]
    assert host.entries()["GPU-3c4d5e6f-7a8b-9c0d-1e2f-3a4b5c6d7e8f"]["state"] == "ok"


def test_a_lost_gpu_known_only_by_its_bus_id() -> None:
    """The driver's line names the bus id alone: the GPU is found from an earlier poll."""
    host = HostHealth("dgx", RULES)
    observe(host, "health_v100_before.txt", T0)
    section = parse_health_section(
        ["Unable to determine the device handle for GPU 0000:89:00.0: GPU is lost."]
    )
    listed = list(V100)  # listed, but named lost by the driver
    events = host.observe(V100, listed, section, None, T0 + timedelta(seconds=10))
    assert [(e[1]["index"], e[1]["state"]) for e in events] == [(3, "failed")]


def test_health_not_read_changes_nothing() -> None:
    host = HostHealth("dgx", RULES)
    observe(host, "health_v100_lost.txt", T0)
    assert host.observe(V100, list(V100), None, None, T0 + timedelta(hours=1)) == []
    assert host.entries()["GPU-3c4d5e6f-7a8b-9c0d-1e2f-3a4b5c6d7e8f"]["state"] == "failed"


@pytest.mark.parametrize("name", sorted(p.name for p in RECORDED.glob("*.txt")))
def test_every_recorded_output_observes_without_error(name: str) -> None:
    reading = recorded(name)
    known = {gpu.uuid: gpu.index for gpu in reading.gpus}
    host = HostHealth("h", RULES)
    for event_type, data in host.observe(known, list(known), reading.health, reading.gpu_error, T0):
        assert event_type == "gpu.health_changed"
        assert data["previous"] is None


OLD_DRIVER_SMI = f"""#!/bin/sh
# A driver without the row remapper: it refuses the full health query, answers the shorter one.
case "$1" in
  --query-gpu=pci.bus_id,*remapped_rows*)
    echo 'Field "remapped_rows.pending" is not a valid field to query.'; exit 2 ;;
  --query-gpu=pci.bus_id,*)
    echo '{", ".join(LEGACY_HEALTH_FIELDS)}'
    echo '00000000:85:00.0, GPU-k80, 0, Yes, Not Active, Not Active, Not Active, 16, 16' ;;
  --query-gpu=*)
    echo 'GPU-k80, 0, Tesla K80, 1, 1, 1, 11441, 30, 50.0, 149.00, [N/A], 823, 2505' ;;
esac
"""


def test_the_real_script_asks_an_old_driver_again_without_the_row_remapper(
    tmp_path: Path,
) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(OLD_DRIVER_SMI)
    smi.chmod(0o755)
    done = subprocess.run(
        ["sh", "-c", PROBE_COMMAND],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"},
        timeout=30,
        check=True,
    )
    reading = parse_probe_output(done.stdout)
    assert [gpu.uuid for gpu in reading.gpus] == ["GPU-k80"]
    assert signals_of(reading) == {"GPU-k80": {Signal.RETIRED_PAGES_PENDING}}
