"""Run-time side of skbuild-cudaq: link, load and drive realtime dispatch kernels.

Needs the ``runtime`` extra (cuda-bindings, nvidia-nvjitlink, pyelftools).
Nothing here touches CUDA at import time: names are loaded lazily, and CUDA is
initialised by the first call that needs it. Never imports settings/TOML code.
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> submodule that defines it
_EXPORTS: dict[str, str] = {
    # errors
    "CUDAError": "errors",
    "InvalidArgumentError": "errors",
    "LinkError": "errors",
    "VersionMismatchError": "errors",
    "RealtimeError": "errors",
    "LibraryConflictError": "errors",
    "LinkCacheError": "errors",
    "DeviceCodeError": "errors",
    # device code of a binary, link, load, lookups
    "DeviceCode": "device_code",
    "device_code_of": "device_code",
    "link_device_code": "link",
    "LinkOptions": "link",
    "LinkCache": "cache",
    "Library": "library",
    "Kernel": "library",
    "get_device_kernel": "library",
    "get_device_handler": "library",
    "get_library": "library",
    "release_library": "library",
    "LinkResult": "link",
    "LaunchConfig": "launch",
    "launch_kernel": "launch",
    # wire format and rings (pure Python)
    "fnv1a_32": "wire",
    "function_id": "wire",
    "RequestHeader": "wire",
    "ResponseHeader": "wire",
    "RingLayout": "_ring",
    "RingClient": "_ring",
    # dispatcher, bridges, host path
    "DispatcherConfig": "dispatcher",
    "Dispatcher": "dispatcher",
    "LaunchArgs": "dispatcher",
    "FunctionTable": "dispatcher",
    "Bridge": "bridge",
    "HostRingBridge": "bridge",
    "HostDispatcher": "host_path",
    "UdpBridge": "udp",
    "UdpClient": "udp",
}

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
