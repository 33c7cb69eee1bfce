"""The `terminal` handler: write the notice on every terminal the offender has open on the host.

By default the host's management user writes it, as a member of group `tty` (terminals are
group-writable by `tty` while their owner allows messages): no sudo, and nothing needed in the
offender's authorized_keys (`[violations] terminal_as`).

One `who` on the host lists the sessions; the notice (`message.terminal_text`) goes to each of
the offender's `pts/N` and `ttyN`, and only while the offender still owns that terminal. One
outcome per terminal (target `host:pts/3`), or one for the host when there is none to write to
or the host cannot be reached.
"""

from __future__ import annotations

import asyncio

from services.shared.config import HostConfig, ViolationSettings
from services.violations.actions.base import ActionOutcome, Alert
from services.violations.actions.message import terminal_text
from services.violations.actions.remote import (
    HostShell,
    RemoteCommandFailed,
    failure,
    require,
    terminal_login,
)
from services.violations.scripts import (
    parse_who,
    parse_write_result,
    who_command,
    write_command,
)


async def _write(
    shell: HostShell, host: HostConfig, login: str, sudo: bool, tty: str, owner: str, text: str
) -> ActionOutcome:
    target = f"{host.name}:{tty}"
    try:
        result = await shell.run(host, login, write_command(tty, owner, text, sudo))
        answer = require(parse_write_result(result.stdout), result, host.name, login, "write")
    except RemoteCommandFailed as err:
        return ActionOutcome(target, False, err.message)
    if answer.status == "written":
        return ActionOutcome(target, True, f"message written to {tty} of {owner}")
    if answer.status == "gone":
        return ActionOutcome(target, False, f"{tty} was closed before the message was written")
    if answer.status == "not-owner":
        return ActionOutcome(
            target, False, f"not written: {tty} now belongs to {answer.owner or 'someone else'}"
        )
    detail = (result.stderr.strip().splitlines() or ["write refused"])[-1]
    if not sudo and login != owner:  # the management user writes as a member of group tty
        detail += f" (is {login} in group tty on {host.name}?)"
    return ActionOutcome(target, False, f"not written: {detail}")


async def notify_terminals(
    shell: HostShell, host: HostConfig, alert: Alert, settings: ViolationSettings
) -> list[ActionOutcome]:
    """Write `terminal_text(alert)` to each terminal session of the offender on `host`."""
    login, sudo = terminal_login(host, settings, alert.offender)
    try:
        result = await shell.run(host, login, who_command(sudo))
        if result.exit_status != 0:
            raise failure(result, host.name, login, "who")
    except RemoteCommandFailed as err:
        return [ActionOutcome(host.name, False, err.message)]
    ttys = [s.tty for s in parse_who(result.stdout) if s.user == alert.offender]
    if not ttys:
        return [
            ActionOutcome(
                host.name, False, f"no terminal session of {alert.offender} on {host.name}"
            )
        ]
    text = terminal_text(alert)
    return list(
        await asyncio.gather(
            *(_write(shell, host, login, sudo, tty, alert.offender, text) for tty in ttys)
        )
    )
