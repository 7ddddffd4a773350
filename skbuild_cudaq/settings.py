"""``[tool.cudaq]`` settings: documented dataclasses, validation that reports every problem.

The dataclasses below are the single description of ``[tool.cudaq]``: the
validating converter here, the JSON schema and the reference table in the docs
(:mod:`skbuild_cudaq.schema`) are all derived from their fields and the
field metadata made by :func:`setting`.  Adding a key means adding a field.

Every front door (the ``skbuild_cudaq.build`` backend, the setuptools command,
``python -m skbuild_cudaq schema --check``) calls :func:`load_settings` and, on
:class:`~skbuild_cudaq.errors.SettingsError`, prints ``str(error)`` (one line per
problem: key path, bad value, what is accepted, how to fix) and exits non-zero.

This module is build-side only: the run time never imports it.
"""

from __future__ import annotations

import dataclasses
import difflib
import errno
import json
import math
import os
import posixpath
import re
import sys
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, time
from pathlib import Path
from typing import Any

from .errors import CudaqError, SettingsError, SettingsProblem

__all__ = [
    "ARCHITECTURE",
    "COMPILER",
    "COMPILERS",
    "DEFAULT_ARCHITECTURES",
    "KERNEL_SOURCE",
    "MAX_ARCHITECTURE",
    "MIN_ARCHITECTURE",
    "ROOT_KEY",
    "TARGET_NAME",
    "UNSAFE_PATH_CHARS",
    "CudaqSettings",
    "DispatchKernelSettings",
    "FieldSpec",
    "Meta",
    "Rule",
    "describe",
    "field_specs",
    "format_key",
    "load_settings",
    "parse_settings",
    "read_pyproject",
    "setting",
    "settings_warnings",
    "show_value",
    "unsafe_path_chars",
]

#: The oldest GPU architecture a dispatch kernel can target (the built-in kernel's).
MIN_ARCHITECTURE = 80
#: The largest architecture number accepted, sm_9999. A bound, so that a value with thousands
#: of digits is a clear problem rather than a number no tool can take.
MAX_ARCHITECTURE = 9999
#: Architectures used when a dispatch kernel names none.
DEFAULT_ARCHITECTURES: tuple[str, ...] = (str(MIN_ARCHITECTURE),)

#: Where the settings live in ``pyproject.toml``.
ROOT_KEY: tuple[str, ...] = ("tool", "cudaq")


# --------------------------------------------------------------------------------------
# Showing values and key paths the way the user wrote them (TOML, not Python)
# --------------------------------------------------------------------------------------

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


def _toml_type(value: Any) -> str:
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


# --------------------------------------------------------------------------------------
# Rules (one scalar value) and field metadata
# --------------------------------------------------------------------------------------


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
                f"{show_value(value)} is {_toml_type(value)}; expected {self.expected}",
                f"write it like {self.example}",
            )
        return self.check(value, ctx)


#: Reports one problem: key path, message, fix.
_Reporter = Callable[[tuple[str | int, ...], str, str], None]


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
    validate: Callable[[Any, Any, tuple[str | int, ...], _Reporter], None]  #: cross-item checks


_MISSING: Any = dataclasses.MISSING


def setting(
    *,
    help: str,
    default: Any = _MISSING,
    default_factory: Any = _MISSING,
    toml: str | None = None,
    item: Rule | None = None,
    key: Rule | None = None,
    key_name: str | None = None,
    key_example: str | None = None,
    min_items: int = 0,
    unique: bool = False,
    shorthand: bool = False,
    validate: Callable[[Any, Any, tuple[str | int, ...], _Reporter], None] | None = None,
) -> Any:
    """A dataclass field of a settings class with its metadata (see :class:`Meta`).

    Options left at their neutral value (None, 0, False, no default) are omitted.
    """
    meta: dict[str, Any] = {"help": help}
    if default is not _MISSING:
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
        return self.default is _MISSING

    @property
    def help(self) -> str:
        return self.meta.get("help", "")


def field_specs(cls: type) -> list[FieldSpec]:
    """The fields of settings dataclass ``cls`` with resolved hints and defaults."""
    hints = typing.get_type_hints(cls)
    specs = []
    for f in dataclasses.fields(cls):
        meta = typing.cast("Meta", dict(f.metadata))
        if f.default is not _MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = _MISSING
        key = meta.get("toml", f.name.replace("_", "-"))
        specs.append(FieldSpec(f.name, key, hints[f.name], meta, default))
    return specs


