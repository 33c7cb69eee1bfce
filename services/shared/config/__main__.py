"""`python -m services.shared.config --readme README.md`: regenerate the README's option table."""

from __future__ import annotations

import argparse
from pathlib import Path

from services.shared.config.render import with_readme_table


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m services.shared.config", description=__doc__)
    parser.add_argument(
        "--readme",
        type=Path,
        required=True,
        help="the README whose table of options is rewritten from the declarations",
    )
    readme: Path = parser.parse_args().readme
    readme.write_text(with_readme_table(readme.read_text()))


if __name__ == "__main__":
    main()
