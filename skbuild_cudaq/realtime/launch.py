"""Launch helper for Python launchers: ``cuLaunchKernelEx`` with launch attributes.

Arguments are ctypes values, one per kernel parameter, in order:
``ctypes.c_void_p(ptr)`` for device pointers (pass the pointer as a Python
``int``, e.g. ``int(CUdeviceptr)``; the ``CUdeviceptr`` object itself is not a
kernel argument), ``ctypes.c_uint32(n)``, ``ctypes.c_uint64``, ... Thread-block
clusters (sm_90+) use ``CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION``; a cooperative
grid ``CU_LAUNCH_ATTRIBUTE_COOPERATIVE``.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

from skbuild_cudaq.realtime import _driver
from skbuild_cudaq.realtime._arguments import typed_arguments
from skbuild_cudaq.realtime.errors import InvalidArgumentError
from skbuild_cudaq.realtime.library import Kernel

__all__ = ["Dim3", "LaunchConfig", "check_driver_result", "launch_kernel"]

Dim3 = tuple[int, int, int]


_U32 = 0xFFFFFFFF


def _dim3(value: int | tuple[int, ...], what: str) -> Dim3:
    dims = (value,) if isinstance(value, int) else tuple(value)
    if not 1 <= len(dims) <= 3 or any(
        not isinstance(d, int) or isinstance(d, bool) or not 1 <= d <= _U32 for d in dims
    ):
        msg = f"{what} must be a positive int or a tuple of 1-3 positive ints, got {value!r}"
        raise InvalidArgumentError(msg)
    padded = (*dims, 1, 1)[:3]
    return (padded[0], padded[1], padded[2])


def _dims(value: object, what: str) -> Dim3:
    """``value`` as three dimensions, checked (an iterable of anything but ints too)."""
    if isinstance(value, (int, tuple, list)):
        return _dim3(value, what)  # type: ignore[arg-type]
    msg = f"{what} must be a positive int or a tuple of 1-3 positive ints, got {value!r}"
    raise InvalidArgumentError(msg)


@dataclass(frozen=True)
class LaunchConfig:
    """Grid, block, dynamic shared memory, cluster dimensions (None: no cluster), cooperative.

    Checked and normalised on construction: ``grid``, ``block`` and ``cluster`` are kept
    as 3-tuples (``LaunchConfig(4, 128) == LaunchConfig((4, 1, 1), (128, 1, 1))``), each
    dimension an int from 1 to 2**32 - 1; ``shared_mem`` is a byte count; the grid a
    multiple of the cluster. Limits of the GPU (1024 threads a block, ...) are the
    driver's to refuse at launch.
    """

    grid: int | tuple[int, ...]
    block: int | tuple[int, ...]
    shared_mem: int = 0
    cluster: int | tuple[int, ...] | None = None
    cooperative: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "grid", _dims(self.grid, "grid"))
        object.__setattr__(self, "block", _dims(self.block, "block"))
        if self.cluster is not None:
            object.__setattr__(self, "cluster", _dims(self.cluster, "cluster"))
        shared = self.shared_mem
        if not isinstance(shared, int) or isinstance(shared, bool) or not 0 <= shared <= _U32:
            msg = f"shared_mem must be >= 0, got {shared!r} (bytes of dynamic shared memory)"
            raise InvalidArgumentError(msg)
        cooperative: object = self.cooperative  # callers without type checking pass anything
        if not isinstance(cooperative, bool):
            msg = f"LaunchConfig.cooperative={cooperative!r}: expected True or False"
            raise InvalidArgumentError(msg)
        self.validate()

    @property
    def grid_dim(self) -> Dim3:
        return _dim3(self.grid, "grid")

    @property
    def block_dim(self) -> Dim3:
        return _dim3(self.block, "block")

    @property
    def cluster_dim(self) -> Dim3 | None:
        return None if self.cluster is None else _dim3(self.cluster, "cluster")

    def validate(self) -> None:
        """Check the dimensions again (construction already did)."""
        grid, _block, cluster = self.grid_dim, self.block_dim, self.cluster_dim
        if self.shared_mem < 0:
            msg = f"shared_mem must be >= 0, got {self.shared_mem}"
            raise InvalidArgumentError(msg)
        if cluster is not None and any(g % c for g, c in zip(grid, cluster, strict=True)):
            msg = f"grid {grid} is not a multiple of the cluster dimensions {cluster}"
            raise InvalidArgumentError(msg)


def _stream_handle(stream: Any) -> Any:
    drv = _driver.driver()
    if stream is None or stream == 0:
        return drv.CUstream(0)
    if isinstance(stream, int):
        return drv.CUstream(stream)
    handle = getattr(stream, "handle", None)  # e.g. a cuda.core Stream
    if handle is not None and not isinstance(stream, drv.CUstream):
        return drv.CUstream(int(handle))
    return stream


@typed_arguments(
    kernel="a Kernel from get_device_kernel(module, name)",
    config="LaunchConfig(grid=..., block=...)",
)
def launch_kernel(kernel: Kernel, config: LaunchConfig, stream: Any, *args: Any) -> None:
    """Enqueue ``kernel`` on ``stream`` (a ``CUstream``, an int handle, or 0) with ``args``.

    Raises :class:`CUDAError` with the driver's result when the launch is refused
    (e.g. a cooperative grid larger than fits, or clusters on a GPU without them).
    """
    config.validate()
    for index, arg in enumerate(args):
        if not isinstance(arg, (ctypes._SimpleCData, ctypes.Structure, ctypes.Union)):
            msg = (
                f"kernel argument {index} of {kernel.name} is {type(arg).__name__}, not a ctypes "
                "value: pass ctypes.c_void_p(int(ptr)) for pointers, ctypes.c_uint32(n), ..."
            )
            raise InvalidArgumentError(msg)
    drv = _driver.driver()
    func = kernel.function()
    grid, block, cluster = config.grid_dim, config.block_dim, config.cluster_dim

    attrs = []
    if cluster is not None:
        attr = drv.CUlaunchAttribute()
        attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster
        attrs.append(attr)
    if config.cooperative:
        attr = drv.CUlaunchAttribute()
        attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE
        attr.value.cooperative = 1
        attrs.append(attr)

    cfg = drv.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block
    cfg.sharedMemBytes = config.shared_mem
    cfg.hStream = _stream_handle(stream)
    cfg.attrs = attrs
    cfg.numAttrs = len(attrs)

    # void *params[] pointing at each ctypes value; both live until the call returns
    # (cuLaunchKernelEx copies the parameter values when it enqueues).
    params = (ctypes.c_void_p * max(len(args), 1))(*(ctypes.addressof(a) for a in args))
    _driver.check(
        drv.cuLaunchKernelEx(cfg, func, ctypes.addressof(params) if args else 0, 0),
        f"cuLaunchKernelEx({kernel.name!r})",
    )


@typed_arguments(call='the name of the driver call, e.g. "cuMemAlloc"')
def check_driver_result(ret: Any, call: str) -> Any:
    """Raise :class:`~skbuild_cudaq.realtime.CUDAError` unless ``ret`` (a
    ``cuda.bindings.driver`` call's return) is success; return its values.

    ``cuda.bindings.driver`` functions return ``(CUresult, value, ...)``: this returns
    ``None`` for a bare result, the value for ``(result, value)`` and the tuple of
    values for longer returns. ``call`` names the call in the error message, e.g.
    ``check_driver_result(drv.cuMemAlloc(n), "cuMemAlloc")``. For launchers of your own.
    """
    return _driver.check(ret, call)
