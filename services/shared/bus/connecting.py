"""What the RabbitMQ bus says about its broker: the URL without its password, and what a
failed first connection means, in one line that names the key to check."""

from __future__ import annotations

from urllib.parse import unquote, urlsplit, urlunsplit

from aio_pika.exceptions import AMQPError

from services.shared.errors import ServiceUnavailable


def redact(url: str) -> str:
    """The URL without its password, for logs and errors."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def start_failure(url: str, timeout_s: float, err: BaseException) -> BaseException:
    """What a failed first connection means, naming `bus.amqp_url`; `err` itself when it is
    no failure to connect (a cancel)."""
    shown = redact(url)
    details = {"amqp_url": shown}
    if isinstance(err, TimeoutError):
        return ServiceUnavailable(
            f"RabbitMQ at {shown} accepts connections but did not answer within {timeout_s:g}s"
            "; check bus.amqp_url",
            details,
        )
    if not isinstance(err, OSError | AMQPError):
        return err
    reason = str(err)
    if "Connection.OpenOk" in reason and "Connection.Close" in reason:
        # The broker closed the connection when asked to open its virtual host (aiormq's error
        # shows only the frame object's repr): no such vhost, or the user may not use it.
        vhost = unquote(urlsplit(url).path[1:]) or "/"
        reason = f"the virtual host {vhost!r} does not exist or the user may not use it"
    return ServiceUnavailable(
        f"cannot connect to RabbitMQ at {shown}: {reason}; check bus.amqp_url", details
    )