# --------------------------------------------------------------------------------------
# The rules of [tool.cudaq]
# --------------------------------------------------------------------------------------

_TARGET_CHARS = re.compile(r"[A-Za-z0-9_.+-]+")
_NOT_TARGET_CHARS = re.compile(r"[^A-Za-z0-9_.+-]+")


def _check_target(name: str, ctx: Context) -> str:
    expected = "a CMake target or setuptools extension name such as _core or pkg._core"
    if not name.strip():
        raise Invalid(
            f"empty target name {show_value(name)}; expected {expected}",
            "use the name of the target (CMake) or extension (setuptools) that holds the handlers",
        )
    if not _TARGET_CHARS.fullmatch(name):
        suggestion = _NOT_TARGET_CHARS.sub("_", name.strip()).strip("_") or "_core"
        raise Invalid(
            f"{show_value(name)} is not a valid target name; expected {expected} "
            "(letters, digits and _ . + -)",
            f"did you mean {show_value(suggestion)}?",
        )
    long_form_keys = [s.key for s in field_specs(DispatchKernelSettings)]
    if name in long_form_keys:
        raise Invalid(
            f"{show_value(name)} is a key of a dispatch kernel entry, not a target name; "
            f"expected {expected}",
            f"put it under the target: _core = {{ {name} = [...] }}",
        )
    return name


#: Characters that neither a kernel source path nor the project's directory may contain. CMake
#: splits lists at ``;`` and keeps ``[...]`` together across ``;``, nvcc hands paths to a shell
#: (``$``, backquote), make and ninja misread ``:`` and ``|`` in rules and depfiles, and quotes,
#: backslashes and control characters break the generated sources. Rejected by every front door,
#: so that a project builds with each; the CMake package rejects the same set.
UNSAFE_PATH_CHARS = ';[]$`"\\|:'


_UNSAFE_SHOWN = " ".join(UNSAFE_PATH_CHARS) + " or control characters"


def unsafe_path_chars(path: str) -> str:
    """The characters of ``path`` that CMake, make, ninja or nvcc would misread, shown once each."""
    bad = dict.fromkeys(c for c in path if c in UNSAFE_PATH_CHARS or ord(c) < 0x20 or c == "\x7f")
    return " ".join(c if c.isprintable() else repr(c)[1:-1] for c in bad)


def _path_error(shown: str, exc: OSError) -> Invalid:
    fix = "check the path and the permissions of its directories"
    if exc.errno == errno.ENAMETOOLONG:
        fix = (
            "shorten it: a file or directory name has at most 255 bytes, a whole path at most 4096"
        )
    return Invalid(f"{shown} cannot be checked: {exc.strerror or exc}", fix)


def _check_source(path: str, ctx: Context) -> str:
    where = "relative to the project directory"
    shown = show_value(path)
    if not path.strip():
        raise Invalid(
            f"empty path {shown}; expected a .cu path {where}",
            "write the kernel file's path, e.g. src/my_dispatcher.cu",
        )
    if bad := unsafe_path_chars(path):
        raise Invalid(
            f"{shown} contains {bad}, which CMake, make or nvcc would misread; expected a .cu "
            f"path {where} without {_UNSAFE_SHOWN}",
            "rename the file (or its directory) without them: CMake splits a path at ; into "
            "two paths, nvcc hands paths to a shell",
        )
    if Path(path).is_absolute():
        absolute = Path(path)
        try:
            relative = absolute.relative_to(ctx.project_dir.resolve()).as_posix()
        except ValueError:
            fix = "move the file into the project: sdists and wheels are built from it alone"
        else:
            fix = f"did you mean {show_value(relative)}?"
        raise Invalid(f"{shown} is an absolute path; expected a .cu path {where}", fix)
    normal = posixpath.normpath(path.replace(os.sep, "/"))
    if normal == ".." or normal.startswith("../"):
        raise Invalid(
            f"{shown} is outside the project directory; expected a .cu path {where}",
            "move the file into the project: sdists and wheels are built from it alone",
        )
    try:
        return _check_source_file(path, normal, ctx)
    except OSError as exc:  # a name over 255 bytes, a path over 4096, no permission, ...
        raise _path_error(shown, exc) from None


