"""The labels GPUs get from their hardware, over names real GPUs report, and selectors."""

from __future__ import annotations

import pytest

from services.shared.gpu_labels import (
    architecture_of,
    failed_terms,
    gpu_labels,
    matches,
    memory_gb,
    model_of,
    selector_problem,
    union,
)

# name as nvidia-smi / NVML report it, memory.total in MiB, expected labels
REAL_GPUS = [
    # /work/shared/reference/nvidia-h200: the real read-out
    (
        "NVIDIA H200",
        143771,
        ["model=H200", "model=H200-141GB", "memory=141GB", "arch=hopper"],
    ),
    # tests/fixtures/nvidia_smi
    (
        "NVIDIA A100-SXM4-80GB",
        81920,
        ["model=A100", "model=A100-80GB", "memory=80GB", "arch=ampere"],
    ),
    (
        "NVIDIA A100-SXM4-40GB",
        40960,
        ["model=A100", "model=A100-40GB", "memory=40GB", "arch=ampere"],
    ),
    (
        "NVIDIA GeForce RTX 3090",
        24576,
        ["model=RTX-3090", "model=RTX-3090-24GB", "memory=24GB", "arch=ampere"],
    ),
    (
        "Tesla V100-SXM2-32GB",
        32768,
        ["model=V100", "model=V100-32GB", "memory=32GB", "arch=volta"],
    ),
    # the simulated fleet's models
    (
        "NVIDIA H100 80GB HBM3",
        81559,
        ["model=H100", "model=H100-80GB", "memory=80GB", "arch=hopper"],
    ),
    (
        "NVIDIA RTX A6000",
        49140,
        ["model=RTX-A6000", "model=RTX-A6000-48GB", "memory=48GB", "arch=ampere"],
    ),
]


@pytest.mark.parametrize(("name", "mib", "expected"), REAL_GPUS)
def test_labels_of_real_gpus(name: str, mib: float, expected: list[str]) -> None:
    assert gpu_labels(name, mib) == expected


