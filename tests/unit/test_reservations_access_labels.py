"""Access rules that select GPUs by their hardware labels ("A100-80GB only for group vision").

Shared values and builders: tests/support/access_rules.py.
"""

from __future__ import annotations

from services.reservations.rules.access import (
    access_refusals,
    allowed_by_gpu,
    rule_covers,
    rule_problems,
    use_refusals,
)
from services.reservations.rules.domain import AccessRule, Gpu, Limits, Member
from tests.support.access_rules import MONDAY, H, booking, codes, rule

A80 = [Gpu(f"GPU-a80-{i}", "dgx1", i, "NVIDIA A100-SXM4-80GB", 81920) for i in range(2)]
A40 = [Gpu(f"GPU-a40-{i}", "dgx2", i, "NVIDIA A100-SXM4-40GB", 40960) for i in range(2)]
H200 = Gpu("GPU-h200-0", "hopper1", 0, "NVIDIA H200", 143771)
FLEET = [*A80, *A40, H200]
VISION = Member("vera", frozenset({"vision"}))
OTHERS = Member("olaf", frozenset({"nlp"}))


def vision_only() -> list[AccessRule]:
    """A100-80GB only for group vision; every other GPU for everybody in vision or nlp."""
    return [
        rule(1, users=frozenset(), groups=frozenset({"vision"}), labels=("model=A100-80GB",)),
        rule(
            2,
            users=frozenset(),
            groups=frozenset({"vision", "nlp"}),
            labels=("model!=A100-80GB",),
        ),
    ]


def test_a_rule_with_labels_alone_covers_every_gpu_carrying_them() -> None:
    by_model = rule(all_gpus=False, labels=("model=A100-80GB",))
    assert [g.uuid for g in FLEET if rule_covers(by_model, g)] == [g.uuid for g in A80]
    by_arch = rule(all_gpus=False, labels=("arch=hopper",))
    assert [g.uuid for g in FLEET if rule_covers(by_arch, g)] == [H200.uuid]
    both = rule(all_gpus=False, labels=("arch=ampere", "memory=40GB"))
    assert [g.uuid for g in FLEET if rule_covers(both, g)] == [g.uuid for g in A40]


def test_labels_narrow_the_hosts_and_gpus_a_rule_names() -> None:
    on_hosts = rule(all_gpus=False, hosts=frozenset({"dgx1", "hopper1"}), labels=("arch=ampere",))
    assert [g.uuid for g in FLEET if rule_covers(on_hosts, g)] == [g.uuid for g in A80]
    everything_but = rule(all_gpus=True, labels=("arch!=hopper",))
    assert [g.uuid for g in FLEET if rule_covers(everything_but, g)] == [
        g.uuid for g in [*A80, *A40]
    ]


def test_a100_80gb_only_for_group_vision() -> None:
    rules = vision_only()
    start, end = MONDAY, MONDAY + H
    assert access_refusals(VISION, rules, FLEET, start, end, []) == []
    refused = access_refusals(OTHERS, rules, FLEET, start, end, [])
    assert codes(refused) == ["not_allowed", "not_allowed"]
    assert [r.details["gpu"] for r in refused] == [g.uuid for g in A80]
    # The refusal says which rule's label the GPU fails.
    assert refused[0].message.endswith(
        "no access rule covers that time; rule 'rule 2' is for GPUs labelled model!=A100-80GB"
    )
    assert refused[0].details["labels_failed"] == [
        {"rule_id": 2, "rule_name": "rule 2", "failed": ["model!=A100-80GB"]}
    ]
    assert access_refusals(OTHERS, rules, [*A40, H200], start, end, []) == []
    allowed = allowed_by_gpu(OTHERS, rules, FLEET, start, end)
    assert [uuid for uuid, spans in allowed.items() if spans] == [g.uuid for g in [*A40, H200]]
    used = use_refusals(OTHERS, rules, [A80[1]], start, end)
    assert "rule 'rule 2' is for GPUs labelled model!=A100-80GB" in used[0].message


def test_a_quota_on_labelled_gpus_counts_only_them() -> None:
    quota = rule(
        1,
        all_gpus=False,
        labels=("arch=hopper",),
        limits=Limits(max_gpu_hours_per_week=2),
    )
    rest = rule(2, all_gpus=False, labels=("arch!=hopper",))
    rules = [quota, rest]
    held = [booking(7, MONDAY, MONDAY + 2 * H, H200), booking(8, MONDAY, MONDAY + 9 * H, *A80)]
    later = MONDAY + 24 * H
    # The A100 hours held count nothing against the H200 quota; the H200's two hours do.
    assert access_refusals(rule_member(), rules, A40, later, later + H, held, known(FLEET)) == []
    refused = access_refusals(rule_member(), rules, [H200], later, later + H, held, known(FLEET))
    assert codes(refused) == ["limit_quota"]


def test_a_rule_with_labels_covers_no_gpu_it_does_not_know() -> None:
    quota = rule(1, all_gpus=True, labels=("arch=hopper",), limits=Limits(max_gpus=1))
    unknown_held = [booking(7, MONDAY, MONDAY + 2 * H, Gpu("GPU-gone", "old", 0))]
    assert access_refusals(rule_member(), [quota], [H200], MONDAY, MONDAY + H, unknown_held) == []


def test_rule_problems_name_a_bad_label_and_accept_labels_as_the_only_objects() -> None:
    assert rule_problems(rule(all_gpus=False, labels=("model=H200",))) == {}
    assert "objects" in rule_problems(rule(all_gpus=False))
    problems = rule_problems(rule(labels=("gpu=H200",)))
    assert problems["labels"] == "'gpu=H200': the label keys are model, memory, arch"


def rule_member() -> Member:
    return Member("alice")


def known(gpus: list[Gpu]) -> dict[str, Gpu]:
    return {g.uuid: g for g in gpus}
