"""What differs between CUDA majors, read from ``skbuild_cudaq/cmake/cuda-majors.txt``.

That file is the one place naming each major's wheels and the folders they put their files in
(the CMake package reads it too). Build side and run time both read it through this module:
neither owns it. Adding a CUDA major is its lines there plus a test.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from skbuild_cudaq._paths import cmake_dir

__all__ = ["MAJORS_FILE", "CudaMajor", "cuda_major", "cuda_majors", "default_major"]

#: The table, in the CMake package directory.
MAJORS_FILE = "cuda-majors.txt"


@dataclass(frozen=True)
class CudaMajor:
    """One CUDA major: its wheels and where they put their files (paths relative to a
    site-packages directory)."""

    major: int
    minor: int  #: the oldest minor the run time accepts; device compilers are pinned to it
    extras: tuple[str, ...]  #: skbuild-cudaq's extras that ask for this major's run time
    nvrtc_wheel: str
    runtime_wheel: str
    cccl_wheel: str
    nvjitlink_wheel: str
    nvcc_wheels: tuple[str, ...]
    nvvm_wheel: str  #: the NVVM numba-cuda compiles Python device code with
    nvrtc_libraries: tuple[str, ...]
    include_dirs: tuple[str, ...]  #: the CUDA runtime's and CCCL's headers (for NVRTC)
    nvjitlink_dirs: tuple[str, ...]
    device_runtime: str  #: ``libcudadevrt.a``
    #: the first nvJitLink release known to link every module the tests build (None: any)
    nvjitlink_fixed: tuple[int, ...] | None = None

    def pinned(self, wheel: str) -> str:
        """``wheel`` pinned to this major's oldest accepted minor: ``name==13.0.*``."""
        return f"{wheel}=={self.major}.{self.minor}.*"

    def within(self, wheel: str) -> str:
        """``wheel`` of this major, any minor: ``name>=13.0,<14``."""
        return f"{wheel}>={self.major}.0,<{self.major + 1}"

    @property
    def nvrtc_requirements(self) -> tuple[str, ...]:
        """The wheels that make NVRTC a device compiler (headers included), pinned."""
        return tuple(
            self.pinned(w) for w in (self.nvrtc_wheel, self.runtime_wheel, self.cccl_wheel)
        )

    @property
    def nvjitlink_soname(self) -> str:
        return f"libnvJitLink.so.{self.major}"


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


@functools.cache
def _table() -> tuple[int, dict[int, CudaMajor]]:
    facts: dict[int, dict[str, list[str]]] = {}
    default = 0
    for line in (cmake_dir() / MAJORS_FILE).read_text(encoding="utf-8").splitlines():
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if words[0] == "default":
            default = int(words[1])
            continue
        facts.setdefault(int(words[0]), {})[words[1]] = words[2:]
    majors = {}
    for major, f in facts.items():
        fixed = f.get("nvjitlink-fixed")
        majors[major] = CudaMajor(
            major=major,
            minor=int(f["minor"][0]),
            extras=tuple(f["extras"]),
            nvrtc_wheel=f["nvrtc-wheel"][0],
            runtime_wheel=f["runtime-wheel"][0],
            cccl_wheel=f["cccl-wheel"][0],
            nvjitlink_wheel=f["nvjitlink-wheel"][0],
            nvcc_wheels=tuple(f["nvcc-wheels"]),
            nvvm_wheel=f["nvvm-wheel"][0],
            nvrtc_libraries=tuple(f["nvrtc-libraries"]),
            include_dirs=tuple(f["include-dirs"]),
            nvjitlink_dirs=tuple(f["nvjitlink-dirs"]),
            device_runtime=f["device-runtime"][0],
            nvjitlink_fixed=_version(fixed[0]) if fixed else None,
        )
    return default, majors


def cuda_majors() -> tuple[CudaMajor, ...]:
    """Every major the package knows, newest first."""
    return tuple(sorted(_table()[1].values(), key=lambda m: -m.major))


def cuda_major(major: int) -> CudaMajor | None:
    """The facts of CUDA ``major``; None for a major the package does not know."""
    return _table()[1].get(major)


def default_major() -> int:
    """The major a project gets when nothing asks for another (``[runtime]``'s)."""
    return _table()[0]
