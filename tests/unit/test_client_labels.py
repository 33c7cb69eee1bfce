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
