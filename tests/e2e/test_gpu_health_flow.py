"""A GPU that fails mid-booking, end to end on the simulated fleet served over real SSH.

monitor, reservations, jobs and violations (the notification path) run together on the
in-process bus. The sim's GPU 0 gets uncorrectable ECC errors while alice holds it: the
monitor's next poll marks it failed, a new booking of it is refused (gpu_failed), alice is told
with an alternative and the admin alerted, her booking stays, a queued job naming it waits;
healthy again for `[health] healthy_for_s`, it returns and the job starts. Deadlines are generous
and nothing asserts how long anything took (only in how many polls).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from services.shared.bus import Bus
from services.shared.contracts import Envelope
from services.shared.errors import ValidationFailed
from services.sim.model import SimFleet
from tests.support.events import record
from tests.support.fleet import served_fleet
from tests.support.polling import until
from tests.support.system import buses, discovered_gpu, running_services, system_settings

pytestmark = pytest.mark.timeout(240)

DEADLINE_S = 60.0


async def _gpu(bus: Bus, uuid: str) -> dict[str, Any] | None:
    for gpu in await bus.call("reservations", "list_gpus", {}):
        if gpu["uuid"] == uuid:
            return dict(gpu)
    return None


async def test_a_gpu_that_fails_mid_booking_leaves_the_pool_and_comes_back(
    tmp_path: Path, cheap_passwords: None
) -> None:
    fleet = SimFleet(1, 4, seed=3, churn=False)
    host = fleet.hosts[0]
    async with served_fleet(fleet, tmp_path) as served:
        settings = await system_settings(
            tmp_path,
            served,
            monitor={"interval_s": 0.5},
            jobs={"poll_interval_s": 0.3, "queue_min_window_s": 600},
            health={"healthy_for_s": 3.0},
        )
        services = ["monitor", "reservations", "jobs", "violations"]
        async with (
            buses(settings, "inproc") as (bus, client),
            running_services(services, settings, "inproc", bus),
        ):
            monitor: list[Envelope] = []
            sent: list[Envelope] = []
            await record(client, monitor, "monitor")
            await record(client, sent, "violations", "notification.sent")
            uuid = (await discovered_gpu(client, host, 0))["uuid"]
            now = datetime.now(UTC)
            booking = await client.call(
                "reservations",
                "create_reservation",
                {
                    "actor": "alice",
                    "gpus": [uuid],
                    "start": now.isoformat(),
                    "end": (now + timedelta(hours=2)).isoformat(),
                    "title": "fine-tune",
                },
            )

            def failed_event() -> dict[str, Any] | None:
                return next(
                    (
                        e.data
                        for e in monitor
                        if e.type == "gpu.health_changed"
                        and e.data["uuid"] == uuid
                        and e.data["state"] == "failed"
                    ),
                    None,
                )

            fault_at = len(monitor)
            fleet.set_gpu_fault(host, 0, "ecc")
            failed = await until(failed_event, "GPU 0 failed", DEADLINE_S, interval=0.1)
            assert failed["reason"] == "2 uncorrectable ECC error(s)"
            # Out of the pool within one poll: the poll under way when the fault came, at
            # most, then the one that read it (its sample comes just before the health event).
            failed_at = next(
                i
                for i, e in enumerate(monitor)
                if e.type == "gpu.health_changed" and e.data is failed
            )
            samples = [
                e
                for e in monitor[fault_at:failed_at]
                if e.type == "host.sampled" and e.data["host"] == host
            ]
            assert len(samples) <= 2

            # The reservations service takes it out: a new booking is refused, with why.
            await until(lambda: _state(client, uuid, "failed"), "reservations knowing", DEADLINE_S)
            later = now + timedelta(days=1)
            with pytest.raises(ValidationFailed) as refused:
                await client.call(
                    "reservations",
                    "create_reservation",
                    {
                        "actor": "bob",
                        "gpus": [uuid],
                        "start": later.isoformat(),
                        "end": (later + timedelta(hours=1)).isoformat(),
                        "title": "refused",
                    },
                )
            reasons = refused.value.details["reasons"]
            assert [r["code"] for r in reasons] == ["gpu_failed"]
            assert "uncorrectable ECC" in reasons[0]["message"]

            # alice is told, with an alternative on another GPU; the admin is alerted.
            def told(user: str) -> dict[str, Any] | None:
                return next(
                    (
                        e.data
                        for e in sent
                        if e.data["user"] == user and e.data["kind"] == "gpu_health"
                    ),
                    None,
                )

            note = await until(lambda: told("alice"), "alice told", DEADLINE_S, interval=0.1)
            assert f"GPU {host}:0" in note["title"] and "not cancelled" in note["text"]
            alternative = note["text"].split("The earliest alternative: ")[1]
            assert alternative.startswith(f"{host}:") and not alternative.startswith(f"{host}:0 ")
            admin = await until(lambda: told("admin"), "admin alerted", DEADLINE_S, interval=0.1)
            assert f"GPU {host}:0 failed" == admin["title"]
            kept = await client.call("reservations", "get_reservation", {"id": booking["id"]})
            assert kept["status"] == "active"

            # A queued job naming the GPU is not placed on it.
            job = await client.call(
                "jobs",
                "create_job",
                {
                    "actor": "alice",
                    "name": "after the fault",
                    "queued": True,
                    "max_runtime_s": 600,
                    "tasks": [{"host": host, "command": "python train.py", "gpus": [0]}],
                },
            )

            async def waiting_reason() -> str | None:
                found = await client.call("jobs", "get_job", {"id": job["id"], "actor": "alice"})
                assert found["status"] == "queued", found
                reason = found.get("waiting_reason") or ""
                return reason if "has failed" in reason else None

            reason = await until(waiting_reason, "the job waiting", DEADLINE_S, interval=0.2)
            assert "uncorrectable ECC" in reason

            # Healthy again: back after healthy_for_s, and the job starts on it.
            fleet.set_gpu_fault(host, 0, "ok")
            await until(lambda: _state(client, uuid, "ok"), "GPU 0 back", DEADLINE_S)
            back = [
                e.data for e in monitor if e.type == "gpu.health_changed" and e.data["uuid"] == uuid
            ][-1]
            assert (back["state"], back["previous"]) == ("ok", "failed")

            async def started() -> bool:
                found = await client.call("jobs", "get_job", {"id": job["id"], "actor": "alice"})
                return bool(found["status"] in ("starting", "running", "succeeded"))

            await until(started, "the job starting", DEADLINE_S, interval=0.2)


async def _state(bus: Bus, uuid: str, state: str) -> bool:
    gpu = await _gpu(bus, uuid)
    return gpu is not None and gpu["health"] == state
