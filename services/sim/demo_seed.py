"""A lived-in week for `warden demo`: reservations, jobs and a violation, so that every page
of the web UI shows what it is for within a minute of the start.

Everything goes through the services' own RPC methods on the demo's bus, as the gateway's
routes call them, except two things no API may do: a booking made days ago (`book_past`,
given by the CLI: the reservations service's own booking command with its clock set to the
moment of the booking) and the stranger's process (the simulator's scripting call, what its
control API's `POST /hosts/{host}/processes` does).

Idempotent: the week hangs off an anchor hour kept in the data dir (`seeded_at`), so a second
start finds its reservations (by owner, title and start) and its jobs (by name, while they
run or wait) and adds none of them again. After 20 hours the anchor moves to the new start
and a new week is added beside the old one (what would clash with the old one is left out;
alice's running reservation, old or new, holds the jobs and the violation). The simulated
fleet is new at every start, so the stranger's process is started again each time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from services.jobs import api as jobs_api
from services.reservations import api as reservations_api
from services.shared.bus import Bus
from services.shared.errors import ServiceUnavailable, WardenError
from services.sim.model import SimFleet

log = logging.getLogger("warden.demo")

ADMIN, ALICE, BOB = "admin", "alice", "bob"
ANCHOR_FILE = "seeded_at"
ANCHOR_KEEPS = timedelta(hours=20)  # alice's "now" booking runs 24 h past the anchor
RUNNING_JOB = "pretrain-7b (demo)"
QUEUED_JOB = "eval-sweep (demo)"
# A stranger's notebook kernel on alice's reserved GPU, an open violation (zoe is not one
# of the users the simulator's background jobs run as).
SQUATTER = "zoe"
SQUATTER_COMMAND = "/home/zoe/venvs/torch/bin/python -m ipykernel_launcher -f kernel-7.json"


@dataclass(frozen=True)
class Booking:
    """One reservation of the week; `host` and `gpus` count into the fleet's sorted lists."""

    owner: str
    host: int
    gpus: tuple[int, ...]  # indexes; -1: every GPU of the host
    start: timedelta  # from midnight (UTC) of the anchor's day, or from the anchor hour
    hours: float
    title: str
    now: bool = False  # started shortly before the anchor hour, runs on past it
    booked_before: timedelta = timedelta(days=1)  # for those that started already

    def starts(self, at: datetime) -> datetime:
        return at + self.start if self.now else at.replace(hour=0) + self.start


DAY, HOUR = timedelta(days=1), timedelta(hours=1)
# alice's "now" booking holds the running job, the queued job's GPU and the squatter.
NOW_BOOKING = Booking(ALICE, 0, (0, 1), -2 * HOUR, 26, "Pretraining, week 2", True, DAY)
WEEK = (
    Booking(ALICE, 0, (0, 1, 2, 3), -5 * DAY + 9 * HOUR, 40, "Fine-tune 7B on the lab corpus"),
    Booking(BOB, 1, (0, 1), -3 * DAY + 10 * HOUR, 30, "Learning-rate sweep"),
    Booking(ADMIN, 2, (-1,), -2 * DAY + 8 * HOUR, 2, "Burn-in after the driver update"),
    Booking(BOB, 0, (0,), -1 * DAY + 9 * HOUR, 8, "Ablation: no augmentation"),
    NOW_BOOKING,
    Booking(BOB, 1, (0,), -1 * HOUR, 7, "Evaluation suite", True, 3 * HOUR),
    Booking(BOB, 1, (1,), DAY + 9 * HOUR, 8, "Paper deadline: final runs"),
    Booking(ALICE, 0, (0, 1), 2 * DAY + 9 * HOUR, 24, "Pretraining, week 3"),
    Booking(ADMIN, 1, (-1,), 4 * DAY + 8 * HOUR, 3, "Maintenance window"),
)

BookPast = Callable[[datetime, dict[str, Any]], Awaitable[Any]]


