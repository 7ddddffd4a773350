"""The process-wide registry of linked modules and the contract lookups
:func:`get_device_kernel` / :func:`get_device_handler` (see
:mod:`skbuild_cudaq.realtime.library`)."""

from __future__ import annotations

import threading
from pathlib import Path

from skbuild_cudaq.realtime import _driver
from skbuild_cudaq.realtime._arguments import typed_arguments
from skbuild_cudaq.realtime.errors import LibraryConflictError
from skbuild_cudaq.realtime.library.loaded import Kernel, Library
from skbuild_cudaq.realtime.link._binary import Binary, BridgeCode, binary_path, bridge_files

__all__ = [
    "get_device_handler",
    "get_device_kernel",
    "get_graph_library",
    "get_library",
    "loaded_libraries",
    "release_library",
]


_registry_lock = threading.Lock()
# sm_XY -> the process's linked module for that architecture; all of one binary and bridge
_libraries: dict[str, Library] = {}
# sm_XY -> the same module linked with the graph dispatch kernel and the device runtime
_graph_libraries: dict[str, Library] = {}


def _describe_bridge(bridge: tuple[Path, ...] | None) -> str:
    if bridge is None:
        return "the host-ring hooks"
    return "the bridge " + ", ".join(str(f) for f in bridge)


@typed_arguments()
def get_library(
    binary: Binary,
    *,
    arch: str | None = None,
    bridge: BridgeCode = None,
    device: int | None = None,
) -> Library:
    """The process's linked module for ``binary`` (links and loads it on first call).

    One module per architecture: ``device`` picks the GPU whose architecture
    counts (None: the current context's device, or device 0); GPUs of one
    architecture share one module (one link, one cache entry).
    ``bridge``: LTO-IR fatbins of a bridge of your own, linked instead of the
    host-ring hooks (see :doc:`/guides/bridges`); None accepts whatever the
    module was linked with (the host-ring hooks when this call links it).
    Raises :class:`LibraryConflictError` if another binary's device code is
    already linked in this process, or this one with another bridge (see
    :func:`release_library`).
    """
    path = binary_path(binary)
    wanted = bridge_files(bridge)
    with _registry_lock:
        for key in [k for k, lib in _libraries.items() if lib.closed]:
            del _libraries[key]
        first = next(iter(_libraries.values()), None)
        if first is not None:
            if first.path != path:
                msg = (
                    f"device code of {first.path} is already linked in this process; a "
                    f"dispatcher's kernel and handlers must come from one binary, so {path} "
                    "cannot be used as well (call skbuild_cudaq.realtime.release_library() "
                    "first to switch binaries)"
                )
                raise LibraryConflictError(msg)
            if wanted is not None and first.bridge != wanted:
                msg = (
                    f"device code of {path} is already linked with "
                    f"{_describe_bridge(first.bridge)}, not with {_describe_bridge(wanted)}: "
                    "link with the bridge before the first lookup "
                    "(get_library(module, bridge=...)), or call "
                    "skbuild_cudaq.realtime.release_library() first"
                )
                raise LibraryConflictError(msg)
            wanted = first.bridge
            if arch is None:  # which architecture does this lookup need?
                ordinal = _driver.current_ordinal() if device is None else device
                arch = _driver.ordinal_arch(ordinal)
            found = _libraries.get(arch)
            if found is not None:
                return found
        library = Library(binary, arch=arch, bridge=wanted)
        library.load(device)
        assert library.arch is not None
        _libraries[library.arch] = library
        return library


def get_graph_library(binary: Binary, *, device: int | None = None) -> Library:
    """``binary``'s module linked with the graph dispatch kernel and the device runtime.

    The module of a dispatcher that serves graph handlers (GRAPH_LAUNCH entries): the
    same device code as :func:`get_library`'s (same binary and bridge), plus
    ``cudaq_realtime_graph_dispatch`` and ``libcudadevrt.a``, linked on first use (and
    cached like every link). Its handler addresses are its own: the dispatcher looks its
    DEVICE_CALL entries up in it by name. :func:`release_library` closes it too.
    """
    primary = get_library(binary, device=device)
    with _registry_lock:
        arch = primary.arch
        assert arch is not None
        found = _graph_libraries.get(arch)
        if found is not None and not found.closed:
            return found
        library = Library(binary, arch=arch, bridge=primary.bridge, graph_launch=True)
        library.load(device)
        _graph_libraries[arch] = library
        return library


def loaded_libraries() -> dict[str, Library]:
    """The process's linked modules, by architecture (a copy; empty before the first lookup)."""
    with _registry_lock:
        return {arch: lib for arch, lib in _libraries.items() if not lib.closed}


def release_library() -> None:
    """Close and forget the process's linked modules (no-op when there are none).

    Kernels and handler addresses looked up from them become invalid: stop every
    dispatcher using them first (while one runs, :class:`RealtimeError` and nothing is
    released).
    """
    with _registry_lock:
        libraries = [*_libraries.values(), *_graph_libraries.values()]
        for library in libraries:
            library._refuse_close_in_use()
        _libraries.clear()
        _graph_libraries.clear()
    for library in libraries:
        library.close()


@typed_arguments()
def get_device_kernel(module: Binary, name: str, *, device: int | None = None) -> Kernel:
    """Launchable handle of the kernel ``name`` in ``module``'s linked device code (contract).

    ``device``: the GPU it is for (None: the current context's device, or device
    0). The handle serves every GPU of that architecture; a launch goes to the
    current context's GPU.
    """
    return get_library(module, device=device).get_kernel(name)


@typed_arguments()
def get_device_handler(module: Binary, name: str, *, device: int | None = None) -> int:
    """Device address of the handler ``name`` exported by ``module`` (contract).

    Addresses are per GPU: ``device`` picks it (None: the current context, or
    device 0's primary context). Put it only in the table of a dispatcher on
    that device; ``start()`` refuses an address from another GPU.
    """
    return get_library(module, device=device).get_handler(name, device)
