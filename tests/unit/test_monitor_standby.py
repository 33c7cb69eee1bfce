"""The standby connections a monitor replica keeps to the hosts it would take over
(`services/monitor/standby.py`), with readers that count what they are asked: paced opening,
handing a reader over at a takeover, keeping one given back, closing the ones not wanted."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time

from services.monitor.probe import HostReading
from services.monitor.readers import HostReader
from services.monitor.standby import Standby
from services.shared.config import HostConfig
from services.shared.remote.shell import HostUnreachable
from tests.support.polling import until


class Reader(HostReader):
    """Opens when let (`gate`), or fails to; counts opens in flight across readers."""

    in_flight = 0
    most_in_flight = 0

    def __init__(self, config: HostConfig, gate: asyncio.Event, fail: bool = False) -> None:
        self.name = config.name
        self.config = config
        self.gate = gate
        self.fail = fail
        self.opened_at: float | None = None
        self.opens = 0
        self.is_open = False
        self.closed = 0

    async def read(self, timeout: float) -> HostReading:
        raise AssertionError("a standby reader is not read")

    @property
    def connected(self) -> bool:
        return self.is_open

    async def connect(self, timeout: float) -> None:
        self.opened_at = time.monotonic()
        self.opens += 1
        Reader.in_flight += 1
        Reader.most_in_flight = max(Reader.most_in_flight, Reader.in_flight)
        try:
            await self.gate.wait()
            if self.fail:
                raise HostUnreachable(f"{self.name}: connection refused", {})
            self.is_open = True
        finally:
            Reader.in_flight -= 1

    async def close(self) -> None:
        self.closed += 1
        self.is_open = False


def hosts(*names: str) -> dict[str, HostConfig]:
    return {name: HostConfig(name=name, address="10.0.0.1", user="warden") for name in names}


class Made:
    """reader_for: every reader it made, by host."""

    def __init__(self, fail: frozenset[str] = frozenset()) -> None:
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail = fail
        self.readers: dict[str, list[Reader]] = {}

    def __call__(self, config: HostConfig) -> Reader:
        reader = Reader(config, self.gate, config.name in self.fail)
        self.readers.setdefault(config.name, []).append(reader)
        return reader


async def test_connections_open_one_at_a_time_from_not_before_at_most_per_s() -> None:
    made = Made()
    standby = Standby(made, per_s=50, connect_timeout_s=5)
    Reader.most_in_flight = 0
    wanted = hosts("a", "b", "c", "d", "e")
    not_before = time.monotonic() + 0.2
    try:
        await standby.update(wanted, not_before=not_before)
        await until(lambda: standby.connected() == 5, "every standby connection open")
        opened = sorted(r.opened_at or 0 for rs in made.readers.values() for r in rs)
        assert len(opened) == 5 and opened[0] >= not_before
        assert all(b - a >= 1 / 50 - 0.002 for a, b in itertools.pairwise(opened))
        assert Reader.most_in_flight == 1
        assert set(standby.readers) == set(wanted)
    finally:
        await standby.close()
    assert all(r.closed for rs in made.readers.values() for r in rs)
    assert standby.readers == {} and standby.connected() == 0


async def test_a_takeover_takes_the_open_reader_and_a_host_configured_otherwise_none() -> None:
    made = Made()
    standby = Standby(made, per_s=1000, connect_timeout_s=5)
    wanted = hosts("a", "b")
    try:
        await standby.update(wanted)
        await until(lambda: standby.connected() == 2, "both open")
        taken = await standby.take(wanted["a"])
        assert taken is made.readers["a"][0] and taken.connected and not taken.closed
        assert "a" not in standby.readers
        moved = dataclasses.replace(wanted["b"], address="10.0.0.2")
        assert await standby.take(moved) is None
        assert made.readers["b"][0].closed == 1  # it reads the old address: closed
        assert await standby.take(hosts("z")["z"]) is None
    finally:
        await standby.close()
    assert taken.closed == 0  # the caller's now


async def test_a_reader_given_back_is_kept_for_a_standby_host_and_opened_if_need_be() -> None:
    made = Made()
    standby = Standby(made, per_s=1000, connect_timeout_s=5)
    made.gate.clear()  # nothing opens yet
    wanted = hosts("a", "b")
    try:
        await standby.update(wanted)
        # A poll's reader of "b" handed back (never polled: not connected), and of "x",
        # which is not a standby host.
        given = Reader(wanted["b"], made.gate)
        stranger = Reader(hosts("x")["x"], made.gate)
        await until(lambda: made.readers.get("a"), "a's connection being opened")
        await standby.keep(given)
        await standby.keep(stranger)
        assert stranger.closed == 1
        assert standby.readers["b"] is given
        made.gate.set()
        await until(lambda: standby.connected() == 2, "both open")
        assert given.connected and "b" not in made.readers  # opened, not made again
        again = Reader(wanted["b"], made.gate)
        await standby.keep(again)  # one is kept already
        assert again.closed == 1 and standby.readers["b"] is given
    finally:
        await standby.close()


async def test_a_host_no_longer_standby_is_closed_even_while_its_connection_opens() -> None:
    made = Made()
    standby = Standby(made, per_s=1000, connect_timeout_s=5)
    made.gate.clear()
    try:
        await standby.update(hosts("a", "b"))
        await until(lambda: made.readers.get("a"), "a's connection being opened")
        await standby.update(hosts("b"))
        [opening] = made.readers["a"]
        assert opening.closed == 1 and "a" not in standby.readers
        made.gate.set()
        await until(lambda: standby.connected() == 1, "b open")
        await asyncio.sleep(0.05)
        assert not opening.connected  # its opening was stopped, not finished
        await standby.update({})
        assert standby.readers == {} and made.readers["b"][0].closed == 1
    finally:
        await standby.close()


async def test_one_that_cannot_be_opened_is_left_to_the_first_poll() -> None:
    made = Made(fail=frozenset({"a"}))
    standby = Standby(made, per_s=1000, connect_timeout_s=5)
    wanted = hosts("a", "b")
    try:
        await standby.update(wanted)
        await until(lambda: standby.connected() == 1, "b open")
        await until(lambda: not standby._opening, "a's try over")
        taken = await standby.take(wanted["a"])
        assert taken is made.readers["a"][0] and not taken.connected
        assert len(made.readers["a"]) == 1  # not tried again and again
        await asyncio.sleep(0.1)
        assert taken.opens == 1  # nor before the recheck
    finally:
        await standby.close()


async def test_one_the_host_closed_or_refused_is_tried_again_at_the_next_recheck() -> None:
    made = Made(fail=frozenset({"b"}))
    standby = Standby(made, per_s=1000, connect_timeout_s=5, recheck_s=0.2)
    try:
        await standby.update(hosts("a", "b"))
        await until(lambda: standby.connected() == 1, "a open")
        [a], [b] = made.readers["a"], made.readers["b"]
        first_a = a.opened_at
        a.is_open = False  # the host closed it (a reboot)
        b.fail = False  # the host that refused is back
        await until(lambda: standby.connected() == 2, "both open again")
        assert a.opened_at != first_a and made.readers == {"a": [a], "b": [b]}  # same readers
    finally:
        await standby.close()


async def test_switched_off_it_keeps_nothing() -> None:
    made = Made()
    standby = Standby(made, per_s=1000, connect_timeout_s=5, enabled=False)
    wanted = hosts("a")
    await standby.update(wanted)
    given = Reader(wanted["a"], made.gate)
    await standby.keep(given)
    await asyncio.sleep(0.05)
    assert made.readers == {} and standby.readers == {} and given.closed == 1
    await standby.close()
