"""Sources and conversion: ``pyproject.toml`` (read once) to the validated settings model.

:func:`read_pyproject` parses the file (every failure one line, never a traceback);
:func:`settings_from_pyproject` converts its ``[tool.cudaq]`` table, walking the model's
dataclasses and collecting every problem (unknown keys with "did you mean") into one
:class:`~skbuild_cudaq.errors.SettingsError`.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from skbuild_cudaq._compat import tomllib
from skbuild_cudaq.errors import CudaqError, SettingsError, SettingsProblem
from skbuild_cudaq.settings._fields import (
    Context,
    FieldSpec,
    Invalid,
    Meta,
    Rule,
    array_of,
    describe,
    field_specs,
    placeholder,
)
from skbuild_cudaq.settings._model import ROOT_KEY, CudaqSettings
from skbuild_cudaq.settings._toml_text import format_key, show_value, toml_type

__all__ = [
    "load_settings",
    "near_miss_tables",
    "parse_settings",
    "read_pyproject",
    "settings_from_pyproject",
]


class _Invalid:
    """Marks a value that could not be converted (its problems are already reported)."""


_INVALID = _Invalid()


class _Converter:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.problems: list[SettingsProblem] = []

    def report(self, path: tuple[str | int, ...], message: str, fix: str = "") -> None:
        self.problems.append(SettingsProblem(format_key(path), message, fix))

    def value(self, hint: Any, meta: Meta, raw: Any, path: tuple[str | int, ...]) -> Any:
        origin = typing.get_origin(hint)
        if dataclasses.is_dataclass(hint):
            return self.record(typing.cast("type", hint), raw, path)
        if origin is tuple:
            return self.array(hint, meta, raw, path)
        if origin is dict:
            return self.table(hint, meta, raw, path)
        if hint is str and "item" in meta:
            return self.scalar(meta["item"], raw, path)
        raise TypeError(f"unsupported settings type {hint!r}")  # pragma: no cover

    def scalar(self, rule: Rule, raw: Any, path: tuple[str | int, ...]) -> Any:
        try:
            return rule.apply(raw, self.ctx)
        except Invalid as exc:
            self.report(path, exc.message, exc.fix)
            return _INVALID

    def record(self, cls: type, raw: Any, path: tuple[str | int, ...]) -> Any:
        specs = field_specs(cls)
        short = next((s for s in specs if s.meta.get("shorthand")), None)
        if short is not None and isinstance(raw, list):
            converted = self.value(short.hint, short.meta, raw, path)
            if converted is _INVALID:
                return _INVALID
            return cls(**{short.name: converted})
        if not isinstance(raw, dict):
            self.not_a_table(cls, short, raw, path)
            return _INVALID
        return self.table_record(cls, specs, raw, path)

    def not_a_table(
        self, cls: type, short: FieldSpec | None, raw: Any, path: tuple[str | int, ...]
    ) -> None:
        """Report a record given as something else; the fix shows the shorthand form when
        the value would fit it (``_core = "k.cu"`` -> ``["k.cu"]``)."""
        fix = f"write a table: [{format_key(path)}]"
        if short is not None and "item" in short.meta:
            rule = short.meta["item"]
            try:
                rule.apply(raw, self.ctx)
            except Invalid:
                fix = f"write it like [{rule.example}]"
            else:
                fix = f"did you mean [{show_value(raw)}]?"
        self.report(path, f"{show_value(raw)} is {toml_type(raw)}; expected {describe(cls)}", fix)

    def table_record(
        self, cls: type, specs: list[FieldSpec], raw: dict[str, Any], path: tuple[str | int, ...]
    ) -> Any:
        """A record from its table: every unknown key, missing key and bad value reported."""
        by_key = {s.key: s for s in specs}
        meant = set()  # known keys an unknown key was taken for ("did you mean")
        for key in raw:
            if key not in by_key:
                meant.add(self.unknown_key((*path, key), key, list(by_key)))
        kwargs: dict[str, Any] = {}
        ok = True
        for spec in specs:
            if spec.key not in raw:
                if spec.required and spec.key not in meant:  # not reported as a misspelling
                    self.report(
                        path,
                        f"{show_value(raw)} lacks the required key {spec.key}; expected "
                        f"{describe(cls)}",
                        f"add {spec.key} = {placeholder(spec.hint)}",
                    )
                ok = ok and not spec.required
                continue
            converted = self.value(spec.hint, spec.meta, raw[spec.key], (*path, spec.key))
            if converted is _INVALID:
                ok = False
            else:
                kwargs[spec.name] = converted
        return cls(**kwargs) if ok else _INVALID

    def unknown_key(self, path: tuple[str | int, ...], key: str, known: list[str]) -> str:
        """Report an unknown key; return the known key it was probably meant as ("" if none)."""
        accepted = ", ".join(known)
        guess = key.strip().lower().replace("_", "-")
        if guess not in known:
            close = difflib.get_close_matches(guess, known, n=1, cutoff=0.6)
            stem = guess.rstrip("s")  # an abbreviation: "arch", "archs"
            close = close or [k for k in known if len(stem) >= 3 and k.startswith(stem)][:1]
            guess = close[0] if close else ""
        fix = f"did you mean {guess}?" if guess else f"remove it (accepted keys: {accepted})"
        self.report(path, f"unknown key {show_value(key)}; expected one of: {accepted}", fix)
        return guess

    def array(self, hint: Any, meta: Meta, raw: Any, path: tuple[str | int, ...]) -> Any:
        rule = meta["item"]
        if not isinstance(raw, list):
            fix = ""
            try:
                rule.apply(raw, self.ctx)
            except Invalid:
                pass
            else:
                fix = f"did you mean [{show_value(raw)}]?"
            self.report(
                path, f"{show_value(raw)} is {toml_type(raw)}; expected {array_of(rule)}", fix
            )
            return _INVALID
        min_items = meta.get("min_items", 0)
        default = f" {show_value(list(meta['default']))}" if "default" in meta else ""
        if len(raw) < min_items:
            self.report(
                path,
                f"empty array {show_value(raw)}; expected {array_of(rule)} (at least {min_items})",
                "list at least one, or remove the entry"
                if "shorthand" in meta
                else f"list at least one, or remove the key to use the default{default}",
            )
            return _INVALID
        items: list[Any] = []
        first_at: dict[Any, int] = {}
        ok = True
        for index, item in enumerate(raw):
            converted = self.scalar(rule, item, (*path, index))
            if converted is _INVALID:
                ok = False
                continue
            if meta.get("unique") and converted in first_at:
                first = first_at[converted]
                same = "" if raw[first] == item else f" ({show_value(raw[first])})"
                self.report(
                    (*path, index),
                    f"{show_value(item)} repeats item [{first}]{same}; expected "
                    f"{array_of(rule)}, each once",
                    "remove the duplicate",
                )
                ok = False
                continue
            first_at.setdefault(converted, index)
            items.append(converted)
        return tuple(items) if ok else _INVALID

    def table(self, hint: Any, meta: Meta, raw: Any, path: tuple[str | int, ...]) -> Any:
        _, value_hint = typing.get_args(hint)
        if not isinstance(raw, dict):
            key_name = meta.get("key_name", "<name>")
            example = meta.get("key_example", "name")
            entry = show_value(raw) if isinstance(raw, list) else placeholder(value_hint)
            self.report(
                path,
                f"{show_value(raw)} is {toml_type(raw)}; expected a table of "
                f"{key_name} = {describe(value_hint)}",
                f"key each entry by its {key_name.strip('<>')}: "
                f"[{format_key(path)}] {example} = {entry}",
            )
            return _INVALID
        min_items = meta.get("min_items", 0)
        if len(raw) < min_items:
            key_name = meta.get("key_name", "<name>")
            example = meta.get("key_example", "name")
            self.report(
                path,
                f"empty table; expected at least {min_items} entry {key_name} = "
                f"{describe(value_hint)}",
                f"add one, e.g. {example} = {_example_of(value_hint)}, or remove the table",
            )
            return _INVALID
        out: dict[str, Any] = {}
        ok = True
        key_rule = meta.get("key")
        for key, item in raw.items():
            if key_rule is not None and self.scalar(key_rule, key, (*path, key)) is _INVALID:
                ok = False
                continue
            converted = self.value(value_hint, {}, item, (*path, key))
            if converted is _INVALID:
                ok = False
            else:
                out[key] = converted
        validate = meta.get("validate")
        if validate is not None:  # on the good entries too when others are bad: report all
            before = len(self.problems)
            validate(out, raw, path, self.report)
            ok = ok and len(self.problems) == before
        return out if ok else _INVALID


def _example_of(hint: Any) -> str:
    """A good value of type ``hint`` as TOML text, for fixes (a dataclass: its shorthand)."""
    if dataclasses.is_dataclass(hint):
        specs = field_specs(typing.cast("type", hint))
        short = next((s for s in specs if s.meta.get("shorthand")), None)
        rule = short.meta.get("item") if short is not None else None
        if rule is not None:
            return f"[{rule.example}]"
    return placeholder(hint)


def parse_settings(
    table: Mapping[str, Any], project_dir: Path, *, source: str = "pyproject.toml"
) -> CudaqSettings:
    """Validate the ``[tool.cudaq]`` table; raise :class:`SettingsError` listing every problem.

    ``project_dir`` is the directory of the ``pyproject.toml`` (kernel sources are
    relative to it); ``source`` names the file in the error message.
    """
    converter = _Converter(Context(Path(project_dir).resolve()))
    raw = dict(table) if isinstance(table, Mapping) else table
    result = converter.value(CudaqSettings, {}, raw, ROOT_KEY)
    if converter.problems:
        raise SettingsError(converter.problems, source=source)
    assert isinstance(result, CudaqSettings)
    return result


def read_pyproject(pyproject: Path) -> dict[str, Any]:
    """The parsed TOML of ``pyproject``; :class:`CudaqError` (one line) when it cannot be read.

    Every way a file can fail is a message, never a traceback: unreadable, not
    UTF-8, not TOML, a number too long for Python, arrays or tables nested deeper
    than the TOML reader recurses.
    """
    pyproject = Path(pyproject)
    try:
        data = pyproject.read_bytes()
    except OSError as exc:
        raise CudaqError(f"cannot read {pyproject}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        reason = f"it is not UTF-8 text (byte 0x{data[exc.start]:02x} on line {line})"
        raise CudaqError(f"cannot read {pyproject}: {reason}") from None
    try:
        parsed: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CudaqError(f"cannot read {pyproject}: {exc}") from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        reason = f"a value cannot be read ({str(exc).split(';')[0]})"
        raise CudaqError(f"cannot read {pyproject}: {reason}") from None
    except RecursionError:
        reason = "arrays or tables are nested too deeply to be read"
        raise CudaqError(f"cannot read {pyproject}: {reason}") from None
    return parsed


def settings_from_pyproject(data: Mapping[str, Any], pyproject: Path) -> CudaqSettings:
    """The validated ``[tool.cudaq]`` of ``data``, the parsed ``pyproject`` (:func:`read_pyproject`
    gives it).

    For a front door that needs other tables of the file too: it reads the file once.
    """
    pyproject = Path(pyproject)
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        problem = SettingsProblem(
            "tool", f"{show_value(tool)} is {toml_type(tool)}; expected a table", "use [tool]"
        )
        raise SettingsError([problem], source=str(pyproject))
    near = near_miss_tables(tool)
    try:
        settings = parse_settings(tool.get("cudaq", {}), pyproject.parent, source=str(pyproject))
    except SettingsError as exc:
        raise SettingsError(near + exc.problems, source=str(pyproject)) from None
    if near:
        raise SettingsError(near, source=str(pyproject))
    return settings


def _normal_tool_name(name: str) -> str:
    return "".join(c for c in name.lower() if c not in "-_. ")


def near_miss_tables(tool: Mapping[str, Any]) -> list[SettingsProblem]:
    """A problem for each ``[tool.X]`` table that looks like ours but is not ``cudaq``
    (``cuda-q``, ``cuda_q``, ``CUDAQ``, ``cudaq-realtime``, ``skbuild-cudaq``, ...): nothing
    reads it, so what it declares (dispatch kernels) would silently be missing. The rule
    (the name without case, ``-``, ``_`` and ``.`` contains ``cudaq``) is the CMake
    package's too (``skbuild_cudaqConfig.cmake``)."""
    return [
        SettingsProblem(
            f"tool.{name}",
            "is not a table skbuild-cudaq reads (nothing reads it: the dispatch kernels it "
            "declares would be missing from the build)",
            "did you mean [tool.cudaq]?",
        )
        for name in tool
        if isinstance(name, str) and name != "cudaq" and "cudaq" in _normal_tool_name(name)
    ]


def load_settings(pyproject: Path) -> CudaqSettings:
    """Read ``pyproject`` and return its validated ``[tool.cudaq]`` settings.

    A missing ``[tool.cudaq]`` gives the defaults (no dispatch kernels). Raises
    :class:`SettingsError` (every problem at once) or :class:`CudaqError` when the
    file cannot be read or parsed (:func:`read_pyproject`).
    """
    return settings_from_pyproject(read_pyproject(pyproject), pyproject)
