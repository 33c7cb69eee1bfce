"""Where queued jobs fit, within one pass of the queue scheduler (pure): `Placer` indexes the
GPUs' free time per owner and gives each job GPUs (best fit, named GPUs, the anti-starvation
hold). The rules it follows are in `services.jobs.queue.scheduler`'s docstring.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from operator import attrgetter

from services.jobs.queue.model import Booking, Demand, Gpu, QueuedJob, QueueState
from services.shared.gpu_labels import matches, selector_text
from services.shared.topology import SPREAD, best_set

_US = timedelta(microseconds=1)
_NEVER = 1 << 62  # µs from now: no blocking booking within the horizon
_NO_SPECIAL: dict[str, int] = {}
_END = attrgetter("end")


def _capped(lim: tuple[int, dict[str, int]], at: int) -> tuple[int, dict[str, int]]:
    """A GPU's limits no later than `at` (a maintenance window starts then, for everyone)."""
    generic, special = lim
    if at >= generic and all(at >= v for v in special.values()):
        return lim
    return min(generic, at), {owner: min(v, at) for owner, v in special.items()}


class Refused(Exception):
    """A task cannot be placed; `busy_only`: it could be if busy GPUs were free."""

    def __init__(self, reason: str, busy_only: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.busy_only = busy_only


class Placer:
    """The indexes of one pass, and the placing of queued jobs on what they leave free. Times
    are integer µs from now.

    For each GPU `_lim` gives `generic`, when the first booking within the horizon starts
    (0 if one covers now; _NEVER if none), and `special`, for the owners and guests of the
    first bookings, the start of the first booking they may not use (later than `generic`).
    A GPU is usable by `owner` for a window of `w` µs when special.get(owner, generic) >= w.
    Free GPUs (not busy, not given) are kept per host sorted by index (`host_free`) and by
    generic limit (`host_lims`, for counting with bisect), and per owner the free GPUs where
    that owner goes further than anyone (`special`).

    Cost: building is O(GPUs + the bookings within the longest window); an any-N job on any
    host costs one bisect per host with enough free GPUs, and nothing once no host has N free
    GPUs (`max_free`) or once (owner, N) found no host for a shorter window (`_failed`: usable
    GPUs only get fewer during a pass; not recorded while a job's own first tasks hold GPUs
    that go back if it does not fit, `_settled`).
    """

    def __init__(self, state: QueueState) -> None:
        self.state = state
        self.now = state.now
        self.windows = {job.job_id: self._window_us(job) for job in state.queue}
        longest = max(self.windows.values(), default=0)
        self.horizon = self.now + longest * _US
        self._lims: dict[str, tuple[int, dict[str, int]]] = {}
        self.running_of: dict[str, int] = {}
        for r in state.running:
            for uuid in r.gpus:
                self.running_of[uuid] = r.job_id
        self.given: dict[str, tuple[int, bool]] = {}  # uuid -> (job id, held)

        gpus = sorted(
            state.gpus.values(),
            key=lambda g: (g.host, g.index is None, g.index or 0, g.uuid),
        )
        self.rank = {g.uuid: i for i, g in enumerate(gpus)}
        self.host_all: dict[str, list[str]] = {}
        self.host_free: dict[str, list[str]] = {}
        self.host_lims: dict[str, list[int]] = {}
        self.free: set[str] = set()
        self.special: dict[str, dict[str, list[str]]] = {}
        for g in gpus:
            if g.failed is not None:  # out of the pool: not even "busy" (place_named says why)
                continue
            self.host_all.setdefault(g.host, []).append(g.uuid)
            free = self.host_free.setdefault(g.host, [])
            lims = self.host_lims.setdefault(g.host, [])
            if g.busy or g.uuid in self.running_of:
                continue
            generic, special = self._lim(g.uuid)
            free.append(g.uuid)
            lims.append(generic)
            self.free.add(g.uuid)
            for owner in special:
                self.special.setdefault(owner, {}).setdefault(g.host, []).append(g.uuid)
        for lims in self.host_lims.values():
            lims.sort()
        self.largest_host = max(map(len, self.host_all.values()), default=0)
        self._max_free: int | None = None
        self._failed: dict[tuple[str | None, int], int] = {}  # (owner|None, n) -> least w
        self._settled = True  # no GPU taken for a job still being placed (memo allowed)
        self.probe_busy = False  # whether a refusal must tell if only busy GPUs block
        self._unlabelled: dict[tuple[str, ...], frozenset[str]] = {}

    # --- GPU limits

    def _window_us(self, job: QueuedJob) -> int:
        w = job.max_runtime if job.max_runtime is not None else self.state.min_window
        return max(w // _US, 1)

    def _lim(self, uuid: str) -> tuple[int, dict[str, int]]:
        got = self._lims.get(uuid)
        if got is None:
            got = self._lims[uuid] = _capped(self._compute_lim(uuid), self._drain_at(uuid))
        return got

    def _drain_at(self, uuid: str) -> int:
        """µs from now to the first maintenance window on the GPU (0: drained now; _NEVER:
        none within the horizon): nobody's work may run into it."""
        at = _NEVER
        for start, end in self.state.drained.get(uuid, ()):
            if (end is None or end > self.now) and start < self.horizon:
                at = min(at, max((start - self.now) // _US, 0))
        return at

    def _compute_lim(self, uuid: str) -> tuple[int, dict[str, int]]:
        bookings = self.state.bookings.get(uuid)
        if not bookings:
            return _NEVER, _NO_SPECIAL
        now, horizon = self.now, self.horizon
        generic = _NEVER
        special: dict[str, int] = {}
        open_: set[str] | None = None  # owners allowed through every booking so far
        for i in range(bisect.bisect_right(bookings, now, key=_END), len(bookings)):
            b = bookings[i]
            if b.start >= horizon:
                break
            at = max((b.start - now) // _US, 0)
            if open_ is None:
                generic = at
                open_ = {b.owner, *b.guests}
            else:
                for owner in open_:
                    if owner != b.owner and owner not in b.guests:
                        special[owner] = at
                open_ = {o for o in open_ if o == b.owner or o in b.guests}
            if not open_:
                break
        for owner in open_ or ():
            special[owner] = _NEVER
        return generic, special

    def usable_by(self, uuid: str, owner: str, w: int) -> bool:
        generic, special = self._lim(uuid)
        return special.get(owner, generic) >= w

    def blocking(self, uuid: str, owner: str, w: int) -> Booking | None:
        """The first booking of someone else overlapping [now, now + w)."""
        bookings = self.state.bookings.get(uuid) or ()
        end = self.now + w * _US
        for i in range(bisect.bisect_right(bookings, self.now, key=_END), len(bookings)):
            b = bookings[i]
            if b.start >= end:
                break
            if b.owner != owner and owner not in b.guests:
                return b
        return None

    # --- giving GPUs away (and back, when a job's tasks do not all fit)

    def take(self, uuid: str) -> None:
        host = self.state.gpus[uuid].host
        self.free.discard(uuid)
        self.host_free[host].remove(uuid)
        lims = self.host_lims[host]
        del lims[bisect.bisect_left(lims, self._lim(uuid)[0])]
        self._max_free = None

    def untake(self, uuid: str) -> None:
        host = self.state.gpus[uuid].host
        self.free.add(uuid)
        bisect.insort(self.host_free[host], uuid, key=self.rank.__getitem__)
        bisect.insort(self.host_lims[host], self._lim(uuid)[0])
        self._max_free = None

    def max_free(self) -> int:
        if self._max_free is None:
            self._max_free = max(map(len, self.host_lims.values()), default=0)
        return self._max_free

    # --- placing one job

    def place(
        self, job: QueuedJob, w: int, avoid: frozenset[str]
    ) -> dict[int, tuple[str, tuple[str, ...]]]:
        """The job's placement, its GPUs taken; or Refused (nothing taken)."""
        placement: dict[int, tuple[str, tuple[str, ...]]] = {}
        taken: list[str] = []
        prefix = (lambda d: f"task {d.index}: ") if len(job.demands) > 1 else (lambda d: "")
        together = self.place_together(job, w, avoid)
        order = _placement_order(job.demands)
        if together:  # named GPUs, then these (taken before another task could pick them)
            order.sort(key=lambda d: 0 if d.gpus else 1 if d.index in together else 2)
        try:
            for d in order:
                self._settled = not taken
                try:
                    if d.index in together:
                        host, uuids = together[d.index]
                    else:
                        host, uuids = self.place_demand(job, d, w, avoid, taken)
                except Refused as refused:
                    raise Refused(prefix(d) + refused.reason, refused.busy_only) from None
                for uuid in uuids:
                    self.take(uuid)
                    taken.append(uuid)
                placement[d.index] = (host, uuids)
        except Refused:
            for uuid in reversed(taken):
                self.untake(uuid)
            raise
        for uuid in taken:
            self.given[uuid] = (job.job_id, False)
        return dict(sorted(placement.items()))

    def place_demand(
        self, job: QueuedJob, d: Demand, w: int, avoid: frozenset[str], taken: list[str]
    ) -> tuple[str, tuple[str, ...]]:
        """One task's host and GPUs (`taken`: what the job's tasks placed so far hold)."""
        if d.gpus:
            return self.place_named(job, d, w, avoid, taken)
        if (d.gpu_count or 0) > 0:
            return self.place_any(job, d, w, avoid, taken)
        if d.host is not None:
            return d.host, ()
        raise Refused("names neither a host nor GPUs")

    def place_named(
        self, job: QueuedJob, d: Demand, w: int, avoid: frozenset[str], local: list[str]
    ) -> tuple[str, tuple[str, ...]]:
        gpus = self.state.gpus
        host = d.host
        busy: str | None = None
        for uuid in d.gpus:
            gpu = _named(gpus, uuid)
            label = _label(gpu)
            if host is None:
                host = gpu.host
            elif gpu.host != host:
                raise Refused(f"GPU {label} is not on host {host}")
            if d.gpus.count(uuid) > 1 or uuid in local:
                raise Refused(f"GPU {label} is named twice")
            if uuid in avoid:
                raise Refused(f"GPU {label} is not available to {job.owner} (access refused)")
            if not self.usable_by(uuid, job.owner, w):
                raise Refused(self._unusable(uuid, label, job.owner, w))
            if busy is None and uuid not in self.free:
                busy = self.busy_reason(uuid, label, job.job_id)
        if busy is not None:
            raise Refused(busy, busy_only=True)
        assert host is not None
        return host, tuple(d.gpus)

    def _unusable(self, uuid: str, label: str, owner: str, w: int) -> str:
        b = self.blocking(uuid, owner, w)
        if b is None or self._drain_at(uuid) < w:  # a maintenance window, whoever books it
            return f"GPU {label} is drained for maintenance ({_duration(w)} needed)"
        return (
            f"GPU {label} is reserved by {b.owner} from {_when(b.start)} to "
            f"{_when(b.end)} ({_duration(w)} needed)"
        )

    def busy_reason(self, uuid: str, label: str, job_id: int) -> str:
        given = self.given.get(uuid)
        if given is not None:
            other, held = given
            if held:
                return f"GPU {label} is kept for job {other}, waiting longest"
            return f"GPU {label} goes to job {other}, earlier in the queue"
        running = self.running_of.get(uuid)
        if running is not None:
            return f"GPU {label} is busy (job {running})"
        return f"GPU {label} is busy"

    def place_together(
        self, job: QueuedJob, w: int, avoid: frozenset[str]
    ) -> dict[int, tuple[str, tuple[str, ...]]]:
        """A job's tasks that ask for any GPUs on any host, all on one host when one can take
        them all: its best-joined set of their total, split in placement order ({}: no such
        host, or fewer than two such tasks). Nothing is taken yet."""
        demands = [
            d
            for d in _placement_order(job.demands)
            if not d.gpus and d.host is None and not d.labels and (d.gpu_count or 0) > 0
        ]
        if len(demands) < 2:
            return {}
        total = sum(d.gpu_count or 0 for d in demands)
        if total > self.largest_host:
            return {}
        avoid = avoid.union(*(d.gpus for d in job.demands))  # its named GPUs are not for these
        host = self.best_host(job.owner, w, total, avoid)
        if host is None:
            return {}
        chosen = self.pick(host, job.owner, w, total, avoid)
        if len(chosen) < total:
            return {}
        together, at = {}, 0
        for d in demands:
            n = d.gpu_count or 0
            together[d.index] = (host, chosen[at : at + n])
            at += n
        return together

    def place_any(
        self, job: QueuedJob, d: Demand, w: int, avoid: frozenset[str], held: Sequence[str] = ()
    ) -> tuple[str, tuple[str, ...]]:
        if d.labels:
            return self.place_labelled(job, d, w, avoid, held)
        n = d.gpu_count or 0
        owner = job.owner
        if d.host is None and held:
            beside = self.beside_held(owner, w, n, avoid, held)
            if beside is not None:
                return beside
        if d.host is not None:
            size = len(self.host_all.get(d.host, ()))
            if size == 0:
                raise Refused(f"host {d.host} is not known")
            if n > size:
                raise Refused(f"host {d.host} has only {size} GPUs, {n} asked")
            chosen = self.pick(d.host, owner, w, n, avoid)
            if len(chosen) < n:
                raise Refused(
                    f"host {d.host} has {len(chosen)} of {n} GPUs free for {_duration(w)}",
                    self.fits_ignoring_busy(d.host, owner, w, n, avoid),
                )
            return d.host, chosen
        if n > self.largest_host:
            raise Refused(f"no host has {n} GPUs")
        host = self.best_host(owner, w, n, avoid)
        if host is None:
            busy_only = self.probe_busy and any(
                self.fits_ignoring_busy(h, owner, w, n, avoid) for h in self.host_all
            )
            raise Refused(f"no host has {n} free GPUs for {_duration(w)}", busy_only)
        return host, self.pick(host, owner, w, n, avoid)

    def beside_held(
        self, owner: str, w: int, n: int, avoid: frozenset[str], held: Sequence[str]
    ) -> tuple[str, tuple[str, ...]] | None:
        """The fewest hosts: n GPUs where the job's other tasks went (`held`), joined best
        with theirs; None when no such host has n free."""
        gpus = self.state.gpus
        hosts = [gpus[u].host for u in held]
        for there in sorted(set(hosts), key=lambda h: (-hosts.count(h), h)):
            anchors = [u for u in held if gpus[u].host == there]
            chosen = self.pick(there, owner, w, n, avoid, anchors)
            if len(chosen) == n:
                return there, chosen
        return None

    def place_labelled(
        self, job: QueuedJob, d: Demand, w: int, avoid: frozenset[str], held: Sequence[str] = ()
    ) -> tuple[str, tuple[str, ...]]:
        """place_any among the GPUs that meet the demand's labels (the others avoided)."""
        unlabelled = self.unlabelled(d.labels)
        if len(unlabelled) == len(self.state.gpus):
            raise Refused(f"no GPU labelled {selector_text(d.labels)} is known")
        try:
            return self.place_any(job, replace(d, labels=()), w, avoid | unlabelled, held)
        except Refused as refused:
            raise Refused(
                f"{refused.reason} (labelled {selector_text(d.labels)})", refused.busy_only
            ) from None

    def unlabelled(self, labels: tuple[str, ...]) -> frozenset[str]:
        """The GPUs that do not meet `labels`, once per pass and selector."""
        found = self._unlabelled.get(labels)
        if found is None:
            found = self._unlabelled[labels] = frozenset(
                g.uuid for g in self.state.gpus.values() if not matches(g.labels, labels)
            )
        return found

    def pick(
        self,
        host: str,
        owner: str,
        w: int,
        n: int,
        avoid: frozenset[str],
        anchors: Sequence[str] = (),
    ) -> tuple[str, ...]:
        """Up to n usable free GPUs of the host: the best joined with each other and with
        `anchors` (GPUs the job holds there) as the host's topology says; without one (or
        for one GPU alone), lowest index first."""
        topology = self.state.topologies.get(host)
        chosen: list[str] = []
        for uuid in self.host_free.get(host, ()):
            if uuid not in avoid and self.usable_by(uuid, owner, w):
                chosen.append(uuid)
                if len(chosen) == n and (topology is None or (n < 2 and not anchors)):
                    break
        if len(chosen) <= n:
            return tuple(chosen)
        index = self._index
        by_index = {index(uuid): uuid for uuid in chosen}
        best, _ = best_set(topology, list(by_index), n, [index(u) for u in anchors])
        return tuple(by_index[i] for i in best)

    def _index(self, uuid: str) -> int:
        index = self.state.gpus[uuid].index
        return index if index is not None else -1 - self.rank[uuid]  # never in a matrix

    def best_connected_host(self, owner: str, w: int, n: int, avoid: frozenset[str]) -> str | None:
        """The host whose best set of n usable free GPUs is best joined; among equals the one
        with the fewest usable free GPUs (pack) or the most (spread), then by name."""
        if n > self.max_free():
            return None
        memo = (owner if owner in self.special else None, n)
        if not avoid and self._failed.get(memo, _NEVER + 1) <= w:
            return None  # failed for a shorter window already: usable GPUs only get fewer
        spread = self.state.packing == SPREAD
        mine = self.special.get(owner) or {}
        best: str | None = None
        best_key: tuple[tuple[int, int], int] | None = None
        for host, lims in self.host_lims.items():  # in host order
            if len(lims) < n:
                continue
            if len(lims) - bisect.bisect_left(lims, w) < n and not mine.get(host):
                continue  # too few free for w, and the owner goes no further than anyone here
            usable = [
                u for u in self.host_free[host] if u not in avoid and self.usable_by(u, owner, w)
            ]
            if len(usable) < n:
                continue
            topology = self.state.topologies.get(host)
            cost = (0, 0)
            if n >= 2:
                cost = best_set(topology, [self._index(u) for u in usable], n)[1]
            key = (cost, -len(usable) if spread else len(usable))
            if best_key is None or key < best_key:
                best, best_key = host, key
        if best is None and not avoid and self._settled:
            self._failed[memo] = min(w, self._failed.get(memo, _NEVER + 1))
        return best

    def best_host(self, owner: str, w: int, n: int, avoid: frozenset[str]) -> str | None:  # noqa: C901 - the placement rule's tie-breaks, measured hot in bench/scheduler.py
        """The host with the fewest usable free GPUs (at least n), then by name; with hosts'
        topologies known (n of 2 or more) or packing spread, `best_connected_host`."""
        if self.state.packing == SPREAD or (n >= 2 and self.state.topologies):
            return self.best_connected_host(owner, w, n, avoid)
        if n > self.max_free():
            return None
        memo = (owner if owner in self.special else None, n)
        if not avoid and self._failed.get(memo, _NEVER + 1) <= w:
            return None  # failed for a shorter window already: usable GPUs only get fewer
        mine = self.special.get(owner)
        avoided: dict[str, list[str]] = {}
        for uuid in avoid:
            if uuid in self.free:
                avoided.setdefault(self.state.gpus[uuid].host, []).append(uuid)
        free = self.free
        lims_of = self._lims
        best: str | None = None
        best_count = _NEVER
        for host, lims in self.host_lims.items():  # in host order
            total = len(lims)
            if total < n:
                continue
            count = total - bisect.bisect_left(lims, w)
            if mine is not None:
                extra = mine.get(host)
                if extra:
                    for uuid in extra:
                        if uuid in free:
                            generic, special = lims_of[uuid]
                            if generic < w <= special[owner]:
                                count += 1
            if avoided:
                for uuid in avoided.get(host, ()):
                    if self.usable_by(uuid, owner, w):
                        count -= 1
            if n <= count < best_count:
                best, best_count = host, count
                if count == n:
                    break  # nothing fits tighter; later hosts tie at best, by name
        if best is None and not avoid and self._settled:
            self._failed[memo] = min(w, self._failed.get(memo, _NEVER + 1))
        return best

    # --- anti-starvation

    def fits_ignoring_busy(
        self, host: str, owner: str, w: int, n: int, avoid: frozenset[str]
    ) -> bool:
        if not self.probe_busy:
            return False  # only the hold needs to know
        usable = 0
        for uuid in self.host_all.get(host, ()):
            if uuid not in avoid and self.usable_by(uuid, owner, w):
                usable += 1
        return usable >= n

    def hold(self, job: QueuedJob, w: int, avoid: frozenset[str]) -> int | None:  # noqa: C901 - the hold rule in one pass, measured hot in bench/scheduler.py
        """Keep for the job the free GPUs of a placement that ignores busy GPUs; how many
        (None, nothing kept: no such placement)."""
        owner, gpus = job.owner, self.state.gpus
        local: set[str] = set()
        for d in _placement_order(job.demands):
            if d.gpus:
                hosts = {gpus[u].host for u in d.gpus if u in gpus}
                if (
                    len(set(d.gpus)) < len(d.gpus)
                    or hosts != {d.host or next(iter(hosts), None)}
                    or any(
                        u not in gpus or u in avoid or u in local or not self.usable_by(u, owner, w)
                        for u in d.gpus
                    )
                ):
                    return None
                local.update(d.gpus)
            elif (d.gpu_count or 0) > 0:
                n = d.gpu_count or 0
                shunned = avoid | self.unlabelled(d.labels) if d.labels else avoid
                best: tuple[int, int, str] | None = None
                best_gpus: list[str] = []
                for host in [d.host] if d.host is not None else list(self.host_all):
                    usable = [
                        u
                        for u in self.host_all.get(host, ())
                        if u not in shunned and u not in local and self.usable_by(u, owner, w)
                    ]
                    if len(usable) < n:
                        continue
                    usable.sort(key=lambda u: (u not in self.free, self.rank[u]))
                    key = (-sum(1 for u in usable if u in self.free), len(usable), host)
                    if best is None or key < best:
                        best, best_gpus = key, usable[:n]
                if best is None:
                    return None
                local.update(best_gpus)
            elif d.host is None:
                return None
        held = sorted((u for u in local if u in self.free), key=self.rank.__getitem__)
        for uuid in held:
            self.take(uuid)
            self.given[uuid] = (job.job_id, True)
        return len(held)


def _placement_order(demands: Sequence[Demand]) -> list[Demand]:
    """Named GPUs first, then any-N largest first, then tasks without GPUs."""
    return sorted(
        demands,
        key=lambda d: (0, 0, d.index) if d.gpus else (1, -(d.gpu_count or 0), d.index),
    )


def _named(gpus: Mapping[str, Gpu], uuid: str) -> Gpu:
    """A GPU a task names; refused when unknown or failed (it waits for it to heal)."""
    gpu = gpus.get(uuid)
    if gpu is None:
        raise Refused(f"GPU {uuid} is not known")
    if gpu.failed is not None:
        raise Refused(f"GPU {_label(gpu)} has failed ({gpu.failed}); waiting for it to heal")
    return gpu


def _label(gpu: Gpu) -> str:
    return f"{gpu.host}:{gpu.index if gpu.index is not None else gpu.uuid}"


def _when(at: datetime) -> str:
    if at.tzinfo is None:
        return at.strftime("%Y-%m-%d %H:%M")
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _duration(us: int) -> str:
    if us < 60_000_000:
        return f"{us / 1e6:g} s"
    hours, minutes = divmod(round(us / 60e6), 60)
    if hours and minutes:
        return f"{hours} h {minutes} min"
    return f"{hours} h" if hours else f"{minutes} min"
