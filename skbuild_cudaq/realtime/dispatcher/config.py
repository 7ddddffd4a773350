"""What a device dispatcher serves and what its kernel is launched with:
:class:`DispatcherConfig` -> (its :class:`~skbuild_cudaq.realtime.RingLayout`) ->
:class:`LaunchArgs` -> the kernel parameters."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from skbuild_cudaq.realtime.ring.layout import RingLayout

__all__ = [
    "BUILTIN_KERNEL",
    "BUILTIN_KERNEL_1024",
    "BUILTIN_KERNEL_SHARED",
    "DispatcherConfig",
    "LaunchArgs",
    "Launcher",
]

BUILTIN_KERNEL = "cudaq_realtime_unified_dispatch"
#: The built-in kernel built with ``__launch_bounds__(1024)``: what ``start()`` launches
#: for a ``block_size`` over :data:`BUILTIN_KERNEL`'s own limit.
BUILTIN_KERNEL_1024 = "cudaq_realtime_unified_dispatch_1024"
#: The built-in kernel polling a shared ring, which ``start()`` launches for
#: ``DispatcherConfig(shared_ring=True)`` (a table without graph handlers).
BUILTIN_KERNEL_SHARED = "cudaq_realtime_unified_dispatch_shared"


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class DispatcherConfig:
    """What the dispatcher serves: device ordinal, ring shape, built-in kernel block size."""

    device: int = 0
    num_slots: int = 64
    slot_size: int = 256  #: bytes per slot (24-byte header and payload), a multiple of 8
    #: threads of the built-in kernel's one block (over 512, ``start()`` launches its
    #: 1024-thread build, :data:`BUILTIN_KERNEL_1024`)
    block_size: int = 128
    stop_timeout: float = 10.0  #: seconds stop() waits for the kernel to exit
    #: A host dispatcher consumes the same ring (``HostDispatcher(..., shared_ring=True)``
    #: over this dispatcher's bridge and table): the device path serves every request but
    #: the table's HOST_CALL ones, which it leaves to the host dispatcher. Built-in kernel
    #: and host-ring bridge only. See ``docs/guides/dispatcher.md``, "A shared ring".
    shared_ring: bool = False

    #: the ring's shape as one value object (validated there, and only there)
    layout: RingLayout = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        from skbuild_cudaq.realtime.errors import InvalidArgumentError

        object.__setattr__(self, "layout", RingLayout(self.num_slots, self.slot_size))
        if not _is_int(self.block_size) or not 1 <= self.block_size <= 1024:
            msg = f"block_size={self.block_size!r}: the built-in kernel runs 1..1024 threads"
            raise InvalidArgumentError(msg)
        if not _is_int(self.device) or self.device < 0:
            msg = f"device={self.device!r}: a CUDA device ordinal is an int >= 0"
            raise InvalidArgumentError(msg)
        timeout: object = self.stop_timeout
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0:
            msg = (
                f"stop_timeout={timeout!r}: the seconds stop() waits for the kernel to exit, "
                "a number > 0"
            )
            raise InvalidArgumentError(msg)
        shared: object = self.shared_ring
        if not isinstance(shared, bool):
            msg = f"shared_ring={shared!r}: expected True or False"
            raise InvalidArgumentError(msg)

    @property
    def max_payload(self) -> int:
        return self.layout.max_payload


@dataclass(frozen=True)
class LaunchArgs:
    """Everything a dispatch kernel needs, handed to a launcher by :meth:`Dispatcher.start`.

    Pointers are device addresses as ints. :meth:`kernel_args` gives the six
    parameters every dispatch kernel takes, in its signature's order
    (``transport_ctx, slot_size, table, table_count, shutdown_flag, stats``), as
    ctypes values for ``launch_kernel``.
    """

    transport_ctx: int
    slot_size: int
    table: int
    table_count: int
    shutdown_flag: int
    stats: int
    stream: Any  #: the dispatcher's non-blocking ``CUstream``: launch on it
    device: int = 0
    num_slots: int = 0  #: the ring's slot count (warp-parallel kernels need a multiple of 32)

    @classmethod
    def for_layout(cls, layout: RingLayout, **fields: Any) -> LaunchArgs:
        """Launch arguments whose ring shape is ``layout``'s (the one route to the kernel)."""
        return cls(slot_size=layout.slot_size, num_slots=layout.num_slots, **fields)

    def kernel_args(
        self,
    ) -> tuple[
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_void_p,
        ctypes.c_void_p,
    ]:
        """``(transport_ctx, slot_size, table, table_count, shutdown_flag, stats)``."""
        return (
            ctypes.c_void_p(self.transport_ctx),
            ctypes.c_uint32(self.slot_size),
            ctypes.c_void_p(self.table),
            ctypes.c_uint32(self.table_count),
            ctypes.c_void_p(self.shutdown_flag),
            ctypes.c_void_p(self.stats),
        )


#: A launcher, which launches a dispatch kernel on ``args.stream``; returns None/True (ok) or
#: False (failed), or raises.
Launcher = Callable[[LaunchArgs], "bool | None"]
