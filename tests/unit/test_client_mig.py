"""MIG instances as people write them: `host:0/mig1` in the CLI's tables and in what the REST
API takes for a GPU (index 1001 on the wire: 1000 x (GPU + 1) + MIG Dev)."""

from __future__ import annotations

from datetime import UTC, datetime

from services.client.render import gpu_place, status_rows
from services.gateway.routes.reservations import mig_places

GPUS = [
    {"host": "dgx1", "index": 1, "uuid": "GPU-b", "name": "NVIDIA A100-SXM4-80GB"},
    {"host": "dgx1", "index": 1001, "uuid": "MIG-y", "name": "NVIDIA A100-SXM4-80GB MIG 3g.40gb"},
    {"host": "dgx1", "index": 0, "uuid": "GPU-a", "name": "NVIDIA A100-SXM4-80GB"},
    {"host": "dgx1", "index": 1000, "uuid": "MIG-x", "name": "NVIDIA A100-SXM4-80GB MIG 3g.40gb"},
    {"host": "dgx1", "index": 2000, "uuid": "MIG-z", "name": "NVIDIA A100-SXM4-80GB MIG 7g.80gb"},
]


def test_an_instance_is_shown_under_its_gpu() -> None:
    assert gpu_place({"host": "dgx1", "index": 1001}) == "dgx1:0/mig1"
    assert gpu_place({"host": "dgx1", "index": 7}) == "dgx1:7"
    rows = status_rows({"gpus": GPUS}, datetime.now(UTC))
    assert [(row[0], row[1]) for row in rows] == [
        ("dgx1:0", "A100-SXM4-80GB"),
        ("dgx1:0/mig0", "A100-SXM4-80GB MIG 3g.40gb"),
        ("dgx1:0/mig1", "A100-SXM4-80GB MIG 3g.40gb"),
        ("dgx1:1", "A100-SXM4-80GB"),
        ("dgx1:1/mig0", "A100-SXM4-80GB MIG 7g.80gb"),
    ]


def test_the_api_takes_an_instance_by_its_place() -> None:
    assert mig_places(GPUS) == {
        "dgx1:0/mig1": "MIG-y",
        "dgx1:0/mig0": "MIG-x",
        "dgx1:1/mig0": "MIG-z",
    }
