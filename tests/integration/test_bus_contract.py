"""One contract, two buses: every test here runs on the InProcessBus and on the AmqpBus.

The `bus_factory` fixture hands out "a connection to the bus". On RabbitMQ each call opens a
new AmqpBus connection (another process or replica) on the test's own vhost; in-process
there is only one bus per process, so every call returns the same InProcessBus. A test that
only makes sense across processes (a consumer that is down while the broker keeps its
messages) runs on RabbitMQ alone.

Waiting is done by polling a condition with a generous deadline, never by sleeping a fixed
time, and nothing asserts how long anything took.
"""

from __future__ import annotations

import asyncio
import functools
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from services.shared.bus.amqp import AmqpBus
from services.shared.bus.base import Bus, BusSettings, queue_name
from services.shared.bus.inproc import InProcessBus
from services.shared.contracts import Envelope, make_envelope, parse_envelope
from services.shared.errors import (
    ContractError,
    InvalidRequest,
    NotFound,
    RemoteError,
    ServiceUnavailable,
)
from tests.support import polling

WAIT_S = 10.0
SETTINGS = BusSettings(max_deliveries=3, prefetch=16, rpc_timeout_s=2.0)
NOW = "2024-05-01T12:00:00+00:00"


# --- fixtures ---------------------------------------------------------------------------------


@dataclass
class BusFactory:
    """`await factory()` gives a started bus connection; everything is closed at teardown."""

    kind: str
    amqp_url: str | None = None
    opened: list[Bus] = field(default_factory=list)

    async def __call__(self) -> Bus:
        if self.kind == "inproc":
            # In-process means one process: a "second connection" is the same bus.
            if not self.opened:
                bus = InProcessBus(SETTINGS)
                await bus.start()
                self.opened.append(bus)
            return self.opened[0]
        assert self.amqp_url is not None
        amqp = AmqpBus(self.amqp_url, SETTINGS, name=f"test-{len(self.opened)}")
        await amqp.start()
        self.opened.append(amqp)
        return amqp

    async def close_all(self) -> None:
        for bus in reversed(self.opened):
            await bus.close()
        self.opened.clear()


@pytest.fixture(
    params=[
        pytest.param("inproc", id="inproc"),
        pytest.param("amqp", id="amqp", marks=pytest.mark.amqp),
    ]
)
def bus_target(request: pytest.FixtureRequest) -> tuple[str, str | None]:
    """(kind, url): only the AMQP variant asks for a RabbitMQ vhost."""
    if request.param == "amqp":
        return "amqp", request.getfixturevalue("amqp_url")
    return "inproc", None


@pytest.fixture
async def bus_factory(bus_target: tuple[str, str | None]) -> AsyncIterator[BusFactory]:
    kind, url = bus_target
    factory = BusFactory(kind, url)
    try:
        yield factory
    finally:
        await factory.close_all()


@pytest.fixture
async def bus(bus_factory: BusFactory) -> Bus:
    return await bus_factory()


# --- helpers ----------------------------------------------------------------------------------


until = functools.partial(polling.until, timeout=WAIT_S)


async def take_dead_letters(bus: Bus, queue: str, count: int) -> list[bytes]:
    """Collect at least `count` dead-lettered bodies of `queue` (dead_letters() takes them)."""
    found: list[bytes] = []

    async def enough() -> bool:
        found.extend(await bus.dead_letters(queue))
        return len(found) >= count

    await until(enough, f"{count} dead letter(s) on {queue}")
    return found


class Recorder:
    """An event handler that records every delivery; `fail_times` / `fails` make it raise."""

    def __init__(
        self,
        *,
        fails: Callable[[Envelope], bool] | None = None,
        fail_times: int = 0,
        delay_s: float = 0.0,
        label: str = "",
    ) -> None:
        self.seen: list[Envelope] = []
        self.handled: list[Envelope] = []
        self.fails = fails
        self.fail_times = fail_times
        self.delay_s = delay_s
        self.label = label

    async def __call__(self, envelope: Envelope) -> None:
        self.seen.append(envelope)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.fails is not None and self.fails(envelope):
            raise RuntimeError(f"handler refuses {envelope.id}")
        if sum(1 for e in self.seen if e.id == envelope.id) <= self.fail_times:
            raise RuntimeError(f"transient failure on {envelope.id}")
        self.handled.append(envelope)

    def types(self) -> list[str]:
        return [e.type for e in self.handled]

    def ids(self) -> list[str]:
        return [e.id for e in self.handled]

    def attempts(self, event_id: str) -> int:
        return sum(1 for e in self.seen if e.id == event_id)


