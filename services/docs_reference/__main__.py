"""`python -m services.docs_reference`: write every generated reference page in docs/reference/."""

from __future__ import annotations

from services.docs_reference import ROOT, pages


def main() -> None:
    for path, render in pages().items():
        target = ROOT / path
        text = render()
        if not target.exists() or target.read_text() != text:
            target.write_text(text)
            print(f"wrote {path}")


if __name__ == "__main__":
    main()
