"""Notifications made from other services' events: a job finished or failed, someone uses my
reserved GPU, I use a GPU I may not (told to the offender: in the browser, where they are
signed in), my reservation was cancelled by a rule change, a host presents another SSH key
(to every admin), GPUs I booked are drained for maintenance. Each goes through `notify` with
a key, so a redelivered event tells nobody twice."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any

from services.shared.bus import EventHandler
from services.shared.config import EscalationStep
from services.shared.contracts import Envelope
from services.shared.remote.shell import HOST_KEY_CHANGED

Notify = Callable[..., Awaitable[Any]]  # Notifier.notify

JOB_DONE = {"succeeded": "job_finished", "failed": "job_failed", "lost": "job_failed"}


def _gpu(data: Mapping[str, Any]) -> str:
    index = data.get("gpu_index")
    return f"{data.get('host')} GPU {index}" if index is not None else f"{data.get('host')}"


def job_note(data: Mapping[str, Any]) -> dict[str, Any] | None:
    """The notification for a job.status_changed, or None when it is not an end."""
    kind = JOB_DONE.get(str(data.get("status")))
    if kind is None or data.get("previous_status") == data.get("status"):
        return None
    if data.get("failure") == "early":
        return None  # the jobs service told the owner itself, with the tail of its output
    name = data.get("name") or f"#{data['id']}"
    if kind == "job_finished":
        title, text = f"Job {name} finished", f"Your job {name} (#{data['id']}) succeeded."
    else:
        what = "was lost (its host stopped answering)" if data["status"] == "lost" else "failed"
        title, text = f"Job {name} failed", f"Your job {name} (#{data['id']}) {what}."
    return {
        "user": data["owner"],
        "kind": kind,
        "title": title,
        "text": text,
        "key": f"job:{data['id']}:{data['status']}",
    }


def violation_note(data: Mapping[str, Any]) -> dict[str, Any] | None:
    """violation.opened, told to the reservation's owner (strict mode: nobody owns it)."""
    owner = data.get("owner")
    if not owner or owner == data.get("offender"):
        return None
    reservation = f" (reservation #{data['reservation_id']})" if data.get("reservation_id") else ""
    return {
        "user": owner,
        "kind": "reservation_violated",
        "title": f"{data['offender']} is using your GPU {_gpu(data)}",
        "text": f"{data['offender']} runs processes on {_gpu(data)}, which you reserved"
        f"{reservation}. Warden has asked them to stop.",
        "key": f"incident:{data['incident_id']}:opened",
    }


def offender_note(data: Mapping[str, Any]) -> dict[str, Any]:
    """violation.opened, told to the offender (their browser by default; the escalation steps
    write to their terminal and mail them)."""
    offender = data["offender"]
    owner = data.get("owner")
    whose = f"{owner} reserved" if owner and owner != offender else "nobody reserved"
    return {
        "user": offender,
        "kind": "using_reserved_gpu",
        "title": f"You are using {_gpu(data)}, which {whose}",
        "text": f"Your processes on {_gpu(data)} use a GPU {whose}. Please stop them now, or "
        "book a GPU of your own.",
        "key": f"incident:{data['incident_id']}:offender",
    }


def cancelled_note(data: Mapping[str, Any]) -> dict[str, Any] | None:
    """reservation.cancelled, told to the owner only when a rule change cancelled it."""
    if not data.get("by_rules"):
        return None
    reason = data.get("cancel_reason") or "the access rules changed"
    return {
        "user": data["owner"],
        "kind": "reservation_cancelled",
        "title": f"Your reservation {data.get('title') or ''} #{data['id']} was cancelled".replace(
            "  ", " "
        ),
        "text": f"Reservation #{data['id']} ({data['start']} to {data['end']}) was cancelled: "
        f"{reason}. It comes back by itself if the rules allow it again and the GPUs are free.",
        "key": f"reservation:{data['id']}:cancelled:{data.get('cancelled_at')}",
    }


def host_key_note(admin: str, data: Mapping[str, Any]) -> dict[str, Any] | None:
    """host.unreachable because the host presents another SSH key (someone may be in between),
    told to an admin; None for any other reason."""
    reason = str(data.get("reason") or "")
    if not reason.startswith(HOST_KEY_CHANGED):
        return None
    host = data["host"]
    return {
        "user": admin,
        "kind": "host_key_changed",
        "title": f"{host} presents another SSH host key",
        "text": f"{reason[:3900]}.",  # what it means and how to check and accept the key
        "key": f"host-key:{host}:{data['since']}",
    }


_OUTCOME = {
    "kept": "Your booking is kept as it is: the GPUs may not be usable then. You may move it "
    "yourself",
    "cancelled": "An admin chose to cancel it",
    "shortened": "An admin chose to end it when the maintenance starts",
    "ended": "An admin chose to end it now",
    "moved": "An admin moved it",
    "not_moved": "An admin asked to move it, but it could not be moved: it is kept as it is. "
    "You may move it yourself",
}


