"""What is written from the declarations: the file `warden init` writes, and the docs' table.

Both walk the same blocks: each `[section]` with its keys, then its arrays of tables
(`[[violations.webhooks]]`), and last the top-level `[[hosts]]`.
"""

from __future__ import annotations

import inspect
import secrets
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.shared import toml
from services.shared.config.declare import MISSING, Key, Option, keys, sections
from services.shared.config.settings import Settings, default_data_dir

WIDTH = 100
TEMPLATE_HEADER = """\
# Warden configuration. Every option is shown with its default.
# Any option can be overridden by an environment variable WARDEN_<SECTION>_<KEY>,
# e.g. WARDEN_BUS_AMQP_URL or WARDEN_AUTH_JWT_SECRET; a list as comma-separated items.
"""
# The page of the documentation site that holds the table of options (docs/reference/).
DOCS_PAGE = "docs/reference/configuration.md"
DOCS_COMMAND = f"python -m services.shared.config --page {DOCS_PAGE}"
DOCS_BEGIN = f"<!-- generated from services/shared/config/settings.py by `{DOCS_COMMAND}` -->"
DOCS_END = "<!-- end of the generated table -->"


@dataclass(frozen=True)
class Block:
    name: str  # "bus", "violations.webhooks", "hosts"
    about: str
    keys: list[Key]
    table: bool  # an array of tables


def blocks() -> list[Block]:
    """Each section with its plain keys, then its arrays of tables; `[[hosts]]` last."""
    found: list[Block] = []
    for section, cls in sections(Settings).items():
        plain = [key for key in keys(cls) if key.table is None and key.section is None]
        found.append(Block(section, inspect.getdoc(cls) or "", plain, table=False))
        for key in keys(cls):
            if key.section is not None:  # `[auth.ldap]`, after its section's keys
                about = inspect.getdoc(key.section) or ""
                found.append(Block(f"{section}.{key.name}", about, keys(key.section), False))
        found += [_table(f"{section}.{key.name}", key) for key in keys(cls) if key.table]
    return found + [_table(key.name, key) for key in keys(Settings)]


def _table(name: str, key: Key) -> Block:
    assert key.table is not None
    return Block(name, key.option.help, keys(key.table), table=True)


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else str(value)


def allowed(option: Option) -> str:
    """The values a key accepts, in words (of each item, for a list)."""
    found: list[str] = []
    low, high = option.min, option.max
    if low is not None and high is not None:
        found.append(f"{_number(low)} to {_number(high)}")
    elif low is not None:
        found.append(f"at least {_number(low)}")
    elif high is not None:
        found.append(f"at most {_number(high)}")
    if option.choices:
        found.append(", ".join(option.choices))
    if option.min_length == 1:
        found.append("not empty")
    elif option.min_length:
        found.append(f"at least {option.min_length} characters")
    if option.prefixes:
        empty = "empty, or " if option.default == "" else ""
        found.append(f"{empty}starting with {' or '.join(option.prefixes)}")
    return "; ".join(found)


def _described(key: Key) -> str:
    limits = allowed(key.option)
    if not limits:
        return key.option.help
    each = " in each item" if key.item is not None else ""
    return f"{key.option.help} Allowed{each}: {limits}."


# --- the template ----------------------------------------------------------------------------


def _comment(text: str, indent: str = "") -> list[str]:
    hanging = f"{indent}  " if indent else ""
    return textwrap.wrap(
        text, WIDTH - 2, initial_indent=f"# {indent}", subsequent_indent=f"# {hanging}"
    )


def _assignment(name: str, value: Any) -> list[str]:
    line = f"{name} = {toml.value(value)}"
    if len(line) <= WIDTH or isinstance(value, str):
        return [line]
    return [f"{name} = [", *(f"    {toml.value(item)}," for item in value), "]"]


def _shown(option: Option) -> Any:
    example = option.example if option.example is not MISSING else option.default
    assert example is not MISSING, f"{option.help!r}: declare an example to show"
    return example


def _opt_in(key: Key) -> list[str]:
    """The key's opt-in value, commented out: the lines to uncomment (in place of the key)."""
    if key.option.opt_in is None:
        return []
    why, value = key.option.opt_in
    return [*_comment(why), *(f"# {line}" for line in _assignment(key.name, value))]


def _template_block(block: Block, chosen: dict[str, Any]) -> list[str]:
    if not block.table:
        lines = ["", f"[{block.name}]", *_comment(block.about)]
        for key in block.keys:
            value = chosen.get(f"{block.name}.{key.name}", key.option.default)
            lines += [*_comment(_described(key)), *_assignment(key.name, value)]
            lines += _opt_in(key)
        return lines
    lines = ["", *_comment(f"{block.about} Each [[{block.name}]] table has:")]
    for key in block.keys:
        required = " (required)" if key.option.default is MISSING else ""
        lines += _comment(f"{key.name}{required}: {_described(key)}", indent="  ")
    lines.append(f"# [[{block.name}]]")
    example = (line for key in block.keys for line in _assignment(key.name, _shown(key.option)))
    return lines + [f"# {line}" for line in example]


def render_config_template(data_dir: Path | None = None) -> str:
    """The file `warden init` writes: every option with its default and what it means, the
    tables as commented examples, a freshly generated JWT secret."""
    chosen = {
        "storage.data_dir": str(data_dir or default_data_dir()),
        "auth.jwt_secret": secrets.token_urlsafe(48),
    }
    lines = TEMPLATE_HEADER.splitlines()
    for block in blocks():
        lines += _template_block(block, chosen)
    return "\n".join(lines) + "\n"


# --- the docs' table of options ----------------------------------------------------------------


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _default(key: Key) -> str:
    option = key.option
    if option.shown:
        return option.shown
    return "required" if option.default is MISSING else f"`{toml.value(option.default)}`"


def options_table() -> str:
    """One row per section or table saying what it is, then one per key."""
    rows = ["| section | option | default | allowed | meaning |", "|---|---|---|---|---|"]
    for block in blocks():
        title = f"[[{block.name}]]" if block.table else f"[{block.name}]"
        rows.append(f"| `{title}` | | | | {_cell(block.about)} |")
        for key in block.keys:
            limits = allowed(key.option)
            each = "each item: " if limits and key.item is not None else ""
            cells = [f"`{key.name}`", _default(key), each + limits, key.option.help]
            rows.append(f"| | {' | '.join(map(_cell, cells))} |")
    return "\n".join(rows) + "\n"


def with_options_table(page: str) -> str:
    """`page` with the generated table between its two markers."""
    head, begin, rest = page.partition(DOCS_BEGIN)
    _, end, tail = rest.partition(DOCS_END)
    if not begin or not end:
        raise ValueError(f"the page has no {DOCS_BEGIN!r} … {DOCS_END!r}")
    return f"{head}{begin}\n{options_table()}{end}{tail}"
