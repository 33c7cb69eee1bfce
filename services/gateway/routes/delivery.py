"""How Warden's e-mail and chat messages go out, for admins (the Settings page): the SMTP server
and the chat webhooks, saved in the violations service's database, and a test of each.

What the page saves wins over the configuration file's keys; secrets are write-only (answers
say whether one is set, never what it is).
"""

from __future__ import annotations

from typing import Any

from services.gateway.routing import Access, Call, Route
from services.notifications import api


async def get_delivery(call: Call) -> dict[str, Any]:
    answer: dict[str, Any] = await call.rpc(api.DELIVERY_SETTINGS, {})
    return answer


async def set_delivery(call: Call) -> dict[str, Any]:
    args = {**call.body, "by": call.user.username}
    answer: dict[str, Any] = await call.rpc(api.SET_DELIVERY_SETTINGS, args)
    return answer


async def test_delivery(call: Call) -> dict[str, Any]:
    args = {**call.body, "by": call.user.username}
    answer: dict[str, Any] = await call.rpc(api.TEST_DELIVERY, args)
    return answer


TAG = "settings"
ROUTES = (
    Route(
        "GET",
        "/settings/delivery",
        get_delivery,
        Access.ADMIN,
        "How e-mail and chat messages go out now, and where each setting comes from",
        TAG,
        response=api.DeliverySchema,
        description="`source` per channel: settings (saved here), file (the configuration "
        "file) or none. `reaches_nobody`: neither is set up, so violations tell nobody by "
        "e-mail or chat. No password, webhook URL or signing key is ever answered.",
    ),
    Route(
        "PUT",
        "/settings/delivery",
        set_delivery,
        Access.ADMIN,
        "Save the e-mail server or the chat webhooks (they win over the configuration file)",
        TAG,
        body=api.DeliveryBody,
        response=api.DeliverySchema,
        description="A channel left out stays as it is; `null` forgets what was saved, and "
        "the configuration file's holds again. A password, URL or signing key left out keeps "
        "the saved one. Holds from the next message on, with no restart.",
    ),
    Route(
        "POST",
        "/settings/delivery/test",
        test_delivery,
        Access.ADMIN,
        "Send a test e-mail, or a test message to every chat webhook, with the settings in force",
        TAG,
        body=api.DeliveryTestBody,
        response=api.DeliveryTestAnswerSchema,
        description="One outcome per address or webhook: reached or not, and why.",
    ),
)
