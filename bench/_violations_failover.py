"""Violations failover: from killing the leader (SIGKILL) to the first escalation step taken by
the new leader, as a real webhook receiver sees it; and whether any step went out twice or
any incident was lost.

Usage::

    .venv/bin/python bench/_violations_failover.py [--quick]

Imported by bench/scale_out.py: `await measure_violations_failover(workdir, amqp_url=...,
pg_url=..., quick=...)` returns `{"violations_failover_s", "duplicate_notifications",
"lost_incidents"}` (plus the figures of each round under "rounds").

Set-up (tests/support/replica_set.py's `ReplicaSet`, in `workdir`): the given RabbitMQ vhost and
PostgreSQL database (run alone: a fresh vhost made with rabbitmqctl on
amqp://guest:guest@127.0.0.1:5672/ and a fresh database on postgresql://postgres@127.0.0.1:5432,
both removed afterwards), migrated by `warden db upgrade`; two `warden run violations`
processes with `[replicas] lease_s` at its default (6 s) and `heartbeat_s = 0.5`; steps
`0s webhook admins` and `5s webhook admins`, handler `webhook`, one `[[violations.webhooks]]`
of format json posting to an aiohttp receiver in this process, `webhook_min_interval_s = 0`.
In this process too: a monitor double (`list_hosts`, `gpu.discovered`, and a
`processes.observed` per host every 0.5 s listing every squatting process) and a reservations
double (`calendar`, `list_gpus`, `contacts`, and `reservation.created` for each booking).

A round: SQUATS GPUs (--quick: fewer) reserved by alice and used by bob; once the receiver
has every squat's first step, the leader (read from the replicas' heartbeats) is killed with
SIGKILL and FRESH more squats start at once. The failover time is the kill to the first
delivery for one of those fresh squats, whose incidents only the new leader can open. Then
the bench waits for every step of every squat (deadline ROUND_DEADLINE_S), counts steps
received more than once (`duplicate_notifications`) and squats the receiver never heard of
(`lost_incidents`), and restarts the killed replica as the standby of the next round.
Figures: the worst round's failover, the sums of duplicates and losses.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import _common as common

from tests.support.replica_set import ReplicaSet

STEPS = ("0s webhook admins", "5s webhook admins")
SQUATS, QUICK_SQUATS = 16, 4
FRESH, QUICK_FRESH = 4, 2
ROUNDS, QUICK_ROUNDS = 3, 1
LEASE_S = 6.0
ROUND_DEADLINE_S = 60.0
OBSERVE_EVERY_S = 0.5
DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


async def _wait(condition: Any, what: str, system: ReplicaSet, deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {deadline_s:g}s\n{system.logs()[-3000:]}")
        await asyncio.sleep(0.05)


async def _round(system: ReplicaSet, squats: int, fresh: int) -> dict[str, Any]:
    await system.reserve_and_squat(squats)
    await _wait(
        lambda: all(system.incidents_of(s) for s in system.squats),
        "every squat's first step",
        system,
        ROUND_DEADLINE_S,
    )
    leader = system.leader()
    assert leader is not None
    standby = next(label for label in system.alive() if label != leader)
    killed_at = system.kill(leader)
    new = await system.reserve_and_squat(fresh)
    fresh_uuids = {s.uuid for s in new}
    await _wait(
        lambda: any(d.gpu_uuid in fresh_uuids for d in system.deliveries),
        "a step for a squat started after the kill",
        system,
        ROUND_DEADLINE_S,
    )
    first = min(d.at for d in system.deliveries if d.gpu_uuid in fresh_uuids)
    led_at = time.time()
    await _wait(lambda: system.leader() == standby, "the standby leads", system, ROUND_DEADLINE_S)
    await _wait(
        lambda: all(
            {step for d in system.deliveries if d.gpu_uuid == s.uuid for step in [d.step_index]}
            >= set(range(len(STEPS)))
            for s in system.squats
        ),
        "every step of every squat",
        system,
        ROUND_DEADLINE_S,
    )
    await asyncio.sleep(2.0)  # room for a late duplicate
    system.start(leader)  # back as the standby of the next round
    await _wait(lambda: system.role_of(leader) == "standby", "the restarted standby", system, 60)
    return {
        "killed": leader,
        "failover_s": first - killed_at,
        "leader_seen_s": led_at - killed_at,
        "squats": len(system.squats),
        "duplicates": system.duplicates(),
        "lost": system.lost(),
    }


async def measure_violations_failover(
    workdir: Path, *, amqp_url: str, pg_url: str, quick: bool
) -> dict[str, Any]:
    """Runs the rounds the module's docstring describes; the figures of the worst round."""
    squats = QUICK_SQUATS if quick else SQUATS
    fresh = QUICK_FRESH if quick else FRESH
    rounds = []
    observing: asyncio.Task[None] | None = None
    async with ReplicaSet(workdir, amqp_url, pg_url, steps=STEPS, lease_s=LEASE_S) as system:
        try:
            system.start("a")
            await _wait(lambda: system.leader() == "a", "a leads", system, 60)
            system.start("b")
            await _wait(lambda: system.role_of("b") == "standby", "b stands by", system, 60)
            observing = asyncio.create_task(system.keep_observing(OBSERVE_EVERY_S))
            for _ in range(QUICK_ROUNDS if quick else ROUNDS):
                rounds.append(await _round(system, squats, fresh))
        finally:
            if observing is not None:
                observing.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await observing
        return {
            "violations_failover_s": round(max(r["failover_s"] for r in rounds), 2),
            "duplicate_notifications": system.duplicates(),
            "lost_incidents": system.lost(),
            "rounds": rounds,
        }


