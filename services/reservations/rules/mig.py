"""GPUs split into MIG instances (pure): each instance is booked like a GPU, and the GPU it is
part of is not bookable whole while it has instances (its memory and compute are theirs)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from services.reservations.rules.domain import Gpu, Refusal

MIG_INDEX_BASE = 1000  # the monitor's: an instance's index is 1000 x (its GPU + 1) + MIG Dev


def place(gpu: Gpu) -> str:
    """`host:index`, or `host:0/mig1` for a MIG instance (index 1001)."""
    if gpu.index >= MIG_INDEX_BASE:
        parent, device = gpu.index // MIG_INDEX_BASE - 1, gpu.index % MIG_INDEX_BASE
        return f"{gpu.host}:{parent}/mig{device}"
    return f"{gpu.host}:{gpu.index}"


def instances_by_parent(gpus: Iterable[Gpu]) -> dict[str, tuple[Gpu, ...]]:
    """The present MIG instances of each split GPU (by the parent's uuid), in index order."""
    found: dict[str, list[Gpu]] = {}
    for gpu in gpus:
        if gpu.mig_parent_uuid is not None and gpu.present:
            found.setdefault(gpu.mig_parent_uuid, []).append(gpu)
    return {
        parent: tuple(sorted(instances, key=lambda g: g.index))
        for parent, instances in found.items()
    }


def split_refusals(
    wanted: Iterable[Gpu], instances: Mapping[str, tuple[Gpu, ...]]
) -> list[Refusal]:
    """A new booking of a whole GPU that is split into MIG instances: refused (422), naming the
    instances to book instead."""
    refusals = []
    for gpu in sorted(wanted, key=lambda g: (g.host, g.index)):
        parts = instances.get(gpu.uuid)
        if not parts:
            continue
        names = ", ".join(place(p) for p in parts)
        refusals.append(
            Refusal(
                "mig_split",
                f"GPU {gpu.host}:{gpu.index} is split into MIG instances ({names}): book an "
                "instance, not the whole GPU",
                {
                    "field": "gpus",
                    "gpu": gpu.uuid,
                    "host": gpu.host,
                    "index": gpu.index,
                    "instances": [p.uuid for p in parts],
                },
            )
        )
    return refusals
