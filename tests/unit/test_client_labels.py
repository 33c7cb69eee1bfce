"""`warden status --label` keeps the GPUs whose labels meet every term, as the server does."""

from __future__ import annotations

import pytest

from services.client.status import _carries
from services.shared.gpu_labels import gpu_labels, matches

H200 = {"labels": gpu_labels("NVIDIA H200", 143771)}
A100 = {"labels": gpu_labels("NVIDIA A100-SXM4-80GB", 81920)}


@pytest.mark.parametrize(
    "terms",
    [
        ["model=H200"],
        ["arch=hopper", "memory=141GB"],
        ["arch!=hopper"],
        ["MODEL=a100-80gb"],
        ["model!=A100", "arch=ampere"],
        [],
    ],
)
def test_the_client_filter_agrees_with_the_servers_selector(terms: list[str]) -> None:
    for gpu in (H200, A100):
        assert _carries(gpu, terms) == matches(gpu["labels"], terms)


def test_a_gpu_without_labels_meets_only_negated_terms() -> None:
    assert _carries({}, ["arch!=volta"])
    assert not _carries({"labels": None}, ["arch=volta"])


def test_the_labels_table_has_a_row_per_gpu_with_its_labels() -> None:
    from rich.console import Console

    from services.client.status import labels_table

    payload = {
        "gpus": [
            {"host": "h2", "index": 0, "name": "NVIDIA H200", **H200},
            {"host": "h1", "index": 1, "name": "NVIDIA A100-SXM4-80GB", **A100},
            {"host": "h1", "index": None, "uuid": "MIG-x", "name": "odd"},
        ]
    }
    console = Console(width=160, record=True)
    console.print(labels_table(payload, width=160))
    lines = [line.rstrip() for line in console.export_text().splitlines()]
    assert lines[0].split() == ["GPU", "MODEL", "LABELS"]
    assert lines[1].split() == ["h1:1", "A100-SXM4-80GB", *A100["labels"]]
    assert lines[2].split() == ["MIG-x", "odd", "\u2013"]
    assert lines[3].split() == ["h2:0", "H200", *H200["labels"]]
