"""NVRTC: a device compiler that comes from pip (never imports ``cuda.*``).

Dispatch kernels, side-compiled handlers and skbuild-cudaq's own device run
time are device-only code, so NVRTC (``libnvrtc`` of the ``nvidia-cuda-nvrtc``
wheel for CUDA 13, ``nvidia-cuda-nvrtc-cu12`` for CUDA 12) can compile them to
LTO-IR where no CUDA toolkit (no nvcc) is installed. It is driven through
``ctypes``: build-time code never imports ``cuda.*``.

Each source is compiled once per architecture with
``-dlto -rdc=true -arch=compute_XX -default-device -std=... -I... -D...`` and
the LTO-IR is wrapped in a fatbin container exactly as nvcc writes one
(:func:`skbuild_cudaq.build._container.make_ltoir_container`), so the output takes the
same embed, reader and link path as nvcc's ``-fatbin`` output.

NVRTC has no dependency output (no ``-MD``): :func:`include_dependencies`
follows ``#include`` lines through the source's directory and the include
directories and lists every header file found (an over-approximation: a header
inside ``#if 0`` counts too, which only costs a rebuild).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from skbuild_cudaq import _log
from skbuild_cudaq._cuda_majors import cuda_major, cuda_majors, default_major
from skbuild_cudaq.build._container import make_ltoir_container
from skbuild_cudaq.errors import CompileError, ToolchainError
from skbuild_cudaq.fatbin import ltoir_code_version

__all__ = [
    "NVRTC_ENV",
    "NVRTC_MISSING_MESSAGE",
    "Nvrtc",
    "compile_file",
    "compile_ltoir",
    "compile_ptx",
    "find_nvrtc",
    "include_dependencies",
    "installed_nvrtc",
    "nvrtc_missing_message",
    "nvrtc_options",
    "wheel_include_dirs",
]

#: Environment variable naming a libnvrtc to use (a file), ahead of the wheels.
NVRTC_ENV = "SKBUILD_CUDAQ_NVRTC"

NVRTC_MISSING_MESSAGE = (
    "NVRTC not found: with no nvcc, skbuild-cudaq compiles device code with NVRTC from the "
    "build environment. Add "
    + " or ".join(f"`{m.nvrtc_wheel}` (CUDA {m.major})" for m in cuda_majors())
    + " to build-system.requires (or pip install it), or install a CUDA toolkit's nvcc."
)

_NVRTC_SUCCESS = 0


def nvrtc_missing_message(env: Mapping[str, str] | None = None) -> str:
    """What to install when no NVRTC is found: :data:`NVRTC_MISSING_MESSAGE` where no nvcc is
    found either; where one is, NVRTC was asked for (the ``nvrtc`` command, ``compiler =
    "nvrtc"``): the ``[nvrtc]`` extra, or nvcc."""
    from skbuild_cudaq.build._toolchain import find_nvcc

    try:
        nvcc = find_nvcc(dict(os.environ if env is None else env))
    except ToolchainError:
        return NVRTC_MISSING_MESSAGE
    return (
        f'NVRTC not found: NVRTC was asked for (the nvrtc command, compiler = "nvrtc" or '
        f"SKBUILD_CUDAQ_COMPILER=nvrtc) and it comes from pip, not with nvcc ({nvcc}): install "
        'the [nvrtc] extra (pip install "skbuild-cudaq[nvrtc]": NVRTC '
        f"{default_major()} and its headers)"
        + "".join(
            f" or {m.nvrtc_wheel} for CUDA {m.major}"
            for m in cuda_majors()
            if m.major != default_major()
        )
        + ", in a build's build-system.requires; or compile "
        'with nvcc (compiler = "nvcc" or "auto")'
    )


@dataclass(frozen=True)
class Nvrtc:
    """One NVRTC library file and its version."""

    library: Path
    version: tuple[int, int]

    @property
    def major(self) -> int:
        return self.version[0]

    def describe(self) -> str:
        return f"NVRTC {self.version[0]}.{self.version[1]} ({self.library})"


def _load(library: Path) -> ctypes.CDLL:
    try:
        # libnvrtc dlopens libnvrtc-builtins.so.<major>.<minor> by name, and some releases
        # (13.0) do not look next to themselves: load it first from the same directory.
        for builtins in sorted(library.resolve().parent.glob("libnvrtc-builtins.so.*")):
            if ".alt." not in builtins.name:
                ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)
        return ctypes.CDLL(str(library))
    except OSError as exc:
        msg = f"cannot load NVRTC library {library}: {exc}. {nvrtc_missing_message()}"
        raise ToolchainError(msg) from None


def _version(library: Path) -> tuple[int, int]:
    lib = _load(library)
    major, minor = ctypes.c_int(), ctypes.c_int()
    if lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)) != _NVRTC_SUCCESS:
        msg = f"{library} is not a working NVRTC library (nvrtcVersion failed)"
        raise ToolchainError(msg)
    return major.value, minor.value


def installed_nvrtc(paths: Iterable[str] | None = None) -> list[Path]:
    """The libnvrtc files of NVRTC wheels along ``paths`` (default ``sys.path``), newest major
    first, without loading them."""
    found: list[tuple[int, Path]] = []
    for entry in sys.path if paths is None else paths:
        site = Path(entry or ".")
        for major, rel in ((m.major, rel) for m in cuda_majors() for rel in m.nvrtc_libraries):
            lib = site / rel
            if lib.is_file() and all(lib.resolve() != p.resolve() for _, p in found):
                found.append((major, lib))
    found.sort(key=lambda item: -item[0])
    return [lib for _, lib in found]


def wheel_include_dirs(major: int, paths: Iterable[str] | None = None) -> list[Path]:
    """The CUDA runtime / CCCL header directories of CUDA ``major`` wheels along ``paths``
    (default ``sys.path``): its runtime and CCCL wheels' (``cuda-majors.txt``)."""
    facts = cuda_major(major)
    found: list[Path] = []
    for entry in sys.path if paths is None else paths:
        for rel in facts.include_dirs if facts else ():
            candidate = Path(entry or ".") / rel
            if candidate.is_dir() and candidate not in found:
                found.append(candidate)
    return found