def unreachable(host: str = "gpu-01") -> dict[str, Any]:
    return {"host": host, "since": NOW, "reason": "ssh timed out"}


def recovered(host: str = "gpu-01") -> dict[str, Any]:
    return {"host": host, "at": NOW, "down_since": None}


def discovered(host: str = "gpu-01") -> dict[str, Any]:
    return {
        "host": host,
        "uuid": "GPU-0000",
        "index": 0,
        "name": "NVIDIA A100",
        "memory_total_mib": 40960.0,
    }


def observed(host: str = "gpu-01") -> dict[str, Any]:
    return {"host": host, "observed_at": NOW, "processes": []}


def raw_body(type_name: str, data: dict[str, Any], /, **changes: Any) -> bytes:
    """A wire body for `type_name` as a foreign publisher would write it."""
    envelope = make_envelope(type_name, data).to_dict()
    envelope.update(changes)
    return json.dumps(envelope).encode()


# --- events: routing --------------------------------------------------------------------------


async def test_topic_routing_exact_wildcards_and_non_matching(bus_factory: BusFactory) -> None:
    bus = await bus_factory()
    patterns = {
        "exact": ("monitor", "host.unreachable"),
        "star": ("monitor", "host.*"),
        "star_first": ("monitor", "*.discovered"),
        "hash": ("monitor", "#"),
        "prefix_hash": ("monitor", "gpu.#"),
        "none": ("monitor", "violation.*"),
        "other_source": ("violations", "#"),
    }
    recorders = {name: Recorder() for name in patterns}
    for name, (source, pattern) in patterns.items():
        await bus.subscribe(source, pattern, f"routing.{name}", recorders[name])

    await bus.emit("gpu.discovered", discovered(), source="monitor")
    await bus.emit("host.unreachable", unreachable(), source="monitor")
    await bus.emit("host.recovered", recovered(), source="monitor")
    await bus.emit("processes.observed", observed(), source="monitor")
    # A three-word key: `#` takes it, `host.*` (exactly one more word) must not.
    deep = make_envelope("host.unreachable", unreachable("deep"))
    await bus.publish_raw("monitor", "host.unreachable.again", deep.to_json())

    # Barriers, published after everything else: once a queue has seen one, every earlier
    # message routed to that queue has been delivered (each queue is FIFO, one consumer).
    barrier = unreachable("barrier")
    for source, key in [
        ("monitor", "host.unreachable"),
        ("monitor", "gpu.discovered"),
        ("monitor", "violation.barrier"),
        ("violations", "violation.barrier"),
    ]:
        await bus.publish_raw(source, key, raw_body("host.unreachable", barrier))

    def real(recorder: Recorder) -> list[str]:
        return [
            e.type + ("/deep" if e.data["host"] == "deep" else "")
            for e in recorder.handled
            if e.data["host"] != "barrier"
        ]

    def saw_barrier(recorder: Recorder) -> Callable[[], bool]:
        return lambda: any(e.data["host"] == "barrier" for e in recorder.handled)

    for name, recorder in recorders.items():
        await until(saw_barrier(recorder), f"a barrier on {name}")

    assert real(recorders["exact"]) == ["host.unreachable"]
    assert real(recorders["star"]) == ["host.unreachable", "host.recovered"]
    assert real(recorders["star_first"]) == ["gpu.discovered"]
    assert real(recorders["hash"]) == [
        "gpu.discovered",
        "host.unreachable",
        "host.recovered",
        "processes.observed",
        "host.unreachable/deep",
    ]
    assert real(recorders["prefix_hash"]) == ["gpu.discovered"]
    assert real(recorders["none"]) == []
    assert real(recorders["other_source"]) == []


async def test_fan_out_every_queue_gets_every_event(bus_factory: BusFactory) -> None:
    bus = await bus_factory()
    first, second = Recorder(), Recorder()
    await bus.subscribe("monitor", "host.*", "alerts.on_host", first)
    await bus.subscribe("monitor", "host.*", "history.on_host", second)

    sent = [
        (await bus.emit("host.unreachable", unreachable(f"gpu-{i:02}"), source="monitor")).id
        for i in range(10)
    ]

    await until(lambda: len(first.handled) >= 10 and len(second.handled) >= 10, "fan-out")
    assert first.ids() == sent
    assert second.ids() == sent


