"""The reservations service through its RPC methods and events, on SQLite and PostgreSQL:
access rules, and rule changes that cancel and restore reservations.

The service and its helpers: tests/support/reservations_service.py.
"""

# ruff: noqa: F811 (the imported fixtures `database_url`, `service` are tests' parameters)

from __future__ import annotations

import pytest

from services.shared.errors import (
    Forbidden,
    InvalidRequest,
    NotAllowed,
)
from tests.support.reservations_service import (  # noqa: F401 (fixtures)
    G0,
    G1,
    Service,
    at,
    book,
    database_url,
    service,
    uuid_of,
)


async def test_deny_by_default_then_rules_with_windows(service: Service) -> None:
    rules = await service.call("list_rules")
    assert [r["name"] for r in rules] == ["users: every GPU, any time"]
    await service.call("delete_rule", actor="admin", id=rules[0]["id"])
    with pytest.raises(NotAllowed) as refused:
        await book(service, "alice", [G0], 0, 1)
    assert refused.value.details["reasons"][0]["code"] == "not_allowed"
    with pytest.raises(Forbidden):
        await service.call(
            "create_rule", actor="alice", name="mine", all_gpus=True, users=["alice"]
        )
    await service.call(
        "create_rule",
        actor="admin",
        name="alice on dgx1 weekdays",
        users=["alice"],
        hosts=["dgx1"],
        windows=[
            {
                "days": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"],
                "start": "00:00",
                "end": "00:00",
            }
        ],
        timezone="Europe/Warsaw",
    )
    await book(service, "alice", [G0], 0, 1)
    with pytest.raises(NotAllowed, match="GPU dgx2:0"):
        await book(service, "alice", [uuid_of("dgx2", 0)], 0, 1)
    with pytest.raises(InvalidRequest, match="timezone"):
        await service.call(
            "create_rule", actor="admin", name="bad", all_gpus=True, timezone="Mars/Olympus"
        )


async def test_rule_changes_cancel_and_restore_future_reservations(service: Service) -> None:
    everyone = (await service.call("list_rules"))[0]
    await service.call("create_group", actor="admin", name="phd")
    await service.call("add_group_member", actor="admin", name="phd", username="alice")
    phd_rule = await service.call(
        "create_rule", actor="admin", name="phd", groups=["phd"], hosts=["dgx1"]
    )
    await service.call("delete_rule", actor="admin", id=everyone["id"])
    kept = await book(service, "alice", [G0], 0, 2)
    # bob may not book at all now; alice loses access when she leaves the group.
    removed = await service.call("remove_group_member", actor="admin", name="phd", username="alice")
    assert removed["cancelled"] == [kept["id"]]
    now_cancelled = await service.call("get_reservation", id=kept["id"])
    assert now_cancelled["status"] == "cancelled" and now_cancelled["cancelled_by_rules"]
    assert "access changed" in now_cancelled["cancel_reason"]
    added = await service.call("add_group_member", actor="admin", name="phd", username="alice")
    assert added["restored"] == [kept["id"]]
    assert (await service.call("get_reservation", id=kept["id"]))["status"] == "active"
    # A quota on the rule: 2 GPU-hours a week; the 2-hour booking uses all of it.
    await service.call(
        "update_rule",
        actor="admin",
        id=phd_rule["id"],
        name="phd",
        groups=["phd"],
        hosts=["dgx1"],
        max_gpu_hours_per_week=2,
    )
    with pytest.raises(NotAllowed) as over:
        await book(service, "alice", [G1], 3, 4)
    assert over.value.details["reasons"][0]["code"] == "limit_quota"
    causes = [
        "group.member_added",
        "rule.created",
        "rule.deleted",
        "group.member_removed",
        "group.member_added",
        "rule.updated",
    ]
    await service.until(
        lambda: len(service.of("access.changed")) == len(causes), "one access.changed per change"
    )
    assert [e["cause"] for e in service.of("access.changed")] == causes
    await service.until(lambda: len(service.of("reservation.cancelled")) == 1, "cancel event")
    cancelled_events = service.of("reservation.cancelled")
    assert cancelled_events[0]["by_rules"] is True
    assert [e["changed"] for e in service.of("reservation.updated")] == [["status"]]
