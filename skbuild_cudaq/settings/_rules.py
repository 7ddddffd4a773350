"""The rules of the ``[tool.cudaq]`` values: target names, kernel sources, architectures, compiler.

Each :class:`~._fields.Rule` checks one scalar, returns its normal form or raises
:class:`~._fields.Invalid` with what is wrong and how to fix it. The architecture grammar
comes from :mod:`skbuild_cudaq._architectures` (shared with the CMake package).
"""

from __future__ import annotations

import difflib
import errno
import os
import posixpath
import re
import stat
from pathlib import Path

from skbuild_cudaq._architectures import (
    ARCHITECTURE_FORM,
    MAX_ARCHITECTURE,
    MIN_ARCHITECTURE,
    PREFIXES,
    VARIANT_FORM,
)
from skbuild_cudaq.settings._fields import Context, Invalid, Rule
from skbuild_cudaq.settings._toml_text import show_value

#: The keys of a dispatch kernel's long form (``DispatchKernelSettings``: the settings tests
#: keep the two equal), which are no target names.
LONG_FORM_KEYS: tuple[str, ...] = ("sources", "architectures")
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
    if name in LONG_FORM_KEYS:
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


_SPECIAL_FILES = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _special_file(path: Path) -> str | None:
    """What ``path`` is when it exists but is neither a regular file nor a directory (links
    followed), else None. Never opens it (opening a FIFO would wait for a writer)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return None
    for test, kind in _SPECIAL_FILES:
        if test(mode):
            return kind
    return None if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else "a special file"


def _check_source_file(path: str, normal: str, ctx: Context) -> str:
    """The checks of :func:`_check_source` that look at the file system (may raise OSError)."""
    where = "relative to the project directory"
    shown = show_value(path)
    if not normal.endswith((".cu", ".py")):  # .py: handlers in Python (skbuild_cudaq.numba)
        stem = posixpath.splitext(normal)[0]
        if normal.endswith((".cuh", ".h", ".hpp")):
            fix = "headers are found through #include: list only the kernel's .cu file"
        elif (ctx.project_dir / f"{stem}.cu").is_file():
            fix = f"did you mean {show_value(stem + '.cu')}?"
        else:
            fix = (
                "a dispatch kernel is a CUDA source: give the file the .cu suffix (or list a "
                ".py file of Python handlers)"
            )
        raise Invalid(f"{shown} is not a .cu file; expected a .cu path {where}", fix)
    full = ctx.project_dir / normal
    if full.is_dir():
        raise Invalid(
            f"{shown} is a directory; expected a .cu path {where}", "name the kernel file itself"
        )
    if not full.is_file():
        kind = _special_file(full)
        if kind is not None:  # it exists: a FIFO, a device (a link to /dev/zero), a socket
            raise Invalid(
                f"{shown} is {kind}, not a regular file; expected a .cu path {where}",
                "a kernel source must be a regular file (nvcc would wait on a pipe, or read a "
                "device for ever): put the kernel's .cu file itself there",
            )
        if full.is_symlink():
            raise Invalid(
                f"{shown} is a symbolic link to a file that does not exist "
                f"({show_value(str(full.readlink()))}); expected a .cu path {where}",
                "point the link at the kernel's .cu file, or list that file itself",
            )
        others = [f for f in ctx.cu_files() if f != normal]
        close = difflib.get_close_matches(normal, others, n=1, cutoff=0.6)
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


_PREFIX = f"(?:(?:{'|'.join(PREFIXES)})_)?"
_ARCH_FORM = ARCHITECTURE_FORM
_ARCH_VARIANT = VARIANT_FORM
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
        "not": {"enum": list(LONG_FORM_KEYS)},
    },
    check=_check_target,
)

_NO_UNSAFE = "[^" + re.escape(UNSAFE_PATH_CHARS) + r"\u0000-\u001f\u007f]"
_SOURCE_PATTERN = f"^(?!/){_NO_UNSAFE}*\\.(cu|py)$"

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
                "pattern": f"^{_PREFIX}0*(?:[89][0-9]|[1-9][0-9]{{2,3}})$",
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
