"""The rule framework of the settings model: field metadata, scalar rules, field introspection.

A settings dataclass declares each field with :func:`setting` (help text, TOML key, the
:class:`Rule` of its items or keys, ...); :func:`field_specs` reads them back for the
converter (:mod:`._sources`), the JSON schema and the docs table (:mod:`.json_schema`).
"""

from __future__ import annotations

import dataclasses
import os
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skbuild_cudaq.settings._toml_text import show_value, toml_type

__all__ = [
    "MISSING",
    "Context",
    "FieldSpec",
    "Invalid",
    "Meta",
    "Reporter",
    "Rule",
    "array_of",
    "describe",
    "field_specs",
    "placeholder",
    "setting",
]


class Invalid(Exception):
    """Raised by a :class:`Rule` check: what is wrong with the value and how to fix it."""

    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix


@dataclass
class Context:
    """What checks may look at beyond the value: the project directory."""

    project_dir: Path
    _cu_files: list[str] | None = None

    def cu_files(self) -> list[str]:
        """Project-relative paths of the ``.cu`` files in the project (for "did you mean")."""
        if self._cu_files is None:
            self._cu_files = _find_cu_files(self.project_dir)
        return self._cu_files


_SKIPPED_DIRS = {
    "build",
    "dist",
    "node_modules",
    "__pycache__",
    "venv",
    "_skbuild",
    "site-packages",
}
_MAX_SCANNED = 20_000


def _find_cu_files(project_dir: Path) -> list[str]:
    found: list[str] = []
    scanned = 0
    for root, dirs, files in os.walk(project_dir):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIPPED_DIRS)
        rel_root = Path(root).relative_to(project_dir).as_posix()
        for name in sorted(files):
            if name.endswith(".cu"):
                found.append(name if rel_root == "." else f"{rel_root}/{name}")
        scanned += len(files)
        if scanned > _MAX_SCANNED:
            break
    return found


@dataclass(frozen=True)
class Rule:
    """How one scalar value (an array item or a table key) is checked, normalized, documented.

    ``check`` receives a value already of one of ``types`` and returns its normal
    form, or raises :class:`Invalid`.
    """

    types: tuple[type, ...]
    expected: str  #: what is accepted, singular ("a .cu path relative to the project directory")
    plural: str  #: the same, plural (".cu paths relative to the project directory")
    example: str  #: a good value as TOML text, for fixes
    schema: Mapping[str, Any]  #: JSON schema of one value
    check: Callable[[Any, Context], Any]

    def apply(self, value: Any, ctx: Context) -> Any:
        if not isinstance(value, self.types) or (
            isinstance(value, bool) and bool not in self.types
        ):
            raise Invalid(
                f"{show_value(value)} is {toml_type(value)}; expected {self.expected}",
                f"write it like {self.example}",
            )
        return self.check(value, ctx)


#: Reports one problem: key path, message, fix.
Reporter = Callable[[tuple[str | int, ...], str, str], None]


class Meta(typing.TypedDict, total=False):
    help: str  #: description (docs, JSON schema)
    toml: str  #: the TOML key; by default the field name with "-" for "_"
    item: Rule  #: rule of each array item / each table value that is a scalar
    key: Rule  #: rule of each table key (``dict`` fields)
    key_name: str  #: placeholder of a table key in docs, e.g. ``<target>``
    key_example: str  #: an example table key, e.g. ``_core``
    min_items: int  #: fewest items of an array
    unique: bool  #: whether the items of an array must differ (after normalization)
    shorthand: bool  #: a bare array given for the whole dataclass fills this field
    default: Any  #: the default (copied here by :func:`setting` for messages)
    validate: Callable[[Any, Any, tuple[str | int, ...], Reporter], None]  #: cross-item checks


MISSING: Any = dataclasses.MISSING


def setting(
    *,
    help: str,
    default: Any = MISSING,
    default_factory: Any = MISSING,
    toml: str | None = None,
    item: Rule | None = None,
    key: Rule | None = None,
    key_name: str | None = None,
    key_example: str | None = None,
    min_items: int = 0,
    unique: bool = False,
    shorthand: bool = False,
    validate: Callable[[Any, Any, tuple[str | int, ...], Reporter], None] | None = None,
) -> Any:
    """A dataclass field of a settings class with its metadata (see :class:`Meta`).

    Options left at their neutral value (None, 0, False, no default) are omitted.
    """
    meta: dict[str, Any] = {"help": help}
    if default is not MISSING:
        meta["default"] = default
    options = {
        "toml": toml,
        "item": item,
        "key": key,
        "key_name": key_name,
        "key_example": key_example,
        "min_items": min_items,
        "unique": unique,
        "shorthand": shorthand,
        "validate": validate,
    }
    meta.update((k, v) for k, v in options.items() if v not in (None, False, 0))
    return field(default=default, default_factory=default_factory, metadata=meta)


@dataclass(frozen=True)
class FieldSpec:
    """One field of a settings dataclass, as the converter, schema and docs see it."""

    name: str  #: Python attribute name
    key: str  #: TOML key
    hint: Any  #: resolved type hint
    meta: Meta
    default: Any  #: default value (``dataclasses.MISSING`` if required)

    @property
    def required(self) -> bool:
        return self.default is MISSING

    @property
    def help(self) -> str:
        return self.meta.get("help", "")


def field_specs(cls: type) -> list[FieldSpec]:
    """The fields of settings dataclass ``cls`` with resolved hints and defaults."""
    hints = typing.get_type_hints(cls)
    specs = []
    for f in dataclasses.fields(cls):
        meta = typing.cast("Meta", dict(f.metadata))
        if f.default is not MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = MISSING
        key = meta.get("toml", f.name.replace("_", "-"))
        specs.append(FieldSpec(f.name, key, hints[f.name], meta, default))
    return specs


def array_of(rule: Rule) -> str:
    return f"an array of {rule.plural}"


def placeholder(hint: Any) -> str:
    if hint is str:
        return '"..."'
    return "[...]" if typing.get_origin(hint) is tuple else "{...}"


def describe(hint: Any, meta: Meta | None = None) -> str:
    """What a value of type ``hint`` may be, in words (messages and docs)."""
    meta = meta or {}
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        specs = field_specs(typing.cast("type", hint))
        keys = ", ".join(f"{s.key} = {placeholder(s.hint)}" for s in specs)
        table = f"a table {{ {keys} }}"
        short = next((s for s in specs if s.meta.get("shorthand")), None)
        if short is not None:
            return f"{describe(short.hint, short.meta)} or {table}"
        return table
    if origin is tuple:
        item = meta.get("item")
        return array_of(item) if item else "an array"
    if origin is dict:
        return "a table"
    if hint is str:
        return meta["item"].expected if "item" in meta else "a string"
    return str(hint)  # pragma: no cover - no other field types
