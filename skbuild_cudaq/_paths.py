"""Where the files that ship inside the wheel live (CMake package, headers, device run time)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cmake_dir", "device_runtime_dir", "include_dir"]

_PACKAGE_DIR = Path(__file__).resolve().parent

#: Environment variable that points the run time at another directory of
#: device run-time fatbins (``*.fatbin``), e.g. a build tree.
DEVICE_RUNTIME_DIR_ENV = "SKBUILD_CUDAQ_DEVICE_RUNTIME_DIR"


def _package_dirs() -> list[Path]:
    """Every directory the package is spread over (one, or more in an editable install)."""
    import skbuild_cudaq

    dirs = [_PACKAGE_DIR]
    for entry in getattr(skbuild_cudaq, "__path__", []):
        path = Path(entry).resolve()
        if path not in dirs:
            dirs.append(path)
    return dirs


def cmake_dir() -> Path:
    """The directory holding ``skbuild_cudaqConfig.cmake`` (for ``skbuild_cudaq_DIR``)."""
    return _PACKAGE_DIR / "cmake"


def include_dir() -> Path:
    """The include directory holding ``cudaq/realtime/unified_dispatch_device.cuh``."""
    return _PACKAGE_DIR / "include"


def device_runtime_dir() -> Path:
    """The directory of the package's own device run time as LTO-IR fatbins.

    These are built with nvcc when skbuild-cudaq itself is built and ship in the
    wheel, so linking at run time needs no nvcc. ``SKBUILD_CUDAQ_DEVICE_RUNTIME_DIR``
    overrides the location.
    """
    override = os.environ.get(DEVICE_RUNTIME_DIR_ENV)
    if override:
        return Path(override)
    candidates = [d / "_device" for d in _package_dirs()]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    return candidates[0]
