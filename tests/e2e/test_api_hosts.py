"""Hosts and GPUs through the API: the sim fleet's figures and processes, reservations now and
next (private fields hidden from outsiders), metric series, and bad input. One embedded system
for the module."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import pytest_asyncio

from services.gateway.fleet_board import GPU_FIGURES, HOST_FIGURES
from tests.e2e.api import ApiClient, ApiSystem, running_system

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(180)]

HOSTS, GPUS = 2, 4


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ApiSystem]:
    async with running_system(
        tmp_path_factory.mktemp("api-hosts"), hosts=HOSTS, gpus=GPUS
    ) as system:
        yield system


def _gpu(answer: dict[str, Any], host: str, index: int) -> dict[str, Any] | None:
    return next(
        (g for g in answer["gpus"] if g["host"] == host and g["index"] == index),
        None,
    )


async def _gpus(client: ApiClient, **params: Any) -> dict[str, Any]:
    answer = await client.get("/gpus", **params)
    assert answer.status == 200, answer.body
    return dict(answer.body)


async def test_gpus_of_the_fleet_are_listed_with_figures_and_processes(system: ApiSystem) -> None:
    host = system.fleet.hosts[0]
    pid = system.fleet.start_process(host, 1, "carol", "python train.py --epochs 3", 2048)
    both = system.fleet.start_process(host, [2, 3], "dave", "torchrun ddp.py", 1024)
    alice = await system.as_user("alice")

    async def listed() -> dict[str, Any] | None:
        answer = await _gpus(alice)
        gpu = _gpu(answer, host, 1)
        if len(answer["gpus"]) < HOSTS * GPUS or gpu is None:
            return None
        if not any(p["pid"] == pid for p in gpu["processes"]):
            return None
        return answer

    answer = await system.until(listed, "every GPU, with carol's process")
    assert datetime.fromisoformat(answer["generated_at"]).tzinfo is not None
    places = {(g["host"], g["index"]) for g in answer["gpus"]}
    assert places == {(h, i) for h in system.fleet.hosts for i in range(GPUS)}
    for gpu in answer["gpus"]:
        assert gpu["uuid"].startswith("GPU-")
        assert gpu["name"]
        assert set(GPU_FIGURES) <= set(gpu)
        assert gpu["reachable"] is True
        assert gpu["sampled_at"] is not None
        assert gpu["memory_total_mib"] > 0
        assert isinstance(gpu["utilization_gpu_percent"], int | float)
        # The sim's data-centre GPUs report no fan: null, never 0.
        assert gpu["fan_speed_percent"] is None
        assert "reservation" in gpu and "next_reservation" in gpu
    carol = _gpu(answer, host, 1)
    assert carol is not None
    (process,) = [p for p in carol["processes"] if p["pid"] == pid]
    assert process["user"] == "carol"
    assert "train.py" in process["command"]
    assert process["used_memory_mib"] == 2048
    assert set(process) == {"pid", "user", "command", "used_memory_mib", "started_at"}
    idle = _gpu(answer, host, 0)
    assert idle is not None and idle["processes"] == []

    async def on_both() -> bool:
        shown = await _gpus(alice, host=host)
        users = [
            {
                p["user"]
                for p in (_gpu(shown, host, i) or {}).get("processes", ())
                if p["pid"] == both
            }
            for i in (2, 3)
        ]
        return users == [{"dave"}, {"dave"}]

    await system.until(on_both, "dave's two-GPU process on both GPUs")


async def test_hosts_are_listed_with_their_figures_and_gpus(system: ApiSystem) -> None:
    bob = await system.as_user("bob")

    async def sampled() -> dict[str, Any] | None:
        answer = await bob.get("/hosts")
        assert answer.status == 200, answer.body
        hosts = answer.body["hosts"]
        ready = len(hosts) == HOSTS and all(
            h["sampled_at"] and h["cpu_percent"] is not None and len(h["gpus"]) == GPUS
            for h in hosts
        )
        return dict(answer.body) if ready else None

    answer = await system.until(sampled, "every host sampled")
    assert [h["name"] for h in answer["hosts"]] == list(system.fleet.hosts)
    for host in answer["hosts"]:
        assert set(HOST_FIGURES) <= set(host)
        assert host["reachable"] is True
        assert host["labels"] == []  # the fleet's [[hosts]] carry none
        assert host["down_since"] is None and host["down_reason"] is None
        assert host["last_seen"] is not None
        assert host["gpu_status"] == "ok" and host["gpu_error"] is None
        assert 0 < host["memory_used_mib"] < host["memory_total_mib"]
        assert [g["index"] for g in host["gpus"]] == list(range(GPUS))
        assert all(g["host"] == host["name"] for g in host["gpus"])

    name = system.fleet.hosts[1]
    one = await bob.get(f"/hosts/{name}")
    assert one.status == 200
    assert one.body["name"] == name
    assert [g["index"] for g in one.body["gpus"]] == list(range(GPUS))
    only = await _gpus(bob, host=name)
    assert {g["host"] for g in only["gpus"]} == {name}
    assert len(only["gpus"]) == GPUS


async def test_unknown_hosts_are_404(system: ApiSystem) -> None:
    alice = await system.as_user("alice")
    missing = await alice.get("/hosts/no-such-host")
    assert missing.status == 404
    assert missing.body["error"] == "not_found"
    assert missing.body["details"] == {"host": "no-such-host"}
    filtered = await alice.get("/gpus", host="no-such-host")
    assert filtered.status == 404
    assert filtered.body["error"] == "not_found"
    empty = await alice.get("/gpus", host="")
    assert empty.status == 422
    assert "host" in empty.body["details"]["errors"]


async def test_a_label_picks_the_hosts_that_carry_it(system: ApiSystem) -> None:
    alice = await system.as_user("alice")
    for path, key in (("/hosts", "hosts"), ("/gpus", "gpus")):
        none = await alice.get(path, label="no-such-label")
        assert none.status == 200 and none.body[key] == [], none.body
        empty = await alice.get(path, label="")
        assert empty.status == 422
        assert "label" in empty.body["details"]["errors"]


async def test_anonymous_callers_get_401(system: ApiSystem) -> None:
    nobody = system.anonymous()
    host = system.fleet.hosts[0]
    for path in ("/hosts", f"/hosts/{host}", "/gpus", "/metrics/series"):
        answer = await nobody.get(path)
        assert answer.status == 401, path
        assert answer.body["error"] == "authentication_required"


async def test_a_reservation_shows_now_and_next_with_private_fields_hidden(
    system: ApiSystem,
) -> None:
    alice, bob = await system.as_user("alice"), await system.as_user("bob")
    admin = await system.as_user("admin")
    host = system.fleet.hosts[1]
    held, later = await system.gpu(1, 0), await system.gpu(1, 1)
    await _gpus(alice)  # the answer is composed and kept before the bookings
    now = datetime.now(UTC)
    current = await bob.post(
        "/reservations",
        {
            "gpus": [f"{host}:0"],
            "start": now.isoformat(),
            "duration_minutes": 60,
            "title": "bob's run",
            "description": "the secret plan",
        },
    )
    assert current.status == 201, current.body
    upcoming = await bob.post(
        "/reservations",
        {
            "gpus": [later["uuid"]],
            "start": (now + timedelta(hours=2)).isoformat(),
            "duration_minutes": 30,
            "title": "bob's next run",
            "description": "more secrets",
        },
    )
    assert upcoming.status == 201, upcoming.body
    shared = await bob.post(
        "/reservations",
        {
            "gpus": [f"{host}:2"],
            "start": now.isoformat(),
            "duration_minutes": 60,
            "title": "bob and alice",
            "description": "shared notes",
            "guests": ["alice"],
        },
    )
    assert shared.status == 201, shared.body

    async def shown(client: ApiClient) -> dict[str, Any] | None:
        answer = await _gpus(client, host=host)
        first, second, third = (_gpu(answer, host, i) for i in range(3))
        if first is None or second is None or third is None:
            return None
        if (first["reservation"] or {}).get("id") != current.body["id"]:
            return None
        if (second["next_reservation"] or {}).get("id") != upcoming.body["id"]:
            return None
        if (third["reservation"] or {}).get("id") != shared.body["id"]:
            return None
        return answer

    as_alice = await system.until(lambda: shown(alice), "bob's reservations, for alice")
    first, second = _gpu(as_alice, host, 0), _gpu(as_alice, host, 1)
    assert first is not None and second is not None
    assert first["uuid"] == held["uuid"]
    assert first["reservation"]["owner"] == "bob"
    assert first["reservation"]["title"] == "bob's run"
    assert first["reservation"]["description"] == ""  # not alice's
    assert first["next_reservation"] is None
    assert second["reservation"] is None
    assert second["next_reservation"]["description"] == ""
    assert second["next_reservation"]["start"] == upcoming.body["start"]
    third = _gpu(as_alice, host, 2)
    assert third is not None
    assert third["reservation"]["description"] == "shared notes"  # alice is a guest

    for client in (bob, admin):
        answer = await system.until(functools.partial(shown, client), "bob's reservations")
        mine = _gpu(answer, host, 0)
        nxt = _gpu(answer, host, 1)
        assert mine is not None and nxt is not None
        assert mine["reservation"]["description"] == "the secret plan"
        assert nxt["next_reservation"]["description"] == "more secrets"

    # The whole list (no host filter) shows the same, still hidden from alice.
    everything = await _gpus(alice)
    again = _gpu(everything, host, 0)
    assert again is not None and again["reservation"]["description"] == ""
    hosts = await alice.get("/hosts")
    (that,) = [h for h in hosts.body["hosts"] if h["name"] == host]
    assert that["gpus"][0]["reservation"]["description"] == ""

    # Cancelled: gone from the GPU (a reservation change shows without waiting for the cache).
    cancelled = await bob.delete(f"/reservations/{upcoming.body['id']}")
    assert cancelled.status == 200, cancelled.body

    async def gone() -> bool:
        answer = await _gpus(bob, host=host)
        gpu = _gpu(answer, host, 1)
        return gpu is not None and gpu["next_reservation"] is None

    await system.until(gone, "the cancelled reservation gone")


async def test_series_gives_buckets_of_a_gpu_metric(system: ApiSystem) -> None:
    alice = await system.as_user("alice")
    host = system.fleet.hosts[0]
    gpu = await system.gpu(0, 1)
    start = datetime.now(UTC) - timedelta(minutes=10)

    async def buckets() -> dict[str, Any] | None:
        answer = await alice.get(
            "/metrics/series",
            host=host,
            metric="utilization_gpu_percent",
            gpu_uuid=gpu["uuid"],
            start=start.isoformat(),
            end=(datetime.now(UTC) + timedelta(minutes=1)).isoformat(),
            step_s=60,
        )
        assert answer.status == 200, answer.body
        filled = [b for b in answer.body["buckets"] if b["count"]]
        return dict(answer.body) if sum(b["count"] for b in filled) >= 3 else None

    series = await system.until(buckets, "three samples of a GPU's utilisation")
    assert series["host"] == host
    assert series["gpu_uuid"] == gpu["uuid"]
    assert series["metric"] == "utilization_gpu_percent"
    assert series["step_s"] == 60
    for bucket in series["buckets"]:
        if bucket["count"]:
            assert bucket["min"] <= bucket["avg"] <= bucket["max"]
            assert datetime.fromisoformat(bucket["start"]).tzinfo is not None

    host_series = await alice.get(
        "/metrics/series",
        host=host,
        metric="cpu_percent",
        start=start.isoformat(),
        end=(datetime.now(UTC) + timedelta(minutes=1)).isoformat(),
        step_s=30,
    )
    assert host_series.status == 200, host_series.body
    assert host_series.body["gpu_uuid"] is None


@pytest.mark.parametrize(
    ("change", "statuses"),
    [
        ({"end": "START"}, (422,)),  # end not after start
        ({"start": "END+"}, (422,)),  # end before start
        ({"step_s": "0"}, (422,)),
        ({"step_s": "-5"}, (422,)),
        ({"step_s": "nan"}, (422,)),
        ({"metric": None}, (422,)),  # missing
        ({"metric": ""}, (422,)),
        ({"start": "yesterday"}, (422,)),
        ({"start": "2024-01-01T00:00:00"}, (422,)),  # no offset
        ({"host": None}, (422,)),
        ({"metric": "no_such_metric"}, (400,)),
        ({"gpu_uuid": None}, (400,)),  # a GPU metric without its GPU
        ({"step_s": "1", "start": "2000-01-01T00:00:00+00:00"}, (400,)),  # too many buckets
    ],
)
async def test_bad_series_input_is_a_json_400_or_422(
    system: ApiSystem, change: dict[str, Any], statuses: tuple[int, ...]
) -> None:
    alice = await system.as_user("alice")
    gpu = await system.gpu(0, 0)
    end = datetime.now(UTC)
    params: dict[str, Any] = {
        "host": system.fleet.hosts[0],
        "metric": "temperature_c",
        "gpu_uuid": gpu["uuid"],
        "start": (end - timedelta(minutes=5)).isoformat(),
        "end": end.isoformat(),
        "step_s": "10",
    }
    for key, value in change.items():
        if value is None:
            params.pop(key)
        else:
            params[key] = value
            if value == "START":
                params[key] = params["start"]
            elif value == "END+":
                params[key] = (end + timedelta(minutes=1)).isoformat()
    answer = await alice.get("/metrics/series", **params)
    assert answer.status in statuses, answer.body
    assert isinstance(answer.body, dict)
    assert answer.body["error"] in ("validation_failed", "invalid_request")
    assert answer.body["message"]
