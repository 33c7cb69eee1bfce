"""The in-memory attempts double (tests/support/attempts_double.py) answers as the real
`take_attempts` / `settle_attempts` do (tests/integration/test_reservations_attempts.py)."""

from __future__ import annotations

from tests.support.attempts_double import FakeAttempts


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def key(name: str, limit: int, window_s: float = 60.0) -> dict[str, object]:
    return {"key": name, "window_s": window_s, "limit": limit}


async def test_the_limit_refuses_the_whole_take_and_says_when_to_retry() -> None:
    clock = Clock()
    fake = FakeAttempts(clock)
    for _ in range(3):
        assert (await fake.take({"limits": [key("a", 3)]}))["retry_after_s"] is None
        clock.now += 1
    refused = await fake.take({"limits": [key("a", 3), key("b", 9)]})
    assert refused == {"retry_after_s": 57.0, "marks": []}
    assert (await fake.take({"limits": [key("b", 1)]}))["retry_after_s"] is None  # b untouched
    clock.now += 57
    assert (await fake.take({"limits": [key("a", 3)]}))["retry_after_s"] is None


async def test_settling_uncounts_and_clears() -> None:
    fake = FakeAttempts(Clock())
    taken = await fake.take({"limits": [key("a", 1), key("b", 1)]})
    await fake.settle({"cancel": taken["marks"][1:], "clear": ["a"]})
    again = await fake.take({"limits": [key("a", 1), key("b", 1)]})
    assert again["retry_after_s"] is None and len(again["marks"]) == 2
