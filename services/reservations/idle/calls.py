"""The RPC methods of idle reservations: the owner's notices, keep/release (signed in or by a
notice's link), and the admins' counts."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from services.accounts.api import Actor
from services.reservations.booking import repository
from services.reservations.booking.changes import Changes
from services.reservations.idle import rows as idle_store
from services.reservations.idle.watch import LINK_GONE, IdleWatch
from services.reservations.store import Store, from_ms, iso_ms, to_ms
from services.shared.errors import Forbidden, NotFound, StateConflict


class IdleCalls:
    def __init__(self, store: Store, changes: Changes, watch: IdleWatch) -> None:
        self.store = store
        self.changes = changes
        self.watch = watch

    async def _owner_of(self, reservation_id: int) -> str:
        async with self.store.read() as conn:
            found = await repository.record(conn, reservation_id)
        if found is None:
            raise NotFound(f"no reservation {reservation_id}", {"id": reservation_id})
        return found.owner

    async def _may_answer(self, actor_name: str, reservation_id: int) -> Actor:
        actor = await self.changes.actor(actor_name)
        owner = await self._owner_of(reservation_id)
        if owner != actor.username and not actor.is_admin:
            raise Forbidden(
                "only the owner or an admin may answer an idle notice", {"id": reservation_id}
            )
        return actor

    async def _release_at(self, row: Any) -> str | None:
        """When an unanswered notice turns into a release (the policy may have changed)."""
        policy = self.watch.policy_of(row.reservation_id)
        if policy is None or row.notified_at_ms is None:
            return None
        grace = timedelta(minutes=policy.grace_minutes)
        return iso_ms(to_ms(from_ms(row.notified_at_ms) + grace))

    async def notices(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        actor = await self.changes.actor(args["actor"])
        everyone = bool(args["everyone"]) and actor.is_admin
        async with self.store.read() as conn:
            found = await idle_store.pending_of(conn, None if everyone else actor.username)
            records = await repository.records(conn, [row.reservation_id for row in found])
        answer = []
        for row in found:
            record = records.get(row.reservation_id)
            if record is None or record.status != "active" or record.shown_status == "ended":
                continue
            answer.append(
                {
                    "id": row.reservation_id,
                    "owner": record.owner,
                    "title": record.title,
                    "end": iso_ms(record.end_ms),
                    "idle_since": iso_ms(row.since_ms),
                    "notified_at": iso_ms(row.notified_at_ms),
                    "release_at": await self._release_at(row),
                }
            )
        return answer

    async def keep(self, args: dict[str, Any]) -> dict[str, Any]:
        await self._may_answer(args["actor"], args["id"])
        return {**await self.watch.keep(args["id"], None), "action": "keep"}

    async def release(self, args: dict[str, Any]) -> dict[str, Any]:
        actor = await self._may_answer(args["actor"], args["id"])
        ended = await self.watch.release(args["id"], actor, "released_by_owner", None)
        return {"id": args["id"], "action": "release", "released_at": ended["end"]}

    async def link(self, args: dict[str, Any]) -> dict[str, Any]:
        reservation_id, notice = self.watch.token_target(args["token"])
        async with self.store.read() as conn:
            found = await repository.record(conn, reservation_id)
            row = await idle_store.row(conn, reservation_id)
        if found is None:
            raise NotFound("no idle notice has this link")
        pending = (
            row is not None
            and row.outcome is None
            and row.notified_at_ms is not None
            and row.notices == notice
            and row.link_used_notice != notice
        )
        return {
            "id": reservation_id,
            "title": found.title,
            "owner": found.owner,
            "pending": pending,
            "release_at": await self._release_at(row) if pending else None,
        }

    async def answer_link(self, args: dict[str, Any]) -> dict[str, Any]:
        reservation_id, notice = self.watch.token_target(args["token"])
        owner = await self._owner_of(reservation_id)
        if args["action"] == "keep":
            return {**await self.watch.keep(reservation_id, notice), "action": "keep"}
        try:
            ended = await self.watch.release(
                reservation_id, Actor(owner, False), "released_by_owner", notice
            )
        except Forbidden as err:  # it ended meanwhile: nothing left to release
            raise StateConflict(LINK_GONE, {"reservation": reservation_id}) from err
        return {"id": reservation_id, "action": "release", "released_at": ended["end"]}

    async def stats(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        actor = await self.changes.actor(args["actor"])
        self.changes.require_admin(actor)
        async with self.store.read() as conn:
            return await idle_store.stats(conn)
