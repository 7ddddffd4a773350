"""What ``build_cudaq_kernels`` makes for an extension and ``build_ext`` links into it.

An :class:`ExtensionPlan` per extension; the nvcc flags of an extension, in the order
distutils gives them to the host compiler (:func:`extension_flags`); the checks of what
``[tool.cudaq]`` asks of this front door (:func:`check_for_setuptools`): every key of
``[tool.cudaq.dispatch-kernels]`` names an extension, and the device compiler is nvcc.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skbuild_cudaq.build import _embed
from skbuild_cudaq.errors import SettingsError, SettingsProblem

__all__ = [
    "CUDA_SUFFIXES",
    "TABLE",
    "ExtensionPlan",
    "check_for_setuptools",
    "extension_flags",
    "is_cuda_source",
]

#: The table whose keys name extensions.
TABLE = "tool.cudaq.dispatch-kernels"
#: Sources of an extension that nvcc compiles (``-c -rdc=true``) instead of the host compiler.
CUDA_SUFFIXES = (".cu",)


@dataclass
class ExtensionPlan:
    """What ``build_cudaq_kernels`` made for one extension and ``build_ext`` links into it."""

    name: str
    directory: Path  #: build_temp/cudaq/<extension name>
    fatbins: list[Path] = field(default_factory=list)  #: one per dispatch kernel
    handler_objects: list[Path] = field(default_factory=list)  #: nvcc -c -rdc of .cu sources
    records: list[Path] = field(default_factory=list)  #: build records (JSON), embedded too
    embed_source: Path | None = None  #: the generated C file
    link_cudart: Path | None = None  #: libcudart_static.a when handler objects need it

    @property
    def embed_object(self) -> Path | None:
        if self.embed_source is None:
            return None
        return self.embed_source.with_suffix(".o")

    def depends(self) -> list[Path]:
        """Files whose change must relink the extension."""
        deps = [*self.handler_objects]
        if self.embed_object is not None:
            deps.append(self.embed_object)
        return deps


def is_cuda_source(path: str) -> bool:
    return path.endswith(CUDA_SUFFIXES)


def _compiler_problems(compiler: str) -> list[SettingsProblem]:
    """This front door compiles with nvcc: its ``.cu`` sources are nvcc objects linked into
    the extension. ``compiler = "nvrtc"`` is refused rather than quietly not honoured."""
    if compiler != "nvrtc":
        return []
    message = (
        '"nvrtc" is not a device compiler of the setuptools front door, which compiles '
        'dispatch kernels and .cu sources with nvcc; expected "auto" or "nvcc"'
    )
    fix = (
        'use "auto" or "nvcc" (nvcc from a CUDA toolkit or the nvidia-cuda-nvcc wheel), or '
        "build with the skbuild_cudaq.build backend (scikit-build-core), which has NVRTC"
    )
    return [SettingsProblem(key="tool.cudaq.compiler", message=message, fix=fix)]


def check_for_setuptools(
    table_keys: Sequence[str], extension_names: Sequence[str], *, compiler: str = "auto"
) -> None:
    """Every key of ``[tool.cudaq.dispatch-kernels]`` must name an extension of the project,
    and ``compiler`` (``[tool.cudaq] compiler``) must be one this front door has; every
    problem in one :class:`~skbuild_cudaq.errors.SettingsError`."""
    problems: list[SettingsProblem] = _compiler_problems(compiler)
    known = sorted(extension_names)
    for key in table_keys:
        if key in extension_names:
            continue
        listed = ", ".join(repr(n) for n in known) if known else "none"
        message = f"no extension named {key!r} in this project (extensions: {listed})"
        suffix = [n for n in known if n.rsplit(".", 1)[-1] == key.rsplit(".", 1)[-1]]
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        guess = close[0] if close else (suffix[0] if len(suffix) == 1 else None)
        if guess is not None:
            fix = f"did you mean {guess!r}?"
        else:
            fix = "use the full name of an Extension passed to setup(), e.g. 'pkg._core'"
        problems.append(SettingsProblem(key=f"{TABLE}.{key}", message=message, fix=fix))
    if problems:
        raise SettingsError(problems)


def extension_flags(ext: Any, build_ext: Any = None) -> _embed.CompileFlags:
    """nvcc flags of an extension, in the order distutils gives them to the host compiler.

    Macros: ``build_ext --define/--undef``, the extension's ``define_macros``,
    its ``undef_macros``, then ``-D``/``-U`` in ``extra_compile_args``. Include
    directories: the extension's, ``-I`` in its arguments, then build_ext's
    (Python's headers among them). C++ standard: ``-std=`` in
    ``extra_compile_args``, else c++17.
    """
    Macro = _embed.Macro
    args = [str(a) for a in (ext.extra_compile_args or [])]
    arg_macros, arg_includes = _embed.preprocessor_from_args(args)
    macros: list[_embed.Macro] = []
    if build_ext is not None:
        macros += [Macro(str(n), None if v is None else str(v)) for n, v in build_ext.define or []]
        macros += [Macro(str(n), undefine=True) for n in build_ext.undef or []]
    macros += [Macro(str(n), None if v is None else str(v)) for n, v in ext.define_macros or []]
    macros += [Macro(str(n), undefine=True) for n in ext.undef_macros or []]
    macros += arg_macros
    includes = [str(Path(d).resolve()) for d in [*(ext.include_dirs or []), *arg_includes]]
    if build_ext is not None:
        includes += [str(Path(d).resolve()) for d in build_ext.include_dirs or []]
    return _embed.CompileFlags(
        include_dirs=tuple(dict.fromkeys(includes)),
        macros=tuple(macros),
        std=_embed.std_from_args(args),
    )
