"""Warden config files for tests, written with the project's own TOML writer.

    write_config(tmp_path / "warden.toml", monitor={"interval_s": 0.5}, hosts=[{...}, ...])

starts from `defaults`: the data directory next to the file, a fresh random JWT secret (48
URL-safe bytes) and no local NVML; each section given is merged over the default one of that
name (a table key by key; anything else, such as the `[[hosts]]` list, replaces it). A value
of None leaves the key out.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from services.shared import toml


def defaults(directory: Path) -> dict[str, Any]:
    """What every test config holds unless it says otherwise."""
    return {
        "storage": {"data_dir": str(directory / "data")},
        "auth": {"jwt_secret": secrets.token_urlsafe(48)},
        "monitor": {"local_nvml": "off"},
    }


def merged(*documents: Mapping[str, Any]) -> dict[str, Any]:
    """The documents' sections, later ones over earlier ones (tables merged key by key)."""
    result: dict[str, Any] = {}
    for document in documents:
        for name, section in document.items():
            if isinstance(section, Mapping) and isinstance(result.get(name), Mapping):
                result[name] = {**result[name], **section}
            else:
                result[name] = section
    return result


def write_config(path: Path, **sections: Any) -> Path:
    """Write `defaults` with `sections` merged over them as TOML at `path`; return `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    document = merged(defaults(path.parent), sections)
    path.write_text(toml.dumps(document, header="Written by a test (tests/support/config.py)."))
    return path