def find_nvrtc(major: int | None = None, env: Mapping[str, str] | None = None) -> Nvrtc:
    """The NVRTC to use: ``$SKBUILD_CUDAQ_NVRTC``, else the newest NVRTC wheel of this
    environment (of CUDA ``major`` when given), or :class:`ToolchainError` saying what to
    install."""
    env = os.environ if env is None else env
    override = env.get(NVRTC_ENV)
    candidates = [Path(override)] if override else installed_nvrtc()
    if override and not Path(override).is_file():
        msg = f"{NVRTC_ENV}={override!r} is not a file. {nvrtc_missing_message(env)}"
        raise ToolchainError(msg)
    seen: list[str] = []
    for library in candidates:
        version = _version(library)
        if major is None or version[0] == major:
            return Nvrtc(library.resolve(), version)
        seen.append(f"{version[0]}.{version[1]} ({library})")
    if major is not None:
        have = f" (found NVRTC {', '.join(seen)})" if seen else ""
        facts = cuda_major(major)
        package = f"{facts.nvrtc_wheel}=={major}.*" if facts else f"NVRTC of CUDA {major}"
        msg = (
            f"NVRTC of CUDA {major} not found{have}: add `{package}` to build-system.requires "
            "(or pip install it)"
        )
        raise ToolchainError(msg)
    raise ToolchainError(nvrtc_missing_message(env))


def nvrtc_options(
    arch: int | str,
    *,
    include_dirs: Sequence[str | os.PathLike[str]] = (),
    defines: Sequence[str] = (),
    std: str | None = None,
) -> list[str]:
    """The NVRTC options for LTO-IR of ``arch`` (e.g. 80), the same include directories,
    definitions and C++ standard nvcc gets."""
    options = ["-dlto", "-rdc=true", f"-arch=compute_{arch}", "-default-device"]
    options.append(f"-std={std or 'c++17'}")
    options += [f"-I{d}" for d in include_dirs]
    options += [f"-D{d}" for d in defines]
    return options


def _program_log(lib: ctypes.CDLL, prog: ctypes.c_void_p) -> str:
    size = ctypes.c_size_t()
    if lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)) != _NVRTC_SUCCESS or size.value <= 1:
        return ""
    buf = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, buf)
    return buf.value.decode(errors="replace").strip()


def _error_string(lib: ctypes.CDLL, code: int) -> str:
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p
    text = lib.nvrtcGetErrorString(code)
    return text.decode() if text else f"NVRTC error {code}"


