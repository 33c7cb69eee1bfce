"""`warden notifications`: what the signed-in user is told and where (`GET/PUT
/api/v1/me/notifications`), what was sent (`--sent`), and a test (`--test`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from services.client.args import Subcommands, json_flag
from services.client.columns import Column
from services.client.output import console, page_note, print_json, utc_now
from services.client.render import make_table, when
from services.client.session import stored_api

CHANNELS = ("email", "chat", "browser")

# What each kind means, in the web UI's words; the name is what `--set` takes.
KIND_LABELS = {
    "reservation_starting": "My reservation starts soon",
    "reservation_ending": "My reservation ends soon",
    "reservation_idle": "My reserved GPUs are idle",
    "reservation_released": "My reservation was released",
    "reservation_cancelled": "My reservation was cancelled by a rule change",
    "reservation_violated": "Someone is using my reserved GPU",
    "job_finished": "My job finished",
    "job_failed": "My job failed",
}
PREFERENCE_COLUMNS = (
    Column("WHEN", 16),
    *(Column(channel.upper()) for channel in CHANNELS),
    Column("KIND (for --set)"),
)
SENT_COLUMNS = (
    Column("AT"),
    Column("ABOUT", 12),
    Column("CHANNEL"),
    Column("TITLE", 12),
    Column("OUTCOME", 8),
)


def kind_label(kind: str) -> str:
    return KIND_LABELS.get(kind) or kind.replace("_", " ")


def parse_choice(text: str) -> dict[str, Any]:
    """`job_failed=email,browser` (or `job_failed=` for none) as a kind's row of channels."""
    kind, sep, listed = text.partition("=")
    chosen = {part.strip() for part in listed.split(",") if part.strip()}
    unknown = chosen - set(CHANNELS)
    if not sep or not kind.strip() or unknown:
        raise argparse.ArgumentTypeError(
            f"expected KIND=CHANNELS with channels from {', '.join(CHANNELS)}: {text!r}"
        )
    return {"kind": kind.strip(), **{channel: channel in chosen for channel in CHANNELS}}


def _changes(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if args.set:
        body["kinds"] = list(args.set)
    if args.start_lead is not None:
        body["start_lead_min"] = args.start_lead
    if args.end_lead is not None:
        body["end_lead_min"] = args.end_lead
    if args.chat_url:
        body["chat_url"] = args.chat_url
    if args.chat_format:
        body["chat_format"] = args.chat_format
    if args.no_chat:
        body["chat_url"] = None
    return body


def _show(prefs: dict[str, Any]) -> None:
    rows = [
        [
            kind_label(row["kind"]),
            *("yes" if row[channel] else "-" for channel in CHANNELS),
            row["kind"],
        ]
        for row in prefs["kinds"]
    ]
    out = console()
    out.print(make_table(PREFERENCE_COLUMNS, rows, "what you are told, and where", out.width))
    chat = prefs.get("chat_handle")
    print(
        f"reminders: {prefs['start_lead_min']} min before a start, "
        f"{prefs['end_lead_min']} min before an end; chat: "
        + (f"{prefs.get('chat_format')} {chat}" if chat else "none")
    )


def cmd_notifications(args: argparse.Namespace) -> int:
    api = stored_api()
    if args.sent:
        answer = api.get("/me/notifications/sent", limit=100)
        if args.json:
            print_json(answer)
            return 0
        now = utc_now()
        rows = [
            [
                when(item["at"], now),
                kind_label(item["kind"]),
                item["channel"],
                item["title"],
                item["outcome"],
            ]
            for item in answer["items"]
        ]
        if not rows:
            print("nothing sent yet")
            return 0
        out = console()
        out.print(make_table(SENT_COLUMNS, rows, width=out.width))
        page_note(answer, "notifications")
        return 0
    if args.test:
        answer = api.post("/me/notifications/test", {"kind": args.test})
        if args.json:
            print_json(answer)
        else:
            went = answer["channels"]
            print(", ".join(f"{c}: {o}" for c, o in went.items()) or "no channel gets that kind")
        return 0
    body = _changes(args)
    prefs = (
        api.request("PUT", "/me/notifications", body=body) if body else api.get("/me/notifications")
    )
    if args.json:
        print_json(prefs)
    else:
        _show(prefs)
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"notifications": cmd_notifications}


def add_parsers(commands: Subcommands, common: Sequence[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "notifications",
        parents=common,
        help="what you are told (reminders, idle GPUs, jobs) and where; --sent, --test",
    )
    parser.add_argument(
        "--set",
        metavar="KIND=CHANNELS",
        type=parse_choice,
        action="append",
        help="channels for a kind, e.g. job_finished=email,browser or job_failed= (repeatable)",
    )
    parser.add_argument("--start-lead", type=int, metavar="MIN", help="remind before a start")
    parser.add_argument("--end-lead", type=int, metavar="MIN", help="remind before an end")
    parser.add_argument("--chat-url", metavar="URL", help="your chat webhook (kept secret)")
    parser.add_argument(
        "--chat-format", choices=("slack", "mattermost", "discord", "teams"), help="its service"
    )
    parser.add_argument("--no-chat", action="store_true", help="remove your chat webhook")
    parser.add_argument("--sent", action="store_true", help="what was sent to you, newest first")
    parser.add_argument(
        "--test", metavar="KIND", help="send yourself a test on the channels of KIND"
    )
    json_flag(parser)
