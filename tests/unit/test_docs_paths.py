"""The documentation's pages name repository paths that exist: a module moved or renamed takes
its mentions in docs/ with it.

Checked: full paths from the repository's root (`services/...`, `bench/...`, `examples/...`,
`tests/...`, `docker/...`) in inline code and the relative links that lead to them. Short forms
inside a service's row (`booking/creates.py`) are not checked; fenced code blocks neither.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
TOP = ("services", "bench", "examples", "tests", "docker")

FENCE = re.compile(r"^ *```.*?^ *```", re.MULTILINE | re.DOTALL)
CODE = re.compile(r"(`+)(.+?)\1", re.DOTALL)
LINK = re.compile(r"\]\(\s*([^)\s]+)[^)]*\)")
PATH = re.compile(rf"(?<![\w./-])((?:{'|'.join(TOP)})/[\w./-]*)")


def _pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def _named_in_code(text: str) -> list[str]:
    """Full repository paths in inline code: a test's node id is its file, a trailing period
    ends the sentence, a glob or a placeholder (`bench/*.py`, `services/<service>/`) is no
    one path."""
    found = []
    for span in CODE.finditer(FENCE.sub("", text)):
        for match in PATH.finditer(span.group(2)):
            end = span.group(2)[match.end() : match.end() + 1]
            if end in ("*", "<", "{"):
                continue
            found.append(match.group(1).split("::")[0].rstrip("."))
    return found


def _missing_links(page: Path, text: str) -> list[str]:
    """Relative links into the repository's folders (from docs/developers/ that is
    `../../examples/...`) that lead nowhere."""
    missing = []
    for target in LINK.findall(FENCE.sub("", text)):
        if "://" in target or target.startswith(("#", "/", "mailto:")):
            continue
        path = target.split("#")[0]
        if not any(f"{top}/" in f"{path}/" for top in TOP):
            continue
        if not (page.parent / path).exists():
            missing.append(target)
    return missing


def test_docs_pages_name_repository_paths_that_exist() -> None:
    missing = []
    for page in _pages():
        text = page.read_text()
        name = page.relative_to(DOCS)
        code = [path for path in _named_in_code(text) if not (ROOT / path).exists()]
        missing += [f"{name}: `{path}`" for path in code]
        missing += [f"{name}: link ({target})" for target in _missing_links(page, text)]
    where = "paths that moved or went (see developers/where-things-live.md):\n"
    assert not missing, where + "\n".join(missing)


def test_the_check_finds_what_it_looks_for(tmp_path: Path) -> None:
    text = (
        "See `services/reservations/creates.py` and `python bench/api_load.py --quick`, "
        "`tests/unit/test_docs_paths.py::test_x`, `bench/*.py`, `services/<service>/`.\n"
        "```\nservices/fenced/away.py\n```\n"
        "[ex](../examples/plugins) [ok](../../examples/plugins)\n"
    )
    assert _named_in_code(text) == [
        "services/reservations/creates.py",
        "bench/api_load.py",
        "tests/unit/test_docs_paths.py",
    ]
    page = DOCS / "developers" / "plugins.md"
    assert _missing_links(page, text) == ["../examples/plugins"]