def _check_source_file(path: str, normal: str, ctx: Context) -> str:
    """The checks of :func:`_check_source` that look at the file system (may raise OSError)."""
    where = "relative to the project directory"
    shown = show_value(path)
    if not normal.endswith(".cu"):
        stem = posixpath.splitext(normal)[0]
        if normal.endswith((".cuh", ".h", ".hpp")):
            fix = "headers are found through #include: list only the kernel's .cu file"
        elif (ctx.project_dir / f"{stem}.cu").is_file():
            fix = f"did you mean {show_value(stem + '.cu')}?"
        else:
            fix = "a dispatch kernel is a CUDA source: give the file the .cu suffix"
        raise Invalid(f"{shown} is not a .cu file; expected a .cu path {where}", fix)
    full = ctx.project_dir / normal
    if full.is_dir():
        raise Invalid(
            f"{shown} is a directory; expected a .cu path {where}", "name the kernel file itself"
        )
    if not full.is_file():
        close = difflib.get_close_matches(normal, ctx.cu_files(), n=1, cutoff=0.6)
        fix = (
            f"did you mean {show_value(close[0])}?"
            if close
            else f"check the path: it is relative to {ctx.project_dir}"
        )
        raise Invalid(f"{shown} does not exist in {ctx.project_dir}", fix)
    try:
        real = full.resolve(strict=True)
    except RuntimeError as exc:  # a symbolic link loop (Python < 3.13)
        raise Invalid(
            f"{shown} cannot be checked: {exc}", "remove the symbolic link loop"
        ) from None
    try:
        real.relative_to(ctx.project_dir)
    except ValueError:
        raise Invalid(
            f"{shown} is a symbolic link (or lies under one) that resolves outside the project "
            f"directory, to {show_value(str(real))}; expected a .cu path {where}",
            "copy the file into the project: an sdist ships the link itself, which points "
            "nowhere on another machine, and the build would compile a file from outside "
            "the project",
        ) from None
    if bad := unsafe_path_chars(str(real)):
        raise Invalid(
            f"{shown} resolves to {show_value(str(real))}, whose directories contain {bad}, "
            "which CMake, make or nvcc would misread; expected a .cu path in a directory "
            "without them",
            "move the project to a directory whose path has none of these characters",
        )
    return normal


_ARCH_FORM = re.compile(r"(?:(?:sm|lto|compute)_)?([0-9]+)")
_ARCH_VARIANT = re.compile(r"(?:(?:sm|lto|compute)_)?([0-9]+)[a-z]")
_ARCH_CMAKE = re.compile(r"([0-9]+)-(?:real|virtual)")
_ARCH_CC = re.compile(r"([1-9]|1[0-9])\.([0-9])")
_ARCH_EXPECTED = f'an architecture >= {MIN_ARCHITECTURE} such as "80", "90" or 100'