def anchor(data_dir: Path, now: datetime) -> datetime:
    """The hour the week hangs off: the stored one while it is recent, else this hour."""
    path = data_dir / ANCHOR_FILE
    try:
        stored = datetime.fromisoformat(path.read_text().strip())
    except (OSError, ValueError):
        stored = None
    if stored is not None and stored.tzinfo is not None and now - stored < ANCHOR_KEEPS:
        return stored
    hour = now.replace(minute=0, second=0, microsecond=0)
    path.write_text(hour.isoformat() + "\n")
    return hour


async def _gpus(bus: Bus, want: int, wait_s: float) -> dict[str, list[dict[str, Any]]]:
    """{host: its GPUs by index} once the reservations service knows `want` of them."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while True:
        try:
            found = await reservations_api.LIST_GPUS.call(bus, {}, timeout=5)
        except WardenError:
            found = []
        present = [g for g in found if g["present"] and g["index"] is not None]
        if len(present) >= want or loop.time() > deadline:
            break
        await asyncio.sleep(0.5)
    hosts: dict[str, list[dict[str, Any]]] = {}
    for gpu in sorted(present, key=lambda g: (g["host"], g["index"])):
        hosts.setdefault(gpu["host"], []).append(gpu)
    return hosts


def gpus_of(booking: Booking, hosts: dict[str, list[dict[str, Any]]]) -> tuple[str, list[str]]:
    names = sorted(hosts)
    host = names[booking.host % len(names)]
    gpus = hosts[host]
    if booking.gpus == (-1,):
        return host, [g["uuid"] for g in gpus]
    return host, sorted({gpus[i % len(gpus)]["uuid"] for i in booking.gpus})


async def _reserve(
    bus: Bus, book_past: BookPast, hosts: dict[str, list[dict[str, Any]]], at: datetime
) -> dict[str, Any] | None:
    """Books the week; answers alice's reservation running now (the old one on a restart)."""
    now = datetime.now(UTC)
    existing = await reservations_api.CALENDAR.call(
        bus, {"start": (at - 6 * DAY).isoformat(), "end": (at + 6 * DAY).isoformat()}
    )
    have = {(r["owner"], r["title"], datetime.fromisoformat(r["start"])): r for r in existing}
    holding = None
    for booking in WEEK:
        start = booking.starts(at)
        end = start + booking.hours * HOUR
        _, uuids = gpus_of(booking, hosts)
        found = have.get((booking.owner, booking.title, start))
        if found is None:
            fields = {"owner": booking.owner, "gpu_uuids": uuids, "title": booking.title}
            try:
                if start < now:
                    booked_at = min(start, now) - booking.booked_before
                    found = await book_past(booked_at, {**fields, "start": start, "end": end})
                else:
                    found = await reservations_api.CREATE_RESERVATION.call(
                        bus,
                        {
                            "actor": booking.owner,
                            "gpus": uuids,
                            "start": start.isoformat(),
                            "end": end.isoformat(),
                            "title": booking.title,
                        },
                    )
            except WardenError as err:  # a small fleet: two bookings on one GPU
                log.info("demo: %r not booked: %s", booking.title, err.message)
                continue
        if booking is NOW_BOOKING:
            holding = found
    if holding is None:  # a new week over an old one: alice's old reservation still runs
        running = [
            r
            for r in existing
            if r["owner"] == ALICE
            and r["status"] == "active"
            and datetime.fromisoformat(r["start"]) <= now
            and datetime.fromisoformat(r["end"]) > now + HOUR
        ]
        holding = running[0] if running else None
    return holding


