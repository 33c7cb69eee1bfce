"""Marshmallow schemas generated from the declarations: one per section and per kind of table.

A schema loads what the file says (after the environment's overrides) and builds the typed
settings: a key's type picks the field, its constraints the validators, and the errors are
keyed by the names in the file. Rules across keys come from the caller.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from marshmallow import RAISE, Schema, ValidationError, fields, post_load, validate

from services.shared.config.declare import MISSING, Key, Option, hints, key_of, keys

Rule = Callable[[dict[str, Any]], None]
"""A check across the keys of one section or table: raises ValidationError(reason, key)."""

_SCALARS: dict[Any, type[fields.Field]] = {
    str: fields.String,
    Path: fields.String,
    int: fields.Integer,
    float: fields.Float,
    bool: fields.Boolean,
}


class StartsWith(validate.Validator):
    """A URL of a supported scheme; an empty one passes where empty means a default."""

    def __init__(self, prefixes: Sequence[str], *, empty_passes: bool) -> None:
        self.prefixes = tuple(prefixes)
        self.empty_passes = empty_passes

    def __call__(self, value: str) -> str:
        if not (value == "" and self.empty_passes) and not value.startswith(self.prefixes):
            raise ValidationError(f"must start with {' or '.join(self.prefixes)}")
        return value


def _validators(option: Option) -> list[validate.Validator]:
    found: list[validate.Validator] = []
    if option.min is not None or option.max is not None:
        found.append(validate.Range(min=option.min, max=option.max))
    if option.choices:
        found.append(validate.OneOf(option.choices))
    if option.min_length:
        found.append(validate.Length(min=option.min_length))
    if option.prefixes:
        found.append(StartsWith(option.prefixes, empty_passes=option.default == ""))
    if option.check is not None:
        found.append(option.check)
    return found


def _field(key: Key, rules: Mapping[type, Sequence[Rule]]) -> fields.Field:
    option = key.option
    if key.section is not None:  # a nested table: absent, it has its defaults
        return fields.Nested(schema_for(key.section, rules), load_default=key.section)
    loading: dict[str, Any] = {"required": True}
    if option.default is not MISSING:
        default = option.default
        loading = {"load_default": (lambda: list(default)) if key.item is not None else default}
    if key.table is not None:
        return fields.List(fields.Nested(schema_for(key.table, rules)), **loading)
    if key.item is not None:  # the constraints of a list are on its items
        item = str if option.parse else key.item
        return fields.List(_SCALARS[item](validate=_validators(option)), **loading)
    return _SCALARS[key.type](validate=_validators(option), **loading)


def _parse_items(key: Key, texts: list[str]) -> list[Any]:
    assert key.option.parse is not None
    items = []
    for i, text in enumerate(texts):
        try:
            items.append(key.option.parse(text))
        except ValueError as err:
            raise ValidationError(str(err), f"{key.name}[{i}]") from None
    return items


def _typed(key: Key, value: Any) -> Any:
    if key.type is Path:
        return Path(value).expanduser()
    if key.item is None:
        return value
    # A choice listed twice counts once (a handler runs once).
    return tuple(dict.fromkeys(value)) if key.option.choices else tuple(value)


def _build(cls: type, values: Mapping[str, Any]) -> Any:
    """`cls` from loaded values keyed by their names in the file (flat fields included)."""
    arguments: dict[str, Any] = {}
    for declared in dataclasses.fields(cls):
        if declared.metadata.get("flat"):
            arguments[declared.name] = _build(hints(cls)[declared.name], values)
        elif (key := key_of(cls, declared)) and key.name in values:
            arguments[declared.name] = _typed(key, values[key.name])
    return cls(**arguments)


def schema_for(cls: type, rules: Mapping[type, Sequence[Rule]]) -> type[Schema]:
    """The schema of a section or table declared by the dataclass `cls`; it loads a `cls`."""
    declared = keys(cls)

    def make(self: Schema, data: dict[str, Any], **_: Any) -> Any:
        for key in declared:
            if key.option.parse is not None:
                data[key.name] = _parse_items(key, data[key.name])
        for rule in rules.get(cls, ()):
            rule(data)
        return _build(cls, data)

    class Meta:
        unknown = RAISE

    attributes: dict[str, Any] = {key.name: _field(key, rules) for key in declared}
    return type(
        f"{cls.__name__}Schema", (Schema,), {**attributes, "Meta": Meta, "make": post_load(make)}
    )
