"""Where the files that ship inside the wheel live (CMake package, headers, device run time)."""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = [
    "cmake_dir",
    "device_runtime_dir",
    "device_runtime_sets",
    "include_dir",
    "source_tree_hint",
]

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


def device_runtime_dir(major: int | None = None) -> Path:
    """The directory of the package's own device run time as LTO-IR fatbins.

    These are built when skbuild-cudaq itself is built (NVRTC of each CUDA major,
    or nvcc) and ship in the wheel, so linking at run time needs no nvcc. The wheel
    holds one set per CUDA major (``_device/cu12``, ``_device/cu13``): this is the
    set of CUDA ``major``, by default the newest one shipped. (The run time links
    with the set of the installed nvJitLink's major:
    :func:`skbuild_cudaq.realtime.link.device_runtime.runtime_dir`.)
    ``SKBUILD_CUDAQ_DEVICE_RUNTIME_DIR`` overrides the location (a set, or a
    directory of ``cu*`` sets).
    """
    override = os.environ.get(DEVICE_RUNTIME_DIR_ENV)
    if override:
        return _set_of_major(Path(override), major)
    candidates = [d / "_device" for d in _package_dirs()]
    for candidate in candidates:
        if candidate.is_dir():
            return _set_of_major(candidate, major)
    return candidates[0]


def device_runtime_sets(root: Path) -> dict[int, Path]:
    """The per-major sets under ``root`` (``cu12``, ``cu13``, ...), by major."""
    sets = {}
    for child in root.glob("cu[0-9]*"):
        if child.is_dir() and child.name[2:].isdigit():
            sets[int(child.name[2:])] = child
    return dict(sorted(sets.items()))


def _set_of_major(root: Path, major: int | None) -> Path:
    sets = device_runtime_sets(root)
    if not sets:
        return root  # one flat set (a build tree, or an override)
    if major is None:
        return sets[max(sets)]
    return root / f"cu{major}"  # may not exist: the run time says what to install


def source_tree_hint() -> str | None:
    """What to say when the package was imported from skbuild-cudaq's own source checkout,
    unbuilt (no device run time in any of its directories), shadowing the installed one:
    Python looks in the current directory (``python -m``, an interactive session) first.
    None otherwise (an installed or an editable package, or an override of the run time)."""
    if os.environ.get(DEVICE_RUNTIME_DIR_ENV) or any(
        (d / "_device").is_dir() for d in _package_dirs()
    ):
        return None
    root = _PACKAGE_DIR.parent
    try:
        text = (root / "pyproject.toml").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if not re.search(r'^name\s*=\s*"skbuild-cudaq"', text, re.MULTILINE):
        return None
    return (
        f"skbuild_cudaq was imported from its unbuilt source checkout {root} (no device run "
        "time, no compiled host path), which shadows the installed package because Python "
        "looks in the current directory first: run from outside the checkout (cd elsewhere), "
        "or install the checkout itself (pip install -e .)"
    )
