"""The e-mail notice (pure): the two templates, the headers, and no header injection."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from email import message_from_bytes, policy
from email.message import EmailMessage

import pytest

from services.notifications.delivery.smtp import NOT_CONFIGURED
from services.shared.config import SmtpSettings
from services.violations.actions.base import Alert, Process
from services.violations.actions.mail import (
    MailSender,
    Recipient,
    compose,
    unique_recipients,
)

NOW = datetime(2026, 11, 21, 13, 5, tzinfo=UTC)
FROM = "Warden <warden@gpu.example.org>"

ALERT = Alert(
    incident_id="inc-7f3a",
    host="node07",
    gpu_uuid="GPU-1234-abcd",
    gpu_index=3,
    offender="bob",
    processes=(Process(pid=4242, command="python train.py --epochs 90"),),
    since=datetime(2026, 11, 21, 12, 58, tzinfo=UTC),
    reservation_id=12,
    owner="alice",
    reservation_start=datetime(2026, 11, 21, 12, 0, tzinfo=UTC),
    reservation_end=datetime(2026, 11, 21, 18, 0, tzinfo=UTC),
    step="60s email offender+owner+admins",
    step_index=1,
    action="email",
    recipients=("offender", "owner", "admins"),
    next_step="300s terminate",
    next_at=datetime(2026, 11, 21, 13, 10, tzinfo=UTC),
)
STRICT = replace(
    ALERT,
    mode="strict",
    owner=None,
    reservation_id=None,
    reservation_start=None,
    reservation_end=None,
)

OFFENDER = Recipient("offender", "bob", "bob@example.org")
OWNER = Recipient("owner", "alice", "alice@example.org")
ADMIN = Recipient("admin", "root", "ops@example.org")


def _roundtrip(message: EmailMessage) -> EmailMessage:
    """What a mail client sees: the bytes on the wire, parsed back."""
    parsed = message_from_bytes(message.as_bytes(), policy=policy.default)
    assert isinstance(parsed, EmailMessage)
    return parsed


def _body(message: EmailMessage) -> str:
    part = message.get_body(("plain",))
    assert part is not None
    content = part.get_content()
    assert isinstance(content, str)
    return content


def test_offender_notice_says_whose_gpu_until_when_and_what_next() -> None:
    mail = _roundtrip(compose(ALERT, OFFENDER, FROM, now=NOW))

    subject = str(mail["Subject"])
    assert "node07" in subject and "GPU 3" in subject and "bob" in subject
    assert "alice" in subject
    assert mail["To"] == "bob@example.org"
    assert mail["From"] == FROM
    body = _body(mail)
    assert "You are using GPU 3 on node07" in body
    assert "alice reserved until 2026-11-21 18:00 UTC" in body
    assert "reservation #12" in body
    assert "Please stop" in body
    assert "Next, at 2026-11-21 13:10 UTC: your processes on this GPU will be terminated" in body
    assert "pid 4242: python train.py --epochs 90" in body
    assert "\n-- \n" in body  # the signature separator keeps its space


def test_headers_date_message_id_and_incident() -> None:
    mail = _roundtrip(compose(ALERT, OFFENDER, FROM, now=NOW))

    assert mail["X-Warden-Incident"] == "inc-7f3a"
    assert mail["Date"].datetime == NOW
    message_id = str(mail["Message-ID"])
    assert message_id.startswith("<") and message_id.endswith("@gpu.example.org>")
    assert mail["Auto-Submitted"] == "auto-generated"
    # The same step to the same address: the same id (a resent copy is recognisably one).
    again = compose(ALERT, OFFENDER, FROM, now=NOW)
    assert again["Message-ID"] == mail["Message-ID"]
    other = compose(ALERT, OWNER, FROM, now=NOW)
    assert other["Message-ID"] != mail["Message-ID"]
    next_step = compose(replace(ALERT, step_index=2), OFFENDER, FROM, now=NOW)
    assert next_step["Message-ID"] != mail["Message-ID"]


def test_owner_notice_names_offender_reservation_and_next_step() -> None:
    mail = _roundtrip(compose(ALERT, OWNER, FROM, now=NOW))

    subject = str(mail["Subject"])
    assert "node07" in subject and "GPU 3" in subject and "bob" in subject
    assert "your reservation #12" in subject
    assert mail["To"] == "alice@example.org"
    body = _body(mail)
    assert body.startswith("Hello alice,")
    assert "bob is using GPU 3 on node07, reserved by alice until 2026-11-21 18:00 UTC" in body
    assert "owner of reservation #12" in body
    assert "What Warden does next" in body
    assert "Next, at 2026-11-21 13:10 UTC: the processes of bob" in body
    assert "processes of bob on this GPU will be terminated" in body
    assert "your processes" not in body  # that wording is for the offender


def test_admin_notice() -> None:
    mail = _roundtrip(compose(ALERT, ADMIN, FROM, now=NOW))

    subject = str(mail["Subject"])
    assert "bob is using the reservation #12 of alice" in subject
    assert "node07" in subject and "GPU 3" in subject
    body = _body(mail)
    assert "as a Warden administrator" in body
    assert "Reservation: #12 of alice" in body
    assert "processes of bob on this GPU will be terminated" in body


def test_last_step_says_so() -> None:
    last = replace(ALERT, next_step=None, next_at=None)

    assert "This is the last step." in _body(compose(last, OFFENDER, FROM, now=NOW))
    assert "This is the last step" in _body(compose(last, ADMIN, FROM, now=NOW))


@pytest.mark.parametrize("recipient", [OFFENDER, ADMIN])
def test_strict_mode_without_owner(recipient: Recipient) -> None:
    mail = _roundtrip(compose(STRICT, recipient, FROM, now=NOW))

    subject = str(mail["Subject"])
    assert "nobody reserved" in subject
    assert "None" not in subject
    body = _body(mail)
    assert "nobody reserved" in body
    assert "None" not in body
    assert "Reservation:" not in body


def test_gpu_without_index_is_named_by_uuid() -> None:
    mail = compose(replace(ALERT, gpu_index=None), OWNER, FROM, now=NOW)

    assert "GPU GPU-1234-abcd" in str(mail["Subject"])


@pytest.mark.parametrize(
    "evil",
    [
        "bob\r\nBcc: victim@example.org",
        "bob\nBcc: victim@example.org",
        "bob\rBcc: victim@example.org",
        "bob\u2028Bcc: victim@example.org",
        "bob\x85Bcc: victim@example.org",
        "bob\x0bBcc: victim@example.org",
    ],
)
@pytest.mark.parametrize("recipient", [OFFENDER, OWNER, ADMIN])
def test_header_injection_in_names_and_commands(evil: str, recipient: Recipient) -> None:
    alert = replace(
        ALERT,
        offender=evil,
        owner=evil,
        host=evil,
        incident_id=evil,
        processes=(Process(pid=1, command=f"sleep 1 {evil}\r\nX-Evil: 1"),),
    )
    message = compose(alert, replace(recipient, username=evil), evil, now=NOW)

    mail = _roundtrip(message)
    assert mail["Bcc"] is None
    assert mail["X-Evil"] is None
    assert sorted(mail.keys()) == sorted(
        [
            "Subject",
            "From",
            "To",
            "Date",
            "Message-ID",
            "X-Warden-Incident",
            "Auto-Submitted",
            "Content-Type",
            "Content-Transfer-Encoding",
            "MIME-Version",
        ]
    )
    for name, value in mail.items():
        assert "\n" not in str(value) and "\r" not in str(value), name
    assert "Bcc: victim@example.org" in str(mail["Subject"])  # kept, but on the one line
    # In the body, too, the command stays on its own line.
    body = _body(mail)
    assert not any(line.startswith(("Bcc:", "X-Evil:")) for line in body.splitlines())


def test_long_names_are_clipped_in_the_subject() -> None:
    mail = compose(replace(ALERT, offender="b" * 500), ADMIN, FROM, now=NOW)

    assert len(str(mail["Subject"])) < 250


def test_unique_recipients_offender_wins_and_skip() -> None:
    both = Recipient("admin", "bob", "Bob@Example.org")
    owner_admin = Recipient("admin", "alice", "alice@example.org")
    chosen = unique_recipients([both, OWNER, owner_admin, ADMIN, OFFENDER, OWNER])

    assert [r.address.lower() for r in chosen] == [
        "bob@example.org",
        "alice@example.org",
        "ops@example.org",
    ]
    assert [r.role for r in chosen] == ["offender", "owner", "admin"]

    assert unique_recipients([OFFENDER, OWNER, ADMIN], skip=["ALICE@example.org"]) == [
        OFFENDER,
        ADMIN,
    ]


async def test_without_smtp_host_every_address_fails_as_not_configured() -> None:
    sender = MailSender(SmtpSettings(host=""))

    outcomes = await sender.send(ALERT, [OFFENDER, OWNER, ADMIN], skip=["ops@example.org"])

    assert [(o.target, o.ok) for o in outcomes] == [
        ("bob@example.org", False),
        ("alice@example.org", False),
    ]
    assert {o.detail for o in outcomes} == {NOT_CONFIGURED}
