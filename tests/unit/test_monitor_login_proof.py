"""The SSH self-signup proof's choices that need no host: the management account is refused
without logging in, no host at all is "unreachable", and of several hosts the proven one wins,
else the failure a person can act on. (Logging in is tested against a real sshd:
tests/e2e/test_api_signup.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from services.monitor.hosts import login_proof
from services.shared.config import HostConfig
from services.shared.remote.ssh import SshOptions

OPTIONS = SshOptions(key_file="/nonexistent/warden_key")


def _host(name: str) -> HostConfig:
    return HostConfig(name=name, address="192.0.2.1", user="warden", key_file="/nonexistent/k")


async def test_the_management_account_is_refused_without_logging_in() -> None:
    outcome = await login_proof.prove_on(_host("gpu1"), "warden", OPTIONS, 1.0)
    assert outcome["outcome"] == login_proof.REFUSED
    assert "manages gpu1" in outcome["reason"]


async def test_no_ssh_host_is_unreachable() -> None:
    answer = await login_proof.prove_login([], "carol", OPTIONS, 1.0)
    assert answer["proven"] is False
    assert answer["outcome"] == login_proof.UNREACHABLE
    assert answer["tried"] == []


@pytest.mark.parametrize(
    ("outcomes", "expected"),
    [
        (["unreachable", "proven", "unknown_user"], "proven"),
        (["unreachable", "unknown_user", "key_not_installed"], "key_not_installed"),
        (["unreachable", "unknown_user"], "unknown_user"),
        (["unreachable", "unreachable"], "unreachable"),
    ],
)
async def test_of_several_hosts_the_most_useful_outcome_is_answered(
    monkeypatch: pytest.MonkeyPatch, outcomes: list[str], expected: str
) -> None:
    by_host = {f"gpu{i}": outcome for i, outcome in enumerate(outcomes)}

    async def fake(host: HostConfig, username: str, *_: Any) -> dict[str, Any]:
        return {"host": host.name, "outcome": by_host[host.name], "reason": host.name}

    monkeypatch.setattr(login_proof, "prove_on", fake)
    answer = await login_proof.prove_login([_host(n) for n in by_host], "carol", OPTIONS, 1.0)
    assert answer["outcome"] == expected
    assert answer["proven"] is (expected == "proven")
    assert by_host[answer["host"]] == expected
    assert [t["outcome"] for t in answer["tried"]] == outcomes
