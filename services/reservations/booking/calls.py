"""Reservations, access rules and GPUs as the RPC methods ask for them: arguments (loaded by the
api's schemas) turned into the domain's terms and handed to `Changes` or `Queries`.
"""

from __future__ import annotations

from datetime import datetime, time, timedelta
from typing import Any

from services.reservations import api
from services.reservations.booking.activity import ActivityBoard
from services.reservations.booking.changes import Changes
from services.reservations.booking.create_keys import key_for
from services.reservations.booking.queries import Queries
from services.reservations.rules.domain import AccessRule, IdlePolicy, Limits, WeeklyWindow
from services.reservations.rules.refusals import START_GRACE
from services.shared.bus import RPC_DELIVERY
from services.shared.errors import InvalidRequest


def weekly_window(raw: dict[str, Any]) -> WeeklyWindow:
    def parse(text: str) -> time:
        hours, minutes = text.split(":")
        return time(0, 0) if hours == "24" else time(int(hours), int(minutes))

    # Validated by api.WindowArgs: every name is a day.
    days = frozenset(
        day if isinstance(day, int) else api.day_index(day) or 0 for day in raw["days"]
    )
    return WeeklyWindow(days=days, start=parse(raw["start"]), end=parse(raw["end"]))


def default_valid_from(now: datetime) -> datetime:
    """A rule given no start starts at the whole minute a booking's grace reaches back to:
    a booking that starts "now" (up to START_GRACE ago) is covered, not refused for the
    seconds between the minute and the rule's creation."""
    return (now - START_GRACE).replace(second=0, microsecond=0)


def access_rule(args: dict[str, Any], now: datetime) -> AccessRule:
    max_duration = args["max_duration_s"]
    return AccessRule(
        id=args.get("id", 0),
        name=args["name"].strip(),
        valid_from=args["valid_from"] or default_valid_from(now),
        valid_until=args["valid_until"],
        users=frozenset(args["users"]),
        groups=frozenset(args["groups"]),
        all_gpus=args["all_gpus"],
        hosts=frozenset(args["hosts"]),
        gpus=frozenset(args["gpus"]),
        labels=tuple(dict.fromkeys(args["labels"])),
        windows=tuple(weekly_window(w) for w in args["windows"]),
        timezone=args["timezone"],
        limits=Limits(
            max_gpus=args["max_gpus"],
            max_duration=None if max_duration is None else timedelta(seconds=max_duration),
            max_gpu_hours_per_week=args["max_gpu_hours_per_week"],
        ),
        idle_policy=None if args.get("idle_policy") is None else IdlePolicy(**args["idle_policy"]),
    )


def _next_minute(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0) + timedelta(minutes=1)


class BookingCalls:
    def __init__(
        self, changes: Changes, queries: Queries, activity: ActivityBoard | None = None
    ) -> None:
        self.changes = changes
        self.queries = queries
        self.activity = activity  # what runs on the GPUs now: the warnings of a booking

    # --- GPUs and access rules ------------------------------------------------------------------

    async def list_gpus(self, _args: dict[str, Any]) -> list[dict[str, Any]]:
        return await self.queries.gpus()

    async def list_rules(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        if args["actor"] is None:
            return await self.queries.rules()
        actor = await self.changes.actor(args["actor"])
        return await self.queries.rules(None if actor.is_admin else actor.username)

    async def create_rule(self, args: dict[str, Any]) -> dict[str, Any]:
        actor = await self.changes.actor(args["actor"])
        rule = access_rule(args, self.changes.clock())
        return await self.changes.create_rule(actor, rule, args["description"])

    async def update_rule(self, args: dict[str, Any]) -> dict[str, Any]:
        actor = await self.changes.actor(args["actor"])
        rule = access_rule(args, self.changes.clock())
        return await self.changes.update_rule(actor, rule, args["description"])

    async def delete_rule(self, args: dict[str, Any]) -> dict[str, Any]:
        actor = await self.changes.actor(args["actor"])
        return await self.changes.delete_rule(actor, args["id"])

    # --- reservations ---------------------------------------------------------------------------

    async def create_reservation(self, args: dict[str, Any]) -> dict[str, Any]:
        # The actor by name: looked up in memory inside the write transaction (no extra query).
        created = await self.changes.create(
            args["actor"],
            owner=args.get("owner") or args["actor"],
            gpu_uuids=args["gpus"],
            start=args["start"],
            end=args["end"],
            title=args["title"],
            description=args["description"],
            guests=args["guests"],
            # The same create again (the client's Idempotency-Key, or this call delivered
            # again): answered with the reservation it made.
            key=key_for(args["actor"], args.get("idempotency_key"), RPC_DELIVERY.get()),
        )
        # Booked all the same: the GPUs are free to reserve, someone just uses them now.
        now = self.changes.clock()
        warnings = [] if self.activity is None else self.activity.warnings(created, now)
        return {**created, "warnings": warnings}

    async def get_reservation(self, args: dict[str, Any]) -> dict[str, Any]:
        return await self.queries.get(args["id"])

    async def update_reservation(self, args: dict[str, Any]) -> dict[str, Any]:
        actor = await self.changes.actor(args["actor"])
        return await self.changes.update(
            actor,
            args["id"],
            title=args.get("title"),
            description=args.get("description"),
            start=args.get("start"),
            end=args.get("end"),
            guests=args.get("guests"),
        )

    async def cancel_reservation(self, args: dict[str, Any]) -> dict[str, Any]:
        actor = await self.changes.actor(args["actor"])
        return await self.changes.cancel(actor, args["id"], args["reason"])

    async def end_reservation(self, args: dict[str, Any]) -> dict[str, Any]:
        return await self.changes.end_now(await self.changes.actor(args["actor"]), args["id"])

    async def calendar(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        return await self.queries.calendar(
            args["start"],
            args["end"],
            args["gpus"],
            owner=args["owner"],
            include_cancelled=args["include_cancelled"],
        )

    async def overview(self, args: dict[str, Any]) -> dict[str, Any]:
        return await self.queries.overview(
            args["actor"],
            args["start"],
            args["end"],
            timedelta(minutes=args["slot_minutes"]),
            args["gpus"],
            compact=args["format"] == "compact",
        )

    async def find_slot(self, args: dict[str, Any]) -> dict[str, Any]:
        duration = timedelta(minutes=args["duration_minutes"])
        bounds = self.changes.bounds
        if not bounds.shortest <= duration <= bounds.longest:
            # A slot nobody could book: refused, not offered.
            raise InvalidRequest(
                f"duration_minutes must be from {bounds.shortest / timedelta(minutes=1):g} to "
                f"{bounds.longest / timedelta(minutes=1):g} (the shortest and longest reservation)",
                {"field": "duration_minutes"},
            )
        return await self.queries.find_slot(
            args["actor"],
            count=args["count"],
            duration=duration,
            not_before=args["not_before"] or _next_minute(self.changes.clock()),
            host=args["host"],
            gpu_model=args["gpu_model"],
            same_host=args["same_host"],
            now=self.changes.clock(),
            labels=args["labels"],
        )

    async def active_reservations(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        return await self.queries.active_at(
            args["at"] or self.changes.clock(), args["gpus"], args["host"]
        )

    async def check_use(self, args: dict[str, Any]) -> dict[str, Any]:
        refusals = await self.queries.use_refusals(
            args["user"], args["gpus"], args["start"], args["end"]
        )
        return {"allowed": not refusals, "reasons": refusals}
