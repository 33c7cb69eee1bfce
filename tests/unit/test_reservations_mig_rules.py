"""The pure rule of MIG bookings: a GPU with present instances is not booked whole."""

from __future__ import annotations

from services.reservations.rules.domain import Gpu
from services.reservations.rules.mig import instances_by_parent, split_refusals

PARENT = Gpu("GPU-p", "dgx1", 0)
WHOLE = Gpu("GPU-w", "dgx1", 1)
MIG_B = Gpu("MIG-b", "dgx1", 1001, mig_parent_uuid="GPU-p")
MIG_A = Gpu("MIG-a", "dgx1", 1000, mig_parent_uuid="GPU-p")
GONE = Gpu("MIG-g", "dgx1", 2000, present=False, mig_parent_uuid="GPU-w")


def test_only_present_instances_split_their_gpu() -> None:
    assert instances_by_parent([PARENT, WHOLE, MIG_B, MIG_A, GONE]) == {"GPU-p": (MIG_A, MIG_B)}


def test_a_split_gpu_is_refused_with_its_instances_named() -> None:
    split = instances_by_parent([MIG_A, MIG_B])
    [refusal] = split_refusals([WHOLE, PARENT, MIG_A], split)
    assert refusal.code == "mig_split"
    assert refusal.message.startswith(
        "GPU dgx1:0 is split into MIG instances (dgx1:0/mig0, dgx1:0/mig1)"
    )
    assert refusal.details["instances"] == ["MIG-a", "MIG-b"]
    assert split_refusals([WHOLE, MIG_A, MIG_B], split) == []
