"""MailSender against a real SMTP server (aiosmtpd) on a free loopback port.

Plain, STARTTLS and implicit TLS with a certificate made in the test, AUTH LOGIN and PLAIN,
one connection for a step's mails, dedupe, skip, a refused recipient, a server that is down.
"""

from __future__ import annotations

import ipaddress
import logging
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email import message_from_bytes, policy
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP as SMTPServer
from aiosmtpd.smtp import AuthResult, Envelope, LoginPassword, Session
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from services.shared.config import SmtpSettings
from services.violations.actions.base import Alert, Process
from services.violations.actions.mail import MailSender, Recipient
from tests.support.ports import free_port

PASSWORD = "s3cret-Pa55word-never-shown"
USER = "warden"

ALERT = Alert(
    incident_id="inc-mail-1",
    host="node07",
    gpu_uuid="GPU-1234-abcd",
    gpu_index=3,
    offender="bob",
    processes=(Process(pid=4242, command="python train.py"),),
    since=datetime(2026, 11, 21, 12, 58, tzinfo=UTC),
    reservation_id=12,
    owner="alice",
    reservation_start=datetime(2026, 11, 21, 12, 0, tzinfo=UTC),
    reservation_end=datetime(2026, 11, 21, 18, 0, tzinfo=UTC),
    step="60s email offender+owner+admins",
    step_index=1,
    action="email",
    next_step="300s terminate",
    next_at=datetime(2026, 11, 21, 13, 10, tzinfo=UTC),
)
OFFENDER = Recipient("offender", "bob", "bob@example.org")
OWNER = Recipient("owner", "alice", "alice@example.org")
ADMIN = Recipient("admin", "root", "ops@example.org")


# --- the server ------------------------------------------------------------------------------


@dataclass
class Delivered:
    mail_from: str
    rcpt_tos: list[str]
    message: EmailMessage
    tls: bool
    peer: Any


@dataclass
class Recorder:
    """An aiosmtpd handler that keeps what it was given and refuses the addresses in `refuse`."""

    refuse: frozenset[str] = frozenset()
    delivered: list[Delivered] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def handle_RCPT(
        self,
        server: SMTPServer,
        session: Session,
        envelope: Envelope,
        address: str,
        rcpt_options: list[str],
    ) -> str:
        if address in self.refuse:
            return f"550 5.1.1 <{address}>: no such user here"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTPServer, session: Session, envelope: Envelope) -> str:
        content = envelope.original_content or b""
        message = message_from_bytes(content, policy=policy.default)
        assert isinstance(message, EmailMessage)
        # STARTTLS sets session.ssl; implicit TLS only shows on the transport.
        transport = server.transport
        tls = session.ssl is not None or (
            transport is not None and transport.get_extra_info("ssl_object") is not None
        )
        with self.lock:
            self.delivered.append(
                Delivered(
                    mail_from=str(envelope.mail_from),
                    rcpt_tos=list(envelope.rcpt_tos),
                    message=message,
                    tls=tls,
                    peer=session.peer,
                )
            )
        return "250 2.0.0 Ok: queued as test"


