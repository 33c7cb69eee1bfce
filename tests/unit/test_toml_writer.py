"""services.shared.toml: what it writes reads back as the same document."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest

from services.shared import toml


def test_a_config_document_reads_back_the_same() -> None:
    document: dict[str, Any] = {
        "storage": {"data_dir": '/tmp/a "quoted" dir\\x'},
        "gateway": {"port": 0, "cors_origins": [], "health_timeout_s": 2.5},
        "monitor": {"local_nvml": "off", "accept": True},
        "violations": {
            "steps": ["0s terminal offender", "60s email offender+admins"],
            "webhooks": [{"url": "http://127.0.0.1:1/x", "format": "json"}],
        },
        "hosts": [
            {"name": "sim-001", "port": 2222, "key_file": "/k"},
            {"name": "sim-002", "port": 2223, "key_file": "/k"},
        ],
    }
    text = toml.dumps(document, header="Written by a test\nsecond line")
    assert text.startswith("# Written by a test\n# second line\n")
    assert tomllib.loads(text) == document


def test_none_leaves_a_key_out_and_odd_keys_are_quoted() -> None:
    text = toml.dumps({"a": {"kept": 1, "left_out": None, "odd key": "x"}})
    assert tomllib.loads(text) == {"a": {"kept": 1, "odd key": "x"}}


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), object()])
def test_values_toml_cannot_hold_are_refused(bad: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        toml.dumps({"a": {"b": bad}})
