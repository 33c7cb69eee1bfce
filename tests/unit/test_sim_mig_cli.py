"""`warden sim --mig` and `warden sim ctl split-gpu` / `start-process --mig`: what they parse
and ask the control API for."""

from __future__ import annotations

import pytest

from services.cli import build_parser
from services.sim.cli import _ctl_request
from services.sim.mig import parse_mig_option


def test_the_mig_option_names_gpus_and_their_profiles() -> None:
    assert parse_mig_option("0:3g.40gb,3g.40gb;1:7g.80gb") == {
        0: ("3g.40gb", "3g.40gb"),
        1: ("7g.80gb",),
    }
    for bad in ("3g.40gb", "x:3g.40gb", "0:"):
        with pytest.raises(ValueError, match="GPU:PROFILE"):
            parse_mig_option(bad)
    args = build_parser().parse_args(["sim", "--mig", "1:2g.20gb"])
    assert args.mig == {1: ("2g.20gb",)}


def test_ctl_splits_a_gpu_and_starts_a_process_on_an_instance() -> None:
    parse = build_parser().parse_args
    gpu_2 = ["sim", "ctl", "split-gpu", "--host", "sim-001", "--gpu", "2"]
    split = parse([*gpu_2, "--profiles", "3g.40gb,4g.40gb"])
    assert _ctl_request(split) == (
        "POST",
        "/hosts/sim-001/gpus/2/mig",
        {"profiles": ["3g.40gb", "4g.40gb"]},
    )
    whole = parse([*gpu_2, "--profiles", "none"])
    assert _ctl_request(whole)[2] == {"profiles": []}
    argv = ["sim", "ctl", "start-process", "--host", "sim-001", "--gpu", "0"]
    start = parse([*argv, "--user", "bob", "--command", "python x", "--mig", "1"])
    assert _ctl_request(start)[2] == {
        "gpu": 0,
        "user": "bob",
        "command": "python x",
        "used_memory_mib": 1024,
        "mig": 1,
    }