async def _answering(bus: Bus, service: str, wait_s: float) -> None:
    """Until `service` answers on the bus (the services start beside the seeding)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while True:
        try:
            await bus.call(service, "health", {}, timeout=2)
            return
        except ServiceUnavailable:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.3)


async def _job(bus: Bus, fleet: SimFleet, owner: str, name: str) -> dict[str, Any] | None:
    """The demo's job of that name while it runs or waits (a restart keeps it). A task the
    simulator no longer knows ran on its previous run: its host says `gone` from now on, so
    the job ends as after a reboot, and a new one is made."""
    page = await jobs_api.LIST_JOBS.call(bus, {"owner": owner, "limit": 100})
    for job in page["jobs"]:
        if job["name"] != name or job["status"] in ("succeeded", "failed", "stopped", "lost"):
            continue
        lost = [
            task
            for task in job["tasks"]
            if task["status"] in ("starting", "running")
            and task["host"] in fleet.hosts
            and not any(t["session"] == task["session"] for t in fleet.tasks(task["host"]))
        ]
        for task in lost:
            fleet.task_gone(task["host"], owner, task["session"])
        if not lost:
            return job
    return None


async def _jobs(bus: Bus, fleet: SimFleet, host: str, gpus: Sequence[str]) -> None:
    """alice's training runs on her reserved GPUs; bob's evaluation waits in the queue for
    those same GPUs (busy now, and hers until her reservation ends)."""
    if await _job(bus, fleet, ALICE, RUNNING_JOB) is None:
        job = await jobs_api.CREATE_JOB.call(
            bus,
            {
                "actor": ALICE,
                "name": RUNNING_JOB,
                "description": "Pretraining on alice's reserved GPUs (started by the demo)",
                "tasks": [
                    {
                        "host": host,
                        "command": "python train.py --config pretrain-7b.yaml",
                        "gpus": list(gpus),
                    }
                ],
            },
        )
        await jobs_api.START_JOB.call(bus, {"actor": ALICE, "id": job["id"]})
    if await _job(bus, fleet, BOB, QUEUED_JOB) is None:
        await jobs_api.CREATE_JOB.call(
            bus,
            {
                "actor": BOB,
                "name": QUEUED_JOB,
                "description": "Waits for alice's GPUs (queued by the demo)",
                "queued": True,
                "max_runtime_s": 4 * 3600,
                "tasks": [{"host": host, "command": "python eval.py --all", "gpus": list(gpus)}],
            },
        )


def _squat(fleet: SimFleet, host: str, index: int) -> None:
    """zoe's notebook on a GPU of alice's reservation; zoe is logged in, so the
    escalation's terminal message reaches her."""
    fleet.login(host, SQUATTER)
    fleet.start_process(host, index, SQUATTER, SQUATTER_COMMAND, used_memory_mib=6144)


async def seed_week(
    bus: Bus, fleet: SimFleet, data_dir: Path, book_past: BookPast, *, wait_s: float = 60.0
) -> str:
    """Seeds what is missing; answers a one-line summary (or why something was left out)."""
    want = sum(len(fleet.snapshot(h)["hosts"][0]["gpus"]) for h in fleet.hosts)
    hosts = await _gpus(bus, want, wait_s)
    if not hosts:
        return "no GPUs discovered yet: the demo data was not added"
    at = anchor(data_dir, datetime.now(UTC))
    holding = await _reserve(bus, book_past, hosts, at)
    if holding is None:
        return "alice's current reservation could not be booked: no jobs or violation added"
    host = holding["gpus"][0]["host"]
    indexes = sorted(g["index"] for g in holding["gpus"] if g["host"] == host)
    _squat(fleet, host, indexes[-1])
    await _answering(bus, jobs_api.SERVICE, wait_s)
    await _jobs(bus, fleet, host, [g["uuid"] for g in holding["gpus"] if g["host"] == host][:1])
    return (
        f"Demo data: a week of reservations by {ADMIN}, {ALICE} and {BOB}; {ALICE}'s job "
        f"running on {host}, {BOB}'s queued for the same GPU; {SQUATTER}'s process on "
        f"{host} GPU {indexes[-1]} (reserved by {ALICE}) is an open violation."
    )
