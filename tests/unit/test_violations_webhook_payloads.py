"""Webhook bodies (pure): each service's shape, its limits whatever the input, the signature.

Limits are counted here on their own terms (UTF-16 code units, as the JavaScript-based services
count, and UTF-8 bytes of the posted body for Teams), not with the module's helpers.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import textwrap
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.notifications.delivery import signature as webhook_signature
from services.notifications.delivery.signature import sign, verify
from services.notifications.delivery.webhook import encode, retry_after
from services.violations.actions.base import Alert, Process
from services.violations.actions.webhook_payloads import FORMATS, audience, payload

T0 = datetime(2026, 11, 21, 13, 5, tzinfo=UTC)
CHAT_FORMATS = ("slack", "mattermost", "discord", "teams")


def units(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def make_alert(**changes: Any) -> Alert:
    alert = Alert(
        incident_id="inc-7f3a",
        host="gpu01",
        gpu_uuid="GPU-5a1c0e2b-1111-2222-3333-444455556666",
        gpu_index=2,
        offender="bob",
        processes=(
            Process(4242, "python train.py --lr 1e-3", T0 - timedelta(minutes=3), 10240.0),
            Process(4243, "python -m torch.distributed.run worker.py", None, None),
        ),
        since=T0,
        reservation_id=12,
        owner="alice",
        reservation_start=T0 - timedelta(hours=1),
        reservation_end=T0 + timedelta(hours=5),
        step="0s webhook owner+admins",
        step_index=1,
        action="webhook",
        recipients=("owner", "admins"),
        next_step="60s email offender+admins",
        next_at=T0 + timedelta(minutes=1),
    )
    return replace(alert, **changes)


def strict_alert() -> Alert:
    return make_alert(
        mode="strict",
        reservation_id=None,
        owner=None,
        reservation_start=None,
        reservation_end=None,
    )


def many_processes(count: int = 500, command_chars: int = 10_000) -> tuple[Process, ...]:
    return tuple(
        Process(1000 + i, f"python job{i}.py " + "x" * command_chars) for i in range(count)
    )


SHOWN_KEYS = {"text", "title", "value", "name", "content", "description"}


def texts_of(value: Any) -> list[str]:
    """Every string a reader sees in a JSON body (not settings such as "spacing": "None")."""
    if isinstance(value, dict):
        found = [v for k, v in value.items() if k in SHOWN_KEYS and isinstance(v, str)]
        return found + [t for item in value.values() for t in texts_of(item)]
    if isinstance(value, list):
        return [t for item in value for t in texts_of(item)]
    return []


# --- the limits, checked on their own --------------------------------------------------------


def check_slack(body: dict[str, Any]) -> None:
    assert units(body["text"]) <= 40_000
    assert 0 < len(body["blocks"]) <= 50
    for block in body["blocks"]:
        if block["type"] == "section":
            assert block["text"]["type"] == "mrkdwn"
            assert 0 < units(block["text"]["text"]) <= 3000
        else:
            assert block["type"] == "context"
            assert 0 < len(block["elements"]) <= 10
            for element in block["elements"]:
                assert 0 < units(element["text"]) <= 3000
    procs = next(b["text"]["text"] for b in body["blocks"] if "*Processes*" in b["text"]["text"])
    # the code block opens once and closes once: no command can close it early
    assert procs.startswith("*Processes*\n```") and procs.endswith("```")
    assert procs.count("```") == 2
    # no raw control character of Slack's: a command cannot write <!channel> or a link
    for text in texts_of(body):
        assert "<" not in text and ">" not in text
        assert not re.search(r"&(?!amp;|lt;|gt;)", text)


def check_mattermost(body: dict[str, Any]) -> None:
    assert set(body) == {"text"}
    text = body["text"]
    assert 0 < units(text) <= 16_383
    assert text.count("```") == 2
    fence = text.splitlines()
    assert fence.count("```") == 2


def check_discord(body: dict[str, Any]) -> None:
    assert body["allowed_mentions"] == {"parse": []}
    assert units(body.get("content", "")) <= 2000
    assert len(body["embeds"]) == 1
    embed = body["embeds"][0]
    assert 0 < units(embed["title"]) <= 256
    assert units(embed.get("description", "")) <= 4096
    assert 0 < len(embed["fields"]) <= 25
    total = units(embed["title"]) + units(embed.get("description", ""))
    total += units(embed["footer"]["text"])
    for item in embed["fields"]:
        assert 0 < units(item["name"]) <= 256
        assert 0 < units(item["value"]) <= 1024
        assert item["value"].strip()
        total += units(item["name"]) + units(item["value"])
    assert total <= 6000


def check_teams(body: dict[str, Any]) -> None:
    assert len(encode(body)) <= 28_000
    assert body["type"] == "message"
    [attachment] = body["attachments"]
    assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
    card = attachment["content"]
    assert card["$schema"] == "http://adaptivecards.io/schemas/adaptive-card.json"
    assert card["type"] == "AdaptiveCard"
    assert card["version"] == "1.4"
    for element in card["body"]:
        assert element["type"] in ("TextBlock", "FactSet")
        if element["type"] == "TextBlock":
            assert element["text"]
        else:
            assert all(f["title"] and f["value"] for f in element["facts"])


CHECKS = {
    "slack": check_slack,
    "mattermost": check_mattermost,
    "discord": check_discord,
    "teams": check_teams,
}


def check(format: str, alert: Alert) -> dict[str, Any]:
    body = payload(format, alert)
    assert json.loads(encode(body)) == body  # what is posted is what was built
    CHECKS[format](body)
    # one line per process at most: no command brings its own line breaks
    for text in texts_of(body):
        for line in text.split("\n"):
            assert "\r" not in line and "\u2028" not in line
    return body


# --- shapes ------------------------------------------------------------------------------------


def test_slack_has_the_fallback_text_and_the_facts_in_blocks() -> None:
    body = check("slack", make_alert())
    assert body["text"] == (
        "bob is using GPU 2 on gpu01, reserved by alice until 2026-11-21 18:05 UTC. "
        "For alice and the admins."
    )
    first, facts, procs, context = body["blocks"]
    assert "*bob is using GPU 2 on gpu01" in first["text"]["text"]
    assert first["text"]["text"].endswith("\nFor alice and the admins.")
    assert facts["text"]["text"].splitlines() == [
        "*Host:* gpu01",
        "*GPU:* 2 (GPU-5a1c0e2b-1111-2222-3333-444455556666)",
        "*User:* bob",
        "*Since:* 2026-11-21 13:05 UTC",
        "*Reservation:* #12 of alice, 2026-11-21 12:05 UTC to 2026-11-21 18:05 UTC",
        "*Incident:* inc-7f3a (step 2: 0s webhook owner+admins)",
    ]
    assert procs["text"]["text"] == (
        "*Processes*\n```pid 4242: python train.py --lr 1e-3\n"
        "pid 4243: python -m torch.distributed.run worker.py```"
    )
    assert context["elements"][0]["text"] == "Next, at 2026-11-21 13:06 UTC: an e-mail goes out."


def test_slack_escapes_what_a_command_could_use_to_ping_or_link() -> None:
    alert = make_alert(processes=(Process(1, "echo <!channel> <@U123|x> & <https://evil>"),))
    body = check("slack", alert)
    procs = body["blocks"][2]["text"]["text"]
    assert "echo &lt;!channel&gt; &lt;@U123|x&gt; &amp; &lt;https://evil&gt;" in procs


def test_mattermost_is_one_markdown_text() -> None:
    text = check("mattermost", make_alert())["text"]
    lines = text.splitlines()
    assert lines[0] == (
        "#### :rotating_light: bob is using GPU 2 on gpu01, reserved by alice until "
        "2026-11-21 18:05 UTC"
    )
    assert lines[1] == "For alice and the admins."
    assert "**Host:** gpu01" in lines
    assert "**Reservation:** #12 of alice, 2026-11-21 12:05 UTC to 2026-11-21 18:05 UTC" in lines
    start = lines.index("```")
    assert lines[start + 1 : start + 4] == [
        "pid 4242: python train.py --lr 1e-3",
        "pid 4243: python -m torch.distributed.run worker.py",
        "```",
    ]
    assert lines[-1] == "Next, at 2026-11-21 13:06 UTC: an e-mail goes out."


def test_discord_has_one_embed_with_fields_and_pings_nobody() -> None:
    body = check("discord", make_alert())
    assert body["username"] == "Warden"
    assert body["content"] == "For alice and the admins."
    [embed] = body["embeds"]
    assert embed["title"].startswith("bob is using GPU 2 on gpu01")
    assert embed["timestamp"] == "2026-11-21T13:05:00+00:00"
    fields = {f["name"]: f["value"] for f in embed["fields"]}
    assert list(fields) == [
        "Host",
        "GPU",
        "User",
        "Since",
        "Reservation",
        "Incident",
        "Processes",
        "Next",
    ]
    assert fields["User"] == "bob"
    assert fields["Processes"] == (
        "```\npid 4242: python train.py --lr 1e-3\n"
        "pid 4243: python -m torch.distributed.run worker.py```"
    )
    assert fields["Next"] == "Next, at 2026-11-21 13:06 UTC: an e-mail goes out."


def test_teams_is_an_adaptive_card_in_a_message() -> None:
    body = check("teams", make_alert())
    card = body["attachments"][0]["content"]
    blocks = card["body"]
    assert blocks[0]["text"].startswith("bob is using GPU 2 on gpu01")
    assert blocks[0]["weight"] == "Bolder"
    assert blocks[1]["text"] == "For alice and the admins."
    facts = {f["title"]: f["value"] for f in blocks[2]["facts"]}
    assert facts["Host"] == "gpu01"
    assert facts["Incident"] == "inc-7f3a (step 2: 0s webhook owner+admins)"
    monospace = [b["text"] for b in blocks if b.get("fontType") == "Monospace"]
    assert monospace == [
        "pid 4242: python train.py --lr 1e-3",
        "pid 4243: python -m torch.distributed.run worker.py",
    ]
    assert blocks[-1]["text"] == "Next, at 2026-11-21 13:06 UTC: an e-mail goes out."


def test_json_body_carries_every_alert_field_and_round_trips() -> None:
    alert = make_alert()
    body = json.loads(encode(payload("json", alert)))
    assert body["event"] == "violation.escalated"
    assert body["version"] == 1
    assert body["text"] == (
        "bob is using GPU 2 on gpu01, reserved by alice until 2026-11-21 18:05 UTC"
    )
    incident = body["incident"]
    assert incident["since"] == "2026-11-21T13:05:00+00:00"
    assert incident["processes"][0] == {
        "pid": 4242,
        "command": "python train.py --lr 1e-3",
        "started_at": "2026-11-21T13:02:00+00:00",
        "used_memory_mib": 10240.0,
    }
    assert incident["recipients"] == ["owner", "admins"]
    assert Alert.from_event(incident) == alert


def test_json_body_keeps_commands_whole() -> None:
    alert = make_alert(processes=many_processes(3, 5000))
    incident = json.loads(encode(payload("json", alert)))["incident"]
    assert [p["command"] for p in incident["processes"]] == [p.command for p in alert.processes]


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown webhook format 'irc'"):
        payload("irc", make_alert())


# --- wording -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("recipients", "owner", "words"),
    [
        (("owner", "admins"), "alice", "For alice and the admins."),
        (("offender", "owner", "admins"), "alice", "For bob, alice and the admins."),
        (("offender",), "alice", "For bob."),
        (("owner", "admins"), None, "For the admins."),
        (("owner",), None, ""),
        ((), "alice", ""),
    ],
)
def test_recipients_in_words(recipients: tuple[str, ...], owner: str | None, words: str) -> None:
    assert audience(make_alert(recipients=recipients, owner=owner)) == words


@pytest.mark.parametrize("format", CHAT_FORMATS)
def test_strict_mode_alert_reads_right(format: str) -> None:
    body = check(format, strict_alert())
    text = "\n".join(texts_of(body))
    assert "bob is using GPU 2 on gpu01, which nobody reserved (strict mode)" in text
    assert "For the admins." in text
    assert "None" not in text
    assert "Reservation" not in text
    assert "reserved by" not in text


@pytest.mark.parametrize("format", CHAT_FORMATS)
def test_last_step_says_so(format: str) -> None:
    body = check(format, make_alert(next_step=None, next_at=None))
    assert "This is the last step." in "\n".join(texts_of(body))


@pytest.mark.parametrize("format", CHAT_FORMATS)
def test_no_processes_reported(format: str) -> None:
    body = check(format, make_alert(processes=()))
    assert "(no processes reported)" in "\n".join(texts_of(body))


# --- limits ------------------------------------------------------------------------------------


@pytest.mark.parametrize("format", CHAT_FORMATS)
def test_limits_hold_with_500_processes_of_10_kb_commands(format: str) -> None:
    body = check(format, make_alert(processes=many_processes()))
    text = "\n".join(texts_of(body))
    shown = len(re.findall(r"pid \d+: ", text))
    assert 0 < shown < 500
    assert f"… and {500 - shown} more processes" in text
    assert "pid 1000: python job0.py xxx" in text  # the first processes come first


@pytest.mark.parametrize("format", CHAT_FORMATS)
def test_a_single_huge_command_is_clipped_with_an_ellipsis(format: str) -> None:
    body = check(format, make_alert(processes=(Process(7, "y" * 10_000),)))
    text = "\n".join(texts_of(body))
    assert re.search(r"pid 7: y+…", text)
    assert "more process" not in text


@pytest.mark.parametrize("format", CHAT_FORMATS)
def test_line_breaks_and_fences_in_commands_stay_inside_their_line(format: str) -> None:
    sneaky = "sh -c 'x'\n```\n@everyone <!here>\r\n\u2028#### fake\x1b[31m"
    body = check(format, make_alert(processes=(Process(9, sneaky),), offender="bob\nmallory"))
    text = "\n".join(texts_of(body))
    assert "\n@everyone" not in text and "\n#### fake" not in text
    assert "\x1b" not in text


@pytest.mark.parametrize("format", CHAT_FORMATS)
def test_limits_hold_with_long_names_everywhere(format: str) -> None:
    long = "é" * 5000 + "😀" * 3000
    alert = make_alert(
        host=long,
        offender=long,
        owner=long,
        gpu_uuid=long,
        incident_id=long,
        step=long,
        next_step=long,
        recipients=("offender", "owner", "admins", long),
        processes=tuple(Process(i, long) for i in range(500)),
    )
    check(format, alert)


def command() -> st.SearchStrategy[str]:
    # short pieces repeated: up to ~12,000 characters without asking hypothesis for huge text
    return st.builds(lambda piece, times: piece * times, st.text(max_size=20), st.integers(0, 600))


alerts = st.builds(
    make_alert,
    host=st.text(max_size=300),
    offender=st.text(max_size=300),
    owner=st.none() | st.text(max_size=300),
    gpu_uuid=st.text(max_size=100),
    gpu_index=st.none() | st.integers(0, 15),
    incident_id=st.text(min_size=1, max_size=100),
    # A step as the config can hold it (parse_step checks it at start-up): not free text.
    step=st.from_regex(
        r"[0-9]{1,5}(ms|s|m|h) [a-z][a-z0-9_-]{0,30}( (offender|owner|admins)(\+admins)?)?",
        fullmatch=True,
    ),
    recipients=st.lists(st.sampled_from(["offender", "owner", "admins"]), max_size=3).map(tuple),
    processes=st.builds(
        lambda base, times: tuple(base) * times,
        st.lists(st.builds(Process, st.integers(0, 2**22), command()), max_size=8),
        st.integers(1, 80),
    ),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(alert=alerts, format=st.sampled_from(CHAT_FORMATS))
def test_limits_hold_for_any_alert(alert: Alert, format: str) -> None:
    check(format, alert)


@settings(max_examples=40, deadline=None)
@given(alert=alerts)
def test_json_body_round_trips_any_alert(alert: Alert) -> None:
    body = json.loads(encode(payload("json", alert)))
    assert body["event"] == "violation.escalated"
    assert len(body["incident"]["processes"]) == len(alert.processes)


def test_every_format_is_buildable() -> None:
    assert set(FORMATS) == {*CHAT_FORMATS, "json"}
    for format in FORMATS:
        assert json.loads(encode(payload(format, make_alert())))


# --- signatures --------------------------------------------------------------------------------

SECRET = "whsec-0123456789abcdef"
BODY = b'{"event":"violation.escalated"}'


def test_sign_is_hmac_sha256_of_timestamp_dot_body() -> None:
    expected = hmac.new(SECRET.encode(), b"1795363200." + BODY, hashlib.sha256).hexdigest()
    assert sign(SECRET, 1795363200, BODY) == f"sha256={expected}"
    assert sign(SECRET, "1795363200", BODY) == f"sha256={expected}"


def test_verify_accepts_the_signature_and_refuses_any_change() -> None:
    signature = sign(SECRET, 1795363200, BODY)
    now = 1795363200 + 10
    assert verify(SECRET, "1795363200", BODY, signature, now=now)
    assert not verify(SECRET, "1795363200", BODY + b" ", signature, now=now)
    assert not verify("another-secret", "1795363200", BODY, signature, now=now)
    assert not verify(SECRET, "1795363201", BODY, signature, now=now)
    assert not verify(SECRET, "1795363200", BODY, signature.upper(), now=now)
    assert not verify(SECRET, "soon", BODY, signature, now=now)
    # replays: a signature older (or newer) than the tolerance is refused
    assert not verify(SECRET, "1795363200", BODY, signature, now=1795363200 + 301)
    assert verify(SECRET, "1795363200", BODY, signature, now=1795363200 + 301, tolerance_s=600)


def test_the_receiver_snippet_in_the_docstring_works() -> None:
    """The code receivers are told to copy is the code that is tested."""
    doc = webhook_signature.__doc__ or ""
    start = doc.index("    import hashlib, hmac, time")
    end = doc.index("signature)\n", start) + len("signature)\n")
    namespace: dict[str, Any] = {}
    exec(textwrap.dedent(doc[start:end]), namespace)
    receiver_verify = namespace["verify"]
    import time

    stamp = str(int(time.time()))
    assert receiver_verify(SECRET, stamp, BODY, sign(SECRET, stamp, BODY))
    assert not receiver_verify(SECRET, stamp, BODY + b"x", sign(SECRET, stamp, BODY))
    assert not receiver_verify(SECRET, "0", BODY, sign(SECRET, "0", BODY))


# --- Retry-After ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "seconds"),
    [("7", 7.0), ("0.5", 0.5), ("3600", 60.0), ("-3", 0.0), ("", None), (None, None)],
)
def test_retry_after_seconds(header: str | None, seconds: float | None) -> None:
    assert retry_after(header) == seconds


def test_retry_after_garbage_is_ignored() -> None:
    assert retry_after("soon") is None
    assert retry_after("nan") is None


def test_retry_after_http_date() -> None:
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past: now
    assert retry_after("Fri, 01 Jan 2100 00:00:00 GMT") == 60.0  # far ahead: capped
