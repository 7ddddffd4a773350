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
    """Unpack a driver result tuple through the run time's one error path.

    Same as :func:`skbuild_cudaq.realtime._driver.check`: ``(CUDA_SUCCESS,)`` gives
    ``None``, ``(CUDA_SUCCESS, x)`` gives ``x``, longer tuples the tuple of values;
    a failure raises :class:`~skbuild_cudaq.realtime.errors.CUDAError` with the
    CUresult name and code.
    """
    from ._driver import check as _check

    return _check(result, what)


def ptr(value: Any) -> int:
    """A device or host pointer (``CUdeviceptr``, int, ...) as a Python int."""
    return int(value) if value is not None else 0