def compile_ltoir(nvrtc: Nvrtc, source: Path, options: Sequence[str]) -> bytes:
    """Compile the device-only CUDA C++ file ``source`` with ``options``: raw LTO-IR.

    Raises :class:`~skbuild_cudaq.errors.CompileError` with NVRTC's log.
    """
    return _compile(nvrtc, source, options, "LTOIR")


def compile_ptx(nvrtc: Nvrtc, source: Path, options: Sequence[str]) -> bytes:
    """The PTX of ``source`` (``options`` without ``-dlto``): what names its kernels and
    exported handlers (``.visible .entry`` / ``cudaq_handler_*``), as ``nvcc -ptx`` would."""
    return _compile(nvrtc, source, [o for o in options if o != "-dlto"], "PTX")


def _compile(nvrtc: Nvrtc, source: Path, options: Sequence[str], what: str) -> bytes:
    try:
        text = source.read_bytes()
    except OSError as exc:
        msg = f"cannot read {source}: {exc.strerror or exc}"
        raise CompileError(msg) from None
    lib = _load(nvrtc.library)
    prog = ctypes.c_void_p()
    code = lib.nvrtcCreateProgram(ctypes.byref(prog), text, str(source).encode(), 0, None, None)
    if code != _NVRTC_SUCCESS:
        msg = f"NVRTC cannot create a program for {source}: {_error_string(lib, code)}"
        raise CompileError(msg)
    try:
        encoded = [o.encode() for o in options]
        argv = (ctypes.c_char_p * len(encoded))(*encoded)
        code = lib.nvrtcCompileProgram(prog, len(encoded), argv)
        log = _program_log(lib, prog)
        if code != _NVRTC_SUCCESS:
            msg = (
                f"{nvrtc.describe()} failed to compile {source} "
                f"({_error_string(lib, code)}; options {' '.join(options)}):\n{log}"
            )
            name = f"NVRTC {nvrtc.version[0]}.{nvrtc.version[1]}"
            raise CompileError(msg.rstrip(), log=log, compiler=name)
        size = ctypes.c_size_t()
        get_size = getattr(lib, f"nvrtcGet{what}Size")
        if get_size(prog, ctypes.byref(size)) != _NVRTC_SUCCESS or not size.value:
            msg = f"{nvrtc.describe()} gave no {what} for {source} (options {' '.join(options)})"
            raise CompileError(msg)
        buf = ctypes.create_string_buffer(size.value)
        getattr(lib, f"nvrtcGet{what}")(prog, buf)
        return buf.raw[: size.value]
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.MULTILINE)


def include_dependencies(
    source: Path, include_dirs: Sequence[str | os.PathLike[str]]
) -> list[Path]:
    """Every header file ``source`` includes, directly or not, that exists on disk.

    ``"x.h"`` is looked up next to the including file first, then (like ``<x.h>``)
    in ``include_dirs`` in order; names found nowhere (NVRTC's built-in headers)
    are skipped.
    """
    dirs = [Path(d) for d in include_dirs]
    seen: dict[Path, None] = {}
    todo = [source.resolve()]
    while todo:
        current = todo.pop()
        try:
            text = current.read_bytes()
        except OSError:
            continue
        for quote, name in _INCLUDE.findall(text):
            rel = name.decode(errors="replace").strip()
            places = ([current.parent] if quote == b'"' else []) + dirs
            for place in places:
                candidate = (place / rel).resolve()
                if candidate.is_file():
                    if candidate not in seen and candidate != source.resolve():
                        seen[candidate] = None
                        todo.append(candidate)
                    break
    return list(seen)


def _make_escape(path: str) -> str:
    return path.replace("\\", "\\\\").replace(" ", "\\ ").replace("#", "\\#").replace("$", "$$")


