"""The words of a violation notice, shared by the terminal, e-mail and webhook handlers (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

from services.violations.actions.base import Alert

MAX_COMMAND_CHARS = 200


def when(moment: datetime | None) -> str:
    """`2026-11-21 14:00 UTC`: times in notices are UTC, written the same everywhere."""
    if moment is None:
        return "an unknown time"
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def headline(alert: Alert) -> str:
    """One line: who uses which GPU of whose reservation."""
    where = f"{alert.gpu_label} on {alert.host}"
    if alert.owner is None:
        return f"{alert.offender} is using {where}, which nobody reserved (strict mode)"
    return (
        f"{alert.offender} is using {where}, reserved by {alert.owner} "
        f"until {when(alert.reservation_end)}"
    )


def process_lines(alert: Alert, limit: int = MAX_COMMAND_CHARS) -> list[str]:
    return [f"pid {p.pid}: {_clip(p.command, limit)}" for p in alert.processes]


def next_text(alert: Alert) -> str:
    """What happens next unless the offending processes stop."""
    if alert.next_step is None:
        return "This is the last step."
    action = alert.next_step.split()[1] if len(alert.next_step.split()) > 1 else alert.next_step
    effect = {
        "terminate": "your processes on this GPU will be terminated",
        "kill": "your processes on this GPU will be killed",
        "email": "an e-mail goes out",
        "webhook": "a chat message goes out",
        "terminal": "you get another terminal message",
    }.get(action, f"step {action!r} follows")
    return f"Next, at {when(alert.next_at)}: {effect}."


def details(alert: Alert) -> list[str]:
    """The facts, one per line, for any notice."""
    lines = [
        f"Host: {alert.host}",
        f"GPU: {alert.gpu_index if alert.gpu_index is not None else '?'} ({alert.gpu_uuid})",
        f"User: {alert.offender}",
        f"Since: {when(alert.since)}",
    ]
    if alert.reservation_id is not None:
        lines.append(
            f"Reservation: #{alert.reservation_id} of {alert.owner}, "
            f"{when(alert.reservation_start)} to {when(alert.reservation_end)}"
        )
    lines += [f"Process {line}" for line in process_lines(alert)]
    lines.append(f"Incident: {alert.incident_id} (step {alert.step_index + 1}: {alert.step})")
    return lines


def terminal_text(alert: Alert) -> str:
    """What the offender reads on their terminal: plain ASCII-safe lines, no markup."""
    owner = (
        f"{alert.owner} reserved it until {when(alert.reservation_end)}"
        if alert.owner is not None
        else "it may only be used with a reservation"
    )
    pids = ", ".join(str(p.pid) for p in alert.processes) or "?"
    return (
        f"\r\n*** Warden: you are using {alert.gpu_label} on {alert.host} (pids {pids}), "
        f"but {owner}. ***\r\n"
        f"*** Please stop your processes on this GPU. {next_text(alert)} ***\r\n"
    )
