"""The JSON schema and the reference table of ``[tool.cudaq]``, derived from the dataclasses.

:func:`generate_schema` and :func:`generate_markdown` walk the settings
dataclasses of :mod:`skbuild_cudaq.settings` (their fields, types and
:func:`~skbuild_cudaq.settings.setting` metadata); nothing here repeats a key by
hand. The schema is committed as ``skbuild_cudaq/resources/cudaq.schema.json``
and published to validate-pyproject (and editors) by :func:`get_schema`, the
``validate_pyproject.tool_schema`` entry point; the table is committed as
``docs/reference/tool-cudaq.md``. Tests regenerate both and compare.

The schema catches what a schema can (types, unknown keys, ``.cu`` suffixes,
architecture numbers); :func:`~skbuild_cudaq.settings.load_settings` checks
everything, files included, and explains each problem.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import typing
from importlib import resources
from typing import Any

from skbuild_cudaq.settings import (
    ROOT_KEY,
    CudaqSettings,
    FieldSpec,
    Meta,
    describe,
    field_specs,
    show_value,
)

__all__ = [
    "SCHEMA_ID",
    "SCHEMA_RESOURCE",
    "generate_markdown",
    "generate_schema",
    "get_schema",
    "schema_text",
]

#: ``$id`` of the schema (validate-pyproject requires one; it is never fetched).
SCHEMA_ID = "urn:skbuild-cudaq:schema:tool.cudaq"
#: The committed schema, inside the package.
SCHEMA_RESOURCE = ("resources", "cudaq.schema.json")
_DRAFT = "http://json-schema.org/draft-07/schema#"


def _doc(obj: Any) -> str:
    """A docstring as one paragraph of plain text."""
    return " ".join(inspect.cleandoc(obj.__doc__ or "").split()).replace("``", "`")


def _json_default(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    return value


def _value_schema(hint: Any, meta: Meta) -> dict[str, Any]:
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        return _object_schema(typing.cast("type", hint))
    if origin is tuple:
        schema: dict[str, Any] = {"type": "array", "items": dict(meta["item"].schema)}
        if meta.get("min_items"):
            schema["minItems"] = meta["min_items"]
        if meta.get("unique"):
            schema["uniqueItems"] = True
        return schema
    if origin is dict:
        _, value_hint = typing.get_args(hint)
        schema = {"type": "object"}
        if meta.get("min_items"):
            schema["minProperties"] = meta["min_items"]
        if "key" in meta:
            schema["propertyNames"] = dict(meta["key"].schema)
        schema["additionalProperties"] = _value_schema(value_hint, {})
        return schema
    if hint is str and "item" in meta:
        return dict(meta["item"].schema)
    raise TypeError(f"unsupported settings type {hint!r}")  # pragma: no cover


def _field_schema(spec: FieldSpec) -> dict[str, Any]:
    schema: dict[str, Any] = {"description": spec.help}
    schema.update(_value_schema(spec.hint, spec.meta))
    if not spec.required:
        schema["default"] = _json_default(spec.default)
    return schema


def _object_schema(cls: type) -> dict[str, Any]:
    specs = field_specs(cls)
    table: dict[str, Any] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {spec.key: _field_schema(spec) for spec in specs},
    }
    required = [spec.key for spec in specs if spec.required]
    if required:
        table["required"] = required
    short = next((s for s in specs if s.meta.get("shorthand")), None)
    if short is None:
        return {"description": _doc(cls), **table}
    # A bare array stands for the shorthand field.
    return {"description": _doc(cls), "oneOf": [_value_schema(short.hint, short.meta), table]}


def generate_schema() -> dict[str, Any]:
    """The JSON schema (draft-07) of ``[tool.cudaq]``, from the settings dataclasses."""
    body = _object_schema(CudaqSettings)
    return {
        "$schema": _DRAFT,
        "$id": SCHEMA_ID,
        "title": "[tool.cudaq] of skbuild-cudaq",
        **body,
    }


def schema_text() -> str:
    """:func:`generate_schema` as the committed file's text (stable key order, final newline)."""
    return json.dumps(generate_schema(), indent=2, ensure_ascii=False) + "\n"