def _check_architecture(value: str | int | float, ctx: Context) -> str:
    text = value if isinstance(value, str) else show_value(value)
    shown = show_value(value)
    number: int | None = None
    if isinstance(value, int):
        number = value
    elif m := _ARCH_FORM.fullmatch(text):
        digits = m.group(1).lstrip("0") or "0"
        # int() refuses over 4300 digits; anything over MAX_ARCHITECTURE is refused below.
        number = int(digits) if len(digits) <= 9 else MAX_ARCHITECTURE + 1
    elif m := _ARCH_CC.fullmatch(text):
        guess = f"{m.group(1)}{m.group(2)}"
        raise Invalid(
            f"{shown} looks like a compute capability; expected {_ARCH_EXPECTED}",
            f"did you mean {show_value(guess)}?",
        )
    elif isinstance(value, float) and value.is_integer() and 0 < value <= MAX_ARCHITECTURE:
        raise Invalid(
            f"{shown} is a float; expected {_ARCH_EXPECTED}",
            f"did you mean {show_value(str(int(value)))}?",
        )
    elif m := _ARCH_VARIANT.fullmatch(text):
        raise Invalid(
            f"{shown} is an architecture-specific variant, which LTO-IR dispatch kernels do not "
            f"support; expected {_ARCH_EXPECTED}",
            f"use {show_value(m.group(1))}: its LTO-IR links for that GPU and every newer one",
        )
    elif m := _ARCH_CMAKE.fullmatch(text):
        raise Invalid(
            f"{shown} is a CMake architecture; expected {_ARCH_EXPECTED} "
            "(dispatch kernels are always built as LTO-IR)",
            f"did you mean {show_value(m.group(1))}?",
        )
    elif text.strip() != text and _ARCH_FORM.fullmatch(text.strip()):
        raise Invalid(
            f"{shown} has surrounding spaces; expected {_ARCH_EXPECTED}",
            f"did you mean {show_value(text.strip())}?",
        )
    if number is None:
        raise Invalid(
            f"{shown} is not an architecture; expected {_ARCH_EXPECTED}",
            "write the number of the oldest GPU architecture to support, e.g. 80 for sm_80",
        )
    if number > MAX_ARCHITECTURE:
        raise Invalid(
            f"{shown} is too large for a GPU architecture (at most {MAX_ARCHITECTURE}); "
            f"expected {_ARCH_EXPECTED}",
            "write the number of the oldest GPU architecture to support, e.g. 90 for sm_90",
        )
    if number < MIN_ARCHITECTURE:
        raise Invalid(
            f"{shown} is below {MIN_ARCHITECTURE}, the oldest supported architecture; "
            f"expected {_ARCH_EXPECTED}",
            f'use "{MIN_ARCHITECTURE}": the realtime dispatcher needs sm_{MIN_ARCHITECTURE} '
            "or newer, and its LTO-IR links for every newer GPU",
        )
    return str(number)


TARGET_NAME = Rule(
    types=(str,),
    expected="a CMake target or setuptools extension name",
    plural="CMake target or setuptools extension names",
    example="_core",
    schema={
        "type": "string",
        "pattern": r"^[A-Za-z0-9_.+-]+$",
        "not": {"enum": ["sources", "architectures"]},
    },
    check=_check_target,
)

_NO_UNSAFE = "[^" + re.escape(UNSAFE_PATH_CHARS) + r"\u0000-\u001f\u007f]"
_SOURCE_PATTERN = f"^(?!/){_NO_UNSAFE}*\\.cu$"

KERNEL_SOURCE = Rule(
    types=(str,),
    expected="a .cu path relative to the project directory",
    plural=".cu paths relative to the project directory",
    example='"src/my_dispatcher.cu"',
    schema={"type": "string", "pattern": _SOURCE_PATTERN},
    check=_check_source,
)

ARCHITECTURE = Rule(
    types=(str, int, float),
    expected=_ARCH_EXPECTED,
    plural=f'architectures >= {MIN_ARCHITECTURE} such as "80", "90" or 100',
    example='"80"',
    schema={
        "anyOf": [
            {"type": "integer", "minimum": MIN_ARCHITECTURE, "maximum": MAX_ARCHITECTURE},
            {
                "type": "string",
                "pattern": r"^(?:(?:sm|lto|compute)_)?0*(?:[89][0-9]|[1-9][0-9]{2,3})$",
            },
        ]
    },
    check=_check_architecture,
)


#: Device compilers of dispatch kernels and side-compiled handlers.
COMPILERS: tuple[str, ...] = ("auto", "nvcc", "nvrtc")


def _check_compiler(value: str, ctx: Context) -> str:
    normal = value.strip().lower()
    if normal in COMPILERS:
        return normal
    close = difflib.get_close_matches(normal, list(COMPILERS), n=1, cutoff=0.5)
    fix = f"did you mean {show_value(close[0])}?" if close else 'use "auto" (the default)'
    raise Invalid(
        f"{show_value(value)} is not a device compiler; expected one of "
        + ", ".join(show_value(c) for c in COMPILERS),
        fix,
    )


COMPILER = Rule(
    types=(str,),
    expected='"auto", "nvcc" or "nvrtc"',
    plural='"auto", "nvcc" or "nvrtc"',
    example='"auto"',
    schema={"type": "string", "enum": list(COMPILERS)},
    check=_check_compiler,
)


# --------------------------------------------------------------------------------------
# The settings
# --------------------------------------------------------------------------------------


