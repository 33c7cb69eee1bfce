"""The webhook handler's adapter: `WebhookSender` posts one alert to every configured endpoint.

It posts the bodies of `webhook_payloads` through the notifications' `WebhookPoster`
(`services.notifications.delivery.webhook`: pacing per URL, retries, signatures).
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence
from typing import Any

from services.notifications.delivery.webhook import WebhookPoster, encode
from services.shared.config import ViolationSettings, WebhookTarget
from services.violations.actions.base import ActionOutcome, Alert
from services.violations.actions.webhook_payloads import payload


class WebhookSender(WebhookPoster):
    """Posts an alert to every configured webhook; one `ActionOutcome` per target (pacing and
    retries as `WebhookPoster` describes)."""

    @classmethod
    def from_settings(cls, settings: ViolationSettings, **options: Any) -> WebhookSender:
        return cls(
            settings.webhooks,
            min_interval_s=settings.webhook_min_interval_s,
            retries=settings.webhook_retries,
            **options,
        )

    async def send(
        self,
        alert: Alert,
        *,
        skip: Collection[str] = (),
        targets: Sequence[WebhookTarget] | None = None,
    ) -> list[ActionOutcome]:
        """Post to every target whose label is not in `skip`, all targets at once.

        `targets`: the webhooks in force now (the Settings page's); None: those it was made
        with."""
        if self._session is None:
            raise RuntimeError("WebhookSender.send before start()")
        chosen = self.targets if targets is None else targets
        targets = [t for t in chosen if t.label not in skip]
        bodies: dict[str, bytes | str] = {}
        for target in targets:
            if target.format not in bodies:
                try:
                    bodies[target.format] = encode(payload(target.format, alert))
                except ValueError as err:
                    bodies[target.format] = str(err)
        return list(await asyncio.gather(*(self._deliver(t, bodies[t.format]) for t in targets)))
