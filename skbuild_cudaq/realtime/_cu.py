"""Private driver glue shared by the dispatcher and the host-ring bridge.

``driver()`` imports ``cuda.bindings.driver`` on first use (nothing touches CUDA
at import time) and is the single seam the CPU unit tests replace with a mocked
driver to exercise error paths. ``check()`` turns a driver result tuple
(``(CUresult, value...)``) into its value or a :class:`CUDAError`.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

__all__ = ["check", "driver", "ptr"]


def driver() -> ModuleType:
    """The CUDA driver bindings (``cuda.bindings.driver``), imported lazily."""
    from cuda.bindings import driver as drv

    module: ModuleType = drv
    return module


def check(result: Any, what: str) -> Any:
    """Unpack a driver result tuple: raise :class:`CUDAError` on failure, else return the value.

    ``(CUDA_SUCCESS,)`` gives ``None``, ``(CUDA_SUCCESS, x)`` gives ``x`` and longer
    tuples give the tuple of values.
    """
    from .errors import CUDAError

    if not isinstance(result, tuple):
        result = (result,)
    code = result[0]
    if int(code) != 0:
        name = getattr(code, "name", str(code))
        raise CUDAError(f"{what}: {name}", int(code))
    values = result[1:]
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return values


def ptr(value: Any) -> int:
    """A device or host pointer (``CUdeviceptr``, int, ...) as a Python int."""
    return int(value) if value is not None else 0
