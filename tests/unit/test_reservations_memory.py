"""The in-memory slot index answers what the database's overlap query would."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from services.reservations.booking.memory import Directory, _Timeline

slots = st.lists(
    st.tuples(st.integers(0, 500), st.integers(1, 200)).map(lambda s: (s[0], s[0] + s[1])),
    max_size=40,
)


@given(slots, st.integers(0, 700), st.integers(1, 300))
def test_overlapping_is_every_slot_that_overlaps(
    held: list[tuple[int, int]], start: int, length: int
) -> None:
    timeline = _Timeline()
    for n, (a, b) in enumerate(held):
        timeline.add(a, b, n, "ann")
    end = start + length
    found = sorted(rid for _a, _b, rid, _o in timeline.overlapping(start, end))
    assert found == [n for n, (a, b) in enumerate(held) if a < end and b > start]


def test_touching_slots_do_not_overlap_and_a_placeholder_gets_its_id() -> None:
    timeline = _Timeline()
    timeline.add(10, 20, -1, "ann")
    assert timeline.overlapping(20, 30) == [] and timeline.overlapping(0, 10) == []
    timeline.rename(10, -1, 7)
    assert timeline.overlapping(15, 16) == [(10, 20, 7, "ann")]


def test_the_directory_knows_members_admins_and_unknown_users() -> None:
    directory = Directory(admins={"ann": False, "root": True}, groups={"ann": frozenset({"phd"})})
    ann, root = directory.member("ann"), directory.actor("root")
    assert ann is not None and ann.groups == {"phd"}
    assert root is not None and root.is_admin
    assert directory.member("zed") is None and directory.actor("zed") is None
    assert directory.unknown_users(["zed", "ann", "amy"]) == ["amy", "zed"]
