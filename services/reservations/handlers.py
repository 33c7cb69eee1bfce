"""What the reservations service answers: RPC methods (beside `health`) and event handlers.

Every method that acts for someone takes `actor`: the username the gateway authenticated.
The service looks the actor up itself (roles come from the database, not from a token) and
decides what they may do. Arguments are validated here; times are ISO-8601 with an offset.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, time, timedelta
from typing import Any

from marshmallow import Schema, ValidationError, fields, validate, validates_schema
from sqlalchemy import update
from sqlalchemy.dialects import postgresql, sqlite

from services.reservations import accounts, sessions
from services.reservations.commands import Commands
from services.reservations.domain import AccessRule, Limits, WeeklyWindow
from services.reservations.queries import Queries
from services.reservations.store import Store, now_ms, to_ms
from services.reservations.tables import gpus
from services.shared.bus import EventHandler, RpcHandler
from services.shared.contracts import Envelope
from services.shared.errors import AuthenticationFailed, Forbidden, InvalidRequest
from services.shared.validation import load_args as _load

DAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


_Str = fields.String
_Time = fields.AwareDateTime


class _Args(Schema):
    actor = _Str(required=True, validate=validate.Length(min=1))


class CreateReservationArgs(_Args):
    owner = _Str(load_default=None)
    gpus = fields.List(_Str(validate=validate.Length(min=1)), required=True)
    start = _Time(required=True)
    end = _Time(required=True)
    title = _Str(required=True)
    description = _Str(load_default="")
    guests = fields.List(_Str(validate=validate.Length(min=1)), load_default=list)


class ReservationIdArgs(_Args):
    id = fields.Integer(required=True, strict=True)


class UpdateReservationArgs(ReservationIdArgs):
    title = _Str(load_default=None)
    description = _Str(load_default=None)
    start = _Time(load_default=None)
    end = _Time(load_default=None)
    # Replaces the list ([] removes every guest); None leaves it as it is.
    guests = fields.List(_Str(validate=validate.Length(min=1)), load_default=None)


class CancelReservationArgs(ReservationIdArgs):
    reason = _Str(load_default="", validate=validate.Length(max=500))


class GetReservationArgs(Schema):
    id = fields.Integer(required=True, strict=True)


class CalendarArgs(Schema):
    start = _Time(required=True)
    end = _Time(required=True)
    gpus = fields.List(_Str(), load_default=None)
    owner = _Str(load_default=None)
    include_cancelled = fields.Boolean(load_default=False)


class OverviewArgs(_Args):
    start = _Time(required=True)
    end = _Time(required=True)
    slot_minutes = fields.Integer(load_default=30, validate=validate.OneOf((30, 60)))
    gpus = fields.List(_Str(), load_default=None)


class FindSlotArgs(_Args):
    count = fields.Integer(required=True, validate=validate.Range(min=1, max=1024))
    duration_minutes = fields.Integer(required=True, validate=validate.Range(min=1))
    not_before = _Time(load_default=None)
    host = _Str(load_default=None)
    gpu_model = _Str(load_default=None)
    same_host = fields.Boolean(load_default=False)


class ActiveArgs(Schema):
    at = _Time(load_default=None)
    gpus = fields.List(_Str(), load_default=None)
    host = _Str(load_default=None)


class UseArgs(Schema):
    user = _Str(required=True, validate=validate.Length(min=1))
    gpus = fields.List(_Str(), required=True, validate=validate.Length(min=1, max=1024))
    start = _Time(required=True)
    end = _Time(required=True)

    @validates_schema
    def ordered(self, data: dict[str, Any], **_: Any) -> None:
        if data["end"] <= data["start"]:
            raise ValidationError("must be after start", "end")


class WindowArgs(Schema):
    days = fields.List(fields.Raw(), required=True, validate=validate.Length(min=1))
    start = _Str(required=True, validate=validate.Regexp(r"^([01]\d|2[0-3]):[0-5]\d$"))
    end = _Str(required=True, validate=validate.Regexp(r"^([01]\d|2[0-3]):[0-5]\d$|^24:00$"))

    @validates_schema
    def known_days(self, data: dict[str, Any], **_: Any) -> None:
        for day in data["days"]:
            if not (
                (isinstance(day, int) and not isinstance(day, bool) and 0 <= day <= 6)
                or (isinstance(day, str) and _day_index(day) is not None)
            ):
                raise ValidationError(
                    f"{day!r} is not a day: 0 (Monday) to 6 (Sunday), or mon..sun", "days"
                )


_Name = _Str(validate=validate.Length(min=1, max=255))
# Limits fit the 32-bit columns; times stay where datetime arithmetic cannot overflow.
_MAX_INT = 2**31 - 1
_SANE_TIME = validate.Range(
    min=datetime(1970, 1, 1, tzinfo=UTC), max=datetime(9000, 1, 1, tzinfo=UTC)
)


class RuleArgs(_Args):
    name = _Str(required=True, validate=validate.Length(min=1, max=128))
    description = _Str(load_default="", validate=validate.Length(max=500))
    users = fields.List(_Name, load_default=list)
    groups = fields.List(_Name, load_default=list)
    all_gpus = fields.Boolean(load_default=False)
    hosts = fields.List(_Name, load_default=list)
    gpus = fields.List(_Name, load_default=list)
    valid_from = _Time(load_default=None, validate=_SANE_TIME)
    valid_until = _Time(load_default=None, allow_none=True, validate=_SANE_TIME)
    windows = fields.List(fields.Nested(WindowArgs), load_default=list)
    timezone = _Str(load_default="UTC")
    max_gpus = fields.Integer(
        load_default=None, allow_none=True, validate=validate.Range(min=0, max=_MAX_INT)
    )
    max_duration_s = fields.Integer(
        load_default=None, allow_none=True, validate=validate.Range(min=0, max=_MAX_INT)
    )
    max_gpu_hours_per_week = fields.Float(
        load_default=None, allow_none=True, validate=validate.Range(min=0, max=1e9)
    )


class UpdateRuleArgs(RuleArgs):
    id = fields.Integer(required=True, strict=True)


class RuleIdArgs(_Args):
    id = fields.Integer(required=True, strict=True)


class AuthenticateArgs(Schema):
    username = _Str(required=True)
    password = _Str(required=True)


class LoginArgs(AuthenticateArgs):
    ttl_s = fields.Integer(required=True, strict=True, validate=validate.Range(min=1))


class RefreshArgs(Schema):
    refresh_token = _Str(required=True, validate=validate.Length(min=1, max=256))
    ttl_s = fields.Integer(required=True, strict=True, validate=validate.Range(min=1))


class LogoutArgs(Schema):
    refresh_token = _Str(required=True, validate=validate.Length(min=1, max=256))


class ContactsArgs(Schema):
    usernames = fields.List(_Str(validate=validate.Length(min=1)), required=True)


class UserArgs(_Args):
    username = _Str(required=True)


class CreateUserArgs(UserArgs):
    email = _Str(required=True)
    password = _Str(required=True)
    is_admin = fields.Boolean(load_default=False)
    groups = fields.List(_Str(), load_default=list)


class UpdateUserArgs(UserArgs):
    email = _Str(load_default=None)
    password = _Str(load_default=None)
    is_admin = fields.Boolean(load_default=None, allow_none=True)


class GroupArgs(_Args):
    name = _Str(required=True)


class CreateGroupArgs(GroupArgs):
    description = _Str(load_default="")
    is_default = fields.Boolean(load_default=False)


class UpdateGroupArgs(GroupArgs):
    description = _Str(load_default=None)
    is_default = fields.Boolean(load_default=None, allow_none=True)


class MemberArgs(GroupArgs):
    username = _Str(required=True)


FULL_DAY_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


def _day_index(name: str) -> int | None:
    """mon..sun or monday..sunday (any case); anything else is not a day."""
    text = name.lower()
    for index, (short, full) in enumerate(zip(DAY_NAMES, FULL_DAY_NAMES, strict=True)):
        if text in (short, full):
            return index
    return None


def _window(raw: dict[str, Any]) -> WeeklyWindow:
    def parse(text: str) -> time:
        hours, minutes = text.split(":")
        return time(0, 0) if hours == "24" else time(int(hours), int(minutes))

    # Validated by WindowArgs: every name is a day.
    days = frozenset(day if isinstance(day, int) else _day_index(day) or 0 for day in raw["days"])
    return WeeklyWindow(days=days, start=parse(raw["start"]), end=parse(raw["end"]))


def _rule(args: dict[str, Any], now: datetime) -> AccessRule:
    max_duration = args["max_duration_s"]
    return AccessRule(
        id=args.get("id", 0),
        name=args["name"].strip(),
        valid_from=args["valid_from"] or now,
        valid_until=args["valid_until"],
        users=frozenset(args["users"]),
        groups=frozenset(args["groups"]),
        all_gpus=args["all_gpus"],
        hosts=frozenset(args["hosts"]),
        gpus=frozenset(args["gpus"]),
        windows=tuple(_window(w) for w in args["windows"]),
        timezone=args["timezone"],
        limits=Limits(
            max_gpus=args["max_gpus"],
            max_duration=None if max_duration is None else timedelta(seconds=max_duration),
            max_gpu_hours_per_week=args["max_gpu_hours_per_week"],
        ),
    )


def rpc_methods(store: Store, commands: Commands, queries: Queries) -> dict[str, RpcHandler]:
    now = commands.clock

    # --- accounts -----------------------------------------------------------------------------

    async def authenticate(args: dict[str, Any]) -> dict[str, Any]:
        """The user and roles for a username and password (the same error for both wrong)."""
        query = _load(AuthenticateArgs(), args)
        async with store.read() as conn:
            return await accounts.authenticate(conn, query["username"], query["password"])

    async def login(args: dict[str, Any]) -> dict[str, Any]:
        """Check the password and open a session: the user and a first refresh token."""
        query = _load(LoginArgs(), args)
        async with store.write() as conn:
            user = await accounts.authenticate(conn, query["username"], query["password"])
            token = await sessions.open_session(
                conn, user["username"], query["ttl_s"] * 1000, now_ms()
            )
        return {"user": user, **token}

    async def refresh_session(args: dict[str, Any]) -> dict[str, Any]:
        """The next refresh token of a session and its user as they are now."""
        query = _load(RefreshArgs(), args)
        async with store.write() as conn:
            refreshed = await sessions.rotate(
                conn, query["refresh_token"], query["ttl_s"] * 1000, now_ms()
            )
            user = None
            if refreshed.username is not None:
                user = await accounts.get_user(conn, refreshed.username)
        # Raised after the commit, so that the family's revocation is kept.
        if refreshed.reused:
            raise AuthenticationFailed(sessions.REUSED_TOKEN, {"revoked": True})
        if user is None or refreshed.token is None:
            raise AuthenticationFailed(sessions.INVALID_TOKEN)
        return {"user": user, **refreshed.token}

    async def logout(args: dict[str, Any]) -> dict[str, Any]:
        query = _load(LogoutArgs(), args)
        async with store.write() as conn:
            closed = await sessions.close_session(conn, query["refresh_token"], now_ms())
        return {"revoked": closed}

    async def contacts(args: dict[str, Any]) -> dict[str, Any]:
        """For other services (no actor): e-mail and roles of the known usernames (unknown
        ones are left out), and every admin's username and e-mail.
        """
        query = _load(ContactsArgs(), args)
        async with store.read() as conn:
            return await accounts.contacts(conn, query["usernames"])

    async def get_user(args: dict[str, Any]) -> dict[str, Any]:
        query = _load(UserArgs(), args)
        actor = await commands.actor(query["actor"])
        if actor.username != query["username"] and not actor.is_admin:
            raise Forbidden("only admins see other accounts")
        async with store.read() as conn:
            return await accounts.get_user(conn, query["username"])

    async def list_users(args: dict[str, Any]) -> list[dict[str, Any]]:
        actor = await commands.actor(_load(_Args(), args)["actor"])
        async with store.read() as conn:
            found = await accounts.list_users(conn)
        if actor.is_admin:
            return found
        return [{"username": u["username"], "roles": u["roles"]} for u in found]

    async def create_user(args: dict[str, Any]) -> dict[str, Any]:
        query = _load(CreateUserArgs(), args)
        actor = await commands.actor(query.pop("actor"))
        commands.require_admin(actor)
        async with store.write() as conn:
            created = await accounts.create_user(conn, **query, actor=actor.username)
        commands.on_commit()
        return created

    async def update_user(args: dict[str, Any]) -> dict[str, Any]:
        query = _load(UpdateUserArgs(), args)
        actor = await commands.actor(query.pop("actor"))
        username = query.pop("username")
        if not actor.is_admin and (actor.username != username or query["is_admin"] is not None):
            raise Forbidden("users change their own e-mail and password; admins change roles")
        async with store.write() as conn:
            demoting = query["is_admin"] is False and await accounts.is_admin(conn, username)
            if demoting and await accounts.count_admins(conn) <= 1:
                raise InvalidRequest(f"{username} is the last admin", {"field": "is_admin"})
            updated = await accounts.update_user(conn, username, **query, actor=actor.username)
            if query["password"] is not None:
                await sessions.revoke_user(conn, username, now_ms())
        commands.on_commit()
        return updated

    async def list_groups(args: dict[str, Any]) -> list[dict[str, Any]]:
        await commands.actor(_load(_Args(), args)["actor"])
        async with store.read() as conn:
            return await accounts.list_groups(conn)

    async def create_group(args: dict[str, Any]) -> dict[str, Any]:
        query = _load(CreateGroupArgs(), args)
        commands.require_admin(await commands.actor(query.pop("actor")))
        async with store.write() as conn:
            return await accounts.create_group(conn, **query)

    async def update_group(args: dict[str, Any]) -> dict[str, Any]:
        query = _load(UpdateGroupArgs(), args)
        commands.require_admin(await commands.actor(query.pop("actor")))
        async with store.write() as conn:
            return await accounts.update_group(conn, query.pop("name"), **query)

    async def delete_group(args: dict[str, Any]) -> dict[str, Any]:
        query = _load(GroupArgs(), args)
        actor = await commands.actor(query["actor"])
        commands.require_admin(actor)
        async with store.write() as conn:
            await accounts.delete_group(conn, query["name"])
            changed = await commands.recheck(
                conn, actor, cause="group.deleted", group=query["name"]
            )
        commands.on_commit()
        return {"name": query["name"], **vars(changed)}

    def membership(change: str) -> RpcHandler:
        async def handler(args: dict[str, Any]) -> dict[str, Any]:
            query = _load(MemberArgs(), args)
            actor = await commands.actor(query["actor"])
            commands.require_admin(actor)
            act = accounts.add_member if change == "added" else accounts.remove_member
            async with store.write() as conn:
                did = await act(conn, query["name"], query["username"], actor.username)
                changed = (
                    await commands.recheck(
                        conn,
                        actor,
                        cause=f"group.member_{change}",
                        group=query["name"],
                        username=query["username"],
                        owners={query["username"]},
                    )
                    if did
                    else None
                )
            commands.on_commit()
            return {
                "group": query["name"],
                "username": query["username"],
                "changed": did,
                "cancelled": changed.cancelled if changed else [],
                "restored": changed.restored if changed else [],
            }

        return handler

    # --- GPUs and access rules ----------------------------------------------------------------

    async def list_gpus(_args: dict[str, Any]) -> list[dict[str, Any]]:
        return await queries.gpus()

    async def list_rules(_args: dict[str, Any]) -> list[dict[str, Any]]:
        return await queries.rules()

    async def create_rule(args: dict[str, Any]) -> dict[str, Any]:
        query = _load(RuleArgs(), args)
        actor = await commands.actor(query["actor"])
        return await commands.create_rule(actor, _rule(query, now()), query["description"])

    async def update_rule(args: dict[str, Any]) -> dict[str, Any]:
        query = _load(UpdateRuleArgs(), args)
        actor = await commands.actor(query["actor"])
        return await commands.update_rule(actor, _rule(query, now()), query["description"])

    async def delete_rule(args: dict[str, Any]) -> dict[str, Any]:
        query = _load(RuleIdArgs(), args)
        return await commands.delete_rule(await commands.actor(query["actor"]), query["id"])

    # --- reservations -------------------------------------------------------------------------

    async def create_reservation(args: dict[str, Any]) -> dict[str, Any]:
        query = _load(CreateReservationArgs(), args)
        actor = await commands.actor(query["actor"])
        return await commands.create(
            actor,
            owner=query["owner"] or actor.username,
            gpu_uuids=query["gpus"],
            start=query["start"],
            end=query["end"],
            title=query["title"],
            description=query["description"],
            guests=query["guests"],
        )

    async def get_reservation(args: dict[str, Any]) -> dict[str, Any]:
        return await queries.get(_load(GetReservationArgs(), args)["id"])

    async def update_reservation(args: dict[str, Any]) -> dict[str, Any]:
        query = _load(UpdateReservationArgs(), args)
        actor = await commands.actor(query["actor"])
        return await commands.update(
            actor,
            query["id"],
            title=query["title"],
            description=query["description"],
            start=query["start"],
            end=query["end"],
            guests=query["guests"],
        )

    async def cancel_reservation(args: dict[str, Any]) -> dict[str, Any]:
        query = _load(CancelReservationArgs(), args)
        actor = await commands.actor(query["actor"])
        return await commands.cancel(actor, query["id"], query["reason"])

    async def end_reservation(args: dict[str, Any]) -> dict[str, Any]:
        query = _load(ReservationIdArgs(), args)
        return await commands.end_now(await commands.actor(query["actor"]), query["id"])

    async def calendar(args: dict[str, Any]) -> list[dict[str, Any]]:
        query = _load(CalendarArgs(), args)
        return await queries.calendar(
            query["start"],
            query["end"],
            query["gpus"],
            owner=query["owner"],
            include_cancelled=query["include_cancelled"],
        )

    async def overview(args: dict[str, Any]) -> dict[str, Any]:
        query = _load(OverviewArgs(), args)
        return await queries.overview(
            query["actor"],
            query["start"],
            query["end"],
            timedelta(minutes=query["slot_minutes"]),
            query["gpus"],
        )

    async def find_slot(args: dict[str, Any]) -> dict[str, Any]:
        query = _load(FindSlotArgs(), args)
        not_before = query["not_before"] or _next_minute(now())
        return await queries.find_slot(
            query["actor"],
            count=query["count"],
            duration=timedelta(minutes=query["duration_minutes"]),
            not_before=not_before,
            host=query["host"],
            gpu_model=query["gpu_model"],
            same_host=query["same_host"],
        )

    async def active_reservations(args: dict[str, Any]) -> list[dict[str, Any]]:
        """Per GPU, the reservation holding it at `at` (default: now)."""
        query = _load(ActiveArgs(), args)
        return await queries.active_at(query["at"] or now(), query["gpus"], query["host"])

    async def check_use(args: dict[str, Any]) -> dict[str, Any]:
        """May `user` run on these GPUs over [start, end) without reserving them? (jobs)"""
        query = _load(UseArgs(), args)
        refusals = await queries.use_refusals(
            query["user"], query["gpus"], query["start"], query["end"]
        )
        return {"allowed": not refusals, "reasons": refusals}

    return {
        "authenticate": authenticate,
        "login": login,
        "refresh_session": refresh_session,
        "logout": logout,
        "contacts": contacts,
        "get_user": get_user,
        "list_users": list_users,
        "create_user": create_user,
        "update_user": update_user,
        "list_groups": list_groups,
        "create_group": create_group,
        "update_group": update_group,
        "delete_group": delete_group,
        "add_group_member": membership("added"),
        "remove_group_member": membership("removed"),
        "list_gpus": list_gpus,
        "list_rules": list_rules,
        "create_rule": create_rule,
        "update_rule": update_rule,
        "delete_rule": delete_rule,
        "create_reservation": create_reservation,
        "get_reservation": get_reservation,
        "update_reservation": update_reservation,
        "cancel_reservation": cancel_reservation,
        "end_reservation": end_reservation,
        "calendar": calendar,
        "overview": overview,
        "find_slot": find_slot,
        "active_reservations": active_reservations,
        "check_use": check_use,
    }


def _next_minute(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0) + timedelta(minutes=1)


# --- events -------------------------------------------------------------------------------------


def _upsert(dialect: str) -> Any:
    return postgresql.insert if dialect == "postgresql" else sqlite.insert


def event_handlers(
    store: Store, on_host_sampled: Callable[[Envelope], Awaitable[None]]
) -> dict[tuple[str, str, str], EventHandler]:
    async def gpu_discovered(envelope: Envelope) -> None:
        """Learn a GPU, or its new identity; conditional on time, so replays change nothing."""
        data = envelope.data
        at_ms = to_ms(datetime.fromisoformat(envelope.occurred_at))
        values = {
            "host": data["host"],
            "gpu_index": data["index"],
            "name": data["name"],
            "memory_total_mib": data["memory_total_mib"],
            "present": True,
            "last_change_ms": at_ms,
        }
        async with store.write() as conn:
            insert = _upsert(conn.dialect.name)(gpus).values(
                uuid=data["uuid"], first_seen_ms=at_ms, **values
            )
            await conn.execute(
                insert.on_conflict_do_update(
                    index_elements=[gpus.c.uuid],
                    set_=values,
                    where=gpus.c.last_change_ms <= at_ms,
                )
            )

    async def gpu_disappeared(envelope: Envelope) -> None:
        """A GPU missing from its host stays known (its reservations stay visible)."""
        at_ms = to_ms(datetime.fromisoformat(envelope.data["at"]))
        async with store.write() as conn:
            await conn.execute(
                update(gpus)
                .where(gpus.c.uuid == envelope.data["uuid"], gpus.c.last_change_ms <= at_ms)
                .values(present=False, last_change_ms=at_ms)
            )

    return {
        ("monitor", "gpu.discovered", "gpu_discovered"): gpu_discovered,
        ("monitor", "gpu.disappeared", "gpu_disappeared"): gpu_disappeared,
        ("monitor", "host.sampled", "usage"): on_host_sampled,
    }
