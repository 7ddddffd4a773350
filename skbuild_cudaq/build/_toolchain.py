"""Finding nvcc on the build machine (never imports ``cuda.*``).

The search order is defined once, in ``skbuild_cudaq/cmake/nvcc-search.txt``,
which this module and the CMake package (``skbuild_cudaqConfig.cmake``) both
read: ``CMAKE_CUDA_COMPILER`` (CMake variable, then environment), ``CUDACXX``,
``PATH``, ``$CUDA_HOME/bin``, ``$CUDA_PATH/bin``, ``/usr/local/cuda/bin``,
``/opt/cuda/bin`` (these two replaced by ``SKBUILD_CUDAQ_CUDA_ROOTS`` when set),
then the ``nvidia-cuda-nvcc`` wheel (``site-packages/nvidia/cu*/bin/nvcc``, the
layout cuda-pathfinder searches; read from the distribution's file list so that
no ``cuda.*`` module is imported at build time). When nothing is found, the
error lists every place tried and what was there.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple

from skbuild_cudaq._cuda_majors import cuda_majors
from skbuild_cudaq._paths import cmake_dir
from skbuild_cudaq.errors import ToolchainError

__all__ = [
    "CUDA_ROOTS_ENV",
    "NVCC_INSTALL_ADVICE",
    "SEARCH_ORDER_FILE",
    "SearchStep",
    "find_nvcc",
    "nvcc_from_wheel",
    "search_order",
    "tool_from_wheel",
    "wheel_names",
]

#: The one definition of the search order (also read by the CMake package).
SEARCH_ORDER_FILE = "nvcc-search.txt"
#: Environment variable whose ``:``-separated entries replace the ``root`` steps.
CUDA_ROOTS_ENV = "SKBUILD_CUDAQ_CUDA_ROOTS"
_KINDS = {"cmake-variable", "env", "path", "root-env", "root", "wheel"}
#: The nvcc wheels, newest CUDA major first (``cuda-majors.txt``).
_WHEELS = tuple(w for m in cuda_majors() for w in m.nvcc_wheels)

#: What to do when nothing was found (the same words in the CMake package).
NVCC_INSTALL_ADVICE = (
    "Install a CUDA toolkit and set CUDA_HOME to it (or put its bin directory on PATH, or set "
    "CMAKE_CUDA_COMPILER to its nvcc), or `pip install nvidia-cuda-nvcc` (add it to "
    "build-system.requires)."
)


class SearchStep(NamedTuple):
    """One line of the search order: a kind and its argument."""

    kind: str
    arg: str


def search_order(path: Path | None = None) -> list[SearchStep]:
    """The steps of ``nvcc-search.txt``, in order (comments and blank lines skipped)."""
    path = cmake_dir() / SEARCH_ORDER_FILE if path is None else path
    steps = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        kind, _, arg = text.partition(" ")
        if kind not in _KINDS:
            msg = f"{path}:{number}: unknown nvcc search kind {kind!r}"
            raise ToolchainError(msg)
        steps.append(SearchStep(kind, arg.strip()))
    return steps


def _expand_roots(steps: list[SearchStep], env: dict[str, str]) -> list[SearchStep]:
    override = env.get(CUDA_ROOTS_ENV)
    if override is None:
        return steps
    roots = [SearchStep("root", r) for r in override.split(os.pathsep) if r]
    out: list[SearchStep] = []
    for step in steps:
        if step.kind == "root":
            out += roots
            roots = []
        else:
            out.append(step)
    return out


def wheel_names(first: str) -> tuple[str, ...]:
    """The distributions that may hold the wheel's nvcc: ``first``, then its CUDA-major variants."""
    return (first, *(w for w in _WHEELS if w != first))


def nvcc_from_wheel(names: tuple[str, ...] = _WHEELS) -> Path | None:
    """nvcc of the ``nvidia-cuda-nvcc`` wheel installed in this environment, if any."""
    return tool_from_wheel("nvcc", names)


def tool_from_wheel(tool: str, names: tuple[str, ...]) -> Path | None:
    """The executable ``bin/<tool>`` of the first of the distributions ``names`` installed in
    this environment that has one (the NVIDIA wheels: ``nvidia-cuda-nvcc``, ...), if any."""
    for dist_name in names:
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError:
            continue
        for file in dist.files or ():
            parts = Path(str(file)).parts
            if len(parts) >= 2 and parts[-1] == tool and parts[-2] == "bin":
                path = Path(str(dist.locate_file(file))).resolve()
                if path.is_file() and os.access(path, os.X_OK):
                    return path
    return None


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


#: What one place of the search order yields: the nvcc found there, else what was tried.
_Look = tuple[Path | None, str]


def _in_env_variable(name: str, env: Mapping[str, str], path_var: str) -> _Look:
    """``CUDACXX``: a variable naming nvcc; set to anything else, it is an error."""
    value = env.get(name)
    if not value:
        return None, f"{name} (environment): not set"
    found = shutil.which(value, path=path_var)
    if found:
        return Path(found).resolve(), ""
    msg = (
        f"{name}={value!r} (environment) does not name an executable nvcc; "
        f"fix or unset it. {NVCC_INSTALL_ADVICE}"
    )
    raise ToolchainError(msg)


def _on_path(tool: str, env: Mapping[str, str], path_var: str) -> _Look:
    found = shutil.which(tool, path=path_var)
    if found:
        return Path(found).resolve(), ""
    return None, f"{tool} on PATH ({path_var}): not found"


def _under_root_variable(name: str, env: Mapping[str, str], path_var: str) -> _Look:
    """``CUDA_HOME``, ``CUDA_PATH``: a variable naming a toolkit root."""
    value = env.get(name)
    if not value:
        return None, f"${name}/bin/nvcc: {name} not set"
    candidate = Path(value) / "bin" / "nvcc"
    if _executable(candidate):
        return candidate.resolve(), ""
    return None, f"${name}/bin/nvcc: {candidate} not found"


def _under_root(root: str, env: Mapping[str, str], path_var: str) -> _Look:
    candidate = Path(root) / "bin" / "nvcc"
    if _executable(candidate):
        return candidate.resolve(), ""
    return None, f"{candidate}: not found"


def _in_wheel(name: str, env: Mapping[str, str], path_var: str) -> _Look:
    wheel = nvcc_from_wheel(wheel_names(name))
    if wheel is not None:
        return wheel, ""
    return None, f"the {name} wheel: not installed for {sys.executable}"


#: kind of a search-order entry -> where Python looks (``cmake-variable``: CMake only)
_LOOKS: dict[str, Callable[[str, Mapping[str, str], str], _Look]] = {
    "env": _in_env_variable,
    "path": _on_path,
    "root-env": _under_root_variable,
    "root": _under_root,
    "wheel": _in_wheel,
}


def find_nvcc(env: dict[str, str] | None = None) -> Path:
    """The nvcc to use, or :class:`ToolchainError` listing every place tried.

    ``env`` (default: ``os.environ``) supplies the variables and ``PATH``.
    """
    env = dict(os.environ) if env is None else env
    path_var = env.get("PATH", "")
    tried: list[str] = []
    for kind, arg in _expand_roots(search_order(), env):
        look = _LOOKS.get(kind)
        if look is None:  # cmake-variable: CMake only
            continue
        found, what = look(arg, env, path_var)
        if found is not None:
            return found
        tried.append(what)
    places = "".join(f"\n  - {t}" for t in tried)
    msg = (
        "nvcc not found: it compiles the dispatch kernels to LTO-IR. Looked in, in order:"
        f"{places}\n{NVCC_INSTALL_ADVICE}"
    )
    raise ToolchainError(msg)