def get_schema(tool_name: str = "cudaq") -> dict[str, Any]:
    """Settings of skbuild-cudaq: custom CUDA-Q realtime dispatch kernels (``[tool.${tool}]``)."""
    if tool_name != "cudaq":
        raise ValueError(f"skbuild-cudaq only provides the schema of tool.cudaq, not {tool_name}")
    folder, name = SCHEMA_RESOURCE
    resource = resources.files("skbuild_cudaq") / folder / name
    loaded: dict[str, Any] = json.loads(resource.read_text(encoding="utf-8"))
    return loaded


# --------------------------------------------------------------------------------------
# The reference table
# --------------------------------------------------------------------------------------

_EXAMPLE = """\
[tool.cudaq]
compiler = "auto"  # or "nvcc", or "nvrtc" (no CUDA toolkit: NVRTC from build-system.requires)

[tool.cudaq.dispatch-kernels]
# short form: target -> kernel sources (architectures default to ["80"])
_core = ["src/single_thread_dispatcher.cu"]
# long form
"pkg._cluster" = { sources = ["src/cluster_dispatcher.cu"], architectures = ["90"] }
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _rows(cls: type, prefix: str) -> list[tuple[str, str, str, str]]:
    rows = []
    for spec in field_specs(cls):
        key = f"{prefix}.{spec.key}"
        default = "required" if spec.required else f"`{show_value(_json_default(spec.default))}`"
        origin = typing.get_origin(spec.hint)
        accepted = describe(spec.hint, spec.meta)
        if origin is dict:
            accepted = f"a table of `{spec.meta.get('key_name', '<name>')}` = entry (below)"
            if spec.meta.get("min_items"):
                accepted += f", at least {spec.meta['min_items']}"
        if origin is tuple:
            notes = []
            if spec.meta.get("min_items"):
                notes.append(f"at least {spec.meta['min_items']}")
            if spec.meta.get("unique"):
                notes.append("each once")
            if notes:
                accepted += f" ({', '.join(notes)})"
        rows.append((f"`{key}`", accepted, default, spec.help))
        if origin is dict:
            key_name = spec.meta.get("key_name", "<name>")
            _, value_hint = typing.get_args(spec.hint)
            entry = f"{key}.{key_name}"
            key_rule = spec.meta.get("key")
            help_text = _doc(value_hint)
            if key_rule is not None:
                help_text = f"`{key_name}`: {key_rule.expected}. {help_text}"
            rows.append((f"`{entry}`", describe(value_hint), "—", help_text))
            if dataclasses.is_dataclass(value_hint):
                rows += _rows(typing.cast("type", value_hint), entry)
        elif dataclasses.is_dataclass(spec.hint):
            rows += _rows(typing.cast("type", spec.hint), key)
    return rows


def generate_markdown() -> str:
    """The reference table of ``[tool.cudaq]`` (Markdown), from the settings dataclasses."""
    root = ".".join(ROOT_KEY)
    lines = [
        "# `[tool.cudaq]` reference",
        "",
        "<!-- Generated from skbuild_cudaq/settings/ by"
        " `python -m skbuild_cudaq schema --markdown`; do not edit."
        " tests/test_schema.py keeps it fresh. -->",
        "",
        _doc(CudaqSettings) + " Every problem is reported at once, each with its key path, the"
        " bad value, what is accepted and a fix; `python -m skbuild_cudaq schema --check` checks"
        " a `pyproject.toml` without building. The JSON schema"
        " (`skbuild_cudaq/resources/cudaq.schema.json`) is published to validate-pyproject.",
        "",
        "```toml",
        *_EXAMPLE.splitlines(),
        "```",
        "",
        "| Key | Accepted | Default | Description |",
        "| --- | --- | --- | --- |",
    ]
    for row in _rows(CudaqSettings, root):
        lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
    return "\n".join(lines) + "\n"
