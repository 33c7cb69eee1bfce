"""One active replica of a single-writer service (violations, jobs): a lease row with a fencing
token in the service's own database.

`<service>_leader_lease` holds one row: who holds it (`holder`, a replica id), its `token`
(incremented at every takeover) and `expires_at_ms`, always from the database's clock, so the
replicas' clocks never matter. The leader renews it every `[replicas] lease_s` / 3; a standby
tries to take it at the same pace and wins only once it expired. Every write of the leader
begins with the fence (`Leadership.fence`): in the same transaction it reads the row `FOR
SHARE` and refuses the write (`Deposed`, rolled back) unless the token is still its own. The
shared row lock also makes a takeover wait for the leader's open write transactions, so what
a deposed leader committed is there when the new leader reloads its state, and nothing it
tries after is.

The service's active part (event consumers, timers, the outbox relay, its RPC for writes)
lives in an "office" the service sets up in `on_elected(stack)` and that `stack` tears down on
losing the lease; a standby takes no action at all. RPC calls to the service reach any replica
(`warden.rpc` is shared); `rpc_table` answers the methods named local (reads of the database)
on the spot and forwards the others to `<service>-leader`, which only the leader serves.

With SQLite (a file of one machine) or the in-process bus (`warden run all`, the embedded
default) there is one replica: it is `solo` and leads from the start, with no lease row and
no fence query. Several replicas need PostgreSQL and RabbitMQ.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

from sqlalchemy import BigInteger, Column, MetaData, String, Table, literal_column, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from services.shared.bus import Bus, RpcHandler, Teardown
from services.shared.cluster.background import cancel_and_wait
from services.shared.errors import ServiceUnavailable
from services.shared.storage.store import Store

if TYPE_CHECKING:
    from services.shared.runtime import ServiceContext

log = logging.getLogger("warden.leadership")

LEADER = "leader"
STANDBY = "standby"


def lease_table(metadata: MetaData, service: str) -> Table:
    """`<service>_leader_lease`: one row per service (its name), see the module's docstring."""
    return Table(
        f"{service}_leader_lease",
        metadata,
        Column("service", String(64), primary_key=True),
        Column("holder", String(255), nullable=False, default=""),
        Column("token", BigInteger, nullable=False, default=0),
        Column("expires_at_ms", BigInteger, nullable=False, default=0),
    )


def is_solo(bus: Bus, store: Store) -> bool:
    """One replica only: SQLite, or an in-process bus no other replica can share."""
    return store.is_sqlite or bus.in_process


def leader_service(service: str) -> str:
    """The RPC name only the leader serves (a standby forwards its calls there)."""
    return f"{service}-leader"


class Deposed(ServiceUnavailable):
    """A write of a replica that does not hold the lease any more: refused and rolled back."""

    code = "service_unavailable"


def _db_now_ms(dialect: str) -> Any:
    """The database's clock in integer ms (never the replica's)."""
    if dialect == "sqlite":
        return literal_column("CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)")
    return literal_column("CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)")


class Lease:
    """The lease row's operations, each its own short transaction (the fence excepted)."""

    def __init__(self, store: Store, table: Table, service: str, lease_s: float) -> None:
        self.store = store
        self.table = table
        self.service = service
        self.lease_ms = int(lease_s * 1000)
        self.dialect = store.engine.dialect.name

    async def _ensure_row(self, conn: AsyncConnection) -> None:
        values = {"service": self.service, "holder": "", "token": 0, "expires_at_ms": 0}
        dialect_insert = sqlite.insert if self.dialect == "sqlite" else postgresql.insert
        await conn.execute(dialect_insert(self.table).values(**values).on_conflict_do_nothing())

    async def acquire(self, holder: str) -> int | None:
        """Take the lease if it expired (or was released); the new token, else None."""
        t, now = self.table, _db_now_ms(self.dialect)
        async with self.store.engine.begin() as conn:
            await self._ensure_row(conn)
            taken = await conn.execute(
                update(t)
                .where(t.c.service == self.service, t.c.expires_at_ms < now)
                .values(holder=holder, token=t.c.token + 1, expires_at_ms=now + self.lease_ms)
                .returning(t.c.token)
            )
            row = taken.first()
        return None if row is None else int(row[0])

    async def renew(self, holder: str, token: int) -> bool:
        """Extend the lease; False when it is not ours any more (taken over)."""
        t, now = self.table, _db_now_ms(self.dialect)
        async with self.store.engine.begin() as conn:
            renewed = await conn.execute(
                update(t)
                .where(t.c.service == self.service, t.c.holder == holder, t.c.token == token)
                .values(expires_at_ms=now + self.lease_ms)
            )
        return bool(renewed.rowcount)

    async def release(self, holder: str, token: int) -> None:
        """Give the lease up at once (a clean stop): a standby takes it at its next try."""
        t = self.table
        async with self.store.engine.begin() as conn:
            await conn.execute(
                update(t)
                .where(t.c.service == self.service, t.c.holder == holder, t.c.token == token)
                .values(expires_at_ms=0)
            )

    async def current(self) -> tuple[str, int, int]:
        """(holder, token, ms until it expires) as the database has it now."""
        t, now = self.table, _db_now_ms(self.dialect)
        async with self.store.read() as conn:
            row = (
                await conn.execute(
                    select(t.c.holder, t.c.token, t.c.expires_at_ms - now).where(
                        t.c.service == self.service
                    )
                )
            ).first()
        return ("", 0, 0) if row is None else (str(row[0]), int(row[1]), int(row[2]))

    async def token_in(self, conn: AsyncConnection) -> int | None:
        """The token now, read in the caller's transaction and locked against a takeover
        until it ends (FOR SHARE on PostgreSQL; SQLite's writer lock does it there)."""
        t = self.table
        row = (
            await conn.execute(
                select(t.c.token).where(t.c.service == self.service).with_for_update(read=True)
            )
        ).first()
        return None if row is None else int(row[0])


