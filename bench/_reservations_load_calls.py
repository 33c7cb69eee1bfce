"""The calls bench/reservations_load.py times: the arguments of each operation drawn at random
(`create_args`, `calendar_args`, `overview_args`, `earliest_args`), and the measurements that
time them (`measure_creates` by N clients, `measure_sequential`, `measure_same_slot`) into
`Calls` figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import _common as common
from _reservations_load_seed import (
    HALF_HOUR_MS,
    HOSTS,
    HOUR_MS,
    USERS,
    WEEK_MS,
    gpu_uuids_by_host,
)

from services.shared.errors import NotFound, ReservationConflict, WardenError

SAME_SLOT_USERS = 20
WARMUP_CALLS = 3

Call = Callable[[str, dict[str, Any]], Awaitable[Any]]


@dataclass
class Calls(common.Latencies):
    """One operation's calls on one backend."""

    note: str = ""
    wall_s: float = 0.0
    cpu_ms: float = float("nan")  # process CPU (service + bench) per call, creates only


# --- measurements -------------------------------------------------------------------------------


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat()


def today_ms(now_ms: int) -> int:
    return now_ms - now_ms % (24 * HOUR_MS)


def create_args(rng: random.Random, now_ms: int) -> dict[str, Any]:
    """1-2 GPUs on one host, 1-4 h, at a half hour 1-8 weeks ahead, for a random user."""
    uuids = gpu_uuids_by_host()[rng.choice(HOSTS)]
    first = now_ms - now_ms % HALF_HOUR_MS + WEEK_MS
    start = first + rng.randrange(7 * WEEK_MS // HALF_HOUR_MS) * HALF_HOUR_MS
    return {
        "actor": rng.choice(USERS),
        "gpus": rng.sample(uuids, rng.randint(1, 2)),
        "start": iso(start),
        "end": iso(start + rng.randint(1, 4) * HOUR_MS),
        "title": "bench",
    }


def calendar_args(rng: random.Random, now_ms: int) -> dict[str, Any]:
    by_host = gpu_uuids_by_host()
    start = today_ms(now_ms) + rng.randrange(28) * 24 * HOUR_MS
    return {
        "start": iso(start),
        "end": iso(start + WEEK_MS),
        "gpus": [uuid for host in rng.sample(HOSTS, 8) for uuid in by_host[host]],
    }


def overview_args(rng: random.Random, now_ms: int, shape: str = "compact") -> dict[str, Any]:
    start = today_ms(now_ms)
    return {
        "actor": rng.choice(USERS),
        "start": iso(start),
        "end": iso(start + 4 * WEEK_MS),
        "slot_minutes": 30,
        "format": shape,
    }


def full_overview_args(rng: random.Random, now_ms: int) -> dict[str, Any]:
    return overview_args(rng, now_ms, "full")


def earliest_args(rng: random.Random, now_ms: int) -> dict[str, Any]:
    not_before = now_ms + rng.randrange(2 * WEEK_MS // 60_000) * 60_000
    return {
        "actor": rng.choice(USERS),
        "count": 8,
        "duration_minutes": 240,
        "same_host": True,
        "not_before": iso(not_before),
    }


class Outcomes:
    """Answers of a batch of calls: successes, conflicts, other refusals, bugs."""

    def __init__(self) -> None:
        self.ok = self.conflicts = self.not_found = self.errors = 0

    async def run(self, figures: Calls, call: Call, method: str, args: dict[str, Any]) -> Any:
        started = time.perf_counter()
        try:
            answer = await call(method, args)
        except ReservationConflict:
            self.conflicts += 1
            figures.add(started)
            return None
        except NotFound:  # find_slot: nothing free within its horizon (a valid answer)
            self.not_found += 1
            figures.add(started)
            return None
        except Exception as err:  # anything else is a bug in the service (or the bench)
            self.errors += 1
            print(f"  ERROR {method}({args}): {err.__class__.__name__}: {err}", flush=True)
            return None
        self.ok += 1
        figures.add(started)
        return answer


async def warm_up(call: Call, method: str, make: Callable[[], dict[str, Any]]) -> None:
    for _ in range(WARMUP_CALLS):
        with contextlib.suppress(WardenError):
            await call(method, make())


async def measure_creates(call: Call, total: int, clients: int, seed: int, now_ms: int) -> Calls:
    """`total` creates by `clients` concurrent clients, each in a closed loop."""
    rng = random.Random(seed)
    await warm_up(call, "create_reservation", lambda: create_args(rng, now_ms))
    figures, outcomes = Calls(), Outcomes()
    remaining = total

    async def client() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await outcomes.run(figures, call, "create_reservation", create_args(rng, now_ms))

    started, cpu_started = time.perf_counter(), time.process_time()
    await asyncio.gather(*(client() for _ in range(clients)))
    figures.wall_s = time.perf_counter() - started
    figures.cpu_ms = (time.process_time() - cpu_started) / total * 1000
    figures.note = (
        f"{outcomes.ok} ok, {outcomes.conflicts} conflicts, {outcomes.errors} errors; "
        f"{total / figures.wall_s:.0f}/s = {figures.wall_s / total * 1000:.1f} ms each"
        + (f" ({clients} clients)" if clients > 1 else "")
        + f"; CPU {figures.cpu_ms:.2f} ms per create"
    )
    return figures


async def measure_sequential(
    call: Call,
    method: str,
    make: Callable[[], dict[str, Any]],
    calls: int,
    size: tuple[str, Callable[[Any], int]],
) -> Calls:
    """`calls` calls one after the other; the note says how big the answers were.

    Only the size of each answer is kept: holding hundreds of thousands of answer objects
    would slow the process (garbage collection) and skew later figures.
    """
    await warm_up(call, method, make)
    figures, outcomes = Calls(), Outcomes()
    unit, count = size
    sizes = []
    started, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        answer = await outcomes.run(figures, call, method, make())
        if answer is not None:
            sizes.append(count(answer))
    figures.wall_s = time.perf_counter() - started
    cpu_ms = (time.process_time() - cpu) / max(calls, 1) * 1000
    mean = statistics.fmean(sizes) if sizes else 0.0
    figures.note = f"{mean:,.0f} {unit} per answer, CPU {cpu_ms:.1f} ms per call"
    if outcomes.not_found:
        figures.note += f", {outcomes.not_found} 'none found'"
    figures.note += _errors(outcomes)
    return figures


def overview_runs(answer: dict[str, Any]) -> int:
    """Runs in either format (compact: `cells` holds two numbers per run)."""
    return sum(
        len(gpu["runs"]) if "runs" in gpu else len(gpu["cells"]) // 2
        for host in answer["hosts"]
        for gpu in host["gpus"]
    )


def gpus_found(answer: dict[str, Any]) -> int:
    return len(answer["gpus"])


def _errors(outcomes: Outcomes) -> str:
    return f", {outcomes.errors} ERRORS" if outcomes.errors else ""


async def measure_same_slot(call: Call, now_ms: int) -> tuple[Calls, int]:
    """20 users ask for the same 2 GPUs for the same 2 hours at once (9 weeks ahead: free)."""
    start = today_ms(now_ms) + 9 * WEEK_MS + 10 * HOUR_MS
    gpus = gpu_uuids_by_host()[HOSTS[0]][:2]
    figures, outcomes = Calls(), Outcomes()
    await asyncio.gather(
        *(
            outcomes.run(
                figures,
                call,
                "create_reservation",
                {
                    "actor": user,
                    "gpus": gpus,
                    "start": iso(start),
                    "end": iso(start + 2 * HOUR_MS),
                    "title": "bench",
                },
            )
            for user in USERS[:SAME_SLOT_USERS]
        )
    )
    figures.note = f"{outcomes.ok} ok, {outcomes.conflicts} conflicts" + _errors(outcomes)
    return figures, outcomes.ok
