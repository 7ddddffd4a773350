"""The CUDA driver, lazily: one helper turns driver results into exceptions.

``cuda.bindings.driver`` functions return ``(CUresult, value, ...)`` tuples.
:func:`check` turns a non-success result into :class:`CUDAError` (carrying the
CUresult's name and code) and returns the values. Nothing here runs at import.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator
from types import ModuleType
from typing import Any

from skbuild_cudaq.realtime.errors import CUDAError, NoDeviceError, RealtimeError

__all__ = [
    "check",
    "current_arch",
    "current_device",
    "current_ordinal",
    "device_arch",
    "device_count",
    "driver",
    "ensure_context",
    "init",
    "is_not_found",
    "make_primary_current",
    "ordinal_arch",
    "primary_context",
    "ptr",
    "pushed",
]

_lock = threading.Lock()
_initialised = False
_primary: dict[int, Any] = {}  # device ordinal -> its retained primary context
_archs: dict[int, str] = {}  # device ordinal -> sm_XY


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


def release_each(steps: Iterable[tuple[Any, Callable[[Any], Any], str]]) -> None:
    """``release(handle)`` for each ``(handle, release, call)`` whose handle is set, checked
    (:func:`check`, named ``call``): every one tried even after a failure (a context a
    kernel faulted in refuses them all), then the first error raised."""
    first: Exception | None = None
    for handle, release, call in steps:
        if not handle:
            continue
        try:
            check(release(handle), call)
        except Exception as exc:
            first = first or exc
    if first is not None:
        raise first


def ptr(value: Any) -> int:
    """A device or host pointer (``CUdeviceptr``, int, ``None``) as a Python int."""
    return int(value) if value is not None else 0


def is_not_found(error: CUDAError) -> bool:
    """Whether a driver error means "no symbol of that name" (CUDA_ERROR_NOT_FOUND)."""
    return error.name == "CUDA_ERROR_NOT_FOUND"


def init() -> None:
    """``cuInit`` once per process; :class:`RealtimeError` when the bindings are missing,
    :class:`NoDeviceError` when the driver library is (the loader's own exception is not a
    :class:`CudaqError`) or sees no GPU."""
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
                raise NoDeviceError(msg) from None
            try:
                check(ret, "cuInit")
            except CUDAError as exc:
                if exc.name != "CUDA_ERROR_NO_DEVICE":
                    raise
                msg = (
                    "cuInit failed: CUDA_ERROR_NO_DEVICE: the NVIDIA driver sees no CUDA GPU "
                    "(CUDA_VISIBLE_DEVICES may hide them)"
                )
                raise NoDeviceError(msg) from None
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

    Creating the primary context is most of CUDA's start-up (~120 ms on an H200);
    ``cuda.bindings`` releases the GIL meanwhile.
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


def device_count() -> int:
    """Number of CUDA devices visible to this process (initialises CUDA, creates nothing)."""
    init()
    return int(check(driver().cuDeviceGetCount(), "cuDeviceGetCount"))


def _device(device: int) -> Any:
    """The ``CUdevice`` of an ordinal; an ordinal the process cannot see is named clearly."""
    init()
    ret = driver().cuDeviceGet(device)
    if int(ret[0]) != 0 and _result_name(ret[0])[0] == "CUDA_ERROR_INVALID_DEVICE":
        from skbuild_cudaq.realtime.errors import InvalidArgumentError

        count = device_count()
        msg = (
            f"device={device}: this process sees {count} CUDA device(s) "
            f"(ordinals 0..{count - 1}; check CUDA_VISIBLE_DEVICES)"
        )
        raise InvalidArgumentError(msg)
    return check(ret, "cuDeviceGet")


def ordinal_arch(device: int) -> str:
    """``sm_XY`` of the device with this ordinal (cached; creates no context)."""
    arch = _archs.get(device)
    if arch is None:
        arch = device_arch(_device(device))
        _archs[device] = arch
    return arch


def current_ordinal() -> int:
    """Ordinal of the current context's device; 0 when no context is current."""
    ctx, dev = current_device()
    return int(dev) if ctx is not None else 0


def primary_context(device: int) -> Any:
    """The primary context of device ``device``, retained once for the process.

    Does not make it current (see :func:`pushed`).
    """
    ctx = _primary.get(device)
    if ctx is None:
        dev = _device(device)
        with _lock:
            ctx = _primary.get(device)
            if ctx is None:
                ctx = check(driver().cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
                _primary[device] = ctx
    return ctx


@contextlib.contextmanager
def pushed(ctx: Any) -> Iterator[Any]:
    """Make ``ctx`` current for the block, then restore the caller's context.

    No driver call when ``ctx`` is current already (one ``cuCtxGetCurrent``).
    """
    drv = driver()
    current = check(drv.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if current is not None and int(current) == int(ctx):
        yield ctx
        return
    check(drv.cuCtxPushCurrent(ctx), "cuCtxPushCurrent")
    try:
        yield ctx
    finally:
        check(drv.cuCtxPopCurrent(), "cuCtxPopCurrent")
