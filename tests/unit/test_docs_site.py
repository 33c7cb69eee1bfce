"""The documentation's promises about itself: a short README, pages that speak of what Warden
does (not of the work items that built it), and the images they show committed."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# Written elsewhere and moved here unchanged: their authors keep them.
MOVED = {"developers/where-things-live.md", "developers/plugins.md"}


def test_the_readme_stays_short() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250, "README.md is the front page: put the long form into docs/"


def test_docs_pages_name_no_work_items() -> None:
    issue = re.compile(r"\bissues? \d+|\(issues?:", re.IGNORECASE)
    found = [
        f"{page.relative_to(DOCS)}: {line.strip()}"
        for page in sorted(DOCS.rglob("*.md"))
        if str(page.relative_to(DOCS)) not in MOVED
        for line in page.read_text().splitlines()
        if issue.search(line)
    ]
    assert not found, "say what Warden does; the history goes to CHANGELOG.md:\n" + "\n".join(found)


def test_every_image_a_page_shows_is_committed() -> None:
    image = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
    pages = [ROOT / "README.md", *DOCS.rglob("*.md")]
    missing = [
        f"{page.relative_to(ROOT)}: {target}"
        for page in pages
        for target in image.findall(page.read_text())
        if not (page.parent / target).is_file()
    ]
    assert not missing, "run `make screenshots` and commit docs/images/:\n" + "\n".join(missing)
