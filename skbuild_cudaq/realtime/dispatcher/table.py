"""The dispatcher's function table: one table for both paths.

DEVICE_CALL entries (handler addresses) are packed into device memory for a
device :class:`~skbuild_cudaq.realtime.Dispatcher`; HOST_CALL entries (Python
callables) are served by a :class:`~skbuild_cudaq.realtime.HostDispatcher`
(``HostDispatcher(layout, table)``). A device dispatcher refuses HOST_CALL
entries at ``start()``: nothing on the GPU would serve them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DEVICE_CALL",
    "HOST_CALL",
    "SHAPE_LAUNCH",
    "SHAPE_THREAD",
    "FunctionEntry",
    "FunctionTable",
]

DEVICE_CALL = 0  # CUDAQ_DISPATCH_DEVICE_CALL
HOST_CALL = 2  # CUDAQ_DISPATCH_HOST_CALL
SHAPE_LAUNCH = 0  # CUDAQ_HANDLER_SHAPE_LAUNCH: every thread of the launch calls the handler
SHAPE_THREAD = 1  # CUDAQ_HANDLER_SHAPE_THREAD: one thread serves one request
_SHAPES = {"launch": SHAPE_LAUNCH, "thread": SHAPE_THREAD}
# cudaq_function_entry_t: handler, function_id, dispatch_mode, shape, reserved[2]
_ENTRY = struct.Struct("<QIBB2x")
assert _ENTRY.size == 16


@dataclass(frozen=True)
class FunctionEntry:
    """One function-table entry: a device handler address or a host callable."""

    name: str
    function_id: int
    dispatch_mode: int
    address: int = 0  #: device address (DEVICE_CALL)
    callable: Callable[..., Any] | None = None  #: host handler (HOST_CALL)
    #: ``SHAPE_LAUNCH`` or ``SHAPE_THREAD``; ``None``: as the handler was exported
    #: (resolved from the linked module at ``Dispatcher.start()``)
    shape: int | None = None
    #: the GPU the address was looked up for (a ``DeviceHandler``'s), None if not known
    device: int | None = None

    def pack(self, shape: int | None = None) -> bytes:
        """The 16-byte ``cudaq_function_entry_t`` (``shape`` fills an unresolved one)."""
        resolved = self.shape if self.shape is not None else (shape or SHAPE_LAUNCH)
        return _ENTRY.pack(self.address, self.function_id, self.dispatch_mode, resolved)


@dataclass
class FunctionTable:
    """The dispatcher's function table (name -> handler), keyed by FNV-1a function id."""

    _entries: list[FunctionEntry] = field(default_factory=list)

    def _add(self, entry: FunctionEntry) -> FunctionEntry:
        from skbuild_cudaq.realtime.errors import InvalidArgumentError

        for old in self._entries:
            if old.function_id == entry.function_id:
                what = (
                    "is already in" if old.name == entry.name else f"collides with {old.name!r} in"
                )
                msg = f"{entry.name!r} (function id {entry.function_id:#010x}) {what} the table"
                raise InvalidArgumentError(msg)
        self._entries.append(entry)
        return entry

    def add_device(self, name: str, address: int, *, shape: str | None = None) -> FunctionEntry:
        """A DEVICE_CALL entry: ``address`` from ``get_device_handler(module, name)``.

        ``shape`` is the handler's shape, ``"launch"`` (every thread of the
        dispatch kernel's launch calls it) or ``"thread"`` (one thread serves one
        request); ``None`` takes the shape the handler was exported with
        (``CUDAQ_REALTIME_EXPORT_THREAD_FUNCTION`` -> ``"thread"``, else
        ``"launch"``), read from the linked module at ``Dispatcher.start()``.
        """
        from skbuild_cudaq.realtime.errors import InvalidArgumentError
        from skbuild_cudaq.realtime.wire import function_id

        looked_up_for = getattr(address, "device", None)
        address = int(address)
        if address <= 0 or address >= 1 << 64:
            msg = f"{name!r}: {address:#x} is not a device address"
            raise InvalidArgumentError(msg)
        code: int | None = None
        if shape is not None:
            if shape not in _SHAPES:
                msg = f"{name!r}: shape={shape!r}; a handler shape is 'launch' or 'thread'"
                raise InvalidArgumentError(msg)
            code = _SHAPES[shape]
        entry = FunctionEntry(
            name,
            function_id(name),
            DEVICE_CALL,
            address=address,
            shape=code,
            device=looked_up_for if isinstance(looked_up_for, int) else None,
        )
        return self._add(entry)

    def add_host(self, name: str, handler: Callable[..., Any]) -> FunctionEntry:
        """A HOST_CALL entry, served by the host path (``HostDispatcher(layout, table)``);
        a device :class:`Dispatcher` refuses a table holding one at ``start()``."""
        from skbuild_cudaq.realtime.errors import InvalidArgumentError
        from skbuild_cudaq.realtime.wire import function_id

        candidate: object = handler
        if not callable(candidate):
            msg = f"{name!r}: a HOST_CALL handler must be callable, got {handler!r}"
            raise InvalidArgumentError(msg)
        return self._add(FunctionEntry(name, function_id(name), HOST_CALL, callable=handler))

    def device_entries(self) -> list[FunctionEntry]:
        return [e for e in self._entries if e.dispatch_mode == DEVICE_CALL]

    def host_entries(self) -> list[FunctionEntry]:
        return [e for e in self._entries if e.dispatch_mode == HOST_CALL]

    def pack(self, shapes: Mapping[int, int] | None = None) -> bytes:
        """Every entry as ``cudaq_function_entry_t[len(self)]``.

        ``shapes`` maps handler addresses to the shape they were exported with,
        for entries added without one (``Library.handler_shapes()``).
        """
        found = shapes or {}
        return b"".join(e.pack(found.get(e.address)) for e in self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[FunctionEntry]:
        return iter(self._entries)

    def __contains__(self, name: object) -> bool:
        return any(e.name == name for e in self._entries)
