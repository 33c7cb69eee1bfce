"""Which e-mail server and chat webhooks are in force: the Settings page's over the file's, and
what an answer may show of them (no secret)."""

from __future__ import annotations

import json

import pytest

from services.notifications.delivery.setup import (
    FILE,
    NONE,
    SAVED,
    MissingUrl,
    Saved,
    answer,
    in_force,
    smtp_changed,
    webhooks_changed,
)
from services.shared.config import SmtpSettings, ViolationSettings, WebhookTarget

TOKEN = "T000/B000/XXXXSECRETXXXX"
SAVED_SMTP = {
    "host": "mail.lab.example",
    "port": 2525,
    "security": "none",
    "username": "warden",
    "password": "hunter2-secret",
    "mail_from": "warden@lab.example",
}
SAVED_HOOK = {
    "name": "lab-chat",
    "format": "slack",
    "url": f"https://hooks.slack.com/services/{TOKEN}",
    "secret": "",
}


def test_nothing_anywhere_reaches_nobody() -> None:
    delivery = in_force(ViolationSettings(), Saved())
    assert (delivery.smtp_source, delivery.webhooks_source) == (NONE, NONE)
    assert delivery.reaches_nobody
    assert answer(delivery)["reaches_nobody"] is True


def test_the_file_holds_until_the_settings_page_saves() -> None:
    file = ViolationSettings(
        smtp=SmtpSettings(host="file.example", timeout_s=3.0),
        webhooks=(WebhookTarget(url="https://file.example/hook", name="file-hook"),),
    )
    from_file = in_force(file, Saved())
    assert (from_file.smtp.host, from_file.smtp_source) == ("file.example", FILE)
    assert [w.label for w in from_file.webhooks] == ["file-hook"]
    assert not from_file.reaches_nobody

    saved = in_force(file, Saved(smtp=SAVED_SMTP, webhooks=[SAVED_HOOK]))
    assert (saved.smtp.host, saved.smtp.port, saved.smtp_source) == (
        "mail.lab.example",
        2525,
        SAVED,
    )
    assert saved.smtp.timeout_s == 3.0  # the file's deadline still holds
    assert [w.label for w in saved.webhooks] == ["lab-chat"]
    assert saved.webhooks_source == SAVED

    none_saved = in_force(file, Saved(webhooks=[]))  # saved as none: none, whatever the file
    assert none_saved.webhooks == () and none_saved.webhooks_source == SAVED


def test_an_answer_holds_no_secret() -> None:
    shown = answer(in_force(ViolationSettings(), Saved(smtp=SAVED_SMTP, webhooks=[SAVED_HOOK])))
    text = json.dumps(shown)
    assert "hunter2" not in text and TOKEN not in text and "services" not in text
    assert shown["smtp"]["password_set"] is True
    assert shown["webhooks"]["targets"] == [
        {
            "name": "lab-chat",
            "format": "slack",
            "url_hint": "https://hooks.slack.com/…",
            "secret_set": False,
        }
    ]


def test_a_change_without_the_password_keeps_the_saved_one() -> None:
    given = {**SAVED_SMTP, "host": "other.example", "password": None}
    assert smtp_changed(SAVED_SMTP, given)["password"] == "hunter2-secret"
    assert smtp_changed(SAVED_SMTP, {**given, "password": ""})["password"] == ""
    assert smtp_changed(None, given)["password"] == ""


def test_a_webhook_left_without_url_keeps_the_saved_one_of_its_name() -> None:
    kept = webhooks_changed([SAVED_HOOK], [{"name": "lab-chat", "format": "mattermost"}])
    assert kept == [{**SAVED_HOOK, "format": "mattermost"}]
    with pytest.raises(MissingUrl):
        webhooks_changed([SAVED_HOOK], [{"name": "new-one", "format": "slack"}])
