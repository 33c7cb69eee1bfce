"""How a configuration key is declared: once, on the field of its typed settings dataclass.

    interval_s: float = option(5.0, "Seconds between two polls of a host.", min=0.1, max=3600)

The field's type and the `Option` in its metadata are all that is known about a key: the schema
that validates it (schema.py), the template `warden init` writes and the docs' table
(render.py) are generated from them.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from marshmallow.validate import Validator

T = TypeVar("T")
U = TypeVar("U")


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
# The metadata of a field of settings held together in code whose keys are flat in the
# section, e.g. `smtp: SmtpSettings` read from `smtp_host`, `smtp_port`, ….
FLAT = {"flat": True}


@dataclass(frozen=True)
class Option:
    help: str
    # As written in the file. MISSING: the key is required, or its default is computed (`shown`).
    default: Any = MISSING
    min: float | None = None
    max: float | None = None
    # The constraints below apply to each item of a list.
    choices: tuple[str, ...] = ()
    min_length: int = 0
    # A string starts with one of these; an empty one passes when the default is empty.
    prefixes: tuple[str, ...] = ()
    check: Validator | None = None  # for what the constraints above cannot say; tell it in help
    parse: Callable[[str], Any] | None = None  # the typed form of each item of a list of strings
    key: str = ""  # its name in the file, when that is not the field's name
    example: Any = MISSING  # what the template shows in a commented example table
    shown: str = ""  # a computed default, in words
    # (why, value): a value the template shows commented out after the key, to opt in to
    # behaviour that must never be a default (stopping people's processes).
    opt_in: tuple[str, Any] | None = None


def about(help: str, **declared: Any) -> dict[str, Option]:
    """The metadata of a field declared with `dataclasses.field` (required or computed keys)."""
    return {"option": Option(help, **declared)}


def option(default: T, help: str, *, secret: bool = False, **declared: Any) -> T:
    """A key with a constant default; a secret stays out of the settings' repr."""
    return field(
        default=default, repr=not secret, metadata=about(help, default=default, **declared)
    )


def parsed(
    texts: tuple[str, ...], parse: Callable[[str], U], help: str, **declared: Any
) -> tuple[U, ...]:
    """A list of strings in the file, held in its typed form: `parse` turns each item."""
    default = tuple(parse(text) for text in texts)
    return field(default=default, metadata=about(help, default=texts, parse=parse, **declared))


@dataclass(frozen=True)
class Key:
    """A key as it is in the file."""

    name: str
    type: Any  # the field's annotation
    option: Option

    @property
    def item(self) -> Any:
        """The type of each item of a list (`tuple[X, ...]`); None for a single value."""
        is_list = typing.get_origin(self.type) is tuple
        return typing.get_args(self.type)[0] if is_list else None

    @property
    def section(self) -> type | None:
        """The dataclass of a table nested in a section (`[auth.ldap]`)."""
        plain = dataclasses.is_dataclass(self.type) and isinstance(self.type, type)
        return self.type if plain else None

    @property
    def table(self) -> type | None:
        """The dataclass of each table of an array of tables (`[[hosts]]`)."""
        item = self.item
        plain = self.option.parse is None and dataclasses.is_dataclass(item)
        return item if plain and isinstance(item, type) else None


@functools.cache
def hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def key_of(cls: type, declared: dataclasses.Field[Any]) -> Key | None:
    """The key that a field of `cls` declares, if it declares one."""
    option: Option | None = declared.metadata.get("option")
    if option is None:
        return None
    return Key(option.key or declared.name, hints(cls)[declared.name], option)


def keys(cls: type) -> list[Key]:
    """The keys of a section or table in the order declared, flat ones among them."""
    found: list[Key] = []
    for declared in dataclasses.fields(cls):
        if declared.metadata.get("flat"):
            found.extend(keys(hints(cls)[declared.name]))
        elif key := key_of(cls, declared):
            found.append(key)
    return found


def sections(root: type) -> dict[str, type]:
    """The `[section]` tables of the file: the fields of `root` that are settings dataclasses."""
    return {
        declared.name: hints(root)[declared.name]
        for declared in dataclasses.fields(root)
        if dataclasses.is_dataclass(hints(root)[declared.name])
    }
