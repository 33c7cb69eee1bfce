"""A local GPU in MIG mode through NVML (FakeMigNvml): its instances are GPUs of their own, each
process on its instance, as the SSH probe reports them."""

from __future__ import annotations

from services.monitor.nvml import FakeGpu, FakeMigGpu, FakeMigNvml, FakeNvml, ProcInfo, read_gpus

GIB = 2**30
MIB = 2**20


class NoProc(ProcInfo):
    """/proc of nobody: owners and commands are not what this test is about."""

    def __init__(self) -> None:
        super().__init__("/nonexistent")


def split_gpu() -> FakeMigGpu:
    first = FakeGpu(
        "MIG-aaaa",
        name="NVIDIA A100-SXM4-80GB MIG 3g.40gb",
        memory=(5 * GIB, 40 * GIB),
        processes=[(4242, 5 * GIB)],
    )
    second = FakeGpu("MIG-bbbb", name="NVIDIA A100-SXM4-80GB MIG 3g.40gb", memory=(0, 40 * GIB))
    return FakeMigGpu(
        "GPU-parent",
        utilization=None,  # MIG mode: no utilisation of the whole GPU
        processes=[(4242, 5 * GIB)],  # as root, the GPU's list names its instances' too
        mig=[first, None, second],  # slot 1 empty: its instance was destroyed
    )


def test_instances_are_gpus_and_processes_are_on_theirs() -> None:
    whole = FakeGpu("GPU-whole", processes=[(77, GIB)])
    reading = read_gpus(FakeMigNvml([split_gpu(), whole]), NoProc())
    assert [(g.uuid, g.index, g.mig_parent_uuid) for g in reading.gpus] == [
        ("GPU-parent", 0, None),
        ("GPU-whole", 1, None),
        ("MIG-aaaa", 1000, "GPU-parent"),
        ("MIG-bbbb", 1001, "GPU-parent"),
    ]
    by_uuid = {g.uuid: g for g in reading.gpus}
    assert by_uuid["MIG-aaaa"].memory_total_mib == 40 * 1024
    assert by_uuid["MIG-aaaa"].utilization_gpu_percent is None  # in use: not reported
    assert by_uuid["MIG-bbbb"].utilization_gpu_percent == 0  # no process can run there
    assert [(p.pid, p.gpu_uuid) for p in reading.processes] == [
        (77, "GPU-whole"),
        (4242, "MIG-aaaa"),
    ]


def test_bindings_without_mig_read_the_gpu_whole() -> None:
    reading = read_gpus(FakeNvml([split_gpu()]), NoProc())
    assert [g.uuid for g in reading.gpus] == ["GPU-parent"]
    assert [(p.pid, p.gpu_uuid) for p in reading.processes] == [(4242, "GPU-parent")]
