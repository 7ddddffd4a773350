"""What the backend adds to a build's requirements: NVRTC where there is no nvcc.

scikit-build-core's ``get_requires_for_build_wheel`` adds the ``cmake`` and ``ninja``
wheels when the system has none; in the same way the ``skbuild_cudaq.build`` backend adds
the device compiler a build needs when the machine has none: where no nvcc is found (the
search of :func:`~skbuild_cudaq.build._toolchain.find_nvcc`: ``CMAKE_CUDA_COMPILER``,
``CUDACXX``, ``PATH``, ``CUDA_HOME``, ``CUDA_PATH``, the fixed roots, the
``nvidia-cuda-nvcc`` wheel) and the project's ``compiler`` is ``"auto"`` (or ``"nvrtc"``),
the NVRTC wheels of the CUDA major it builds for. So a downstream project builds with build
isolation on a machine with no CUDA toolkit (a CI runner) and nothing about NVRTC in its own
``build-system.requires``. A project with no device code -- no ``[tool.cudaq]`` dispatch
kernels and no ``cudaq_realtime_add_*`` call in its CMake files, such as a package of native
host handlers only -- gets nothing (``compiler = "nvrtc"`` asks for NVRTC regardless).

The CUDA major is the one the project runs with: its ``dependencies`` on
``skbuild-cudaq[cu12]`` make it CUDA 12, anything else (``[runtime]``, ``[cu13]``, none)
CUDA 13; ``-C cmake.define.SKBUILD_CUDAQ_NVRTC_MAJOR=12`` decides too. The NVRTC pin is the
oldest minor the run time's extra accepts (13.0, 12.9): LTO-IR links only with an nvJitLink
no older than the compiler that wrote it. The CUDA runtime and CCCL headers come along
(``cooperative_groups.h``, ``cuda/std``), as in the ``nvrtc`` extra. Never imports
``cuda.*``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from skbuild_cudaq import _cuda_majors
from skbuild_cudaq.errors import ConfigSettingsError, ToolchainError

__all__ = [
    "COMPILER_ENV",
    "NVRTC_REQUIREMENTS",
    "NVVM_PINS",
    "PYTHON_DEVICE_REQUIREMENTS",
    "DeviceCompilerRequires",
    "compiler_from_env",
    "cuda_major",
    "declares_device_code",
    "device_compiler_requires",
    "dispatch_kernel_sources",
    "python_device_requires",
]

#: The environment variable that chooses the device compiler (``auto``, ``nvcc`` or ``nvrtc``)
#: over ``[tool.cudaq] compiler`` and ``[tool.scikit-build.cmake.define]``; only
#: ``-C cmake.define.SKBUILD_CUDAQ_COMPILER`` beats it. ``SKBUILD_CUDAQ_COMPILER=nvrtc`` makes a
#: machine with a CUDA toolkit build as a CI runner without one does. The CMake package takes it
#: as the default of its cache variable of the same name.
COMPILER_ENV = "SKBUILD_CUDAQ_COMPILER"
_COMPILERS = ("auto", "nvcc", "nvrtc")

#: The wheels that make NVRTC a device compiler, per CUDA major (``cuda-majors.txt``).
NVRTC_REQUIREMENTS: Mapping[int, tuple[str, ...]] = {
    m.major: m.nvrtc_requirements for m in _cuda_majors.cuda_majors()
}
#: What compiles Python handlers (``.py`` dispatch-kernel sources, skbuild_cudaq.numba), per
#: CUDA major: numba-cuda and the NVVM it needs (``cuda-majors.txt``), pinned like NVRTC to the
#: oldest minor the run time's extra links with (LTO-IR links only with an nvJitLink no older
#: than its NVVM).
NUMBA_CUDA_REQUIREMENT = "numba-cuda>=0.30"
NVVM_PINS: Mapping[int, tuple[int, int]] = {
    m.major: (m.major, m.minor) for m in _cuda_majors.cuda_majors()
}
PYTHON_DEVICE_REQUIREMENTS: Mapping[int, tuple[str, ...]] = {
    m.major: (NUMBA_CUDA_REQUIREMENT, m.pinned(m.nvvm_wheel)) for m in _cuda_majors.cuda_majors()
}
DEFAULT_MAJOR = _cuda_majors.default_major()
_PACKAGE = "skbuild-cudaq"
_EXTRA_MAJOR = {extra: m.major for m in _cuda_majors.cuda_majors() for extra in m.extras}
_DEFINE = "cmake.define."
#: The CMake functions that compile device code (CMake names are case-insensitive).
_DEVICE_CALL = re.compile(rb"cudaq_realtime_add_\w+\s*\(", re.IGNORECASE)
#: Directories the CMake search skips: hidden ones, build trees, environments.
_SKIP_DIRS = re.compile(r"^(\..*|_?build|_skbuild|dist|node_modules|venv|__pycache__)$")
_MAX_CMAKE_FILES = 2000


class DeviceCompilerRequires(NamedTuple):
    """What to add (maybe nothing) and why, in words for the build log."""

    requirements: tuple[str, ...]
    reason: str


def _one(value: Any) -> str | None:
    if isinstance(value, list):
        value = value[-1] if value else None
    return None if value is None else str(value)


def cuda_major(pyproject: Mapping[str, Any]) -> int | None:
    """The CUDA major ``project.dependencies`` ask skbuild-cudaq's run time for (``[cu12]``:
    12; ``[cu13]`` or ``[runtime]``: 13), or None when they do not say."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    project = pyproject.get("project")
    dependencies = project.get("dependencies") if isinstance(project, dict) else None
    majors = set()
    for text in dependencies if isinstance(dependencies, list) else []:
        try:
            requirement = Requirement(str(text))
        except InvalidRequirement:
            continue  # scikit-build-core reports it
        if canonicalize_name(requirement.name) != _PACKAGE:
            continue
        majors |= {_EXTRA_MAJOR[e] for e in requirement.extras if e in _EXTRA_MAJOR}
    return majors.pop() if len(majors) == 1 else None