@pytest.mark.parametrize(
    ("name", "model", "architecture"),
    [
        ("NVIDIA H100 PCIe", "H100", "hopper"),
        ("NVIDIA H100 NVL", "H100-NVL", "hopper"),
        ("NVIDIA H200 NVL", "H200-NVL", "hopper"),
        ("NVIDIA GH200 480GB", "GH200", "hopper"),
        ("NVIDIA H20", "H20", "hopper"),
        ("NVIDIA B200", "B200", "blackwell"),
        ("NVIDIA GB200", "GB200", "blackwell"),
        ("NVIDIA GeForce RTX 5090", "RTX-5090", "blackwell"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", None, "blackwell"),
        ("NVIDIA A100-PCIE-40GB", "A100", "ampere"),
        ("NVIDIA A100 80GB PCIe", "A100", "ampere"),
        ("NVIDIA A10G", "A10G", "ampere"),
        ("NVIDIA A30", "A30", "ampere"),
        ("NVIDIA A40", "A40", "ampere"),
        ("NVIDIA GeForce RTX 3080 Ti", "RTX-3080-Ti", "ampere"),
        ("NVIDIA L4", "L4", "ada"),
        ("NVIDIA L40S", "L40S", "ada"),
        ("NVIDIA GeForce RTX 4090", "RTX-4090", "ada"),
        ("NVIDIA RTX 6000 Ada Generation", "RTX-6000-Ada", "ada"),
        ("Tesla T4", "T4", "turing"),
        ("Quadro RTX 8000", "RTX-8000", "turing"),
        ("NVIDIA GeForce RTX 2080 Ti", "RTX-2080-Ti", "turing"),
        ("NVIDIA TITAN RTX", "TITAN-RTX", "turing"),
        ("Tesla V100-PCIE-16GB", "V100", "volta"),
        ("Tesla P100-PCIE-16GB", "P100", "pascal"),
        ("NVIDIA GeForce GTX 1080 Ti", "GTX-1080-Ti", "pascal"),
        ("Tesla M60", "M60", "maxwell"),
        ("Tesla K80", "K80", "kepler"),
    ],
)
def test_models_and_architectures(name: str, model: str | None, architecture: str) -> None:
    found = model_of(name)
    if model is not None:
        assert found == model
    assert architecture_of(found) == architecture


def test_an_unknown_model_has_no_architecture_label() -> None:
    assert gpu_labels("Some Accelerator X9", 16384) == [
        "model=Some-Accelerator-X9",
        "model=Some-Accelerator-X9-16GB",
        "memory=16GB",
    ]


@pytest.mark.parametrize(
    ("name", "mib", "gb"),
    [
        ("Tesla T4", 15360, 16),  # ECC keeps some: sold as 16 GB
        ("NVIDIA L4", 23034, 24),
        ("NVIDIA L40S", 46068, 48),
        ("NVIDIA B200", 183359, 180),
        ("NVIDIA H100 NVL", 95830, 94),
        ("Tesla K80", 11441, 12),
        ("NVIDIA GeForce RTX 2080 Ti", 11264, 11),
        ("NVIDIA A100-SXM4-40GB MIG 3g.20gb", 19968, 20),  # an instance: its own size
        ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", 4864, 5),
        ("Odd GPU", 300_000, 293),  # no sold size near: rounded
        ("NVIDIA H200", None, None),
        ("NVIDIA H200", 0, None),
    ],
)
def test_memory_is_the_size_sold(name: str, mib: float | None, gb: int | None) -> None:
    assert memory_gb(name, mib) == gb


def test_a_mig_instance_is_labelled_as_its_parent_model_with_its_own_memory() -> None:
    assert gpu_labels("NVIDIA A100-SXM4-40GB MIG 3g.20gb", 19968) == [
        "model=A100",
        "model=A100-20GB",
        "memory=20GB",
        "arch=ampere",
    ]


def test_no_name_and_no_memory_give_no_labels() -> None:
    assert gpu_labels(None, None) == []
    assert gpu_labels("", 81920) == ["memory=80GB"]


def test_model_labels_keep_only_what_a_selector_can_name() -> None:
    assert model_of("NVIDIA RTX A4000 (Laptop) GPU") == "RTX-A4000-Laptop-GPU"


def test_union_of_a_hosts_gpus() -> None:
    a100 = gpu_labels("NVIDIA A100-SXM4-80GB", 81920)
    h200 = gpu_labels("NVIDIA H200", 143771)
    assert union([a100, a100, h200]) == sorted(set(a100) | set(h200))


def test_selectors_match_all_terms_ignoring_case() -> None:
    labels = gpu_labels("NVIDIA A100-SXM4-80GB", 81920)
    assert matches(labels, [])
    assert matches(labels, ["model=a100-80gb", "arch=AMPERE"])
    assert matches(labels, ["model=A100", "model!=A100-40GB"])
    assert not matches(labels, ["model!=A100-80GB"])
    assert failed_terms(labels, ["arch=ampere", "memory=40GB", "arch=hopper"]) == [
        "memory=40GB",
        "arch=hopper",
    ]


@pytest.mark.parametrize(
    ("terms", "problem"),
    [
        (["model=A100-80GB", "arch!=hopper", "memory=141GB"], None),
        (["A100"], "write key=value"),
        (["model="], "write key=value"),
        (["model = A100"], "write key=value"),
        (["gpu=A100"], "the label keys are model, memory, arch"),
        (["model=" + "x" * 80], "at most 64 characters"),
        (["arch=ampere"] * 17, "at most 16 labels"),
        (["model=A100;rm"], "write key=value"),
    ],
)
def test_selector_problems(terms: list[str], problem: str | None) -> None:
    found = selector_problem(terms)
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found
