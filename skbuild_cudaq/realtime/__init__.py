"""Run-time side of skbuild-cudaq: link, load and drive realtime dispatch kernels.

Needs the ``runtime`` extra (cuda-bindings, nvidia-nvjitlink, numpy). Nothing here
touches CUDA at import time: the CUDA driver, nvJitLink and numpy are loaded by the
first call that needs them. Never imports settings/TOML code.

These are the verbs and value objects an application uses, and the errors it catches.
What a call returns and never needs constructing lives in its submodule:
:mod:`~skbuild_cudaq.realtime.library` (``Library``, ``Kernel``, ``DeviceHandler``),
:mod:`~skbuild_cudaq.realtime.link` (``LinkResult``),
:mod:`~skbuild_cudaq.realtime.check` (``CheckReport`` and its parts),
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
    from ._shm import connect_host_ring
    from .bridge import Bridge, HostRingBridge
    from .cache import LinkCache
    from .check import check_package
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
        check_driver_result,
    )
    from .graph import GraphMailbox, capture_device_graph
    from .host_handlers import get_host_handler
    from .host_path import HostDispatcher
    from .launch import LaunchConfig, launch_kernel
    from .library import get_device_handler, get_device_kernel, get_library, release_library
    from .link import LinkOptions, link_device_code
    from .ring import RingClient, RingLayout
    from .udp import UdpClient, UdpFeeder
    from .wire import function_id

#: submodule -> the names this package takes from it (the import block above)
_FROM: dict[str, tuple[str, ...]] = {
    "_shm": ("connect_host_ring",),
    "bridge": ("Bridge", "HostRingBridge"),
    "cache": ("LinkCache",),
    "check": ("check_package",),
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
        "check_driver_result",
    ),
    "graph": ("GraphMailbox", "capture_device_graph"),
    "host_handlers": ("get_host_handler",),
    "host_path": ("HostDispatcher",),
    "launch": ("LaunchConfig", "launch_kernel"),
    "library": ("get_device_handler", "get_device_kernel", "get_library", "release_library"),
    "link": ("LinkOptions", "link_device_code"),
    "ring": ("RingClient", "RingLayout"),
    "udp": ("UdpClient", "UdpFeeder"),
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


#: compiled submodules: a missing one is said in one line (see _compiled)
_COMPILED = ("_native",)


def _compiled(name: str) -> Any:
    """The compiled submodule ``name``; missing, a NotBuiltError saying why, in one line
    (``from . import _native`` asks this module's ``__getattr__`` first)."""
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{name}":
            raise
        from skbuild_cudaq._paths import source_tree_hint

        from .errors import NotBuiltError

        msg = source_tree_hint() or (
            f"skbuild-cudaq's compiled host path ({__name__}.{name}) is missing: this "
            "installation was built without it; reinstall skbuild-cudaq (it needs a C "
            "compiler and Python's headers to build)"
        )
        raise NotBuiltError(msg) from None


def __getattr__(name: str) -> Any:
    if name in _COMPILED:
        return _compiled(name)
    module = _EXPORTS.get(name)
    if module is None:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
