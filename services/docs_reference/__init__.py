"""The documentation's reference pages generated from the code (docs/reference/).

`python -m services.docs_reference` (or `make docs-reference`) writes every page; each page has a
unit test (tests/unit/test_docs_reference.py) that fails with that command when the committed
page differs from what the code gives. This package stands above the services, like
`services/cli.py`: it reads the CLI's parser, the gateway's routes and every service's public
api, and nothing imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

COMMAND = "python -m services.docs_reference"
ROOT = Path(__file__).resolve().parents[2]


def pages() -> dict[str, Callable[[], str]]:
    """Each generated page (its path from the repository's root) and what writes its text."""
    from services.docs_reference import cli_page, contracts_page, rest_page
    from services.shared.config.render import DOCS_PAGE, with_options_table

    def configuration() -> str:
        return with_options_table((ROOT / DOCS_PAGE).read_text())

    return {
        DOCS_PAGE: configuration,
        "docs/reference/cli.md": cli_page.render,
        "docs/reference/rest-api.md": rest_page.render,
        "docs/reference/events-rpc.md": contracts_page.render,
    }


def header(source: str) -> str:
    """The comment that opens a page written whole by this package."""
    return f"<!-- generated from {source} by `{COMMAND}`: do not edit by hand -->\n\n"
