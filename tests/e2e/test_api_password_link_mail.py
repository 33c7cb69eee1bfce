"""Invitation and reset links e-mailed through the notification path to a real SMTP receiver
(aiosmtpd), and what the answer says when e-mail is not set up.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from email import policy
from pathlib import Path

import pytest
import pytest_asyncio
from aiosmtpd.controller import Controller

from tests.e2e.api import ApiSystem, running_system
from tests.support.mailbox import Mailbox
from tests.support.polling import until
from tests.support.ports import free_port

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(180)]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def mailed(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[ApiSystem, Mailbox]]:
    mailbox = Mailbox(policy.default)
    smtp = Controller(mailbox, hostname="127.0.0.1", port=free_port())
    smtp.start()
    mail = {"smtp_host": "127.0.0.1", "smtp_port": smtp.port, "smtp_security": "none"}
    try:
        async with running_system(
            tmp_path_factory.mktemp("password-link-mail"), config={"violations": mail}
        ) as system:
            yield system, mailbox
    finally:
        smtp.stop()


def body_of(message: object) -> str:
    part = message.get_body(preferencelist=("plain",))  # type: ignore[attr-defined]
    return str(part.get_content())


async def test_an_invitation_is_e_mailed_with_its_link(mailed: tuple[ApiSystem, Mailbox]) -> None:
    system, mailbox = mailed
    admin = await system.as_user("admin")
    invited = await admin.post("/users/invites", {"username": "mia", "email": "mia@lab.example"})
    assert invited.status == 201, invited.body
    assert invited.body["emailed"] == "sent"
    [message] = await until(lambda: mailbox.to("mia@lab.example"), "the invitation", 30)
    assert invited.body["link"] in body_of(message)
    assert "Warden" in str(message["Subject"])

    reset = await admin.post("/users/mia/reset")
    assert reset.body["emailed"] == "sent"
    messages = await until(
        lambda: len(mailbox.to("mia@lab.example")) == 2 and mailbox.to("mia@lab.example"),
        "the reset link",
        30,
    )
    assert reset.body["link"] in body_of(messages[-1])


async def test_without_e_mail_the_link_is_shown_and_said_not_sent(tmp_path: Path) -> None:
    async with running_system(tmp_path, hosts=1, gpus=1) as system:
        admin = await system.as_user("admin")
        invited = await admin.post(
            "/users/invites", {"username": "noel", "email": "noel@lab.example"}
        )
        assert invited.status == 201, invited.body
        assert invited.body["emailed"] == "failed"
        assert "/password/" in invited.body["link"]