@contextlib.asynccontextmanager
async def postgres_database(admin_url: str) -> AsyncIterator[str]:
    """A fresh database on the server of `admin_url` (its SQLAlchemy URL), dropped after."""
    import asyncpg

    name = f"warden_bench_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(admin_url, timeout=5)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    try:
        parts = urlsplit(admin_url)
        yield urlunsplit(parts._replace(scheme="postgresql+asyncpg", path=f"/{name}"))
    finally:
        admin = await asyncpg.connect(admin_url, timeout=10)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


async def _alone(quick: bool) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="warden-bench-failover-") as tmp,
        common.rabbitmq_vhost(common.DEFAULT_AMQP_URL, "warden-bench-failover") as amqp_url,
    ):
        async with postgres_database(DEFAULT_PG_URL) as url:
            return await measure_violations_failover(
                Path(tmp), amqp_url=amqp_url, pg_url=url, quick=quick
            )


def main() -> None:
    parser = common.argument_parser(__doc__, "one round with 4 + 2 squats")
    args = parser.parse_args()
    print(
        f"2 violations replicas, lease_s={LEASE_S:g}, steps {list(STEPS)}, "
        f"{'1 round' if args.quick else f'{ROUNDS} rounds'}\n"
    )
    figures = common.run_async(_alone(args.quick), "replicas stopped, vhost and database removed")
    rows = [
        (
            str(n + 1),
            r["killed"],
            f"{r['failover_s']:.2f}",
            f"{r['leader_seen_s']:.2f}",
            str(r["squats"]),
            str(r["duplicates"]),
            str(r["lost"]),
        )
        for n, r in enumerate(figures["rounds"])
    ]
    common.print_table(
        ("round", "killed", "failover s", "leader seen s", "squats", "duplicates", "lost"),
        rows,
        "<<>>>>>",
    )
    print()
    common.print_machine(sharing="RabbitMQ and PostgreSQL shared with other work on this host")
    spread = [r["failover_s"] for r in figures["rounds"]]
    print(f"\nfailover median {statistics.median(spread):.2f}s, worst {max(spread):.2f}s")
    print(f"target < 10 s: {common.verdict(max(spread) < 10, max(spread))}")
    common.print_result(
        violations_failover_s=figures["violations_failover_s"],
        duplicate_notifications=figures["duplicate_notifications"],
        lost_incidents=figures["lost_incidents"],
    )


if __name__ == "__main__":
    main()
