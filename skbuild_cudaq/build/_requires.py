"""What the backend adds to a build's requirements: NVRTC where there is no nvcc.

scikit-build-core's ``get_requires_for_build_wheel`` adds the ``cmake`` and ``ninja``
wheels when the system has none; in the same way the ``skbuild_cudaq.build`` backend adds
the device compiler a build needs when the machine has none: where no nvcc is found (the
search of :func:`~skbuild_cudaq.build._toolchain.find_nvcc`: ``CMAKE_CUDA_COMPILER``,
``CUDACXX``, ``PATH``, ``CUDA_HOME``, ``CUDA_PATH``, the fixed roots, the
``nvidia-cuda-nvcc`` wheel) and the project's ``compiler`` is ``"auto"`` (or ``"nvrtc"``),
the NVRTC wheels of the CUDA major it builds for. So a downstream project builds with build
isolation on a machine with no CUDA toolkit (a CI runner) and nothing about NVRTC in its own
``build-system.requires``.

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
from collections.abc import Mapping
from typing import Any, NamedTuple

from skbuild_cudaq.errors import ToolchainError

__all__ = ["NVRTC_REQUIREMENTS", "DeviceCompilerRequires", "cuda_major", "device_compiler_requires"]

#: The wheels that make NVRTC a device compiler, per CUDA major.
NVRTC_REQUIREMENTS: Mapping[int, tuple[str, ...]] = {
    13: ("nvidia-cuda-nvrtc==13.0.*", "nvidia-cuda-runtime==13.0.*", "nvidia-cuda-cccl==13.0.*"),
    12: (
        "nvidia-cuda-nvrtc-cu12==12.9.*",
        "nvidia-cuda-runtime-cu12==12.9.*",
        "nvidia-cuda-cccl-cu12==12.9.*",
    ),
}
DEFAULT_MAJOR = 13
_PACKAGE = "skbuild-cudaq"
_EXTRA_MAJOR = {"cu12": 12, "cu13": 13, "runtime": 13}
_DEFINE = "cmake.define."


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


def device_compiler_requires(
    pyproject: Mapping[str, Any],
    compiler: str,
    config_settings: Mapping[str, Any],
    env: Mapping[str, str] | None = None,
) -> DeviceCompilerRequires:
    """The NVRTC wheels to add to the build's requirements (none when nvcc will compile).

    ``compiler`` is ``[tool.cudaq] compiler``; ``-C cmake.define.SKBUILD_CUDAQ_COMPILER``
    overrides it, as it does for CMake.
    """
    from ._toolchain import find_nvcc

    choice = (_define("SKBUILD_CUDAQ_COMPILER", config_settings, pyproject) or compiler).lower()
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
    wanted = _define("SKBUILD_CUDAQ_NVRTC_MAJOR", config_settings, pyproject)
    asked = int(wanted) if wanted and wanted.isdigit() else cuda_major(pyproject)
    major = asked if asked is not None and asked in NVRTC_REQUIREMENTS else DEFAULT_MAJOR
    why = "no nvcc found" if choice == "auto" else "the device compiler is NVRTC"
    return DeviceCompilerRequires(
        NVRTC_REQUIREMENTS[major],
        f"{why}: the build environment gets NVRTC of CUDA {major} "
        f"({', '.join(NVRTC_REQUIREMENTS[major])})",
    )
