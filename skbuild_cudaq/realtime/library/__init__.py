"""The linked module (``CUlibrary``), its kernels and exported handlers.

One module per job: :mod:`.symbols` (a cubin's ELF symbols, no CUDA),
:mod:`.loaded` (:class:`Library`: link, load, look up; and its handles,
:class:`Kernel` and :class:`DeviceHandler`), :mod:`.registry` (the process-wide
registry and the contract lookups).

:class:`Library` links lazily (on first use), loads with ``cuLibraryLoadData``
and looks names up: kernels with ``cuLibraryGetKernel``, handlers through the
device global ``cudaq_handler_<name>`` that holds the handler's address
(``CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION``). A :class:`Kernel` keeps its library
alive.

The contract lookups :func:`get_device_kernel` and :func:`get_device_handler`
go through a process-wide registry: whichever comes first links and loads the
module's device code; the kernel and the handlers of one dispatcher must come
from that same binary, so a lookup naming another binary raises
:class:`LibraryConflictError` until :func:`release_library` is called.

Several GPUs: the registry holds one :class:`Library` per architecture (one
link per ``sm_XY``: GPUs of one architecture share the linked cubin and its
cache entry). A ``CUlibrary`` is context-independent, so a :class:`Kernel`
launches on every GPU of its architecture (in the current context); but a
handler's address is per context, so handler lookups take ``device=`` (the
device's primary context; ``None``: the current context, or device 0's).
"""

from __future__ import annotations

from skbuild_cudaq.realtime.library.loaded import DeviceHandler, Kernel, Library
from skbuild_cudaq.realtime.library.registry import (
    get_device_handler,
    get_device_kernel,
    get_graph_library,
    get_library,
    loaded_libraries,
    release_library,
)
from skbuild_cudaq.realtime.library.symbols import HANDLER_PREFIX, ModuleSymbols, cubin_symbols

__all__ = [
    "HANDLER_PREFIX",
    "DeviceHandler",
    "Kernel",
    "Library",
    "ModuleSymbols",
    "cubin_symbols",
    "get_device_handler",
    "get_device_kernel",
    "get_graph_library",
    "get_library",
    "loaded_libraries",
    "release_library",
]