OnElected = Callable[[AsyncExitStack], Awaitable[None]]


class Leadership:
    """This replica's part in the election: leads (with its office set up) or stands by."""

    def __init__(
        self,
        store: Store,
        table: Table,
        service: str,
        replica_id: str,
        on_elected: OnElected,
        *,
        lease_s: float = 6.0,
        solo: bool = False,
        connected: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.service = service
        self.replica_id = replica_id
        self.on_elected = on_elected
        self.lease = Lease(store, table, service, lease_s)
        self.lease_s = lease_s
        self.renew_s = lease_s / 3
        self.solo = solo
        # Whether this replica reaches the broker: one that cannot hear events or publish
        # must not lead (it steps down after a lease length) nor take over.
        self.connected = connected
        self.clock = clock
        self._cut_off_since: float | None = None
        self._failing = False
        self.token: int | None = None  # held while not None
        self.ready = False  # the office is set up: the replica acts
        self.took_office_at: float | None = None  # clock() when it last became ready
        self._valid_until = 0.0
        self._office: AsyncExitStack | None = None
        self._setting_up: asyncio.Task[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._stepping_down: asyncio.Future[None] | None = None
        self._wake = asyncio.Event()

    def role(self) -> str:
        return LEADER if self.ready else STANDBY

    @property
    def holds_lease(self) -> bool:
        return self.token is not None

    # --- the fence ---------------------------------------------------------------------------

    async def fence(self, conn: AsyncConnection) -> None:
        """First thing of every write: refuse it unless this replica still holds the lease."""
        if self.solo:
            return
        token = self.token
        if token is None:
            raise Deposed(f"{self.service}: this replica does not lead; nothing written")
        if await self.lease.token_in(conn) != token:
            log.warning("%s: the lease was taken over; this replica steps down", self.service)
            self._lost(token)
            raise Deposed(f"{self.service}: this replica was deposed; nothing written")

    # --- running -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Solo: set the office up now. Otherwise try once now (a first replica leads when
        this returns), then keep the lease or wait for it in the background."""
        if self.solo:
            self.token = 0
            await self._set_up(0)
            return
        try:
            await self._try_acquire()
            if self._setting_up is not None:
                await asyncio.shield(self._setting_up)
        except Exception as err:  # the database away: the loop tries again
            log.warning("%s: the lease could not be read yet: %s", self.service, err)
        self._task = asyncio.create_task(self._run(), name=f"{self.service} leadership")

    async def stop(self) -> None:
        """Tear the office down and give the lease back, so a standby takes over at once."""
        task, self._task = self._task, None
        await cancel_and_wait(task)
        token = self.token
        await self._step_down("stopping")
        if token is not None and not self.solo:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.lease.release(self.replica_id, token), self.renew_s)

    async def _run(self) -> None:  # noqa: C901 - the election loop: renew, elect, step down, fence
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.renew_s):  # (3.11's wait_for can swallow a cancel)
                    await self._wake.wait()
            self._wake.clear()
            if self._stepping_down is not None and not self._stepping_down.done():
                continue  # the old office is still being torn down
            try:
                if self.token is None:
                    if self.connected():
                        await self._try_acquire()
                else:
                    await self._renew(self.token)
            except asyncio.CancelledError:
                raise
            except Exception as err:
                if not self._failing:
                    log.warning("%s: the lease could not be reached: %s", self.service, err)
                self._failing = True
            else:
                if self._failing:
                    log.info("%s: the lease can be reached again", self.service)
                self._failing = False
            if self.token is not None:
                await self._check_still_fit(self.token)

    async def _check_still_fit(self, token: int) -> None:
        now = self.clock()
        if self.connected():
            self._cut_off_since = None
        elif self._cut_off_since is None:
            self._cut_off_since = now
        if now > self._valid_until - self.renew_s / 2:
            # Not renewed in time (database away): another replica may take it soon.
            await self._step_down("the lease could not be renewed")
        elif self._cut_off_since is not None and now - self._cut_off_since > self.lease_s:
            await self._step_down("the message broker cannot be reached")
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.lease.release(self.replica_id, token), self.renew_s)

    async def _try_acquire(self) -> None:
        started = self.clock()
        token = await asyncio.wait_for(self.lease.acquire(self.replica_id), self.renew_s)
        if token is None:
            return
        self.token = token
        self._valid_until = started + self.lease_s
        log.info("%s: this replica leads (token %d); loading its state", self.service, token)
        self._setting_up = asyncio.create_task(self._set_up(token), name=f"{self.service} office")

    async def _renew(self, token: int) -> None:
        started = self.clock()
        if await asyncio.wait_for(self.lease.renew(self.replica_id, token), self.renew_s):
            self._valid_until = started + self.lease_s
        else:
            self._lost(token)

    async def _set_up(self, token: int) -> None:
        office = AsyncExitStack()
        self._office = office
        started = self.clock()
        try:
            await self.on_elected(office)
        except asyncio.CancelledError:
            raise
        except Exception:
            if self.solo:  # the service's start fails (and is retried) as it always did
                await office.aclose()
                raise
            log.exception("%s: setting up the leader failed; standing down", self.service)
            self._lost(token)
            with contextlib.suppress(Exception):  # another replica may do better
                await asyncio.wait_for(self.lease.release(self.replica_id, token), self.renew_s)
            return
        if self.token == token:
            self.ready = True
            self.took_office_at = self.clock()
            log.info(
                "%s: leader ready (state loaded in %.2fs)", self.service, self.clock() - started
            )

    def _lost(self, token: int) -> None:
        """The lease is gone (taken over, refused): step down in the background."""
        if self.token == token and not self.solo:
            self.token = None
            self.ready = False
            self._stepping_down = asyncio.ensure_future(self._step_down("the lease was lost"))
            self._wake.set()

    async def _step_down(self, why: str) -> None:
        was_leading = self._office is not None
        self._cut_off_since = None
        # A clean stop keeps the token while the office closes (its last writes, such as the
        # outbox's final flush, still count); losing the lease drops it first.
        stopping = why == "stopping"
        if not stopping and not self.solo:
            self.token = None
        self.ready = False
        setting_up, self._setting_up = self._setting_up, None
        if setting_up is not None and not setting_up.done():
            setting_up.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await setting_up
        office, self._office = self._office, None
        if office is not None:
            try:
                await office.aclose()
            except Exception:
                log.exception("%s: error while standing down", self.service)
        if stopping and not self.solo:
            self.token = None
        if was_leading and not stopping:
            log.warning("%s: this replica stands by (%s)", self.service, why)


def elect(
    ctx: ServiceContext,
    store: Store,
    table: Table,
    on_elected: Callable[[AsyncExitStack], Awaitable[None]],
) -> Leadership:
    """The leadership of a single-writer service's replica: every write of `store` fenced by
    it, and the replica's heartbeats saying leader or standby. Not started yet."""
    leadership = Leadership(
        store,
        table,
        ctx.name,
        ctx.replicas.replica_id,
        on_elected,
        lease_s=ctx.settings.replicas.lease_s,
        solo=is_solo(ctx.bus, store),
        connected=lambda: ctx.bus.connected,
    )
    store.fence = leadership.fence
    ctx.replicas.role = leadership.role
    return leadership


def rpc_table(
    bus: Bus,
    service: str,
    leadership: Leadership,
    *,
    local: Mapping[str, RpcHandler],
    office: Callable[[], Mapping[str, RpcHandler] | None],
    names: Mapping[str, float | None],
) -> dict[str, RpcHandler]:
    """What every replica serves on `<service>`: `local` methods answered here; the others
    by the office when this replica leads, else forwarded to the leader (`names`: each
    method's deadline, None for the bus's default)."""

    def handler(name: str) -> RpcHandler:
        if name in local:
            return local[name]

        async def forward_or_answer(args: dict[str, Any]) -> Any:
            table = office() if leadership.ready else None
            if table is not None:
                return await table[name](args)
            try:
                return await bus.call(leader_service(service), name, args, timeout=names[name])
            except Deposed:
                raise
            except ServiceUnavailable as err:
                if "is not running" not in err.message:
                    raise
                raise ServiceUnavailable(
                    f"{service} has no leader right now (a standby takes over within "
                    f"{leadership.lease_s + leadership.renew_s:g}s); try again",
                    {"service": service},
                ) from err

        return forward_or_answer

    return {name: handler(name) for name in names}


async def serve_office(
    bus: Bus, service: str, office: AsyncExitStack, table: Mapping[str, RpcHandler]
) -> None:
    """Serve the office's methods on `<service>-leader` until it closes."""
    stop: Teardown = await bus.serve(leader_service(service), table)
    office.push_async_callback(stop)