async def test_emit_all_keeps_the_order_while_many_polls_emit_at_once(bus: Bus) -> None:
    """A monitor's polls each emit their events together (a GPU found, then the sample),
    fifty at a time: every consumer gets each poll's events in the order given."""
    recorder = Recorder()
    await bus.subscribe("monitor", "#", "order.all", recorder)

    def poll(i: int) -> list[tuple[str, dict[str, Any]]]:
        host = f"gpu-{i:02}"
        return [
            ("gpu.discovered", discovered(host)),
            ("host.recovered", recovered(host)),
            ("processes.observed", observed(host)),
        ]

    sent = await asyncio.gather(*(bus.emit_all(poll(i), source="monitor") for i in range(50)))
    assert [[e.type for e in poll_sent] for poll_sent in sent] == [
        ["gpu.discovered", "host.recovered", "processes.observed"]
    ] * 50
    await until(lambda: len(recorder.handled) >= 150, "150 events")
    for i, poll_sent in enumerate(sent):
        host = f"gpu-{i:02}"
        of_host = [e.id for e in recorder.handled if e.data["host"] == host]
        assert of_host == [e.id for e in poll_sent]
    with pytest.raises(ContractError):  # one invalid event: none of them is published
        await bus.emit_all(
            [("gpu.discovered", discovered("gpu-99")), ("host.unreachable", {"host": "x"})],
            source="monitor",
        )
    await bus.emit("host.recovered", recovered("gpu-last"), source="monitor")
    await until(lambda: recorder.handled[-1].data["host"] == "gpu-last", "the last event")
    assert not any(e.data["host"] == "gpu-99" for e in recorder.handled)


async def test_competing_consumers_share_one_queue(bus_factory: BusFactory) -> None:
    publisher = await bus_factory()
    replica_a, replica_b = await bus_factory(), await bus_factory()
    # Realistic handlers do I/O: the small delay lets the other replica take its turn.
    a, b = Recorder(delay_s=0.01, label="a"), Recorder(delay_s=0.01, label="b")
    await replica_a.subscribe("monitor", "host.unreachable", "alerts.on_unreachable", a)
    await replica_b.subscribe("monitor", "host.unreachable", "alerts.on_unreachable", b)

    sent = {
        (await publisher.emit("host.unreachable", unreachable(f"h{i}"), source="monitor")).id
        for i in range(20)
    }

    await until(lambda: len(a.handled) + len(b.handled) >= 20, "20 events handled")
    handled = a.ids() + b.ids()
    assert sorted(handled) == sorted(sent)  # each exactly once overall
    assert a.handled, "replica a got none: consumers on one queue must compete"
    assert b.handled, "replica b got none: consumers on one queue must compete"


# --- events: failures -------------------------------------------------------------------------


async def test_failed_handler_is_retried_until_it_succeeds(bus: Bus) -> None:
    flaky = Recorder(fail_times=2)  # fails twice, the third delivery (= max_deliveries) works
    await bus.subscribe("monitor", "host.unreachable", "alerts.flaky", flaky)

    sent = await bus.emit("host.unreachable", unreachable(), source="monitor")

    await until(lambda: bool(flaky.handled), "the third delivery to succeed")
    assert flaky.ids() == [sent.id]
    assert flaky.attempts(sent.id) == 3
    queue = queue_name("monitor", "host.unreachable", "alerts.flaky")
    assert await bus.dead_letters(queue) == []


async def test_poison_message_is_dead_lettered_and_consumer_goes_on(bus: Bus) -> None:
    handler = Recorder(fails=lambda e: e.data["host"] == "poison")
    await bus.subscribe("monitor", "host.unreachable", "alerts.poison", handler)
    queue = queue_name("monitor", "host.unreachable", "alerts.poison")

    poison = await bus.emit("host.unreachable", unreachable("poison"), source="monitor")
    good = await bus.emit("host.unreachable", unreachable("fine"), source="monitor")

    dead = await take_dead_letters(bus, queue, 1)
    assert [parse_envelope(body).id for body in dead] == [poison.id]
    assert handler.attempts(poison.id) == SETTINGS.max_deliveries

    later = await bus.emit("host.unreachable", unreachable("later"), source="monitor")
    await until(lambda: later.id in handler.ids(), "a good message after the poison")
    assert handler.ids() == [good.id, later.id]
    assert handler.attempts(poison.id) == SETTINGS.max_deliveries  # no loop after dead-letter


