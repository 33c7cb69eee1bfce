"""The signed-in user's notifications: what they are told and where, and what was sent.

The violations service keeps both (`violations.notification_prefs`, `list_notifications`); a
user reads and changes only their own. The chat webhook is a secret: answers show it masked.
"""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, fields, validate

from services.gateway.routing import Access, Call, Page, Route, page_of, page_schema
from services.notifications import api
from services.notifications.api import NOTIFICATION_KINDS, PreferencesBody, PreferencesSchema

TEST_TEXT = "A test from your notification settings: this channel works."


class TestBody(Schema):
    kind = fields.String(
        load_default="job_finished",
        validate=validate.OneOf(NOTIFICATION_KINDS),
        metadata={"description": "sent on the channels chosen for this kind"},
    )


class TestAnswerSchema(api.NotifyAnswerSchema):
    pass


async def get_prefs(call: Call) -> dict[str, Any]:
    answer: dict[str, Any] = await call.rpc(api.NOTIFICATION_PREFS, {"user": call.user.username})
    return answer


async def set_prefs(call: Call) -> dict[str, Any]:
    args = {**call.body, "user": call.user.username}
    answer: dict[str, Any] = await call.rpc(api.SET_NOTIFICATION_PREFS, args)
    return answer


async def list_sent(call: Call) -> dict[str, Any]:
    query = call.query
    found = await call.rpc(
        api.LIST_NOTIFICATIONS,
        {"user": call.user.username, "limit": query["limit"], "offset": query["offset"]},
    )
    return page_of(found["items"], found["total"], query)


async def send_test(call: Call) -> dict[str, Any]:
    args = {
        "user": call.user.username,
        "kind": call.body["kind"],
        "title": "Warden test notification",
        "text": TEST_TEXT,
    }
    answer: dict[str, Any] = await call.rpc(api.NOTIFY, args)
    return answer


TAG = "notifications"
ROUTES = (
    Route(
        "GET",
        "/me/notifications",
        get_prefs,
        Access.USER,
        "The signed-in user's notification preferences (the defaults until changed)",
        TAG,
        response=PreferencesSchema,
        description="Per kind, which channels (email, chat, browser) get it; reminder lead "
        "times; the chat webhook masked.",
    ),
    Route(
        "PUT",
        "/me/notifications",
        set_prefs,
        Access.USER,
        "Change the signed-in user's notification preferences",
        TAG,
        body=PreferencesBody,
        response=PreferencesSchema,
        description="Fields left out keep their value; `chat_url: null` removes the chat "
        "webhook. Answers the preferences as they are now (the chat webhook masked).",
    ),
    Route(
        "GET",
        "/me/notifications/sent",
        list_sent,
        Access.USER,
        "What was sent to the signed-in user, newest first",
        TAG,
        query=Page,
        response=page_schema(api.SentSchema),
        description="One entry per channel and notification: sent, failed (with why) or "
        "limited (over the rate limit, not sent).",
    ),
    Route(
        "POST",
        "/me/notifications/test",
        send_test,
        Access.USER,
        "Send the signed-in user a test notification on the channels of a kind",
        TAG,
        body=TestBody,
        response=TestAnswerSchema,
        description="Rate-limited like every notification.",
    ),
)
