"""docs/reference/cli.md: every `warden` command and subcommand, from the CLI's own parser."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from services.docs_reference import header

WIDTH = 100


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str]]:
    """(name, help) of each subcommand, in the order the parser declares them."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name in action.choices:
                yield name, helps.get(name, "")


def _children(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


# Every command takes these: listed once, under `warden`.
COMMON = {"-h", "--config", "--dev"}


def _options(parser: argparse.ArgumentParser, top: bool) -> list[str]:
    formatter = argparse.HelpFormatter(parser.prog, width=WIDTH)
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
            continue
        if not top and COMMON & set(action.option_strings):
            continue
        if action.option_strings:
            name = ", ".join(action.option_strings)
            if action.nargs != 0:
                name += f" {formatter._format_args(action, action.dest.upper())}"
        else:
            name = formatter._format_args(action, action.dest)
        text = formatter._expand_help(action) if action.help else ""
        rows.append(f"| `{_cell(name)}` | {_cell(text)} |")
    if not rows:
        return []
    return ["| argument | what |", "|---|---|", *rows, ""]


def _section(parser: argparse.ArgumentParser, level: int, about: str) -> list[str]:
    out = [f"{'#' * level} `{parser.prog}`", ""]
    text = about or parser.description or ""
    if text:
        out += [_cell(text), ""]
    out += ["```text", _usage(parser), "```", ""]
    out += _options(parser, top=level == 2)
    children = _children(parser)
    helps = dict(_subcommands(parser))
    for name, child in children.items():
        out += _section(child, min(level + 1, 4), helps.get(name, ""))
    return out


def render() -> str:
    from services.cli import build_parser

    parser = build_parser()
    lines = [
        "# CLI reference",
        "",
        "Every `warden` command with its arguments, as `warden COMMAND --help` prints them. How",
        "to use the everyday ones: [The command-line client](../users/cli.md). The options every",
        "command takes (`-h`, `--config`, `--dev`) are listed once, under `warden`.",
        "",
        *_section(parser, 2, ""),
    ]
    text = header("services/cli.py's build_parser()") + "\n".join(lines).rstrip() + "\n"
    return _without_this_machine(text)


def _without_this_machine(text: str) -> str:
    """Defaults that name this machine's home directory, as every machine's: `~/...`."""
    from services.shared.config.settings import default_config_path, default_data_dir

    for path, shown in (
        (default_config_path(), "~/.config/warden/warden.toml"),
        (default_data_dir(), "~/.local/share/warden"),
    ):
        text = text.replace(str(path), shown)
    return text
