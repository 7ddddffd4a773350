"""Handles into a linked module: :class:`Kernel` (launchable; keeps its library alive)
and :class:`DeviceHandler` (a handler's device address that remembers its GPU)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from skbuild_cudaq.realtime import _driver
from skbuild_cudaq.realtime._closing import Closing
from skbuild_cudaq.realtime.errors import RealtimeError

if TYPE_CHECKING:
    from .loaded import Library

__all__ = ["DeviceHandler", "Kernel"]


class DeviceHandler(int):
    """A handler's device address (an ``int``) that remembers its name and its GPU.

    What :func:`get_device_handler` returns: use it as the address it is. A device
    function's "address" is an index into its module's function table, so the same
    handler of the same cubin has the same value on every GPU (measured on two
    H200s); the value alone cannot say which GPU it was looked up for, the
    ``device`` it carries can, and ``Dispatcher.start()`` refuses an entry looked
    up for another GPU than its own.
    """

    name: str
    device: int

    def __new__(cls, address: int, name: str, device: int) -> DeviceHandler:
        self = super().__new__(cls, address)
        self.name = name
        self.device = device
        return self

    def __repr__(self) -> str:
        return f"<DeviceHandler {self.name!r} {int(self):#x} of device {self.device}>"


class Kernel(Closing):
    """A kernel of a :class:`Library` (``CUkernel``). Keeps its library alive."""

    def __init__(self, library: Library, name: str, handle: Any) -> None:
        self._library: Library | None = library
        self.name = name
        self._handle = handle
        self._functions: dict[int, Any] = {}

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<Kernel {self.name!r} {state}>"

    @property
    def closed(self) -> bool:
        return self._library is None or self._library.closed

    @property
    def library(self) -> Library:
        if self._library is None:
            msg = f"kernel {self.name!r} is closed"
            raise RealtimeError(msg)
        return self._library

    @property
    def handle(self) -> Any:
        """The ``CUkernel``."""
        if self.closed:
            msg = f"kernel {self.name!r} is closed (or its library was closed)"
            raise RealtimeError(msg)
        return self._handle

    def function(self, device: int | None = None) -> Any:
        """The ``CUfunction`` of this kernel in a context (``cuKernelGetFunction``).

        For occupancy queries (``cuOccupancyMaxActiveBlocksPerMultiprocessor`` ...)
        and launches. ``device=None``: the current context (device 0's primary
        context when none is); otherwise ``device``'s primary context.
        """
        handle = self.handle
        if device is None:
            ctx = _driver.ensure_context()
        else:
            self.library.check_device(device)
            ctx = _driver.primary_context(device)
        key = int(ctx)
        func = self._functions.get(key)
        if func is None:
            with _driver.pushed(ctx):
                func = _driver.check(
                    _driver.driver().cuKernelGetFunction(handle),
                    f"cuKernelGetFunction({self.name!r})",
                )
            self._functions[key] = func
        return func

    def close(self) -> None:
        """Drop this handle (idempotent); the library stays loaded for its other users."""
        self._library = None
        self._functions.clear()

    def __enter__(self) -> Kernel:
        return self
