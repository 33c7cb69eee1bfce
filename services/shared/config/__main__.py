"""`python -m services.shared.config --page docs/reference/configuration.md`: regenerate the
documentation's table of options."""

from __future__ import annotations

import argparse
from pathlib import Path

from services.shared.config.render import DOCS_PAGE, with_options_table


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m services.shared.config", description=__doc__)
    parser.add_argument(
        "--page",
        type=Path,
        default=Path(DOCS_PAGE),
        help=f"the page whose table of options is rewritten from the declarations ({DOCS_PAGE})",
    )
    page: Path = parser.parse_args().page
    page.write_text(with_options_table(page.read_text()))


if __name__ == "__main__":
    main()
