"""Launchers for example_app's custom dispatch kernels.

Each factory looks the kernel up in the extension module (``get_device_kernel``;
the first lookup links the module) and returns a :class:`KernelLauncher` to hand
to ``Dispatcher.set_unified_launch``. At ``start()`` the dispatcher calls it with
a ``LaunchArgs``; the launcher picks the grid, block, cluster and cooperative
attribute its kernel needs and launches on ``args.stream``::

    from example_app import _core, launchers
    dispatcher.set_unified_launch(launchers.cooperative_grid(_core))

Several GPUs: pass the dispatcher's device, ``launchers.single_thread(_core,
device=1)``, so the kernel is looked up (and linked) for that GPU's architecture;
the launch itself goes to the GPU whose dispatcher calls the launcher.

Shapes:
- ``single_thread``: grid 1, block 1.
- ``cooperative_grid``: cooperative launch, one block per SM by default, never
  more blocks than can be co-resident (from the occupancy calculator).
- ``cluster``: one cluster of ``cluster_size`` blocks (sm_90+), grid = cluster.
- ``warp_parallel``: grid 1, block 32, ``32 * slot_size`` bytes of dynamic
  shared memory to stage requests (when the device allows it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from skbuild_cudaq.realtime import (
    InvalidArgumentError,
    LaunchConfig,
    get_device_kernel,
    launch_kernel,
)

__all__ = [
    "KernelLauncher",
    "cluster",
    "cooperative_grid",
    "py_single_thread",
    "single_thread",
    "warp_parallel",
]

WARP = 32
_DEFAULT_SHARED_LIMIT = 48 * 1024  # dynamic shared memory usable without opting in


def _driver() -> Any:
    from cuda.bindings import driver

    return driver


def _value(result: Any, what: str) -> Any:
    """Unpack a ``(CUresult, value)`` tuple or raise the run time's ``CUDAError(call, name,
    code)`` (``what`` is the call, e.g. ``cuDeviceGet``)."""
    from skbuild_cudaq.realtime import CUDAError

    code = result[0]
    if int(code) != 0:
        name = getattr(code, "name", None) or f"CUresult {int(code)}"
        raise CUDAError(what, str(name), int(code))
    return result[1] if len(result) > 1 else None


def _device_attribute(device: int, attribute: str) -> int:
    drv = _driver()
    dev = _value(drv.cuDeviceGet(device), "cuDeviceGet")
    attr = getattr(drv.CUdevice_attribute, attribute)
    return int(_value(drv.cuDeviceGetAttribute(attr, dev), f"cuDeviceGetAttribute({attribute})"))


@dataclass
class KernelLauncher:
    """A launcher: ``kernel`` plus a rule that turns ``LaunchArgs`` into a ``LaunchConfig``."""

    name: str
    kernel: Any  #: the ``Kernel`` from ``get_device_kernel`` (its ``.library`` is the module)
    configure: Callable[[Any, Any], LaunchConfig]  #: (kernel, LaunchArgs) -> LaunchConfig
    last_config: LaunchConfig | None = None

    @property
    def library(self) -> Any:
        return self.kernel.library

    def __call__(self, args: Any) -> bool:
        config = self.configure(self.kernel, args)
        self.last_config = config
        launch_kernel(self.kernel, config, args.stream, *args.kernel_args())
        return True

    def __repr__(self) -> str:
        return f"<{self.name} launcher>"


def single_thread(module: ModuleType, *, device: int | None = None) -> KernelLauncher:
    """``single_thread_dispatcher``: one thread polls, dispatches and publishes."""

    def configure(kernel: Any, args: Any) -> LaunchConfig:
        return LaunchConfig(grid=(1, 1, 1), block=(1, 1, 1))

    kernel = get_device_kernel(module, "single_thread_dispatcher", device=device)
    return KernelLauncher("single_thread_dispatcher", kernel, configure)


def py_single_thread(module: ModuleType, *, device: int | None = None) -> KernelLauncher:
    """``py_single_thread_dispatcher`` (src/py_dispatcher.py, written in Python): grid 1,
    block 1, as ``single_thread_dispatcher``."""

    def configure(kernel: Any, args: Any) -> LaunchConfig:
        return LaunchConfig(grid=(1, 1, 1), block=(1, 1, 1))

    kernel = get_device_kernel(module, "py_single_thread_dispatcher", device=device)
    return KernelLauncher("py_single_thread_dispatcher", kernel, configure)


def max_cooperative_blocks(kernel: Any, device: int, block: int, shared_mem: int = 0) -> int:
    """Blocks of ``block`` threads that can be co-resident (what a cooperative launch allows)."""
    drv = _driver()
    function = _value(drv.cuKernelGetFunction(kernel.handle), "cuKernelGetFunction")
    per_sm = int(
        _value(
            drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(function, block, shared_mem),
            "cuOccupancyMaxActiveBlocksPerMultiprocessor",
        )
    )
    sms = _device_attribute(device, "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT")
    return per_sm * sms


def cooperative_grid(
    module: ModuleType, block: int = 128, blocks: int | None = None, *, device: int | None = None
) -> KernelLauncher:
    """``cooperative_grid_dispatcher``: cooperative launch, every thread of the grid calls handlers.

    ``blocks`` defaults to one block per SM; it is checked against occupancy (a
    cooperative grid must be co-resident, else the launch fails).
    """
    if not 1 <= block <= 1024:
        msg = f"block={block}: 1..1024 threads"
        raise InvalidArgumentError(msg)

    def configure(kernel: Any, args: Any) -> LaunchConfig:
        limit = max_cooperative_blocks(kernel, args.device, block)
        if limit < 1:
            msg = f"cooperative_grid_dispatcher cannot run blocks of {block} threads on this GPU"
            raise InvalidArgumentError(msg)
        wanted = blocks
        if wanted is None:
            wanted = _device_attribute(args.device, "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT")
        if wanted > limit:
            msg = f"blocks={wanted}: at most {limit} blocks of {block} threads are co-resident"
            raise InvalidArgumentError(msg)
        return LaunchConfig(grid=(wanted, 1, 1), block=(block, 1, 1), cooperative=True)

    kernel = get_device_kernel(module, "cooperative_grid_dispatcher", device=device)
    return KernelLauncher("cooperative_grid_dispatcher", kernel, configure)


def cluster(
    module: ModuleType, cluster_size: int = 4, block: int = 128, *, device: int | None = None
) -> KernelLauncher:
    """``cluster_dispatcher`` (sm_90+): a grid of exactly one cluster of ``cluster_size`` blocks."""
    if not 1 <= cluster_size <= 8:
        msg = f"cluster_size={cluster_size}: 1..8 blocks (the portable cluster size)"
        raise InvalidArgumentError(msg)
    if not 1 <= block <= 1024:
        msg = f"block={block}: 1..1024 threads"
        raise InvalidArgumentError(msg)

    def configure(kernel: Any, args: Any) -> LaunchConfig:
        major = _device_attribute(args.device, "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR")
        if major < 9:
            msg = f"cluster_dispatcher needs thread-block clusters (sm_90+); device is sm_{major}x"
            raise InvalidArgumentError(msg)
        dims = (cluster_size, 1, 1)
        return LaunchConfig(grid=dims, block=(block, 1, 1), cluster=dims)

    kernel = get_device_kernel(module, "cluster_dispatcher", device=device)
    return KernelLauncher("cluster_dispatcher", kernel, configure)


def warp_shared_bytes(kernel: Any, device: int, slot_size: int) -> int:
    """Dynamic shared memory for ``warp_parallel_dispatcher`` to stage 32 slots, or 0.

    Above 48 KiB it opts the kernel in (``MAX_DYNAMIC_SHARED_SIZE_BYTES``); when
    32 slots do not fit at all the kernel reads requests from the ring directly.
    """
    wanted = WARP * slot_size
    if wanted <= _DEFAULT_SHARED_LIMIT:
        return wanted
    drv = _driver()
    optin = _device_attribute(device, "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")
    function = _value(drv.cuKernelGetFunction(kernel.handle), "cuKernelGetFunction")
    static = int(
        _value(
            drv.cuFuncGetAttribute(
                drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, function
            ),
            "cuFuncGetAttribute(SHARED_SIZE_BYTES)",
        )
    )
    if wanted + static > optin:
        return 0
    dev = _value(drv.cuDeviceGet(device), "cuDeviceGet")
    _value(
        drv.cuKernelSetAttribute(
            drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            wanted,
            kernel.handle,
            dev,
        ),
        "cuKernelSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
    )
    return wanted


def warp_parallel(module: ModuleType, *, device: int | None = None) -> KernelLauncher:
    """``warp_parallel_dispatcher``: 32 lanes poll their own slots (num_slots % 32 == 0)."""

    def configure(kernel: Any, args: Any) -> LaunchConfig:
        if args.num_slots % WARP != 0:
            msg = (
                f"warp_parallel_dispatcher needs num_slots to be a multiple of {WARP}, "
                f"got {args.num_slots}"
            )
            raise InvalidArgumentError(msg)
        shared = warp_shared_bytes(kernel, args.device, args.slot_size)
        return LaunchConfig(grid=(1, 1, 1), block=(WARP, 1, 1), shared_mem=shared)

    kernel = get_device_kernel(module, "warp_parallel_dispatcher", device=device)
    return KernelLauncher("warp_parallel_dispatcher", kernel, configure)


#: name -> factory, for the test server's ``--dispatcher=NAME``
LAUNCHERS: dict[str, Callable[..., KernelLauncher]] = {
    "single_thread": single_thread,
    "single_thread_dispatcher": single_thread,
    "py_single_thread": py_single_thread,
    "py_single_thread_dispatcher": py_single_thread,
    "cooperative_grid": cooperative_grid,
    "cooperative_grid_dispatcher": cooperative_grid,
    "cluster": cluster,
    "cluster_dispatcher": cluster,
    "warp_parallel": warp_parallel,
    "warp_parallel_dispatcher": warp_parallel,
}
