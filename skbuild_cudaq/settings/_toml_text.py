"""Values and key paths of ``[tool.cudaq]`` shown the way the user wrote them (TOML, not Python).

Every message about a setting names the key path (:func:`format_key`), the bad value
(:func:`show_value`) and its type (:func:`toml_type`) in TOML words.
"""

from __future__ import annotations

import json
import math
import re
from datetime import date, datetime, time
from typing import Any

__all__ = ["format_key", "show_value", "toml_type"]

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_MAX_SHOWN = 120  # arrays and tables
_MAX_SHOWN_STRING = 400  # paths stay whole
_MAX_SHOWN_BITS = 4000  # integers wider than this are not written out in full


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, int):
        if value.bit_length() > _MAX_SHOWN_BITS:  # str() refuses > 4300 digits
            return f"<an integer of {value.bit_length()} bits>"
        return str(value)
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = ", ".join(f"{_toml_key(k)} = {_toml(v)}" for k, v in value.items())
        return "{ " + items + " }"
    return repr(value)  # pragma: no cover - TOML has no other types


def show_value(value: Any) -> str:
    """``value`` as TOML text (what the user wrote), shortened when long."""
    text = _toml(value)
    limit = _MAX_SHOWN_STRING if isinstance(value, str) else _MAX_SHOWN
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key, ensure_ascii=False)


def format_key(path: tuple[str | int, ...]) -> str:
    """A key path as TOML writes it: ``tool.cudaq.dispatch-kernels."pkg._core".sources[1]``."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += ("." if text else "") + _toml_key(part)
    return text


def toml_type(value: Any) -> str:
    """The TOML type of ``value``, with its article."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return "a date-time"
