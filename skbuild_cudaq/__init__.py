"""skbuild-cudaq: ship your own CUDA-Q realtime dispatch kernels in Python packages.

Build side (no GPU, no ``cuda.*`` imports): the ``skbuild_cudaq.build`` PEP 517
backend, the ``skbuild_cudaq`` CMake package and the device headers.
Run-time side: :mod:`skbuild_cudaq.realtime` (needs the ``runtime`` extra).
"""

from __future__ import annotations

from ._paths import cmake_dir, device_runtime_dir, include_dir

__version__ = "0.1.0"

__all__ = ["__version__", "cmake_dir", "device_runtime_dir", "include_dir"]
