"""The generated reference pages in docs/reference/ are the ones the code gives today."""

from __future__ import annotations

import argparse

import pytest

from services.docs_reference import COMMAND, ROOT, pages
from services.docs_reference.contracts_page import api_modules, methods


@pytest.mark.parametrize("path", sorted(pages()))
def test_the_committed_page_is_the_generated_one(path: str) -> None:
    committed = (ROOT / path).read_text()
    assert committed == pages()[path](), f"{path} is stale: run `{COMMAND}` and commit it"


def test_every_method_of_every_api_is_found() -> None:
    # Each service's api lists its methods in METHODS: all of them, and the four services at
    # least, are on the page.
    declared: set[tuple[str, str]] = set()
    for module in api_modules():
        declared |= {(m.service, m.name) for m in getattr(module, "METHODS", ())}
    found = {(m.service, m.name) for listed in methods().values() for m in listed}
    assert declared <= found
    assert {"monitor", "reservations", "jobs", "violations"} <= set(methods())


def test_the_cli_page_names_every_command() -> None:
    from services.cli import build_parser

    text = pages()["docs/reference/cli.md"]()
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name in action.choices:
                assert f"## `warden {name}`" in text