def _define(
    name: str, config_settings: Mapping[str, Any], pyproject: Mapping[str, Any]
) -> str | None:
    """``-C cmake.define.<name>``, else ``[tool.scikit-build.cmake.define]``'s ``<name>``."""
    given = _one(config_settings.get(_DEFINE + name))
    if given is not None:
        return given
    tool = pyproject.get("tool")
    skbuild = tool.get("scikit-build") if isinstance(tool, dict) else None
    cmake = skbuild.get("cmake") if isinstance(skbuild, dict) else None
    defines = cmake.get("define") if isinstance(cmake, dict) else None
    return _one(defines.get(name)) if isinstance(defines, dict) else None


def _cmake_source_dir(project_dir: Path, pyproject: Mapping[str, Any]) -> Path:
    tool = pyproject.get("tool")
    skbuild = tool.get("scikit-build") if isinstance(tool, dict) else None
    cmake = skbuild.get("cmake") if isinstance(skbuild, dict) else None
    source = cmake.get("source-dir") if isinstance(cmake, dict) else None
    return project_dir / source if isinstance(source, str) and source else project_dir


def _cmake_compiles_device_code(source_dir: Path) -> bool:
    """Whether a CMake file under ``source_dir`` calls a ``cudaq_realtime_add_*`` function
    (True as well when there are too many to read: the safe answer)."""
    seen = 0
    for root, dirs, files in os.walk(source_dir):
        dirs[:] = [d for d in dirs if not _SKIP_DIRS.match(d)]
        for name in files:
            if name != "CMakeLists.txt" and not name.endswith(".cmake"):
                continue
            seen += 1
            if seen > _MAX_CMAKE_FILES:
                return True
            try:
                if _DEVICE_CALL.search((Path(root) / name).read_bytes()):
                    return True
            except OSError:
                continue
    return False


def dispatch_kernel_sources(pyproject: Mapping[str, Any]) -> list[str]:
    """Every source ``[tool.cudaq.dispatch-kernels]`` lists (short and long forms)."""
    tool = pyproject.get("tool")
    cudaq = tool.get("cudaq") if isinstance(tool, dict) else None
    table = cudaq.get("dispatch-kernels") if isinstance(cudaq, dict) else None
    found: list[str] = []
    for entry in table.values() if isinstance(table, dict) else []:
        sources = entry.get("sources") if isinstance(entry, dict) else entry
        sources = [sources] if isinstance(sources, str) else sources
        found += [v for v in sources if isinstance(v, str)] if isinstance(sources, list) else []
    return found


def declares_device_code(project_dir: Path, pyproject: Mapping[str, Any]) -> bool:
    """Whether the project compiles CUDA device code: ``[tool.cudaq]`` dispatch kernels other
    than Python handlers (``.py``), or a ``cudaq_realtime_add_*`` call in a CMake file of its
    CMake source directory."""
    if any(not s.endswith(".py") for s in dispatch_kernel_sources(pyproject)):
        return True
    return _cmake_compiles_device_code(_cmake_source_dir(project_dir, pyproject))


