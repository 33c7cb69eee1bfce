"""Safe by default: the shipped escalation only tells people, and the file `warden init` writes
has no step that stops a process; its commented opt-in example does what it says."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from services.shared.config import load_settings, render_config_template
from services.shared.config.escalation import OPT_IN_STEPS, STOPPING_ACTIONS, parse_step
from services.shared.config.settings import ViolationSettings


def _actions(steps: object) -> set[str]:
    return {step.action for step in steps}  # type: ignore[attr-defined]


def test_default_steps_notify_offender_owner_at_once_and_admins_later() -> None:
    steps = ViolationSettings().steps
    assert not _actions(steps) & set(STOPPING_ACTIONS)
    at_once = {(s.action, r) for s in steps if s.after_s == 0 for r in s.recipients}
    assert {("terminal", "offender"), ("email", "offender"), ("email", "owner")} <= at_once
    assert {("webhook", "offender"), ("webhook", "owner")} <= at_once
    admins = [s for s in steps if "admins" in s.recipients]
    assert admins and all(s.after_s >= 300 for s in admins)
    assert {s.action for s in admins} == {"email", "webhook"}


def test_the_template_warden_init_writes_has_no_terminate_or_kill_step(tmp_path: Path) -> None:
    text = render_config_template(tmp_path / "data")
    path = tmp_path / "warden.toml"
    path.write_text(text)
    violations = load_settings(path, environ={}).violations
    assert not _actions(violations.steps) & set(STOPPING_ACTIONS)
    for override in violations.overrides:
        assert not _actions(override.steps) & set(STOPPING_ACTIONS)
    # Nowhere in the active (uncommented) TOML: not in any step list of any table.
    active = tomllib.loads(text)["violations"]
    assert not any(re.search(r"\b(terminate|kill)\b", step) for step in active["steps"])
    assert "overrides" not in active


def test_the_commented_opt_in_turns_terminate_and_kill_on(tmp_path: Path) -> None:
    lines = render_config_template(tmp_path / "data").splitlines()
    begin = lines.index("# steps = [")
    end = lines.index("# ]", begin)
    assert all(line.startswith("#") for line in lines[begin : end + 1])
    opt_in = [line.removeprefix("# ") for line in lines[begin : end + 1]]
    # Uncommented in place of the default `steps = [...]`, as the comment above it says.
    start = lines.index("steps = [")
    stop = lines.index("]", start)
    edited = [*lines[:start], *opt_in, *lines[stop + 1 :]]
    path = tmp_path / "warden.toml"
    path.write_text("\n".join(edited) + "\n")
    steps = load_settings(path, environ={}).violations.steps
    assert steps == tuple(parse_step(text) for text in OPT_IN_STEPS)
    assert [s.action for s in steps][-2:] == ["terminate", "kill"]
