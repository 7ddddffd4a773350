"""skbuild-cudaq: ship your own CUDA-Q realtime dispatch kernels in Python packages.

Build side (no GPU, no ``cuda.*`` imports): the ``skbuild_cudaq.build`` PEP 517
backend, the ``skbuild_cudaq`` CMake package and the device headers.
Run-time side: :mod:`skbuild_cudaq.realtime` (needs the ``runtime`` extra).

The path helpers load on first use: importing the package (as every
``skbuild_cudaq.realtime`` import does) costs no ``pathlib``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skbuild_cudaq._paths import cmake_dir, device_runtime_dir, include_dir

__version__ = "0.1.0"

__all__ = ["__version__", "cmake_dir", "device_runtime_dir", "include_dir"]

_LAZY = frozenset({"cmake_dir", "device_runtime_dir", "include_dir"})


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    from skbuild_cudaq import _paths

    value = getattr(_paths, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | _LAZY)
