"""JSON through orjson, with the standard library's meaning: what `json` would write or read,
these write or read the same values (tests/unit/test_fastjson.py), a few times faster.

Where the two differ, `json` decides: a value orjson refuses or would read otherwise (integers
beyond 64 bits, lone surrogates, datetimes and dataclasses, which `json` refuses too) goes
through `json`. One difference is kept on purpose: NaN and infinities are written as `null`
(`json` writes `NaN`, which is not JSON and which no browser reads). Text is written as UTF-8,
not as `\\uXXXX` escapes: the same value.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

_OPTIONS = (
    orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
)
# orjson reads an integer of 19 digits or more that does not fit 64 bits as a float: such
# text (rare: ids and figures are far shorter) is read by `json`, which keeps it an integer.
# Found by two C passes (every ASCII digit made "0", all else " "; then 19 "0"s looked for): a
# regular expression took 3 times as long as orjson's whole reading.
_DIGITS = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
_NINETEEN_DIGITS = b"0" * 19


def _long_number_in(raw: bytes | bytearray | str) -> bool:
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    return data.translate(_DIGITS).find(_NINETEEN_DIGITS) >= 0


def _refuse(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def dumps(value: Any) -> bytes:
    """Compact JSON of `value` as UTF-8 bytes (`json.dumps(separators=(",", ":"))`'s value)."""
    try:
        return orjson.dumps(value, default=_refuse, option=_OPTIONS)
    except TypeError:
        # What `json` writes differently or refuses: it decides (and raises as it would).
        return json.dumps(value, separators=(",", ":")).encode()


def dumps_text(value: Any) -> str:
    return dumps(value).decode()


def loads(raw: bytes | bytearray | str) -> Any:
    """`json.loads(raw)`'s value; ValueError (json.JSONDecodeError, UnicodeDecodeError) when
    `raw` is not JSON, as `json.loads` raises."""
    if not _long_number_in(raw):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass  # `json` decides: it reads NaN, 1e400, lone surrogates, UTF-16, and says why not
    return json.loads(raw)
