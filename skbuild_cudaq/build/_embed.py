"""The shared core of embedding dispatch kernels: nvcc commands, the embed C source, staleness.

(Over 400 lines: the setuptools side's whole compile-and-embed recipe, kept in one place.)

Everything here is plain Python with no build-system import, so any front door
(the setuptools command today; anything that builds outside CMake tomorrow)
produces exactly what ``cudaq_realtime_add_dispatch_kernel`` produces in CMake:

* each kernel compiled **on its own** to an LTO-IR fatbin:
  ``nvcc -fatbin -rdc=true -gencode arch=compute_XX,code=lto_XX`` with the
  extension's C++ standard, macros and include directories, plus
  :func:`skbuild_cudaq.include_dir`, in the source's directory -- the command lines of
  ``cmake/nvcc-recipe.txt``, which the CMake package reads too (:func:`nvcc_command`);
* a generated **C** file whose top-level ``__asm__`` ``.incbin``'s every fatbin
  into ``__nv_relfatbin`` (flags ``"aR"``: allocated and retained against
  ``--gc-sections``; ``.balign 8``; absolute paths, because under host ``-flto``
  the asm is assembled at link time in another directory). C, never a raw
  ``.s``: a ``.s`` without ``.note.GNU-stack`` marks the module as needing an
  executable stack, which glibc >= 2.41 refuses to load;
* for handler sources compiled by nvcc with ``-c -rdc=true`` into the extension,
  the ``__cudaRegisterLinkedBinary_<module id>`` functions that a device link
  would define, as no-ops (see :func:`linked_binary_stubs`).

Staleness is decided from make-style depfiles written by ``nvcc -MD -MF`` plus a
record of the command line, so an unchanged tree recompiles nothing.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skbuild_cudaq import _log
from skbuild_cudaq._paths import cmake_dir, include_dir
from skbuild_cudaq.errors import KernelCompileError, ToolchainError

__all__ = [
    "DEFAULT_CXX_STANDARD",
    "RECIPE_FILE",
    "SECTION",
    "CompileFlags",
    "Macro",
    "asm_incbin",
    "cudart_static_library",
    "embed_c_source",
    "fatbin_command",
    "gencode_flags",
    "host_compiler_flags",
    "is_stale",
    "linked_binary_module_ids",
    "linked_binary_stubs",
    "nvcc_command",
    "preprocessor_from_args",
    "ptx_command",
    "rdc_object_command",
    "read_depfile",
    "run_compile",
    "std_from_args",
    "write_if_changed",
]

#: The section nvcc itself uses for relocatable device code and that the run time reads.
SECTION = "__nv_relfatbin"
#: C++ standard of kernels when the extension does not choose one (like the CMake path).
DEFAULT_CXX_STANDARD = "c++17"
_REGISTER_PREFIX = "__cudaRegisterLinkedBinary_"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_STD = re.compile(r"(?:-std=|/std:)(?:c|gnu)\+\+(\w+)\Z")


@dataclass(frozen=True)
class Macro:
    """A preprocessor macro option: ``-Dname``, ``-Dname=value`` or (``undefine``) ``-Uname``."""

    name: str
    value: str | None = None
    undefine: bool = False

    def option(self) -> str:
        if self.undefine:
            return f"-U{self.name}"
        return f"-D{self.name}" if self.value is None else f"-D{self.name}={self.value}"


@dataclass(frozen=True)
class CompileFlags:
    """Preprocessor and language flags a target gives its sources, forwarded to nvcc.

    ``macros`` keep the order the host compiler sees them in (a later ``-D`` or
    ``-U`` of the same name wins).
    """

    include_dirs: tuple[str, ...] = ()
    macros: tuple[Macro, ...] = ()
    std: str = DEFAULT_CXX_STANDARD
    extra: tuple[str, ...] = field(default=())  #: further nvcc options, passed last

    def nvcc_options(self) -> list[str]:
        """``-std``, ``-D``/``-U`` (in order), ``-I`` (target's, then skbuild-cudaq's headers)."""
        opts = [f"-std={self.std}"]
        opts += [m.option() for m in self.macros]
        opts += [f"-I{d}" for d in self.include_dirs]
        opts.append(f"-I{include_dir()}")
        opts += list(self.extra)
        return opts


def std_from_args(args: Iterable[str], default: str = DEFAULT_CXX_STANDARD) -> str:
    """The C++ standard chosen by compiler arguments (last one wins), as nvcc spells it.

    ``-std=c++20`` and ``-std=gnu++20`` (and MSVC's ``/std:c++20``) give
    ``c++20``; C standards (``-std=c11``) do not apply to CUDA sources and are
    ignored.
    """
    found = default
    for arg in args:
        match = _STD.match(arg)
        if match:
            found = f"c++{match.group(1)}"
    return found


def preprocessor_from_args(args: Sequence[str]) -> tuple[list[Macro], list[str]]:
    """``-D``/``-U`` (in order) and ``-I`` options in compiler arguments (``-DX`` or ``-D X``)."""
    macros: list[Macro] = []
    includes: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        flag, value = arg[:2], arg[2:]
        if flag in {"-D", "-U", "-I"}:
            if not value and i + 1 < len(args):
                i += 1
                value = args[i]
            if flag == "-D":
                name, eq, val = value.partition("=")
                macros.append(Macro(name, val if eq else None))
            elif flag == "-U":
                macros.append(Macro(value, undefine=True))
            else:
                includes.append(value)
        i += 1
    return macros, includes


def gencode_flags(architectures: Sequence[str]) -> list[str]:
    """``-gencode arch=compute_XX,code=lto_XX`` for each architecture (LTO-IR only)."""
    flags: list[str] = []
    for arch in architectures:
        flags += ["-gencode", f"arch=compute_{arch},code=lto_{arch}"]
    return flags


#: The recipe file, in the CMake package directory (read by the CMake package too).
RECIPE_FILE = "nvcc-recipe.txt"
_recipes: dict[str, list[str]] = {}


def _recipe(name: str) -> list[str]:
    """The argument template of recipe ``name`` of ``nvcc-recipe.txt``."""
    if not _recipes:
        text = (cmake_dir() / RECIPE_FILE).read_text(encoding="utf-8")
        for line in text.splitlines():
            words = line.split("#", 1)[0].split()
            if words:
                _recipes[words[0]] = words[1:]
    return _recipes[name]


def host_compiler_flags(env: Mapping[str, str] | None = None) -> list[str]:
    """``--compiler-bindir`` of the ``CUDAHOSTCXX`` host compiler (CMake's
    ``CMAKE_CUDA_HOST_COMPILER`` comes from it), else nothing: nvcc's default."""
    host = (os.environ if env is None else env).get("CUDAHOSTCXX", "")
    return [f"--compiler-bindir={host}"] if host else []


def nvcc_command(
    recipe: str,
    nvcc: Path | str,
    source: Path,
    output: Path,
    *,
    architectures: Sequence[str],
    flags: CompileFlags,
    depfile: Path | None = None,
) -> list[str]:
    """The nvcc command of ``recipe`` (``fatbin``, ``ptx``, ``object``) of ``nvcc-recipe.txt``.

    Paths are made absolute: the command runs in the source's directory (:func:`run_compile`
    with ``cwd=source.parent``), as the CMake package runs it.
    """
    output = Path(output).absolute()
    cmd = [str(nvcc)]
    for word in _recipe(recipe):
        if word == "<gencode>":
            cmd += gencode_flags(architectures)
        elif word == "<host-compiler>":
            cmd += host_compiler_flags()
        elif word == "<flags>":
            cmd += flags.nvcc_options()
        elif word == "<depfile>":
            if depfile is not None:
                target = str(output).replace(" ", "\\ ")
                cmd += ["-MD", "-MF", str(Path(depfile).absolute()), "-MT", target]
        elif word == "<output>":
            cmd.append(str(output))
        elif word == "<source>":
            cmd.append(str(Path(source).absolute()))
        else:
            cmd.append(word.replace("<arch>", architectures[0]))
    return cmd


#: nvcc command compiling one dispatch kernel on its own to an LTO-IR fatbin
#: (``nvcc_command("fatbin", ...)``).
fatbin_command = functools.partial(nvcc_command, "fatbin")
#: nvcc command compiling a handler source of an extension to a position-independent object
#: (``nvcc_command("object", ...)``): with ``-rdc=true`` and an LTO architecture nvcc puts
#: the handlers' LTO-IR in the object's ``__nv_relfatbin`` section, where the run time finds it.
rdc_object_command = functools.partial(nvcc_command, "object")


def ptx_command(
    nvcc: Path | str, source: Path, output: Path, *, architecture: str, **options: Any
) -> list[str]:
    """nvcc command compiling a side-compiled source to PTX, only to name what it defines.

    Same flags as :data:`fatbin_command` (``options``: ``flags``, ``depfile``); the PTX's
    ``.visible .entry`` and ``cudaq_handler_*`` lines feed the build record
    (:mod:`skbuild_cudaq.build._device_info`).
    """
    return nvcc_command("ptx", nvcc, source, output, architectures=(architecture,), **options)


# ---------------------------------------------------------------------------
# The generated embed source
# ---------------------------------------------------------------------------
def _gas_string(text: str) -> str:
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        msg = f"cannot .incbin a path with control characters: {text!r}"
        raise KernelCompileError(msg)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _c_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def asm_incbin(fatbin: Path) -> str:
    """One top-level C statement placing ``fatbin`` (made absolute) in ``__nv_relfatbin``."""
    path = Path(fatbin).resolve()
    body = f'.section {SECTION},"aR"\n.balign 8\n.incbin {_gas_string(str(path))}\n.previous'
    return f"__asm__({_c_string(body)});"


def linked_binary_stubs(module_ids: Iterable[str]) -> str:
    """C definitions of ``__cudaRegisterLinkedBinary_<id>`` that do nothing.

    Objects compiled with ``nvcc -c -rdc=true`` call these from a static
    constructor; normally the device-link object (``nvcc -dlink``) defines them
    to register the linked device code with the CUDA runtime. With LTO-IR the
    device link needs ``-dlto`` and libnvvm under ``<nvcc>/../nvvm/lib64``, which
    the toolkits built from wheels lack, and it would produce code nobody uses:
    skbuild-cudaq's run time never loads this code through cudart, it reads the
    LTO-IR from ``__nv_relfatbin`` and links it with nvJitLink. So the stubs
    stand in for the device link and leave the registration callback uncalled;
    the module imports with or without a GPU.
    """
    lines: list[str] = []
    for module_id in sorted(set(module_ids)):
        if not _IDENTIFIER.match(_REGISTER_PREFIX + module_id):
            msg = f"unexpected CUDA module id {module_id!r} in an nvcc object"
            raise KernelCompileError(msg)
        lines.append(
            f'__attribute__((visibility("hidden")))\n'
            f"void {_REGISTER_PREFIX}{module_id}(void (*callback)(void **), void *fatbin,\n"
            f"    void *module_id, void (*dummy)(void *));\n"
            f"void {_REGISTER_PREFIX}{module_id}(void (*callback)(void **), void *fatbin,\n"
            f"    void *module_id, void (*dummy)(void *)) {{\n"
            f"  (void)callback; (void)fatbin; (void)module_id; (void)dummy;\n"
            f"}}"
        )
    return "\n".join(lines)


def embed_c_source(
    fatbins: Sequence[Path], module_ids: Iterable[str] = (), records: Sequence[Path] = ()
) -> str:
    """The generated C file: one ``.incbin`` per kernel fatbin, the device-link stubs, then
    one ``.incbin`` per build record (JSON naming a container's kernels and handlers)."""
    parts = [
        "/* Generated by skbuild-cudaq: do not edit.\n"
        " * Places each dispatch kernel's LTO-IR fatbin in __nv_relfatbin (flags aR:\n"
        " * allocated, retained against --gc-sections), next to the fatbins nvcc emits\n"
        " * for -rdc handlers. The run time reads them and links with nvJitLink. */",
    ]
    parts += [asm_incbin(f) for f in fatbins]
    stubs = linked_binary_stubs(module_ids)
    if stubs:
        parts.append(
            "/* Stand-ins for the device link of the -rdc handler objects (see\n"
            " * skbuild_cudaq.build._embed.linked_binary_stubs). */"
        )
        parts.append(stubs)
    if records:
        from skbuild_cudaq._records import asm_record

        parts.append(
            "/* Build records: what each container holds (skbuild_cudaq.build._device_info). */"
        )
        parts += [asm_record(r) for r in records]
    return "\n".join(parts) + "\n"


def linked_binary_module_ids(objects: Iterable[Path]) -> list[str]:
    """Module ids of the ``__cudaRegisterLinkedBinary_*`` symbols the objects leave undefined."""
    from skbuild_cudaq._elf import elf_symbols

    ids: set[str] = set()
    for obj in objects:
        with Path(obj).open("rb") as f:
            for sym in elf_symbols(f, Path(obj)):
                if sym.name.startswith(_REGISTER_PREFIX) and sym.section == 0:  # undefined
                    ids.add(sym.name[len(_REGISTER_PREFIX) :])
    return sorted(ids)


def _nvcc_library_dirs(nvcc: Path) -> list[Path]:
    """The library directories nvcc links with, as nvcc itself reports them (``-dryrun``).

    Asking nvcc sees through wrapper scripts and symlinks of ``nvcc`` on PATH.
    """
    try:
        proc = subprocess.run(
            [str(nvcc), "-dryrun", "-o", os.devnull, "skbuild-cudaq-probe.o"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    dirs: list[Path] = []
    for line in (proc.stdout + proc.stderr).splitlines():
        if line.startswith("#$ LIBRARIES="):
            for token in re.findall(r'-L"?([^"\s]+)"?', line):
                path = Path(token)
                if path.name != "stubs":
                    dirs.append(path)
        elif line.startswith("#$ _HERE_="):
            here = Path(line.split("=", 1)[1].strip())
            dirs += [here.parent / "lib64", here.parent / "lib"]
    return dirs


def cudart_static_library(nvcc: Path) -> Path:
    """``libcudart_static.a`` of the toolkit ``nvcc`` belongs to.

    Objects compiled by nvcc reference the runtime's registration entry points
    (``__cudaRegisterVar``, ...), as any nvcc-linked binary does; linking the
    static runtime (nvcc's own default) keeps the module free of a run-time
    dependency on libcudart.
    """
    root = Path(nvcc).resolve().parent.parent
    candidates = _nvcc_library_dirs(nvcc)
    candidates += [root / "lib64", root / "lib", root / "targets" / "x86_64-linux" / "lib"]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        value = os.environ.get(var)
        if value:
            candidates += [Path(value) / "lib64", Path(value) / "lib"]
    candidates = list(dict.fromkeys(candidates))
    for directory in candidates:
        lib = directory / "libcudart_static.a"
        if lib.is_file():
            return lib.resolve()
    searched = ", ".join(str(c) for c in candidates)
    msg = (
        "libcudart_static.a not found: objects nvcc compiles from the extension's .cu "
        f"sources reference the CUDA runtime (searched {searched}). Use the nvcc of a full "
        "CUDA toolkit, or set CUDA_HOME to a toolkit that has lib64/libcudart_static.a."
    )
    raise ToolchainError(msg)


# ---------------------------------------------------------------------------
# Staleness and running
# ---------------------------------------------------------------------------
def read_depfile(path: Path) -> list[Path]:
    """Prerequisites listed in a make-style depfile (``nvcc -MD -MF``/``gcc -MD``)."""
    text = path.read_text(encoding="utf-8", errors="surrogateescape")
    text = text.replace("\\\r\n", " ").replace("\\\n", " ")
    deps: list[Path] = []
    for line in text.splitlines():
        target_sep = re.search(r":(\s|$)", line)
        if target_sep is None:
            continue
        rest = line[target_sep.end() :]
        for token in re.findall(r"(?:\\.|[^\s\\])+", rest):
            name = re.sub(r"\\(.)", r"\1", token).replace("$$", "$")
            deps.append(Path(name))
    return deps


def _cmd_record(output: Path) -> Path:
    return output.with_name(output.name + ".cmd")


def is_stale(
    output: Path, command: Sequence[str], depfile: Path | None, inputs: Iterable[Path] = ()
) -> bool:
    """Whether ``output`` must be rebuilt.

    It must when it is missing, when the command line differs from the one that
    made it, when its depfile is missing, or when any prerequisite (from the
    depfile, plus ``inputs``) is missing or newer.
    """
    try:
        out_mtime = output.stat().st_mtime_ns
        recorded = json.loads(_cmd_record(output).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return True
    if recorded != list(command):
        return True
    deps = list(inputs)
    if depfile is not None:
        try:
            deps += read_depfile(depfile)
        except OSError:
            return True
    for dep in deps:
        try:
            if dep.stat().st_mtime_ns > out_mtime:
                return True
        except OSError:
            return True
    return False


def run_compile(
    command: Sequence[str], output: Path, what: str, *, cwd: Path | None = None
) -> None:
    """Run a compiler command (its diagnostics go straight to stderr) and record it.

    ``cwd``: where it runs; the source's directory for :func:`nvcc_command`'s recipes.
    """
    output.parent.mkdir(parents=True, exist_ok=True)
    # Forget the old command first: a failed run must never leave a newer output
    # that a later build would take as up to date.
    _cmd_record(output).unlink(missing_ok=True)
    _log.progress(" ".join(command))
    try:
        proc = subprocess.run(list(command), check=False, cwd=cwd)
    except OSError as exc:
        msg = f"cannot run {command[0]}: {exc}"
        raise ToolchainError(msg) from exc
    if proc.returncode != 0:
        msg = f"{what} failed (exit status {proc.returncode}): {' '.join(command)}"
        raise KernelCompileError(msg)
    _cmd_record(output).write_text(json.dumps(list(command)), encoding="utf-8")


def write_if_changed(path: Path, text: str) -> bool:
    """Write ``text`` unless the file already holds it (keeps the mtime: no rebuild)."""
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return True
