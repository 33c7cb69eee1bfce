"""`warden hosts check` in words: what the API's host check answers, the terminals included
(whether the host's login writes the violation warning on offenders' terminals)."""

from __future__ import annotations

from typing import Any

from services.client.hosts import check_lines

KEY = {"fingerprint": "SHA256:abc", "status": "trusted"}
GPU = {"index": 0, "name": "NVIDIA A100", "uuid": "GPU-1"}


def check(**terminals: Any) -> dict[str, Any]:
    return {
        "ok": True,
        "detail": "ok",
        "host_key": KEY,
        "gpus": [GPU],
        "terminals": terminals or None,
    }


def test_a_login_that_writes_on_terminals_says_so() -> None:
    detail = "warden is in group tty: it writes warnings on terminals"
    assert check_lines("dgx1", check(ok=True, detail=detail)) == [
        "host key of dgx1: SHA256:abc (trusted)",
        "  GPU 0: NVIDIA A100 (GPU-1)",
        f"terminal warnings: ok, {detail}",
        "ok: ok, 1 GPU(s)",
    ]


def test_a_login_that_cannot_says_how_to_fix_it() -> None:
    detail = "warden is not in group tty: ... (on the host: sudo usermod -aG tty warden)"
    lines = check_lines("dgx1", check(ok=False, detail=detail))
    assert f"terminal warnings: NO, {detail}" in lines
    assert lines[-1] == "ok: ok, 1 GPU(s)"  # the host is fine: the step is what cannot


def test_no_terminals_line_when_they_could_not_be_asked() -> None:
    failed = {"ok": False, "detail": "connection refused", "host_key": None, "gpus": []}
    assert check_lines("dgx1", {**failed, "terminals": None}) == ["FAILED: connection refused"]
