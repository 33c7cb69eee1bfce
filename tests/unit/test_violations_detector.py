"""The detector, the reservation book and incident reconciliation: pure rules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from services.shared.config import DEFAULT_ALLOW, EscalationStep, parse_allow_entry, parse_step
from services.shared.reservation_book import Holding, ReservationBook
from services.violations.detector import SeenProcess, detect, executable, is_allowed
from services.violations.incidents import (
    RESOLVED_GONE,
    open_incident,
    reconcile,
)

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
ALLOW = tuple(parse_allow_entry(e) for e in DEFAULT_ALLOW)


def reservation(
    rid: int = 7,
    owner: str = "alice",
    gpus: tuple[str, ...] = ("GPU-2",),
    start: datetime = T0,
    hours: float = 4,
    guests: tuple[str, ...] = (),
    status: str = "active",
) -> dict:
    return {
        "id": rid,
        "owner": owner,
        "guests": list(guests),
        "gpus": [{"uuid": u, "host": "h1", "index": int(u.split("-")[1])} for u in gpus],
        "start": start.isoformat(),
        "end": (start + timedelta(hours=hours)).isoformat(),
        "status": status,
    }


def proc(pid: int, user: str | None, gpu: str = "GPU-2", command: str = "python train.py"):
    return SeenProcess(pid, user, command, gpu, started_at=T0 + timedelta(minutes=5))


def book_with(*datas: dict) -> ReservationBook:
    book = ReservationBook()
    book.load(datas)
    return book


def run(processes, book, at=T0 + timedelta(minutes=10), mode="reservations"):
    return detect("h1", processes, lambda uuid: book.holding(uuid, at), mode=mode, allow=ALLOW)


def test_owner_and_guests_may_use_their_gpu_others_violate():
    book = book_with(reservation(guests=("carol",)))
    offences = run([proc(1, "alice"), proc(2, "carol"), proc(3, "bob"), proc(4, "bob")], book)
    assert len(offences) == 1
    offence = offences[0]
    assert offence.offender == "bob"
    assert [p.pid for p in offence.processes] == [3, 4]
    assert offence.holding is not None and offence.holding.reservation_id == 7
    assert offence.key == ("bob", "h1", "GPU-2", 7)


def test_unreserved_gpu_violates_only_in_strict_mode():
    book = book_with()
    assert run([proc(1, "bob", gpu="GPU-3")], book) == []
    strict = run([proc(1, "bob", gpu="GPU-3")], book, mode="strict")
    assert [(o.offender, o.holding) for o in strict] == [("bob", None)]


def test_outside_the_reservation_time_nothing_violates():
    book = book_with(reservation())
    assert run([proc(1, "bob")], book, at=T0 - timedelta(seconds=1)) == []
    assert run([proc(1, "bob")], book, at=T0 + timedelta(hours=4)) == []
    assert run([proc(1, "bob")], book, at=T0) != []


def test_allowlist_needs_the_right_user_and_unknown_owners_are_left_alone():
    book = book_with(reservation())
    xorg = proc(1, "root", command="/usr/lib/xorg/Xorg -core :0")
    renamed = proc(2, "bob", command="/home/bob/Xorg --train")
    persistenced = proc(3, "nvidia-persistenced", command="nvidia-persistenced --user x")
    offences = run([xorg, renamed, persistenced, proc(4, None)], book)
    assert [(o.offender, [p.pid for p in o.processes]) for o in offences] == [("bob", [2])]
    assert executable("/usr/lib/xorg/Xorg -core :0") == "Xorg"
    assert is_allowed("anyone", "nvidia-persistenced", ALLOW)
    assert not is_allowed("bob", "Xorg", ALLOW)


def test_one_offence_per_offender_and_gpu():
    book = book_with(reservation(gpus=("GPU-1", "GPU-2")))
    offences = run(
        [proc(1, "bob", "GPU-1"), proc(2, "bob", "GPU-2"), proc(3, "carl", "GPU-2")], book
    )
    assert sorted(o.key for o in offences) == [
        ("bob", "h1", "GPU-1", 7),
        ("bob", "h1", "GPU-2", 7),
        ("carl", "h1", "GPU-2", 7),
    ]


users = st.sampled_from(["alice", "bob", "carol", "root", None])
gpus = st.sampled_from(["GPU-1", "GPU-2", "GPU-3"])


@given(st.lists(st.tuples(users, gpus), max_size=30), st.sampled_from(["reservations", "strict"]))
def test_detector_agrees_with_a_naive_reading(seen, mode):
    book = book_with(reservation(gpus=("GPU-1", "GPU-2"), guests=("carol",)))
    processes = [proc(i, user, gpu) for i, (user, gpu) in enumerate(seen)]
    offences = run(processes, book, mode=mode)
    flagged = {p.pid for o in offences for p in o.processes}
    for p in processes:
        reserved = p.gpu_uuid in ("GPU-1", "GPU-2")
        expected = p.user is not None and (
            (reserved and p.user not in ("alice", "carol")) or (not reserved and mode == "strict")
        )
        assert (p.pid in flagged) == expected, p
    for offence in offences:
        assert {p.user for p in offence.processes} == {offence.offender}
        assert {p.gpu_uuid for p in offence.processes} == {offence.gpu_uuid}


def test_book_ignores_late_events_of_a_cancelled_reservation_until_restored():
    book = ReservationBook()
    data = reservation()
    at = T0 + timedelta(minutes=1)
    book.apply("reservation.created", data)
    assert book.holding("GPU-2", at) is not None
    gone = book.apply("reservation.cancelled", {**data, "status": "cancelled"})
    assert gone is not None and gone.reservation_id == 7
    book.apply("reservation.created", data)  # redelivered late
    book.load([data])  # a start-up answer fetched before the cancel
    assert book.holding("GPU-2", at) is None
    book.apply("reservation.updated", {**data, "changed": ["status"]})
    assert book.holding("GPU-2", at) is not None


def test_book_moves_a_reservation_when_its_times_or_guests_change():
    book = ReservationBook()
    book.apply("reservation.created", reservation())
    book.apply(
        "reservation.updated",
        {**reservation(start=T0 + timedelta(hours=1), guests=("bob",)), "changed": ["start"]},
    )
    assert book.holding("GPU-2", T0 + timedelta(minutes=30)) is None
    held = book.holding("GPU-2", T0 + timedelta(minutes=90))
    assert held is not None and held.may_use("bob")
    assert [h.reservation_id for h in book.ended(T0 + timedelta(hours=6))] == [7]
    assert len(book) == 0


STEPS = tuple(parse_step(s) for s in ("0s terminal offender", "60s email admins", "5m kill"))


def make_incident(processes, at=T0):
    book = book_with(reservation())
    (offence,) = run(processes, book, at=at)
    return open_incident("inc-1", offence, at, mode="reservations", steps=STEPS, gpu_index=2)


def test_open_incident_context_and_since():
    incident = make_incident([proc(3, "bob")], at=T0 + timedelta(minutes=10))
    context = incident.context()
    assert context["owner"] == "alice" and context["reservation_id"] == 7
    assert context["pids"] == [3] and context["gpu_index"] == 2
    assert incident.since == T0 + timedelta(minutes=5)  # when the process started
    old = SeenProcess(9, "bob", "x", "GPU-2", started_at=T0 - timedelta(hours=1))
    assert make_incident([old], at=T0 + timedelta(minutes=1)).since == T0  # reservation start


def test_steps_fall_due_in_order_once_and_never_after_resolution():
    at = T0 + timedelta(minutes=10)
    incident = make_incident([proc(3, "bob")], at=at)
    assert incident.due_steps(at) == [0]
    assert incident.due_steps(at + timedelta(seconds=61)) == [0, 1]
    done = incident.__class__(**{**incident.__dict__, "steps_done": frozenset({0, 1})})
    assert done.due_steps(at + timedelta(minutes=10)) == [2]
    assert done.next_due_at() == at + timedelta(minutes=5)
    escalation = incident.escalation(1)
    assert escalation["action"] == "email" and escalation["recipients"] == ["admins"]
    assert escalation["next_step"] == "300s kill"
    resolved = done.__class__(**{**done.__dict__, "resolved_at": at})
    assert resolved.due_steps(at + timedelta(hours=1)) == [] and resolved.next_due_at() is None
    assert EscalationStep(90, "kill").text == "90s kill"


def test_reconcile_opens_updates_resolves_and_ignores_stale_snapshots():
    at = T0 + timedelta(minutes=10)
    book = book_with(reservation())
    incident = make_incident([proc(3, "bob")], at=at)

    same = reconcile([incident], run([proc(3, "bob")], book), at + timedelta(seconds=2))
    assert (same.opened, same.changed, same.resolved) == ([], [], [])
    assert same.seen[0].last_seen_at == at + timedelta(seconds=2)

    more = reconcile(
        [incident], run([proc(3, "bob"), proc(4, "bob"), proc(5, "eve")], book), at + timedelta(2)
    )
    assert [p.pid for p in more.changed[0].processes] == [3, 4]
    assert [o.offender for o in more.opened] == ["eve"]

    gone = reconcile([incident], run([proc(1, "alice")], book), at + timedelta(seconds=4))
    assert gone.resolved[0].resolve_reason == RESOLVED_GONE
    assert gone.resolved[0].resolved_at == at + timedelta(seconds=4)

    stale = reconcile([incident], [], at - timedelta(seconds=1))
    assert (stale.opened, stale.changed, stale.resolved) == ([], [], [])


def test_holding_from_rpc_answer_keeps_gpu_indexes():
    held = Holding.from_data(reservation(gpus=("GPU-1", "GPU-5")))
    assert held.gpus == {"GPU-1": ("h1", 1), "GPU-5": ("h1", 5)}
