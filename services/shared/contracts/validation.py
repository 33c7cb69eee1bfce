"""How event data is checked against its declared type: `EventType` and its fast path.

An `EventType` is one (name, version) with the service that publishes it and the schema of its
`data`. `errors` answers whether data fits: strictly for a publisher, leniently (unknown fields
ignored at every depth) for a consumer reading the wire.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from marshmallow import Schema, ValidationError, fields, validate

from services.shared.contracts.schema import Integer, Number

# A compiled check of a value: True only when the schema certainly accepts it.
Check = Callable[[Any], bool]


@dataclass(frozen=True)
class EventType:
    """One declared (name, version): who publishes it and the schema of its data."""

    name: str
    version: int
    source: str
    schema: type[Schema]
    description: str
    _schema: Schema = field(init=False, repr=False, compare=False)
    _fast_strict: Check | None = field(init=False, repr=False, compare=False)
    _fast_lenient: Check | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        schema = self.schema()
        object.__setattr__(self, "_schema", schema)
        object.__setattr__(self, "_fast_strict", _compile_schema(schema, strict=True))
        object.__setattr__(self, "_fast_lenient", _compile_nested_lenient(schema))

    def errors(self, data: Any, *, strict: bool) -> dict[str, Any]:
        """Validation errors of `data` (empty when it fits the schema).

        Not strict (a consumer reading the wire): fields it does not know are ignored at every
        depth, since a compatible change may add optional fields anywhere.
        """
        if not isinstance(data, Mapping):
            return {"_schema": ["data must be an object"]}
        fast = self._fast_strict if strict else self._fast_lenient
        if fast is not None and fast(data):
            return {}
        try:
            self._schema.load(data if strict else _known_fields_only(self._schema, data))
        except ValidationError as err:
            return err.normalized_messages()
        return {}


# --- a fast path for validation ----------------------------------------------------------------
# Every event is validated when published and again when it arrives from the wire, so the
# common case (valid data) is checked by plain functions compiled once per schema from its
# fields. They are conservative: when one says "no" (or a field kind is not compiled), the
# marshmallow schema decides and writes the error messages. A test checks both agree.


def _compile_field(declared: fields.Field) -> Check | None:  # noqa: C901 - one branch per marshmallow field type
    """A check of one present value of `declared`, or None when it cannot be compiled."""
    value_check: Check | None
    if isinstance(declared, fields.Nested):
        value_check = _compile_schema(declared.schema, strict=True)
    elif isinstance(declared, fields.List):
        inner = _compile_field(declared.inner)
        if inner is None:
            return None
        value_check = lambda v, inner=inner: isinstance(v, list) and all(map(inner, v))  # noqa: E731
    elif isinstance(declared, fields.AwareDateTime):
        value_check = _is_aware_iso
    elif isinstance(declared, Integer):
        value_check = lambda v: type(v) is int  # noqa: E731
    elif isinstance(declared, Number):
        value_check = lambda v: type(v) is int or (type(v) is float and math.isfinite(v))  # noqa: E731
    elif type(declared) is fields.String:
        value_check = lambda v: type(v) is str  # noqa: E731
    elif type(declared) is fields.Boolean:
        value_check = lambda v: type(v) is bool  # noqa: E731
    elif type(declared) is fields.Dict and declared.value_field is None:
        value_check = lambda v: type(v) is dict and all(type(k) is str for k in v)  # noqa: E731
    else:
        return None
    if value_check is None:
        return None
    checks = [value_check]
    for validator in declared.validators:
        compiled = _compile_validator(validator)
        if compiled is None:
            return None
        checks.append(compiled)
    return _present_value_check(checks, allow_none=declared.allow_none)


def _present_value_check(checks: list[Check], *, allow_none: bool) -> Check:
    """All of `checks` on a value (None passes when allowed). One or two checks get a closure
    of their own: a generator per field was a good part of validating a monitor sample (8 GPUs,
    a hundred fields) when published."""
    if len(checks) == 1:
        check = checks[0]
    elif len(checks) == 2:
        first, second = checks
        check = lambda v: first(v) and second(v)  # noqa: E731
    else:
        check = lambda v: all(one(v) for one in checks)  # noqa: E731
    if allow_none:
        return lambda v: v is None or check(v)
    return lambda v: v is not None and check(v)


def _compile_validator(validator: Any) -> Check | None:
    if type(validator) is validate.Length and validator.equal is None:
        low, high = validator.min, validator.max
        return lambda v: (low is None or len(v) >= low) and (high is None or len(v) <= high)
    if type(validator) is validate.OneOf:
        choices = tuple(validator.choices)
        return lambda v: v in choices
    if type(validator) is validate.Range and validator.min_inclusive and validator.max_inclusive:
        low, high = validator.min, validator.max
        return lambda v: (low is None or v >= low) and (high is None or v <= high)
    return None


def _is_aware_iso(value: Any) -> bool:
    if type(value) is not str:
        return False
    try:
        return datetime.fromisoformat(value).utcoffset() is not None
    except ValueError:
        return False


def _compile_schema(schema: Any, *, strict: bool) -> Check | None:
    if not isinstance(schema, Schema):
        return None
    compiled: list[tuple[str, bool, Check]] = []
    for name, declared in schema.fields.items():
        check = _compile_field(declared)
        if check is None:
            return None
        compiled.append((name, declared.required, check))
    known = frozenset(schema.fields)

    def check_object(data: Any) -> bool:
        if not isinstance(data, dict) or (strict and not known.issuperset(data)):
            return False
        for name, required, check in compiled:
            if name in data:
                if not check(data[name]):
                    return False
            elif required:
                return False
        return True

    return check_object


def _compile_nested_lenient(schema: Schema) -> Check | None:
    """The consumer's check: unknown keys are ignored at every depth."""
    strict_check = _compile_schema(schema, strict=True)
    if strict_check is None:
        return None
    return lambda data: strict_check(_known_fields_only(schema, data))


def _known_fields_only(schema: Schema, data: Any) -> Any:
    """`data` without the keys `schema` does not declare, recursively through nested objects."""
    if not isinstance(data, Mapping):
        return data
    kept: dict[str, Any] = {}
    for key, value in data.items():
        declared = schema.fields.get(key)
        if declared is None:
            continue
        inner = declared.inner if isinstance(declared, fields.List) else declared
        if isinstance(inner, fields.Nested) and isinstance(inner.schema, Schema):
            if isinstance(declared, fields.List) and isinstance(value, list):
                value = [_known_fields_only(inner.schema, item) for item in value]
            else:
                value = _known_fields_only(inner.schema, value)
        kept[key] = value
    return kept