def python_device_requires(
    pyproject: Mapping[str, Any], config_settings: Mapping[str, Any]
) -> DeviceCompilerRequires:
    """numba-cuda and NVVM (pinned with the run time's nvJitLink) where a dispatch-kernel
    source is a ``.py`` file of Python handlers; nothing otherwise."""
    if not any(s.endswith(".py") for s in dispatch_kernel_sources(pyproject)):
        return DeviceCompilerRequires((), "no Python device code")
    wanted = _define("SKBUILD_CUDAQ_NVRTC_MAJOR", config_settings, pyproject)
    asked = int(wanted) if wanted and wanted.isdigit() else cuda_major(pyproject)
    major = asked if asked is not None and asked in PYTHON_DEVICE_REQUIREMENTS else DEFAULT_MAJOR
    wheels = PYTHON_DEVICE_REQUIREMENTS[major]
    return DeviceCompilerRequires(
        wheels,
        f"Python handlers (.py) in [tool.cudaq.dispatch-kernels]: the build environment gets "
        f"numba-cuda and NVVM of CUDA {'.'.join(map(str, NVVM_PINS[major]))} ({', '.join(wheels)})",
    )


def compiler_from_env(env: Mapping[str, str] | None = None) -> str | None:
    """``$SKBUILD_CUDAQ_COMPILER`` in lower case, None where unset or empty;
    :class:`~skbuild_cudaq.errors.ConfigSettingsError` where it names no device compiler."""
    value = (os.environ if env is None else env).get(COMPILER_ENV, "").strip()
    if not value:
        return None
    if value.lower() not in _COMPILERS:
        msg = (
            f"{COMPILER_ENV}={value!r} (environment variable) is not a device compiler: "
            "expected auto, nvcc or nvrtc (or unset it: [tool.cudaq] compiler decides)"
        )
        raise ConfigSettingsError(msg)
    return value.lower()


def device_compiler_requires(
    pyproject: Mapping[str, Any],
    compiler: str,
    config_settings: Mapping[str, Any],
    env: Mapping[str, str] | None = None,
    project_dir: Path | None = None,
) -> DeviceCompilerRequires:
    """The NVRTC wheels to add to the build's requirements (none when nvcc will compile,
    or when the project in ``project_dir`` compiles no device code).

    ``compiler`` is ``[tool.cudaq] compiler``; ``-C cmake.define.SKBUILD_CUDAQ_COMPILER``,
    then ``$SKBUILD_CUDAQ_COMPILER`` (:data:`COMPILER_ENV`), then
    ``[tool.scikit-build.cmake.define]`` override it, as they do for CMake.
    """
    from skbuild_cudaq.build._toolchain import find_nvcc

    given = _one(config_settings.get(_DEFINE + COMPILER_ENV))
    from_env = None if given else compiler_from_env(env)
    choice = (from_env or given or _define(COMPILER_ENV, {}, pyproject) or compiler).lower()
    if choice == "nvcc":
        return DeviceCompilerRequires((), "the device compiler is nvcc (compiler = nvcc)")
    if choice == "auto":
        given = _define("CMAKE_CUDA_COMPILER", config_settings, pyproject)
        if given:
            return DeviceCompilerRequires((), f"nvcc is CMAKE_CUDA_COMPILER={given}")
        try:
            nvcc = find_nvcc(dict(os.environ if env is None else env))
        except ToolchainError:
            pass
        else:
            return DeviceCompilerRequires((), f"nvcc found: {nvcc}")
        if project_dir is not None and not declares_device_code(project_dir, pyproject):
            return DeviceCompilerRequires(
                (),
                "the project compiles no CUDA device code (no [tool.cudaq] dispatch kernels "
                "but Python handlers, no cudaq_realtime_add_* call in its CMake files; "
                'compiler = "nvrtc" asks for NVRTC regardless)',
            )
    wanted = _define("SKBUILD_CUDAQ_NVRTC_MAJOR", config_settings, pyproject)
    asked = int(wanted) if wanted and wanted.isdigit() else cuda_major(pyproject)
    major = asked if asked is not None and asked in NVRTC_REQUIREMENTS else DEFAULT_MAJOR
    why = "no nvcc found" if choice == "auto" else "the device compiler is NVRTC"
    if from_env:
        why += f" ({COMPILER_ENV}={from_env} in the environment)"
    return DeviceCompilerRequires(
        NVRTC_REQUIREMENTS[major],
        f"{why}: the build environment gets NVRTC of CUDA {major} "
        f"({', '.join(NVRTC_REQUIREMENTS[major])})",
    )
