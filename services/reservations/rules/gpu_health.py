"""GPU health in bookings (pure): a failed GPU takes no new booking, and the note its owners
get about their bookings on it, with the earliest alternative slot."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from services.reservations.rules.domain import Gpu, Refusal

FAILED = "failed"


def failed_gpu_refusals(gpus: Iterable[Gpu]) -> list[Refusal]:
    """A new booking of a failed GPU: refused (422, code gpu_failed) until it reads healthy."""
    return [
        Refusal(
            "gpu_failed",
            f"GPU {gpu.host}:{gpu.index} has failed ({gpu.health_reason or 'no reason given'}): "
            "it takes no new booking until it reads healthy again",
            {
                "field": "gpus",
                "gpu": gpu.uuid,
                "host": gpu.host,
                "index": gpu.index,
                "reason": gpu.health_reason,
            },
        )
        for gpu in sorted(gpus, key=lambda g: (g.host, g.index))
        if gpu.health == FAILED
    ]


def _slot_text(slot: Mapping[str, Any] | None) -> str:
    if slot is None:
        return (
            "Warden found no other GPUs you may use for as long within the next weeks; "
            "the Calendar shows what is free."
        )
    gpus = ", ".join(f"{g['host']}:{g['index']}" for g in slot["gpus"])
    return f"The earliest alternative: {gpus} from {slot['start']} to {slot['end']}."


def failed_gpu_note(
    *,
    owner: str,
    reservation_id: int,
    title: str,
    start: datetime,
    end: datetime,
    gpu: Mapping[str, Any],
    slot: Mapping[str, Any] | None,
    now: datetime,
) -> dict[str, Any]:
    """The notification (violations.notify arguments) an owner gets about a booking on a GPU
    that failed: what failed, that the booking stays, and the earliest alternative slot."""
    label = f"{gpu['host']}:{gpu['index']}"
    when = "now" if start <= now else f"from {start.isoformat()}"
    return {
        "user": owner,
        "kind": "gpu_health",
        "title": f"GPU {label} of your reservation '{title}' has failed"[:200],
        "text": (
            f"GPU {label} failed at {gpu['since']}: {gpu['reason'] or 'no reason given'}. Your "
            f"reservation '{title}' (#{reservation_id}, {when} until {end.isoformat()}) uses it; "
            "it is not cancelled (cancel or move it yourself if you want). "
            f"{_slot_text(slot)}"
        )[:4000],
        "key": f"gpu-health:{gpu['uuid']}:{gpu['since']}:{reservation_id}",
    }


def affected(
    bookings: Sequence[Mapping[str, Any]], uuid: str, now: datetime
) -> list[Mapping[str, Any]]:
    """The current and upcoming active bookings (from `repository` rows) on GPU `uuid`."""
    return [b for b in bookings if uuid in b["gpu_uuids"] and b["end"] > now]