async def test_invalid_messages_are_dead_lettered_without_calling_the_handler(
    bus: Bus,
) -> None:
    handler = Recorder()
    await bus.subscribe("monitor", "#", "audit.everything", handler)
    queue = queue_name("monitor", "#", "audit.everything")

    invalid = {
        "not json": b"\x00this is not JSON",
        "not an object": b"[1, 2, 3]",
        "unknown type": raw_body("host.unreachable", unreachable(), type="host.exploded"),
        "unknown version": raw_body("host.unreachable", unreachable(), version=99),
        "data off schema": raw_body(
            "host.unreachable", unreachable(), data={"host": "gpu-01", "since": NOW}
        ),
    }
    for body in invalid.values():
        await bus.publish_raw("monitor", "host.unreachable", body)
    good = await bus.emit("host.unreachable", unreachable(), source="monitor")

    dead = await take_dead_letters(bus, queue, len(invalid))
    assert sorted(dead) == sorted(invalid.values())
    await until(lambda: bool(handler.handled), "the valid message after the invalid ones")
    assert handler.ids() == [good.id]
    assert len(handler.seen) == 1, "the handler was called with an invalid message"


async def test_publisher_side_validation(bus: Bus) -> None:
    with pytest.raises(ContractError):
        await bus.emit("host.unreachable", {"host": "gpu-01"}, source="monitor")
    with pytest.raises(ContractError):
        await bus.emit("host.unreachable", {**unreachable(), "surprise": 1}, source="monitor")
    with pytest.raises(ContractError):
        await bus.emit("host.unreachable", unreachable(), source="violations")
    with pytest.raises(ContractError):
        await bus.emit("host.exploded", unreachable(), source="monitor")


# --- events: consumers that stop and come back -----------------------------------------------


async def test_teardown_stops_delivery_and_the_queue_keeps_messages(bus: Bus) -> None:
    before = Recorder()
    stop = await bus.subscribe("monitor", "host.*", "history.on_host", before)
    first = await bus.emit("host.unreachable", unreachable(), source="monitor")
    await until(lambda: bool(before.handled), "delivery before teardown")

    await stop()
    while_down = await bus.emit("host.recovered", recovered(), source="monitor")

    after = Recorder()
    await bus.subscribe("monitor", "host.*", "history.on_host", after)
    await until(lambda: bool(after.handled), "the kept message after re-subscribing")
    assert before.ids() == [first.id]
    assert after.ids() == [while_down.id]


@pytest.fixture
async def amqp_factory(amqp_url: str) -> AsyncIterator[BusFactory]:
    factory = BusFactory("amqp", amqp_url)
    try:
        yield factory
    finally:
        await factory.close_all()


@pytest.mark.amqp
async def test_event_published_while_consumer_is_down_is_delivered_later(
    amqp_factory: BusFactory,
) -> None:
    """AMQP only: in-process, a consumer cannot be down while the bus holding its queue lives."""
    bus_factory = amqp_factory
    consumer = await bus_factory()
    stop = await consumer.subscribe("violations", "violation.*", "notify.on_violation", Recorder())
    await stop()
    await consumer.close()

    publisher = await bus_factory()
    sent = await publisher.emit("host.unreachable", unreachable(), source="monitor")
    opened = await publisher.emit(
        "violation.opened",
        {
            "incident_id": "inc-1",
            "host": "gpu-01",
            "gpu_uuid": "GPU-0000",
            "gpu_index": 0,
            "offender": "mallory",
            "pids": [4242],
            "commands": ["python train.py"],
            "since": NOW,
        },
        source="violations",
    )
    assert sent.id != opened.id

    back = await bus_factory()
    handler = Recorder()
    await back.subscribe("violations", "violation.*", "notify.on_violation", handler)
    await until(lambda: bool(handler.handled), "the event kept while the consumer was down")
    assert handler.ids() == [opened.id]


# --- RPC --------------------------------------------------------------------------------------


async def _serve_reservations(server: Bus) -> Callable[[], Awaitable[None]]:
    async def create(args: dict[str, Any]) -> Any:
        return {"id": "r-1", "echo": args, "gpus": [0, 1], "note": None}

    async def get(args: dict[str, Any]) -> Any:
        raise NotFound(f"no reservation {args['id']}", {"id": args["id"]})

    async def cancel(args: dict[str, Any]) -> Any:
        raise InvalidRequest("reason is required", {"field": "reason"})

    async def broken(args: dict[str, Any]) -> Any:
        raise ZeroDivisionError("a bug on the far side")

    return await server.serve(
        "reservations", {"create": create, "get": get, "cancel": cancel, "broken": broken}
    )