def compile_file(
    source: Path,
    output: Path,
    *,
    architectures: Sequence[int | str],
    include_dirs: Sequence[str | os.PathLike[str]] = (),
    defines: Sequence[str] = (),
    std: str | None = None,
    depfile: Path | None = None,
    dep_target: str | None = None,
    ptx: Path | None = None,
    nvrtc: Nvrtc | None = None,
) -> Nvrtc:
    """Compile ``source`` to an LTO-IR fatbin at ``output`` (one entry per architecture).

    Writes ``depfile`` (make syntax) and ``ptx`` (the PTX of the first architecture, for
    the device-code records) when given. Returns the NVRTC used.
    """
    nvrtc = nvrtc or find_nvrtc()
    search = [*include_dirs, *wheel_include_dirs(nvrtc.major)]
    entries = []
    for arch in architectures:
        options = nvrtc_options(arch, include_dirs=search, defines=defines, std=std)
        ltoir = compile_ltoir(nvrtc, source, options)
        ltoir_code_version(ltoir)  # a CompileError-worthy surprise shows here, not at link time
        entries.append((int(str(arch).rstrip("af")), ltoir))
    if ptx is not None:
        first = nvrtc_options(architectures[0], include_dirs=search, defines=defines, std=std)
        ptx.parent.mkdir(parents=True, exist_ok=True)
        ptx.write_bytes(compile_ptx(nvrtc, source, first).rstrip(b"\0"))
    data = make_ltoir_container(entries)
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(output.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(output)
    if depfile is not None:
        deps = [source.resolve(), *include_dependencies(source, include_dirs)]
        target = dep_target or str(output)
        lines = [_make_escape(target) + ":"]
        lines += [" \\\n  " + _make_escape(str(d)) for d in deps]
        depfile.write_text("".join(lines) + "\n", encoding="utf-8")
    return nvrtc


# ---------------------------------------------------------------------------------------------
# The compile command's arguments (``python -m skbuild_cudaq nvrtc``, and the CMake package's
# steps runner, which compiles in its own process)
# ---------------------------------------------------------------------------------------------
def add_compile_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of one NVRTC compile, on ``p``."""
    p.add_argument("source", nargs="*", help="the .cu file (empty arguments are ignored)")
    p.add_argument("-o", "--output", type=Path, help="fatbin file to write")
    p.add_argument("--arch", action="append", default=[], help="architecture, e.g. 80 (repeatable)")
    p.add_argument("-I", dest="include", action="append", default=[], help="include directory")
    p.add_argument("-D", dest="define", action="append", default=[], help="definition NAME[=VALUE]")
    p.add_argument(
        "-std", "--std", dest="std", default="", help="C++ standard, e.g. c++17 (the default)"
    )
    p.add_argument("--depfile", type=Path, help="write a make-style depfile here")
    p.add_argument("--dep-target", help="the depfile's target (default: the output path)")
    p.add_argument("--ptx", type=Path, help="also write the PTX of the first architecture here")
    p.add_argument("--cuda-major", type=int, help="use NVRTC of this CUDA major (12 or 13)")
    p.add_argument("--find", action="store_true", help="print '<major>.<minor>;<library>' and exit")


def compile_args(args: argparse.Namespace) -> Nvrtc:
    """Compile what the parsed ``nvrtc`` arguments say; the NVRTC used.

    Raises :class:`~skbuild_cudaq.errors.CompileError` (NVRTC's log in ``log``) or
    :class:`~skbuild_cudaq.errors.ToolchainError`; the CMake package's steps runner
    (:mod:`skbuild_cudaq.build._device_compile`) calls it in its own process
    (:func:`parse_compile_args`).
    """
    nvrtc = find_nvrtc(args.cuda_major)
    sources = [s for s in args.source if s]
    if len(sources) != 1 or args.output is None or not args.arch:
        msg = "nvrtc: give exactly one source, -o OUTPUT and at least one --arch"
        raise CompileError(msg)
    with _log.step(f"{nvrtc.describe()}: {sources[0]}"):
        compile_file(
            Path(sources[0]),
            args.output,
            architectures=[a for a in args.arch if a],
            include_dirs=[d for d in args.include if d],
            defines=[d for d in args.define if d],
            std=args.std.removeprefix("-std=") or None,
            depfile=args.depfile,
            dep_target=args.dep_target,
            ptx=args.ptx,
            nvrtc=nvrtc,
        )
    return nvrtc


def parse_compile_args(argv: Sequence[str]) -> argparse.Namespace:
    """``argv`` of ``python -m skbuild_cudaq nvrtc`` (the command's name left out), parsed."""
    parser = argparse.ArgumentParser(prog="skbuild-cudaq nvrtc")
    add_compile_arguments(parser)
    return parser.parse_args(list(argv))
