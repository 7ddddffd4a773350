"""Run-time side of skbuild-cudaq: link, load and drive realtime dispatch kernels.

Needs the ``runtime`` extra (cuda-bindings, nvidia-nvjitlink, numpy). Nothing here
touches CUDA at import time: the CUDA driver, nvJitLink and numpy are loaded by the
first call that needs them. Never imports settings/TOML code.

These are the verbs and value objects an application uses, and the errors it catches.
What a call returns and never needs constructing lives in its submodule:
:mod:`~skbuild_cudaq.realtime.library` (``Library``, ``Kernel``, ``DeviceHandler``),
:mod:`~skbuild_cudaq.realtime.link.linker` (``LinkResult``),
:mod:`~skbuild_cudaq.realtime.link.check` (``CheckReport`` and its parts),
:mod:`~skbuild_cudaq.realtime.graph` (``DeviceGraph``, ``find_device_runtime``);
the wire format's internals are in :mod:`~skbuild_cudaq.realtime.wire`, and every
run-time error in :mod:`~skbuild_cudaq.realtime.errors`.

Each name loads with its submodule on first use: a warm start that only looks a kernel
up imports the link and lookup modules, not the dispatcher, the rings or the UDP feeder
(importing every submodule up front would add ~40 ms to it).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers see; _FROM below is the same, for the run time
    from .bridge import Bridge, HostRingBridge
    from .dispatcher import Dispatcher, DispatcherConfig, FunctionTable, LaunchArgs
    from .errors import (
        CUDAError,
        DeviceCodeError,
        InvalidArgumentError,
        LibraryConflictError,
        LinkError,
        NoDeviceError,
        RealtimeError,
        RingError,
    )
    from .graph import GraphMailbox, capture_device_graph
    from .host._shm import connect_host_ring
    from .host.dispatcher import HostDispatcher
    from .host.handlers import get_host_handler
    from .host.udp import UdpClient, UdpFeeder
    from .launch import LaunchConfig, check_driver_result, launch_kernel
    from .library import get_device_handler, get_device_kernel, get_library, release_library
    from .link.cache import LinkCache
    from .link.check import check_package
    from .link.linker import LinkOptions, link_device_code
    from .ring import RingClient, RingLayout
    from .wire import function_id

#: submodule -> the names this package takes from it (the import block above)
_FROM: dict[str, tuple[str, ...]] = {
    "host._shm": ("connect_host_ring",),
    "bridge": ("Bridge", "HostRingBridge"),
    "link.cache": ("LinkCache",),
    "link.check": ("check_package",),
    "dispatcher": ("Dispatcher", "DispatcherConfig", "FunctionTable", "LaunchArgs"),
    "errors": (
        "CUDAError",
        "DeviceCodeError",
        "InvalidArgumentError",
        "LibraryConflictError",
        "LinkError",
        "NoDeviceError",
        "RealtimeError",
        "RingError",
    ),
    "graph": ("GraphMailbox", "capture_device_graph"),
    "host.handlers": ("get_host_handler",),
    "host.dispatcher": ("HostDispatcher",),
    "launch": ("LaunchConfig", "check_driver_result", "launch_kernel"),
    "library": ("get_device_handler", "get_device_kernel", "get_library", "release_library"),
    "link.linker": ("LinkOptions", "link_device_code"),
    "ring": ("RingClient", "RingLayout"),
    "host.udp": ("UdpClient", "UdpFeeder"),
    "wire": ("function_id",),
}
_EXPORTS = {name: module for module, names in _FROM.items() for name in names}

__all__ = [
    "Bridge",
    "CUDAError",
    "DeviceCodeError",
    "Dispatcher",
    "DispatcherConfig",
    "FunctionTable",
    "GraphMailbox",
    "HostDispatcher",
    "HostRingBridge",
    "InvalidArgumentError",
    "LaunchArgs",
    "LaunchConfig",
    "LibraryConflictError",
    "LinkCache",
    "LinkError",
    "LinkOptions",
    "NoDeviceError",
    "RealtimeError",
    "RingClient",
    "RingError",
    "RingLayout",
    "UdpClient",
    "UdpFeeder",
    "capture_device_graph",
    "check_driver_result",
    "check_package",
    "connect_host_ring",
    "function_id",
    "get_device_handler",
    "get_device_kernel",
    "get_host_handler",
    "get_library",
    "launch_kernel",
    "link_device_code",
    "release_library",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