async def test_rpc_result_round_trip(bus_factory: BusFactory) -> None:
    server, client = await bus_factory(), await bus_factory()
    await _serve_reservations(server)
    args = {"user": "alice", "gpus": [0, 1], "window": {"hours": 2.5}, "note": None}

    result = await client.call("reservations", "create", args, timeout=5)

    assert result == {"id": "r-1", "echo": args, "gpus": [0, 1], "note": None}
    # A sub-second deadline (the AMQP request's expiration) still leaves time to answer.
    assert (await client.call("reservations", "create", None, timeout=1))["echo"] == {}


async def test_rpc_result_that_is_not_json_is_a_remote_error(bus_factory: BusFactory) -> None:
    server, client = await bus_factory(), await bus_factory()

    async def leaky(args: dict[str, Any]) -> Any:
        return {"gpus": {0, 1}}  # a set: not JSON

    await server.serve("reservations", {"list": leaky})

    with pytest.raises(RemoteError):
        await client.call("reservations", "list", {}, timeout=5)


async def test_rpc_errors_cross_the_bus(bus_factory: BusFactory) -> None:
    server, client = await bus_factory(), await bus_factory()
    await _serve_reservations(server)

    # A WardenError raised by the handler is raised again here, with its code and details.
    with pytest.raises(NotFound) as not_found:
        await client.call("reservations", "get", {"id": "r-9"}, timeout=5)
    assert not_found.value.code == "not_found"
    assert not_found.value.details == {"id": "r-9"}
    assert "r-9" in not_found.value.message

    with pytest.raises(InvalidRequest) as invalid:
        await client.call("reservations", "cancel", {}, timeout=5)
    assert invalid.value.code == "invalid_request"
    assert invalid.value.details == {"field": "reason"}

    # A method the service does not have.
    with pytest.raises(NotFound) as unknown:
        await client.call("reservations", "explode", {}, timeout=5)
    assert unknown.value.details.get("method") == "explode"

    # Anything that is not a WardenError is a bug on the far side.
    with pytest.raises(RemoteError) as remote:
        await client.call("reservations", "broken", {}, timeout=5)
    assert "broken" in remote.value.message

    # The server survived all of that.
    assert (await client.call("reservations", "create", {}, timeout=5))["id"] == "r-1"


async def test_rpc_gives_service_unavailable_never_a_hang(bus_factory: BusFactory) -> None:
    server, client = await bus_factory(), await bus_factory()

    # Nobody serves it (yet).
    with pytest.raises(ServiceUnavailable) as never:
        await client.call("reservations", "create", {}, timeout=5)
    assert never.value.details.get("service") == "reservations"

    # Served, then stopped.
    stop = await _serve_reservations(server)
    assert (await client.call("reservations", "create", {}, timeout=5))["id"] == "r-1"
    await stop()
    with pytest.raises(ServiceUnavailable) as stopped:
        await client.call("reservations", "create", {}, timeout=5)
    assert stopped.value.details.get("service") == "reservations"

    # Served, but slower than the caller's deadline.
    release = asyncio.Event()

    async def slow(args: dict[str, Any]) -> Any:
        await release.wait()
        return "too late"

    await server.serve("scheduler", {"plan": slow})
    try:
        with pytest.raises(ServiceUnavailable) as late:
            await client.call("scheduler", "plan", {}, timeout=0.3)
        assert late.value.details.get("timeout_s") == 0.3
    finally:
        release.set()  # let the handler finish so the server closes promptly


async def test_rpc_replicas_both_answer(bus_factory: BusFactory) -> None:
    replica_a, replica_b, client = await bus_factory(), await bus_factory(), await bus_factory()

    def answer(label: str) -> Callable[[dict[str, Any]], Awaitable[Any]]:
        async def health(args: dict[str, Any]) -> Any:
            return {"replica": label}

        return health

    await replica_a.serve("monitor", {"health": answer("a")})
    await replica_b.serve("monitor", {"health": answer("b")})

    answers = [
        (await client.call("monitor", "health", {"n": uuid.uuid4().hex}, timeout=5))["replica"]
        for _ in range(10)
    ]

    assert set(answers) == {"a", "b"}
