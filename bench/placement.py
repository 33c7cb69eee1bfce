"""How often the earliest slot and the jobs' placement pick the best-connected GPUs.

Usage::

    .venv/bin/python bench/placement.py [--quick] [--trials N] [--seed N]

Each trial draws a random fleet: 2-8 hosts of 4 or 8 GPUs, each host with a random interconnect
(`nvlink-mesh`, `nvlink-quads`, `nvlink-pairs` or `pcie`, as `warden sim --topology` makes
them), each GPU busy with probability p (p drawn per trial in 0-0.6), and a request for k GPUs
(k in 2, 4, 8) that at least one host can hold. It asks

- the reservations' `earliest_slot` (services/reservations/rules/planner.py) for k GPUs now, the
  busy GPUs booked by someone else;
- the jobs' queue pass (`schedule`, services/jobs/queue/) for a job of one task of k GPUs, and
  for a job of k tasks of one GPU each, the busy GPUs with processes on them;

and compares each answer with the brute-force best: every k-subset of every host's free GPUs,
scored by the pairs' links (`link_cost`: NV# best, then PIX, PXB, PHB, NODE, SYS; worst pair
first, then the sum). An answer is "best" when it lies on one host and scores as well as the
best subset. As a baseline, the rule before topology: the first k free GPUs by index on the host
with the fewest free GPUs that holds k.

Prints a table by k, then `RESULT best_set_share=<percent of answers that are best, all three
askers together> planner=<%> job=<%> tasks=<%> baseline=<%> trials=<n>`. Target: 100 %.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from itertools import combinations

import _common as common

from services.jobs.queue.model import Demand, QueuedJob, QueueState, Start
from services.jobs.queue.model import Gpu as JobGpu
from services.jobs.queue.scheduler import schedule
from services.reservations.rules.domain import Gpu, Interval
from services.reservations.rules.planner import Locality, earliest_slot
from services.shared.topology import Topology, link_cost
from services.shared.topology_shapes import SHAPES, shape

NOW = datetime(2026, 11, 23, 9, 30, tzinfo=UTC)
H = timedelta(hours=1)
EVER = [Interval(NOW - 1000 * H, NOW + 1000 * H)]
ASKERS = ("planner", "job", "tasks", "baseline")


class Fleet:
    def __init__(self, rng: random.Random) -> None:
        self.topologies: dict[str, Topology] = {}
        self.free: dict[str, list[int]] = {}
        self.busy: set[str] = set()
        p = rng.uniform(0.0, 0.6)
        for h in range(rng.randint(2, 8)):
            host = f"node{h:02d}"
            size = rng.choice((4, 8))
            self.topologies[host] = shape(rng.choice(SHAPES), size)
            self.free[host] = []
            for i in range(size):
                if rng.random() < p:
                    self.busy.add(f"{host}:{i}")
                else:
                    self.free[host].append(i)

    def cost(self, host: str, indexes: Sequence[int]) -> tuple[int, int]:
        topology = self.topologies[host]
        costs = [link_cost(topology.link(a, b)) for a, b in combinations(indexes, 2)]
        return max(costs, default=0), sum(costs)

    def best_cost(self, k: int) -> tuple[int, int] | None:
        costs = [
            self.cost(host, subset)
            for host, free in self.free.items()
            for subset in combinations(free, k)
        ]
        return min(costs, default=None)

    def is_best(self, uuids: Sequence[str], k: int) -> bool:
        hosts = {uuid.split(":")[0] for uuid in uuids}
        if len(uuids) != k or len(hosts) != 1 or any(uuid in self.busy for uuid in uuids):
            return False
        host = hosts.pop()
        return self.cost(host, [int(u.split(":")[1]) for u in uuids]) == self.best_cost(k)


def ask_planner(fleet: Fleet, k: int) -> list[str]:
    gpus = [Gpu(f"{h}:{i}", h, i) for h, t in fleet.topologies.items() for i in range(len(t.gpus))]
    busy = {uuid: [Interval(NOW - H, NOW + 5 * H)] for uuid in fleet.busy}
    allowed = {g.uuid: EVER for g in gpus}
    slot = earliest_slot(
        gpus, allowed, busy, k, H, NOW, NOW + 100 * H, locality=Locality(fleet.topologies)
    )
    return [] if slot is None or slot.start != NOW else list(slot.gpus)


def ask_jobs(fleet: Fleet, k: int, tasks: bool) -> list[str]:
    gpus = {
        f"{h}:{i}": JobGpu(f"{h}:{i}", h, i, f"{h}:{i}" in fleet.busy)
        for h, t in fleet.topologies.items()
        for i in range(len(t.gpus))
    }
    if tasks:
        demands = tuple(Demand(i, None, gpu_count=1) for i in range(k))
    else:
        demands = (Demand(0, None, gpu_count=k),)
    state = QueueState(
        now=NOW,
        gpus=gpus,
        bookings={},
        queue=[QueuedJob(1, "ann", NOW, demands)],
        topologies=fleet.topologies,
    )
    for decision in schedule(state):
        if isinstance(decision, Start):
            return [u for _, uuids in decision.placement.values() for u in uuids]
    return []


def ask_baseline(fleet: Fleet, k: int) -> list[str]:
    fits = [(len(free), host) for host, free in fleet.free.items() if len(free) >= k]
    _, host = min(fits)
    return [f"{host}:{i}" for i in fleet.free[host][:k]]


def main() -> None:
    parser = common.argument_parser(__doc__, "300 trials instead of 3,000")
    parser.add_argument("--trials", type=int, default=None)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    trials = args.trials or (300 if args.quick else 3000)
    rng = random.Random(args.seed)
    best: dict[tuple[int, str], int] = defaultdict(int)
    asked: dict[int, int] = defaultdict(int)
    seconds: dict[str, float] = defaultdict(float)
    done = 0
    while done < trials:
        fleet = Fleet(rng)
        k = rng.choice((2, 4, 8))
        if fleet.best_cost(k) is None:
            continue  # no host holds k free GPUs: nothing to compare with
        done += 1
        asked[k] += 1
        for asker in ASKERS:
            began = time.perf_counter()
            if asker == "planner":
                chosen = ask_planner(fleet, k)
            elif asker == "baseline":
                chosen = ask_baseline(fleet, k)
            else:
                chosen = ask_jobs(fleet, k, tasks=asker == "tasks")
            seconds[asker] += time.perf_counter() - began
            best[(k, asker)] += fleet.is_best(chosen, k)

    def share(asker: str, ks: Sequence[int] = (2, 4, 8)) -> float:
        total = sum(asked[k] for k in ks)
        return 100.0 * sum(best[(k, asker)] for k in ks) / total if total else float("nan")

    common.print_machine()
    print(f"{trials} random fleets (seed {args.seed}); best: on one host, as well joined as the")
    print("best k-subset of any host's free GPUs\n")
    rows = [
        [f"k = {k}", str(asked[k]), *(f"{share(a, (k,)):.1f}" for a in ASKERS)] for k in (2, 4, 8)
    ]
    rows.append(["all", str(trials), *(f"{share(a):.1f}" for a in ASKERS)])
    rows.append(["ms/ask", "", *(f"{1000 * seconds[a] / trials:.2f}" for a in ASKERS)])
    print("best set, % of trials")
    common.print_table(
        ["request", "trials", "planner", "job (1 task)", "job (k tasks)", "baseline"],
        rows,
        "<>>>>>",
    )
    overall = (share("planner") + share("job") + share("tasks")) / 3
    print(f"\ntarget: 100 % best sets: {common.verdict(overall >= 100.0, overall)}")
    common.print_result(
        best_set_share=f"{overall:.1f}",
        planner=f"{share('planner'):.1f}",
        job=f"{share('job'):.1f}",
        tasks=f"{share('tasks'):.1f}",
        baseline=f"{share('baseline'):.1f}",
        trials=trials,
    )


if __name__ == "__main__":
    main()