def _one_target_per_source(
    kernels: dict[str, DispatchKernelSettings],
    raw: dict[str, Any],
    path: tuple[str | int, ...],
    report: _Reporter,
) -> None:
    """A kernel source belongs to one target: the same file under two targets is an error."""
    owner: dict[str, tuple[str, tuple[str | int, ...]]] = {}
    for target, kernel in kernels.items():
        base = (*path, target) if isinstance(raw[target], list) else (*path, target, "sources")
        for index, source in enumerate(kernel.sources):
            where = (*base, index)
            if source in owner:
                first_target, first_where = owner[source]
                report(
                    where,
                    f"{show_value(source)} is already the dispatch kernel of target "
                    f"{show_value(first_target)} ({format_key(first_where)}); expected each "
                    "kernel source under one target",
                    "keep it under one target (each binary links its own kernel), or copy it "
                    "to a second .cu file",
                )
            else:
                owner[source] = (target, where)


@dataclass(frozen=True)
class DispatchKernelSettings:
    """A custom dispatch kernel of one target: its sources and architectures.

    Short form ``_core = ["src/k.cu"]``; long form
    ``_core = { sources = ["src/k.cu"], architectures = ["80", "90"] }``.
    """

    sources: tuple[str, ...] = setting(
        help="Dispatch kernel sources (.cu), relative to the project directory and inside it "
        '(no symbolic link leading out), without ; [ ] $ ` " \\ | : or control characters; '
        "each is compiled on its own to LTO-IR and embedded in the target's binary.",
        item=KERNEL_SOURCE,
        min_items=1,
        unique=True,
        shorthand=True,
    )
    architectures: tuple[str, ...] = setting(
        help='GPU architectures to build LTO-IR for (numbers 80 to 9999; 80, "80", "sm_80" '
        'and "lto_80" are the same). LTO-IR for one architecture links for that GPU and every '
        "newer one.",
        default=DEFAULT_ARCHITECTURES,
        item=ARCHITECTURE,
        min_items=1,
        unique=True,
    )

    def source_paths(self, project_dir: Path) -> tuple[Path, ...]:
        """The sources as absolute, resolved paths (``project_dir`` is the pyproject's folder)."""
        return tuple((project_dir / source).resolve() for source in self.sources)


@dataclass(frozen=True)
class CudaqSettings:
    """Settings of skbuild-cudaq (``[tool.cudaq]`` of ``pyproject.toml``): custom CUDA-Q
    realtime dispatch kernels to build into the project's binaries."""

    dispatch_kernels: dict[str, DispatchKernelSettings] = setting(  # noqa: RUF009 (a Field)
        help="Custom dispatch kernels, by the CMake target (scikit-build-core) or extension "
        "(setuptools) whose binary embeds them and holds their handlers.",
        default_factory=dict,
        key=TARGET_NAME,
        key_name="<target>",
        key_example="_core",
        validate=_one_target_per_source,
    )
    compiler: str = setting(
        help='Device compiler of dispatch kernels and side-compiled handlers: "nvcc", '
        '"nvrtc" (NVRTC of the nvidia-cuda-nvrtc / nvidia-cuda-nvrtc-cu12 wheel in the build '
        'environment: no CUDA toolkit needed) or "auto" (nvcc where found, else NVRTC).',
        default="auto",
        item=COMPILER,
    )


# --------------------------------------------------------------------------------------
# The converter: walks the dataclasses, collects every problem
# --------------------------------------------------------------------------------------


class _Invalid:
    """Marks a value that could not be converted (its problems are already reported)."""


_INVALID = _Invalid()


def _array_of(rule: Rule) -> str:
    return f"an array of {rule.plural}"


def _placeholder(hint: Any) -> str:
    if hint is str:
        return '"..."'
    return "[...]" if typing.get_origin(hint) is tuple else "{...}"


