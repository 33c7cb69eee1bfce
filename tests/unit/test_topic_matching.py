"""AMQP topic matching (`*` one word, `#` zero or more) and nameko's queue names."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.shared.bus.base import dead_letter_queue_name, queue_name, topic_matches

words = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=8)
keys = st.lists(words, min_size=1, max_size=6).map(".".join)
pattern_words = st.one_of(words, st.just("*"), st.just("#"))
patterns = st.lists(pattern_words, min_size=1, max_size=6).map(".".join)


def reference_matches(pattern: str, routing_key: str) -> bool:
    """An independent matcher: a regex over the key written with a leading dot per word."""
    pieces = []
    for word in pattern.split("."):
        if word == "*":
            pieces.append(r"\.[^.]+")
        elif word == "#":
            pieces.append(r"(?:\.[^.]+)*")
        else:
            pieces.append(r"\." + re.escape(word))
    return re.fullmatch("".join(pieces), "." + routing_key) is not None


@pytest.mark.parametrize(
    ("pattern", "key", "expected"),
    [
        ("violation.opened", "violation.opened", True),
        ("violation.opened", "violation.resolved", False),
        ("violation.opened", "violation.opened.v2", False),
        ("violation.opened", "violation", False),
        ("violation.*", "violation.opened", True),
        ("violation.*", "violation", False),
        ("violation.*", "violation.opened.v2", False),
        ("violation.*", "host.opened", False),
        ("*.opened", "violation.opened", True),
        ("*.opened", "opened", False),
        ("*", "host", True),
        ("*", "host.sampled", False),
        ("*.*", "host.sampled", True),
        ("#", "host", True),
        ("#", "host.sampled.extra", True),
        ("host.#", "host", True),  # `#` may be zero words
        ("host.#", "host.sampled", True),
        ("host.#", "host.sampled.extra", True),
        ("host.#", "gpu.discovered", False),
        ("#.sampled", "host.sampled", True),
        ("#.sampled", "sampled", True),
        ("#.sampled", "host.sampled.extra", False),
        ("a.#.z", "a.z", True),
        ("a.#.z", "a.b.c.z", True),
        ("a.#.z", "a.b.c", False),
        ("#.#", "a.b.c", True),
        ("a.*.#", "a", False),
        ("a.*.#", "a.b", True),
        ("a.*.#", "a.b.c.d", True),
        ("gpu.*", "gpu.discovered", True),
    ],
)
def test_topic_matches_examples(pattern: str, key: str, expected: bool) -> None:
    assert topic_matches(pattern, key) is expected


@given(keys)
def test_a_key_matches_itself(key: str) -> None:
    assert topic_matches(key, key)


@given(keys)
def test_hash_matches_everything(key: str) -> None:
    assert topic_matches("#", key)
    assert topic_matches("#.#", key)


@given(keys)
def test_star_matches_exactly_one_word(key: str) -> None:
    assert topic_matches("*", key) is ("." not in key)


@given(keys)
def test_n_stars_match_exactly_n_words(key: str) -> None:
    n = len(key.split("."))
    assert topic_matches(".".join(["*"] * n), key)
    assert not topic_matches(".".join(["*"] * (n + 1)), key)
    if n > 1:
        assert not topic_matches(".".join(["*"] * (n - 1)), key)


@given(keys, st.data())
def test_any_word_may_be_replaced_by_a_wildcard(key: str, data: st.DataObject) -> None:
    parts = key.split(".")
    i = data.draw(st.integers(min_value=0, max_value=len(parts) - 1))
    wildcard = data.draw(st.sampled_from(["*", "#"]))
    assert topic_matches(".".join([*parts[:i], wildcard, *parts[i + 1 :]]), key)


@given(words, keys)
def test_prefix_hash_matches_keys_with_that_first_word(first: str, key: str) -> None:
    assert topic_matches(f"{first}.#", key) is (key.split(".")[0] == first)
    assert topic_matches(f"{first}.#", f"{first}.{key}")


@given(patterns, keys)
def test_agrees_with_a_reference_matcher(pattern: str, key: str) -> None:
    assert topic_matches(pattern, key) is reference_matches(pattern, key)


# --- queue names ------------------------------------------------------------------------------


def test_queue_name_is_nameko_form() -> None:
    # nameko: evt-<source service>-<event type>--<consumer service>.<method>
    assert (
        queue_name("violations", "violation.opened", "warden_chat_plugin.on_opened")
        == "evt-violations-violation.opened--warden_chat_plugin.on_opened"
    )


def test_queue_name_spells_star_as_any() -> None:
    assert (
        queue_name("violations", "violation.*", "csv_plugin.append")
        == "evt-violations-violation.any--csv_plugin.append"
    )
    assert queue_name("monitor", "*.*", "a.b") == "evt-monitor-any.any--a.b"
    assert "*" not in queue_name("monitor", "*.sampled", "a.b")


def test_queue_name_keeps_hash() -> None:
    assert queue_name("monitor", "host.#", "history.record") == "evt-monitor-host.#--history.record"


def test_queue_names_differ_per_consumer_and_pattern() -> None:
    names = {
        queue_name("monitor", "host.*", "a.h"),
        queue_name("monitor", "host.*", "b.h"),
        queue_name("monitor", "host.sampled", "a.h"),
        queue_name("violations", "host.*", "a.h"),
    }
    assert len(names) == 4


def test_dead_letter_queue_name() -> None:
    queue = queue_name("monitor", "host.*", "a.h")
    assert dead_letter_queue_name(queue) == queue + ".dead-letter"
