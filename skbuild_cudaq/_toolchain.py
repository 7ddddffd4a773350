"""Finding nvcc on the build machine (never imports ``cuda.*``).

Order: ``CMAKE_CUDA_COMPILER`` (environment), ``CUDACXX``, ``PATH``, then the
``nvidia-cuda-nvcc`` wheel (``site-packages/nvidia/cu*/bin/nvcc``, the layout
cuda-pathfinder searches; read from the distribution's file list so that no
``cuda.*`` module is imported at build time).
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
from pathlib import Path

from .errors import ToolchainError

__all__ = ["NVCC_MISSING_MESSAGE", "find_nvcc", "nvcc_from_wheel"]

NVCC_MISSING_MESSAGE = (
    "nvcc not found: it compiles the dispatch kernels to LTO-IR. "
    "Set CMAKE_CUDA_COMPILER (or the CUDACXX environment variable) to the nvcc of a "
    "CUDA toolkit, put nvcc on PATH, or `pip install nvidia-cuda-nvcc` "
    "(add it to build-system.requires)."
)


def nvcc_from_wheel() -> Path | None:
    """nvcc of the ``nvidia-cuda-nvcc`` wheel installed in this environment, if any."""
    for dist_name in ("nvidia-cuda-nvcc", "nvidia-cuda-nvcc-cu13", "nvidia-cuda-nvcc-cu12"):
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError:
            continue
        for file in dist.files or ():
            parts = Path(str(file)).parts
            if len(parts) >= 2 and parts[-1] == "nvcc" and parts[-2] == "bin":
                path = Path(str(dist.locate_file(file))).resolve()
                if path.is_file() and os.access(path, os.X_OK):
                    return path
    return None


def find_nvcc(env: dict[str, str] | None = None) -> Path:
    """The nvcc to use, or :class:`ToolchainError` saying what to install."""
    env = dict(os.environ) if env is None else env
    for var in ("CMAKE_CUDA_COMPILER", "CUDACXX"):
        value = env.get(var)
        if value:
            found = shutil.which(value, path=env.get("PATH"))
            if found:
                return Path(found).resolve()
            msg = f"{var}={value!r} is not an executable nvcc. {NVCC_MISSING_MESSAGE}"
            raise ToolchainError(msg)
    found = shutil.which("nvcc", path=env.get("PATH"))
    if found:
        return Path(found).resolve()
    wheel = nvcc_from_wheel()
    if wheel is not None:
        return wheel
    raise ToolchainError(NVCC_MISSING_MESSAGE)
