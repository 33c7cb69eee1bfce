"""Accounts, groups and sessions as the RPC methods do them: who may, then the change in one
transaction (`users`, `sessions`), then the outbox relay woken.

Each method takes its arguments loaded by the api's schema (`services.accounts.api`). What they
need of the reservations the accounts live beside (re-checking bookings after a group change,
waking the relay) comes in as `Bookings`, so accounts import no booking code.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from sqlalchemy.ext.asyncio import AsyncConnection

from services.accounts import ldap_accounts, lifecycle, password_links, sessions
from services.accounts import setup_tokens as setup
from services.accounts import users as accounts
from services.accounts.api import Actor
from services.accounts.ldap_directory import LdapDirectory, grant
from services.reservations.store import Store, now_ms
from services.shared.errors import (
    AlreadyExists,
    AuthenticationFailed,
    Forbidden,
    InvalidRequest,
    StateConflict,
)

log = logging.getLogger("warden.reservations")


class Rechecked(Protocol):
    """What a re-check of reservations did: future ones cancelled and restored, by id."""

    cancelled: list[int]
    restored: list[int]


class Bookings(Protocol):
    """The reservations beside the accounts (`services.reservations.booking.changes.Changes`)."""

    on_commit: Callable[[], None]  # wakes the outbox relay (and what else watches changes)

    async def recheck(
        self,
        conn: AsyncConnection,
        actor: Actor,
        *,
        cause: str,
        group: str | None = None,
        username: str | None = None,
        owners: set[str] | None = None,
    ) -> Rechecked:
        """After a group change: cancel the future reservations no longer allowed, restore
        those allowed again."""
        ...

    async def cancel(self, actor: Actor, reservation_id: int, reason: str = "") -> Any:
        """Cancel one reservation (in its own transaction)."""
        ...


class AccountCalls:
    def __init__(
        self, store: Store, bookings: Bookings, directory: LdapDirectory | None = None
    ) -> None:
        self.store = store
        self.bookings = bookings  # re-checking reservations, on_commit
        self.directory = directory  # [auth.ldap]; None: local accounts only

    async def _actor(self, username: str) -> Actor:
        async with self.store.read() as conn:
            return await accounts.actor(conn, username)

    # --- sessions -------------------------------------------------------------------------------

    async def authenticate(self, args: dict[str, Any]) -> dict[str, Any]:
        async with self.store.read() as conn:
            return await accounts.authenticate(conn, args["username"], args["password"])

    async def login(self, args: dict[str, Any]) -> dict[str, Any]:
        if self.directory is not None:
            async with self.store.read() as conn:
                kind = await ldap_accounts.source(conn, args["username"])
            if kind != "local":  # a directory account, or a name Warden does not know
                return await self._directory_login(self.directory, args)
        async with self.store.write() as conn:
            user = await accounts.authenticate(conn, args["username"], args["password"])
            token = await sessions.open_session(
                conn, user["username"], args["ttl_s"] * 1000, now_ms()
            )
        return {"user": user, **token}

    async def _directory_login(
        self, directory: LdapDirectory, args: dict[str, Any]
    ) -> dict[str, Any]:
        # The directory is asked outside any transaction: a slow server holds no lock.
        found = await directory.sign_in(args["username"], args["password"])
        granted = grant(directory.settings, found.groups)
        async with self.store.write() as conn:
            user, removed = await ldap_accounts.signed_in(conn, found, granted)
            actor = Actor(user["username"], "admin" in user["roles"])
            for group in sorted(removed):  # their bookings through that group may lapse
                await self.bookings.recheck(
                    conn,
                    actor,
                    cause="group.member_removed",
                    group=group,
                    username=user["username"],
                    owners={user["username"]},
                )
            token = await sessions.open_session(
                conn, user["username"], args["ttl_s"] * 1000, now_ms()
            )
        self.bookings.on_commit()
        log.info("user %s signed in through LDAP", user["username"])
        return {"user": user, **token}

    async def refresh_session(self, args: dict[str, Any]) -> dict[str, Any]:
        async with self.store.write() as conn:
            refreshed = await sessions.rotate(
                conn, args["refresh_token"], args["ttl_s"] * 1000, now_ms()
            )
            user = None
            if refreshed.username is not None:
                user = await accounts.get_user(conn, refreshed.username)
        self.bookings.on_commit()  # a reuse revoked the family: announce it
        # Raised after the commit, so that the family's revocation is kept.
        if refreshed.reused:
            raise AuthenticationFailed(sessions.REUSED_TOKEN, {"revoked": True})
        if user is None or refreshed.token is None:
            raise AuthenticationFailed(sessions.INVALID_TOKEN)
        return {"user": user, **refreshed.token}

    async def logout(self, args: dict[str, Any]) -> dict[str, Any]:
        async with self.store.write() as conn:
            closed = await sessions.close_session(conn, args["refresh_token"], now_ms())
        self.bookings.on_commit()
        return {"revoked": closed}

    # --- the first run ----------------------------------------------------------------------------

    async def setup_state(self, _args: dict[str, Any]) -> dict[str, Any]:
        async with self.store.read() as conn:
            return {"needed": await setup.needed(conn)}

    async def issue_setup_token(self, _args: dict[str, Any]) -> dict[str, Any]:
        async with self.store.write() as conn:
            return {"token": await setup.issue_token(conn)}

    async def setup_admin(self, args: dict[str, Any]) -> dict[str, Any]:
        async with self.store.write() as conn:
            user = await setup.create_first_admin(
                conn,
                token=args["token"],
                username=args["username"],
                email=args["email"],
                password=args["password"],
            )
            token = await sessions.open_session(
                conn, user["username"], args["ttl_s"] * 1000, now_ms()
            )
        self.bookings.on_commit()  # user.created
        return {"user": user, **token}

    # --- SSH self-signup: the gateway has the monitor prove the Unix account in between ----

    async def check_signup(self, args: dict[str, Any]) -> dict[str, Any]:
        """Refuse, before any SSH login, what the account could never be made of."""
        username = args["username"]
        accounts.check_user_fields(
            username=username, email=args["email"], password=args["password"]
        )
        async with self.store.read() as conn:
            taken = not await accounts.unknown_usernames(conn, [username])
            known = {group["name"] for group in await accounts.list_groups(conn)}
        if taken:
            raise AlreadyExists(f"user {username!r} exists already", {"username": username})
        missing = sorted(set(args["groups"]) - known)
        if missing:
            raise StateConflict(
                "self-signup is set up with groups that do not exist "
                f"({', '.join(missing)}; auth.ssh_signup_groups): ask an admin",
                {"groups": missing},
            )
        return {"ok": True}

    async def signup(self, args: dict[str, Any]) -> dict[str, Any]:
        """A `user` account in every default group and `groups`, signed in (as login answers)."""
        async with self.store.write() as conn:
            user = await accounts.create_user(
                conn,
                username=args["username"],
                email=args["email"],
                password=args["password"],
                groups=args["groups"],
                actor="ssh-signup",
            )
            token = await sessions.open_session(
                conn, user["username"], args["ttl_s"] * 1000, now_ms()
            )
        self.bookings.on_commit()  # user.created
        return {"user": user, **token}

    # --- users ----------------------------------------------------------------------------------

    async def contacts(self, args: dict[str, Any]) -> dict[str, Any]:
        async with self.store.read() as conn:
            return await accounts.contacts(conn, args["usernames"])

    async def get_user(self, args: dict[str, Any]) -> dict[str, Any]:
        actor = await self._actor(args["actor"])
        if actor.username != args["username"] and not actor.is_admin:
            raise Forbidden("only admins see other accounts")
        async with self.store.read() as conn:
            return await accounts.get_user(conn, args["username"])

    async def list_users(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        actor = await self._actor(args["actor"])
        async with self.store.read() as conn:
            found = await accounts.list_users(conn)
        if actor.is_admin:
            return found
        return [{"username": u["username"], "roles": u["roles"]} for u in found]

    async def create_user(self, args: dict[str, Any]) -> dict[str, Any]:
        fields = dict(args)
        actor = await self._actor(fields.pop("actor"))
        accounts.require_admin(actor)
        async with self.store.write() as conn:
            created = await accounts.create_user(
                conn, **fields, actor=actor.username, change_at_sign_in=True
            )
        self.bookings.on_commit()
        return created

    async def update_user(self, args: dict[str, Any]) -> dict[str, Any]:
        fields = dict(args)
        actor = await self._actor(fields.pop("actor"))
        username = fields.pop("username")
        if not actor.is_admin and (actor.username != username or fields["is_admin"] is not None):
            raise Forbidden("users change their own e-mail and password; admins change roles")
        async with self.store.write() as conn:
            demoting = fields["is_admin"] is False and await accounts.is_admin(conn, username)
            if demoting and await accounts.count_admins(conn) <= 1:
                raise InvalidRequest(f"{username} is the last admin", {"field": "is_admin"})
            updated = await accounts.update_user(
                conn,
                username,
                **fields,
                actor=actor.username,
                change_at_sign_in=actor.username != username,  # an admin chose it
            )
            if fields["password"] is not None:
                await sessions.revoke_user(conn, username, now_ms())
        self.bookings.on_commit()
        return updated

    # --- groups ---------------------------------------------------------------------------------

    async def list_groups(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        await self._actor(args["actor"])
        async with self.store.read() as conn:
            return await accounts.list_groups(conn)

    async def create_group(self, args: dict[str, Any]) -> dict[str, Any]:
        fields = dict(args)
        accounts.require_admin(await self._actor(fields.pop("actor")))
        async with self.store.write() as conn:
            return await accounts.create_group(conn, **fields)

    async def update_group(self, args: dict[str, Any]) -> dict[str, Any]:
        fields = dict(args)
        accounts.require_admin(await self._actor(fields.pop("actor")))
        async with self.store.write() as conn:
            return await accounts.update_group(conn, fields.pop("name"), **fields)

    async def delete_group(self, args: dict[str, Any]) -> dict[str, Any]:
        actor = await self._actor(args["actor"])
        accounts.require_admin(actor)
        async with self.store.write() as conn:
            await accounts.delete_group(conn, args["name"])
            changed = await self.bookings.recheck(
                conn, actor, cause="group.deleted", group=args["name"]
            )
        self.bookings.on_commit()
        return {"name": args["name"], **vars(changed)}

    async def add_group_member(self, args: dict[str, Any]) -> dict[str, Any]:
        return await self._membership(args, "added")

    async def remove_group_member(self, args: dict[str, Any]) -> dict[str, Any]:
        return await self._membership(args, "removed")

    async def _membership(self, args: dict[str, Any], change: str) -> dict[str, Any]:
        actor = await self._actor(args["actor"])
        accounts.require_admin(actor)
        act = accounts.add_member if change == "added" else accounts.remove_member
        async with self.store.write() as conn:
            did = await act(conn, args["name"], args["username"], actor.username)
            changed = (
                await self.bookings.recheck(
                    conn,
                    actor,
                    cause=f"group.member_{change}",
                    group=args["name"],
                    username=args["username"],
                    owners={args["username"]},
                )
                if did
                else None
            )
        self.bookings.on_commit()
        return {
            "group": args["name"],
            "username": args["username"],
            "changed": did,
            "cancelled": changed.cancelled if changed else [],
            "restored": changed.restored if changed else [],
        }

    # --- accounts people run themselves ---------------------------------------------------------

    async def invite_user(self, args: dict[str, Any]) -> dict[str, Any]:
        fields = dict(args)
        actor = await self._actor(fields.pop("actor"))
        accounts.require_admin(actor)
        ttl_ms = fields.pop("link_ttl_s") * 1000
        async with self.store.write() as conn:
            await accounts.create_user(conn, **fields, password=None, actor=actor.username)
            username, by = fields["username"], actor.username
            link = await password_links.issue(
                conn, username, "invite", actor=by, ttl_ms=ttl_ms, now=now_ms()
            )
        self.bookings.on_commit()  # user.created
        return {"username": fields["username"], **link}

    async def reset_password(self, args: dict[str, Any]) -> dict[str, Any]:
        actor = await self._actor(args["actor"])
        accounts.require_admin(actor)
        username, ttl_ms = args["username"], args["link_ttl_s"] * 1000
        async with self.store.write() as conn:
            link = await password_links.issue(
                conn, username, "reset", actor=actor.username, ttl_ms=ttl_ms, now=now_ms()
            )
        log.info("password link for %s", username, extra={"fields": {"actor": actor.username}})
        return {"username": username, **link}

    async def password_link(self, args: dict[str, Any]) -> dict[str, Any]:
        async with self.store.read() as conn:
            return await password_links.peek(conn, args["token"], now_ms())

    async def use_password_link(self, args: dict[str, Any]) -> dict[str, Any]:
        """The new password, and sessions opened before it end (a reset: someone may hold one)."""
        async with self.store.write() as conn:
            now = now_ms()
            user = await password_links.use(conn, args["token"], args["password"], now)
            await sessions.revoke_user(conn, user["username"], now)
            token = await sessions.open_session(conn, user["username"], args["ttl_s"] * 1000, now)
        self.bookings.on_commit()
        return {"user": user, **token}

    async def deactivate_user(self, args: dict[str, Any]) -> dict[str, Any]:
        actor = await self._actor(args["actor"])
        accounts.require_admin(actor)
        username = args["username"]
        async with self.store.write() as conn:
            now = now_ms()
            user = await lifecycle.set_active(conn, actor, username, active=False, now=now)
            future = await lifecycle.future_bookings(conn, username, now)
        self.bookings.on_commit()
        cancelled: list[int] = []
        for reservation_id in future if args["free_bookings"] else []:
            # Each in its own transaction: one that started meanwhile is refused and kept.
            try:
                await self.bookings.cancel(actor, reservation_id, f"{username} was deactivated")
            except (InvalidRequest, StateConflict, Forbidden) as err:
                log.info("reservation %s of %s kept: %s", reservation_id, username, err)
                continue
            cancelled.append(reservation_id)
        return {"user": user, "cancelled": cancelled}

    async def activate_user(self, args: dict[str, Any]) -> dict[str, Any]:
        actor = await self._actor(args["actor"])
        accounts.require_admin(actor)
        async with self.store.write() as conn:
            user = await lifecycle.set_active(
                conn, actor, args["username"], active=True, now=now_ms()
            )
        self.bookings.on_commit()
        return user

    async def delete_user(self, args: dict[str, Any]) -> dict[str, Any]:
        actor = await self._actor(args["actor"])
        accounts.require_admin(actor)
        async with self.store.write() as conn:
            await lifecycle.delete_user(conn, actor, args["username"], now_ms())
        self.bookings.on_commit()
        return {"username": args["username"], "deleted": True}
