"""The CUDA driver, lazily: one helper turns driver results into exceptions.

``cuda.bindings.driver`` functions return ``(CUresult, value, ...)`` tuples.
:func:`check` turns a non-success result into :class:`CUDAError` (carrying the
CUresult's name and code) and returns the values. Nothing here runs at import.
"""

from __future__ import annotations

import threading
from types import ModuleType
from typing import Any

from .errors import CUDAError, RealtimeError

__all__ = [
    "check",
    "current_arch",
    "current_device",
    "device_arch",
    "driver",
    "ensure_context",
    "init",
    "is_not_found",
    "make_primary_current",
    "ptr",
]

_lock = threading.Lock()
_initialised = False


def driver() -> ModuleType:
    """``cuda.bindings.driver`` (imported on first use); :class:`RealtimeError` without it."""
    try:
        import cuda.bindings.driver as drv
    except ImportError as exc:
        msg = (
            f"the CUDA driver bindings cannot be imported ({exc}); install the run time: "
            "pip install 'skbuild-cudaq[runtime]'"
        )
        raise RealtimeError(msg) from None

    module: ModuleType = drv
    return module


def _result_name(result: Any) -> tuple[str, int]:
    name = getattr(result, "name", None)
    code = int(result)
    if not name:
        try:
            name = driver().CUresult(code).name
        except (ValueError, RealtimeError, AttributeError):  # unknown code, no bindings
            name = f"CUresult {code}"
    return str(name), code


def _description(result: Any) -> str:
    try:
        err, text = driver().cuGetErrorString(result)
    except Exception:  # the description is a nicety; never mask the real error
        return ""
    if int(err) != 0 or not text:
        return ""
    return text.decode() if isinstance(text, bytes) else str(text)


def check(ret: Any, call: str) -> Any:
    """Raise :class:`CUDAError` unless ``ret`` (a driver call's return) is success.

    Returns ``None`` for a bare result, the value for ``(result, value)`` and the
    tuple of values for longer returns.
    """
    if isinstance(ret, tuple):
        result, values = ret[0], ret[1:]
    else:
        result, values = ret, ()
    if int(result) != 0:
        name, code = _result_name(result)
        raise CUDAError(call, name, code, _description(result))
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return values


def ptr(value: Any) -> int:
    """A device or host pointer (``CUdeviceptr``, int, ``None``) as a Python int."""
    return int(value) if value is not None else 0


def is_not_found(error: CUDAError) -> bool:
    """Whether a driver error means "no symbol of that name" (CUDA_ERROR_NOT_FOUND)."""
    return error.name == "CUDA_ERROR_NOT_FOUND"


def init() -> None:
    """``cuInit`` once per process; :class:`RealtimeError` when the bindings or the driver
    library are missing (the loader's own exception is not a :class:`CudaqError`)."""
    global _initialised  # noqa: PLW0603 - once per process
    if _initialised:
        return
    with _lock:
        if not _initialised:
            drv = driver()
            try:
                ret = drv.cuInit(0)
            except Exception as exc:  # e.g. libcuda not found: not a CUresult
                msg = f"cannot initialise CUDA (is an NVIDIA driver installed?): {exc}"
                raise RealtimeError(msg) from None
            check(ret, "cuInit")
            _initialised = True


def current_device(device: int = 0) -> tuple[Any, Any]:
    """``(context, device)``: the current context and its device, or ``(None, device)``.

    Initialises CUDA but creates nothing: a few fast driver calls. Used to learn
    the architecture before the (slow) context creation.
    """
    init()
    drv = driver()
    ctx = check(drv.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if ctx is not None and int(ctx) != 0:
        return ctx, check(drv.cuCtxGetDevice(), "cuCtxGetDevice")
    return None, check(drv.cuDeviceGet(device), "cuDeviceGet")


def make_primary_current(dev: Any) -> Any:
    """Retain ``dev``'s primary context and make it current; returns it.

    Creating the primary context is most of CUDA's start-up (~120 ms on an H200,
    ``bench/startup_phases.py``); ``cuda.bindings`` releases the GIL meanwhile.
    """
    drv = driver()
    ctx = check(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    check(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return ctx


def ensure_context(device: int = 0) -> Any:
    """The current context; if none, the primary context of ``device`` is made current."""
    ctx, dev = current_device(device)
    if ctx is not None:
        return ctx
    return make_primary_current(dev)


def device_arch(dev: Any) -> str:
    """``sm_XY`` of a ``CUdevice``."""
    drv = driver()
    attr = drv.CUdevice_attribute
    major = check(
        drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
        "cuDeviceGetAttribute",
    )
    minor = check(
        drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
        "cuDeviceGetAttribute",
    )
    return f"sm_{int(major)}{int(minor)}"


def current_arch() -> str:
    """``sm_XY`` of the current context's device (device 0's when none is current).

    Creates no context.
    """
    return device_arch(current_device()[1])