def _slot(alternative: Mapping[str, Any]) -> str:
    gpus = ", ".join(f"{g['host']}:{g['index']}" for g in alternative["gpus"])
    return f"GPU {gpus} from {alternative['start']} to {alternative['end']}"


def maintenance_notes(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """maintenance.scheduled, told to the owner of each booking the window overlaps: the
    window and its reason, what became of the booking, the earliest alternative."""
    until = data["end"] or "further notice"
    notes = []
    for booking in data["affected"]:
        outcome = booking["outcome"]
        what = _OUTCOME[outcome]
        alternative = booking.get("alternative")
        if outcome == "moved":
            what += f" to {_slot(alternative)} (reservation #{booking['moved_to']})"
        elif alternative:
            what += f"; the earliest free alternative is {_slot(alternative)}"
        else:
            what += "; no alternative is free within the next weeks"
        title = booking["title"]
        notes.append(
            {
                "user": booking["owner"],
                "kind": "maintenance",
                "title": f"{data['target']} is drained for maintenance during '{title}'"[:200],
                "text": (
                    f"{data['target']} is drained for maintenance from {data['start']} to "
                    f"{until}: {data['reason']}. It overlaps your reservation '{title}' "
                    f"(#{booking['reservation_id']}, {booking['start']} to {booking['end']}). "
                    f"{what}."
                )[:4000],
                "key": f"maintenance:{data['id']}:{booking['reservation_id']}",
            }
        )
    return notes


def telling_each(
    notify: Notify, build: Callable[[Mapping[str, Any]], list[dict[str, Any]]]
) -> EventHandler:
    """A handler that sends every notification `build` makes of an event."""

    async def handle(envelope: Envelope) -> None:
        for note in build(envelope.data):
            await notify(note)

    return handle


def gpu_failed_note(admin: str, data: Mapping[str, Any]) -> dict[str, Any] | None:
    """gpu.health_changed to failed, told to an admin (the owners of its bookings are told
    by the reservations service, with an alternative); None for any other state."""
    if data.get("state") != "failed" or data.get("previous") == "failed":
        return None
    label = f"{data['host']}:{data.get('index')}"
    return {
        "user": admin,
        "kind": "gpu_health",
        "title": f"GPU {label} failed",
        "text": f"GPU {label} ({data['uuid']}) failed at {data['since']}: "
        f"{str(data.get('reason') or 'no reason given')[:3000]}. It takes no new booking or "
        "queued job until it reads healthy for [health] healthy_for_s.",
        "key": f"gpu-failed:{data['uuid']}:{data['since']}",
    }


def owner_mailed_by_steps(
    steps: Sequence[EscalationStep], handlers: Collection[str]
) -> frozenset[str]:
    """{"email"} when an escalation step already e-mails the owner (the e-mail handler runs):
    the owner's reservation_violated notification then skips e-mail, not to say it twice."""
    mails = "email" in handlers and any(
        step.action == "email" and "owner" in step.recipients for step in steps
    )
    return frozenset({"email"}) if mails else frozenset()


def _to_admins(
    notify: Notify,
    admins: Callable[[], Awaitable[list[str]]],
    build: Callable[[str, Mapping[str, Any]], dict[str, Any] | None],
) -> EventHandler:
    """An event told to every admin, when `build` makes a note of it."""

    async def handle(envelope: Envelope) -> None:
        if build("", envelope.data) is None:
            return
        for admin in await admins():
            note = build(admin, envelope.data)
            if note is not None:
                await notify(note)

    return handle


def event_handlers(
    notify: Notify,
    told_by_steps: Callable[[Mapping[str, Any]], frozenset[str]],
    admins: Callable[[], Awaitable[list[str]]],
) -> dict[tuple[str, str, str], EventHandler]:
    """`told_by_steps`: the channels an incident's escalation uses for its owner already;
    `admins`: the usernames of the admin accounts now."""

    def making(build: Callable[[Mapping[str, Any]], dict[str, Any] | None]) -> EventHandler:
        async def handle(envelope: Envelope) -> None:
            note = build(envelope.data)
            if note is not None:
                await notify(note)

        return handle

    async def violation_opened(envelope: Envelope) -> None:
        note = violation_note(envelope.data)
        if note is not None:
            await notify(note, skip=told_by_steps(envelope.data))
        await notify(offender_note(envelope.data))

    return {
        ("jobs", "job.status_changed", "notify-jobs"): making(job_note),
        ("reservations", "maintenance.scheduled", "notify-maintenance"): telling_each(
            notify, maintenance_notes
        ),
        ("monitor", "gpu.health_changed", "notify-gpu-health"): _to_admins(
            notify, admins, gpu_failed_note
        ),
        ("monitor", "host.unreachable", "notify-hosts"): _to_admins(notify, admins, host_key_note),
        ("violations", "violation.opened", "notify-violations"): violation_opened,
        ("reservations", "reservation.cancelled", "notify-cancelled"): making(cancelled_note),
    }