def describe(hint: Any, meta: Meta | None = None) -> str:
    """What a value of type ``hint`` may be, in words (messages and docs)."""
    meta = meta or {}
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        specs = field_specs(typing.cast("type", hint))
        keys = ", ".join(f"{s.key} = {_placeholder(s.hint)}" for s in specs)
        table = f"a table {{ {keys} }}"
        short = next((s for s in specs if s.meta.get("shorthand")), None)
        if short is not None:
            return f"{describe(short.hint, short.meta)} or {table}"
        return table
    if origin is tuple:
        item = meta.get("item")
        return _array_of(item) if item else "an array"
    if origin is dict:
        return "a table"
    if hint is str:
        return meta["item"].expected if "item" in meta else "a string"
    return str(hint)  # pragma: no cover - no other field types


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
            fix = f"write a table: [{format_key(path)}]"
            if short is not None and "item" in short.meta:
                rule = short.meta["item"]
                try:
                    rule.apply(raw, self.ctx)
                except Invalid:
                    fix = f"write it like [{rule.example}]"
                else:
                    fix = f"did you mean [{show_value(raw)}]?"
            self.report(
                path, f"{show_value(raw)} is {_toml_type(raw)}; expected {describe(cls)}", fix
            )
            return _INVALID
        by_key = {s.key: s for s in specs}
        meant = set()  # known keys an unknown key was taken for ("did you mean")
        for key in raw:
            if key not in by_key:
                meant.add(self.unknown_key((*path, key), key, list(by_key)))
        kwargs: dict[str, Any] = {}
        ok = True
        for spec in specs:
            if spec.key not in raw:
                if spec.required and spec.key in meant:
                    ok = False  # already reported as a misspelling of this key
                elif spec.required:
                    self.report(
                        path,
                        f"{show_value(raw)} lacks the required key {spec.key}; expected "
                        f"{describe(cls)}",
                        f"add {spec.key} = {_placeholder(spec.hint)}",
                    )
                    ok = False
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
                path, f"{show_value(raw)} is {_toml_type(raw)}; expected {_array_of(rule)}", fix
            )
            return _INVALID
        min_items = meta.get("min_items", 0)
        default = f" {show_value(list(meta['default']))}" if "default" in meta else ""
        if len(raw) < min_items:
            self.report(
                path,
                f"empty array {show_value(raw)}; expected {_array_of(rule)} (at least {min_items})",
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
                    f"{_array_of(rule)}, each once",
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
            entry = show_value(raw) if isinstance(raw, list) else _placeholder(value_hint)
            self.report(
                path,
                f"{show_value(raw)} is {_toml_type(raw)}; expected a table of "
                f"{key_name} = {describe(value_hint)}",
                f"key each entry by its {key_name.strip('<>')}: "
                f"[{format_key(path)}] {example} = {entry}",
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
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]
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


def load_settings(pyproject: Path) -> CudaqSettings:
    """Read ``pyproject`` and return its validated ``[tool.cudaq]`` settings.

    A missing ``[tool.cudaq]`` gives the defaults (no dispatch kernels). Raises
    :class:`SettingsError` (every problem at once) or :class:`CudaqError` when the
    file cannot be read or parsed (:func:`read_pyproject`).
    """
    pyproject = Path(pyproject)
    data = read_pyproject(pyproject)
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        problem = SettingsProblem(
            "tool", f"{show_value(tool)} is {_toml_type(tool)}; expected a table", "use [tool]"
        )
        raise SettingsError([problem], source=str(pyproject))
    return parse_settings(tool.get("cudaq", {}), pyproject.parent, source=str(pyproject))


def settings_warnings(pyproject: Path) -> list[str]:
    """Things in a valid ``[tool.cudaq]`` that are almost certainly mistakes, in words.

    An empty ``[tool.cudaq.dispatch-kernels]`` is valid (it builds, embedding no kernel) but
    a project declares the table to get a kernel. Never raises: a file that cannot be read
    is :func:`load_settings`' to report.
    """
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]
    try:
        with Path(pyproject).open("rb") as f:
            data = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError):
        return []
    tool = data.get("tool")
    cudaq = tool.get("cudaq") if isinstance(tool, dict) else None
    kernels = cudaq.get("dispatch-kernels") if isinstance(cudaq, dict) else None
    if isinstance(kernels, dict) and not kernels:
        return [
            "[tool.cudaq.dispatch-kernels] is empty: no dispatch kernel is built or embedded. "
            'Add one entry per binary, e.g. _core = ["src/my_dispatcher.cu"] (the CMake target '
            "or setuptools extension whose binary holds the handlers), or remove the table."
        ]
    return []
