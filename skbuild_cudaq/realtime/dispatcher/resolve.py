"""Which linked module a device dispatcher serves, and whether its table belongs to it.

:func:`resolve_library` finds the :class:`~skbuild_cudaq.realtime.library.Library` from
``module=`` or, without it, from the launcher (its ``library``, or its
``kernel.library``: the example launchers carry one). :func:`check_table`
refuses DEVICE_CALL entries the GPU cannot call from that module (handlers of
another module or looked up on another GPU) before anything runs.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from skbuild_cudaq.realtime import _driver
from skbuild_cudaq.realtime.dispatcher.table import FunctionEntry, FunctionTable

__all__ = ["check_launcher_arch", "check_table", "resolve_library"]


def resolve_library(
    module: ModuleType | str | None, launcher: Any, bridge: Any, device: int
) -> Any:
    """The library the dispatcher on ``device`` serves (None when nothing names one)."""
    from skbuild_cudaq.realtime.link._binary import bridge_files

    wanted = bridge_files(getattr(bridge, "device_code", None))
    launcher_library = getattr(launcher, "library", None)
    if launcher_library is None:
        launcher_library = getattr(getattr(launcher, "kernel", None), "library", None)
    if module is not None:
        from skbuild_cudaq.realtime.library import get_library

        linked = get_library(module, bridge=wanted, device=device)
        check_launcher_arch(launcher_library, getattr(linked, "arch", None), device)
        return linked
    library = launcher_library
    if getattr(library, "arch", None) is not None:
        check_launcher_arch(library, _driver.ordinal_arch(device), device)
    if library is not None and wanted is not None and library.bridge != wanted:
        from skbuild_cudaq.realtime.errors import LibraryConflictError

        msg = (
            f"the launcher's kernel was linked without this bridge's device code "
            f"({', '.join(map(str, wanted))}): look it up after get_library(module, "
            "bridge=bridge.device_code)"
        )
        raise LibraryConflictError(msg)
    return library


def check_launcher_arch(launcher_library: Any, arch: str | None, device: int) -> None:
    """A launcher's kernel must be linked for this dispatcher's GPU architecture."""
    linked = getattr(launcher_library, "arch", None)
    if linked is None or arch is None or linked == arch:
        return
    from skbuild_cudaq.realtime.errors import LibraryConflictError

    msg = (
        f"the launcher's kernel is linked for {linked}, but device {device} is {arch}: "
        f"look the kernel up for this GPU (get_device_kernel(module, name, "
        f"device={device})) before making the launcher"
    )
    raise LibraryConflictError(msg)


def check_table(table: FunctionTable, library: Any, device: int) -> None:
    """Refuse DEVICE_CALL entries the dispatch kernel on ``device`` cannot call from
    ``library``. (Entries of the other modes are answered -2, or served by the graph
    dispatch kernel: see :mod:`.plan`.)"""
    from skbuild_cudaq.realtime.errors import InvalidArgumentError

    entries = table.device_entries()
    if not entries:
        return
    if library is None:
        msg = (
            "cannot check the DEVICE_CALL entries: pass module= to Dispatcher (the "
            "extension whose handlers it serves) or a launcher with a .kernel"
        )
        raise InvalidArgumentError(msg)
    # A handler's value is the same on every GPU of one cubin (an index into the
    # module's function table), so where it was looked up is told by the value
    # get_device_handler returned, which remembers its GPU.
    looked_up_elsewhere = [e for e in entries if e.device is not None and e.device != device]
    if looked_up_elsewhere:
        names = ", ".join(
            f"{e.name!r} (looked up with get_device_handler(..., device={e.device}))"
            for e in looked_up_elsewhere
        )
        msg = (
            f"DEVICE_CALL entries looked up on another GPU: {names}; this dispatcher runs "
            f"on device {device}: look them up with get_device_handler(module, name, "
            f"device={device})"
        )
        raise InvalidArgumentError(msg)
    foreign = [e for e in entries if not library.contains(e.address, device=device)]
    elsewhere = _other_devices(foreign, library, device)
    if elsewhere:
        names = ", ".join(
            f"{e.name!r} at {e.address:#x} (handler {name!r} of device {other})"
            for e, other, name in elsewhere
        )
        msg = (
            f"DEVICE_CALL entries looked up on another GPU: {names}; this dispatcher runs "
            f"on device {device}, and a handler's address is per GPU: look it up with "
            f"get_device_handler(module, name, device={device})"
        )
        raise InvalidArgumentError(msg)
    if foreign:
        names = ", ".join(f"{e.name!r} at {e.address:#x}" for e in foreign)
        msg = (
            f"DEVICE_CALL entries not in the linked module: {names}; look handlers up with "
            "get_device_handler() on the same module as the dispatch kernel"
        )
        raise InvalidArgumentError(msg)


def _other_devices(entries: list[FunctionEntry], library: Any, device: int) -> list[Any]:
    """``(entry, device, handler)`` for entries that are handler addresses of another GPU."""
    if not entries:
        return []
    from skbuild_cudaq.realtime.library import loaded_libraries

    libraries = [library, *(lib for lib in loaded_libraries().values() if lib is not library)]
    found = []
    for entry in entries:
        owners = [
            (other, name)
            for lib in libraries
            for other, name in lib.owners(entry.address)
            if other != device
        ]
        if owners:
            found.append((entry, *owners[0]))
    return found
