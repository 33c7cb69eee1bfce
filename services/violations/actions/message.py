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


_EFFECTS_ON_OFFENDER = {
    "terminate": "your processes on this GPU will be terminated",
    "kill": "your processes on this GPU will be killed",
    "email": "an e-mail goes out",
    "webhook": "a chat message goes out",
    "terminal": "you get another terminal message",
}
_EFFECTS_ON_OTHERS = {
    "terminate": "the processes of {offender} on this GPU will be terminated",
    "kill": "the processes of {offender} on this GPU will be killed",
    "email": "an e-mail goes out",
    "webhook": "a chat message goes out",
    "terminal": "{offender} gets another terminal message",
}
STOPPING = ("terminate", "kill")


def effect(action: str, offender: str, *, to_offender: bool) -> str:
    effects = _EFFECTS_ON_OFFENDER if to_offender else _EFFECTS_ON_OTHERS
    return effects.get(action, f"step {action!r} follows").format(offender=offender)


def next_text(alert: Alert, *, to_offender: bool = True) -> str:
    """What happens next unless the offending processes stop, said to or about the offender."""
    ahead = alert.steps_ahead
    if not ahead:
        return "This is the last step."
    following = ahead[0]
    said = effect(following.action, alert.offender, to_offender=to_offender)
    text = f"Next, at {when(following.at)}: {said}."
    stopping = next((u for u in ahead if u.action in STOPPING), None)
    if stopping is not None and stopping is not following:
        text += (
            f" At {when(stopping.at)}: "
            f"{effect(stopping.action, alert.offender, to_offender=to_offender)}."
        )
    return text


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
    """What the offender reads on their terminal: plain lines, no markup."""
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