@dataclass(frozen=True)
class Certificate:
    cert_file: Path
    key_file: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert_file, self.key_file)
        return context

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.cert_file))


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> Certificate:
    """A self-signed certificate for 127.0.0.1 and localhost."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "warden-test-smtp")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    folder = tmp_path_factory.mktemp("smtp-tls")
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return Certificate(cert_file, key_file)


@dataclass
class Server:
    recorder: Recorder
    port: int
    auth_mechanisms: list[str]

    def settings(self, **overrides: Any) -> SmtpSettings:
        values: dict[str, Any] = {
            "host": "127.0.0.1",
            "port": self.port,
            "security": "none",
            "mail_from": "Warden <warden@gpu.example.org>",
            "timeout_s": 10.0,
        }
        values.update(overrides)
        return SmtpSettings(**values)


StartServer = Callable[..., Server]


@pytest.fixture
def smtp_server() -> Iterator[StartServer]:
    """Starts aiosmtpd servers for this test (own free port each) and stops them after."""
    controllers: list[Controller] = []

    def start(
        *, refuse: frozenset[str] = frozenset(), password: str | None = None, **kwargs: Any
    ) -> Server:
        recorder = Recorder(refuse=refuse)
        mechanisms: list[str] = []
        if password is not None:

            def authenticator(
                server: SMTPServer,
                session: Session,
                envelope: Envelope,
                mechanism: str,
                auth_data: Any,
            ) -> AuthResult:
                mechanisms.append(mechanism)
                ok = (
                    isinstance(auth_data, LoginPassword)
                    and auth_data.login == USER.encode()
                    and auth_data.password == password.encode()
                )
                return AuthResult(success=ok, handled=False)  # the server answers 535

            kwargs |= {"authenticator": authenticator, "auth_required": True}
        port = free_port()
        controller = Controller(
            recorder, hostname="127.0.0.1", port=port, server_hostname="smtp.test", **kwargs
        )
        controller.start()
        controllers.append(controller)
        return Server(recorder, port, mechanisms)

    yield start
    for controller in controllers:
        controller.stop()


def _results(outcomes: list[Any]) -> list[tuple[str, bool]]:
    return [(o.target, o.ok) for o in outcomes]


# --- delivery --------------------------------------------------------------------------------


async def test_plain_delivery_one_mail_per_address_with_its_template(
    smtp_server: StartServer,
) -> None:
    server = smtp_server()
    sender = MailSender(server.settings())

    outcomes = await sender.send(ALERT, [OFFENDER, OWNER, ADMIN])

    assert _results(outcomes) == [
        ("bob@example.org", True),
        ("alice@example.org", True),
        ("ops@example.org", True),
    ]
    assert all("queued as test" in o.detail for o in outcomes)
    delivered = {d.rcpt_tos[0]: d for d in server.recorder.delivered}
    assert sorted(delivered) == ["alice@example.org", "bob@example.org", "ops@example.org"]
    assert all(len(d.rcpt_tos) == 1 for d in server.recorder.delivered)
    assert {d.mail_from for d in server.recorder.delivered} == {"warden@gpu.example.org"}
    # One connection for the whole step.
    assert len({d.peer for d in server.recorder.delivered}) == 1

    to_offender = delivered["bob@example.org"].message
    assert to_offender["To"] == "bob@example.org"
    assert to_offender["X-Warden-Incident"] == "inc-mail-1"
    assert "node07 GPU 3: bob, you are using a GPU reserved by alice" in str(to_offender["Subject"])
    body = to_offender.get_body(("plain",))
    assert body is not None
    assert "Please stop your processes" in body.get_content()

    to_owner = delivered["alice@example.org"].message
    assert to_owner["To"] == "alice@example.org"
    assert "bob is using your reservation #12" in str(to_owner["Subject"])
    owner_body = to_owner.get_body(("plain",))
    assert owner_body is not None
    assert "What Warden does next" in owner_body.get_content()


async def test_same_address_twice_gets_one_mail_offender_template_wins(
    smtp_server: StartServer,
) -> None:
    server = smtp_server()
    sender = MailSender(server.settings())
    bob_as_admin = Recipient("admin", "bob", "BOB@example.org")
    alice_as_admin = Recipient("admin", "alice", "alice@example.org")

    outcomes = await sender.send(ALERT, [bob_as_admin, OWNER, alice_as_admin, OFFENDER])

    assert _results(outcomes) == [("bob@example.org", True), ("alice@example.org", True)]
    assert len(server.recorder.delivered) == 2
    subjects = {d.rcpt_tos[0].lower(): str(d.message["Subject"]) for d in server.recorder.delivered}
    assert "you are using" in subjects["bob@example.org"]
    assert "your reservation" in subjects["alice@example.org"]


async def test_skip_leaves_out_addresses_already_mailed(smtp_server: StartServer) -> None:
    server = smtp_server()
    sender = MailSender(server.settings())

    outcomes = await sender.send(
        ALERT, [OFFENDER, OWNER, ADMIN], skip=["bob@example.org", "ops@example.org"]
    )

    assert _results(outcomes) == [("alice@example.org", True)]
    assert [d.rcpt_tos for d in server.recorder.delivered] == [["alice@example.org"]]
    assert await sender.send(ALERT, [OFFENDER], skip=["bob@example.org"]) == []


async def test_a_refused_recipient_fails_only_itself(smtp_server: StartServer) -> None:
    server = smtp_server(refuse=frozenset({"alice@example.org"}))
    sender = MailSender(server.settings())

    outcomes = await sender.send(ALERT, [OFFENDER, OWNER, ADMIN])

    assert _results(outcomes) == [
        ("bob@example.org", True),
        ("alice@example.org", False),
        ("ops@example.org", True),
    ]
    assert "550" in outcomes[1].detail and "no such user" in outcomes[1].detail
    assert sorted(d.rcpt_tos[0] for d in server.recorder.delivered) == [
        "bob@example.org",
        "ops@example.org",
    ]


async def test_an_invalid_address_fails_without_touching_the_others(
    smtp_server: StartServer,
) -> None:
    server = smtp_server()
    sender = MailSender(server.settings())
    broken = Recipient("admin", "eve", "eve@example.org\r\nRCPT TO:<x@example.org>")

    outcomes = await sender.send(ALERT, [OFFENDER, broken])

    assert _results(outcomes) == [("bob@example.org", True), (broken.address, False)]
    assert outcomes[1].detail == "not a valid e-mail address"
    assert [d.rcpt_tos for d in server.recorder.delivered] == [["bob@example.org"]]


async def test_server_down_fails_every_address(caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()  # nothing listens there
    sender = MailSender(SmtpSettings(host="127.0.0.1", port=port, security="none"))

    with caplog.at_level(logging.WARNING, logger="services.violations.actions.mail"):
        outcomes = await sender.send(ALERT, [OFFENDER, OWNER])

    assert _results(outcomes) == [("bob@example.org", False), ("alice@example.org", False)]
    assert all("connecting to 127.0.0.1 on port" in o.detail for o in outcomes)
    assert all(str(port) in o.detail for o in outcomes)
    assert "inc-mail-1" in caplog.text


# --- TLS -------------------------------------------------------------------------------------


async def test_starttls_with_a_trusted_self_signed_certificate(
    smtp_server: StartServer, certificate: Certificate
) -> None:
    server = smtp_server(tls_context=certificate.server_context(), require_starttls=True)
    sender = MailSender(
        server.settings(security="starttls"), tls_context=certificate.client_context()
    )

    outcomes = await sender.send(ALERT, [OFFENDER])

    assert _results(outcomes) == [("bob@example.org", True)]
    assert [d.tls for d in server.recorder.delivered] == [True]


async def test_starttls_is_required_not_optional(smtp_server: StartServer) -> None:
    server = smtp_server()  # offers no STARTTLS
    sender = MailSender(server.settings(security="starttls"))

    outcomes = await sender.send(ALERT, [OFFENDER, OWNER])

    assert _results(outcomes) == [("bob@example.org", False), ("alice@example.org", False)]
    assert all("STARTTLS" in o.detail for o in outcomes)
    assert server.recorder.delivered == []


async def test_untrusted_certificate_is_refused(
    smtp_server: StartServer, certificate: Certificate
) -> None:
    server = smtp_server(tls_context=certificate.server_context(), require_starttls=True)
    sender = MailSender(server.settings(security="starttls"))  # system trust store only

    outcomes = await sender.send(ALERT, [OFFENDER])

    assert _results(outcomes) == [("bob@example.org", False)]
    assert "certificate" in outcomes[0].detail.lower()
    assert server.recorder.delivered == []


async def test_implicit_tls(smtp_server: StartServer, certificate: Certificate) -> None:
    server = smtp_server(ssl_context=certificate.server_context())
    sender = MailSender(server.settings(security="tls"), tls_context=certificate.client_context())

    outcomes = await sender.send(ALERT, [OFFENDER, ADMIN])

    assert _results(outcomes) == [("bob@example.org", True), ("ops@example.org", True)]
    assert [d.tls for d in server.recorder.delivered] == [True, True]


# --- AUTH ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["LOGIN", "PLAIN"])
async def test_auth_with_the_right_password_delivers(
    smtp_server: StartServer, certificate: Certificate, mechanism: str
) -> None:
    other = {"LOGIN": "PLAIN", "PLAIN": "LOGIN"}[mechanism]
    server = smtp_server(
        password=PASSWORD,
        tls_context=certificate.server_context(),
        require_starttls=True,
        auth_exclude_mechanism=[other],
    )
    sender = MailSender(
        server.settings(security="starttls", username=USER, password=PASSWORD),
        tls_context=certificate.client_context(),
    )

    outcomes = await sender.send(ALERT, [OFFENDER, OWNER])

    assert _results(outcomes) == [("bob@example.org", True), ("alice@example.org", True)]
    assert server.auth_mechanisms == [mechanism]
    assert len(server.recorder.delivered) == 2


@pytest.mark.parametrize(
    "security",
    [
        "starttls",
        pytest.param(
            "tls",
            marks=pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS"),
        ),
    ],
)
async def test_auth_with_a_wrong_password_fails_all_and_never_shows_it(
    smtp_server: StartServer,
    certificate: Certificate,
    caplog: pytest.LogCaptureFixture,
    security: str,
) -> None:
    tls = (
        # aiosmtpd only counts STARTTLS as TLS for auth_require_tls; this port is all TLS.
        {"ssl_context": certificate.server_context(), "auth_require_tls": False}
        if security == "tls"
        else {"tls_context": certificate.server_context(), "require_starttls": True}
    )
    server = smtp_server(password="the-real-one", **tls)
    settings = server.settings(security=security, username=USER, password=PASSWORD)
    sender = MailSender(settings, tls_context=certificate.client_context())

    with caplog.at_level(logging.DEBUG):
        outcomes = await sender.send(ALERT, [OFFENDER, OWNER, ADMIN])

    assert _results(outcomes) == [
        ("bob@example.org", False),
        ("alice@example.org", False),
        ("ops@example.org", False),
    ]
    for outcome in outcomes:
        assert f"login as '{USER}' failed" in outcome.detail
        assert "535" in outcome.detail
        assert PASSWORD not in outcome.detail
    assert server.recorder.delivered == []
    assert "login as" in caplog.text
    assert PASSWORD not in caplog.text
    assert PASSWORD not in repr(settings)
