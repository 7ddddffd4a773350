"""Run-time side of skbuild-cudaq: link, load and drive realtime dispatch kernels.

Needs the ``runtime`` extra (cuda-bindings, nvidia-nvjitlink, numpy).
Nothing here touches CUDA at import time: names are loaded lazily, and CUDA is
initialised by the first call that needs it. Never imports settings/TOML code.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# public name -> submodule that defines it
_EXPORTS: dict[str, str] = {
    # errors (every run-time error, all under RealtimeError) and the driver-result check
    "CUDAError": "errors",
    "DeviceRuntimeNotFoundError": "errors",
    "InvalidArgumentError": "errors",
    "LinkError": "errors",
    "VersionMismatchError": "errors",
    "RealtimeError": "errors",
    "LibraryConflictError": "errors",
    "LinkCacheError": "errors",
    "DeviceCodeError": "errors",
    "ProtocolError": "errors",
    "RingError": "errors",
    "RingProtocolError": "errors",
    "HostDispatcherError": "errors",
    "UdpFeederError": "errors",
    "UdpBridgeError": "errors",
    "check_driver_result": "errors",
    # device code of a binary, link, load, lookups
    "DeviceCode": "device_code",
    "device_code_of": "device_code",
    "link_device_code": "link",
    "link_with_options": "link",
    "LinkOptions": "link",
    "LinkResult": "link",
    "LinkCache": "cache",
    "Library": "library",
    "Kernel": "library",
    "get_device_kernel": "library",
    "get_device_handler": "library",
    "get_host_handler": "host_handlers",
    "NativeHostHandler": "host_handlers",
    "DeviceHandler": "library",
    "get_library": "library",
    "release_library": "library",
    "LaunchConfig": "launch",
    "launch_kernel": "launch",
    # checking built wheels and installed distributions (no GPU)
    "check_wheel": "check",
    "check_distribution": "check",
    "CheckReport": "check",
    "ModuleCheck": "check",
    "ArchCheck": "check",
    "CheckProblem": "check",
    # wire format and rings (pure Python)
    "fnv1a_32": "wire",
    "function_id": "wire",
    "RequestHeader": "wire",
    "ResponseHeader": "wire",
    "RingLayout": "ring",
    "RingClient": "ring",
    # dispatchers (device and host path), bridges, the UDP feeder
    "DispatcherConfig": "dispatcher",
    "Dispatcher": "dispatcher",
    "LaunchArgs": "dispatcher",
    "FunctionTable": "dispatcher",
    "Bridge": "bridge",
    "HostRingBridge": "bridge",
    "HostDispatcher": "host_path",
    "UdpFeeder": "udp",
    "UdpBridge": "udp",
    "UdpClient": "udp",
    # graph handlers (GRAPH_LAUNCH entries)
    "GraphMailbox": "graph",
    "DeviceGraph": "graph",
    "capture_device_graph": "graph",
    "find_device_runtime": "graph",
}

if TYPE_CHECKING:  # what type checkers see; at run time the names load lazily
    from .bridge import (
        Bridge as Bridge,
    )
    from .bridge import (
        HostRingBridge as HostRingBridge,
    )
    from .cache import (
        LinkCache as LinkCache,
    )
    from .check import (
        ArchCheck as ArchCheck,
    )
    from .check import (
        CheckProblem as CheckProblem,
    )
    from .check import (
        CheckReport as CheckReport,
    )
    from .check import (
        ModuleCheck as ModuleCheck,
    )
    from .check import (
        check_distribution as check_distribution,
    )
    from .check import (
        check_wheel as check_wheel,
    )
    from .device_code import (
        DeviceCode as DeviceCode,
    )
    from .device_code import (
        device_code_of as device_code_of,
    )
    from .dispatcher import (
        Dispatcher as Dispatcher,
    )
    from .dispatcher import (
        DispatcherConfig as DispatcherConfig,
    )
    from .dispatcher import (
        FunctionTable as FunctionTable,
    )
    from .dispatcher import (
        LaunchArgs as LaunchArgs,
    )
    from .errors import (
        CUDAError as CUDAError,
    )
    from .errors import (
        DeviceCodeError as DeviceCodeError,
    )
    from .errors import (
        DeviceRuntimeNotFoundError as DeviceRuntimeNotFoundError,
    )
    from .errors import (
        HostDispatcherError as HostDispatcherError,
    )
    from .errors import (
        InvalidArgumentError as InvalidArgumentError,
    )
    from .errors import (
        LibraryConflictError as LibraryConflictError,
    )
    from .errors import (
        LinkCacheError as LinkCacheError,
    )
    from .errors import (
        LinkError as LinkError,
    )
    from .errors import (
        ProtocolError as ProtocolError,
    )
    from .errors import (
        RealtimeError as RealtimeError,
    )
    from .errors import (
        RingError as RingError,
    )
    from .errors import (
        RingProtocolError as RingProtocolError,
    )
    from .errors import (
        UdpBridgeError as UdpBridgeError,
    )
    from .errors import (
        UdpFeederError as UdpFeederError,
    )
    from .errors import (
        VersionMismatchError as VersionMismatchError,
    )
    from .errors import (
        check_driver_result as check_driver_result,
    )
    from .graph import (
        DeviceGraph as DeviceGraph,
    )
    from .graph import (
        GraphMailbox as GraphMailbox,
    )
    from .graph import (
        capture_device_graph as capture_device_graph,
    )
    from .graph import (
        find_device_runtime as find_device_runtime,
    )
    from .host_handlers import (
        NativeHostHandler as NativeHostHandler,
    )
    from .host_handlers import (
        get_host_handler as get_host_handler,
    )
    from .host_path import (
        HostDispatcher as HostDispatcher,
    )
    from .launch import (
        LaunchConfig as LaunchConfig,
    )
    from .launch import (
        launch_kernel as launch_kernel,
    )
    from .library import (
        DeviceHandler as DeviceHandler,
    )
    from .library import (
        Kernel as Kernel,
    )
    from .library import (
        Library as Library,
    )
    from .library import (
        get_device_handler as get_device_handler,
    )
    from .library import (
        get_device_kernel as get_device_kernel,
    )
    from .library import (
        get_library as get_library,
    )
    from .library import (
        release_library as release_library,
    )
    from .link import (
        LinkOptions as LinkOptions,
    )
    from .link import (
        LinkResult as LinkResult,
    )
    from .link import (
        link_device_code as link_device_code,
    )
    from .link import (
        link_with_options as link_with_options,
    )
    from .ring import (
        RingClient as RingClient,
    )
    from .ring import (
        RingLayout as RingLayout,
    )
    from .udp import (
        UdpBridge as UdpBridge,
    )
    from .udp import (
        UdpClient as UdpClient,
    )
    from .udp import (
        UdpFeeder as UdpFeeder,
    )
    from .wire import (
        RequestHeader as RequestHeader,
    )
    from .wire import (
        ResponseHeader as ResponseHeader,
    )
    from .wire import (
        fnv1a_32 as fnv1a_32,
    )
    from .wire import (
        function_id as function_id,
    )

__all__ = sorted(_EXPORTS)  # noqa: PLE0605  (names are loaded lazily)


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
