"""The dispatcher's function table: one table for both paths.

Dispatch modes as CUDA-Q realtime numbers them: DEVICE_CALL (0, a device function's
address), GRAPH_LAUNCH (1, a CUDA graph, launched for each request), HOST_CALL (2, a
Python callable or a native host handler). One table may hold all three: a device
:class:`~skbuild_cudaq.realtime.Dispatcher` serves its DEVICE_CALL entries (and its
GRAPH_LAUNCH entries where it can: the built-in kernel on sm_90+ launches them from the
GPU) and a :class:`~skbuild_cudaq.realtime.HostDispatcher` (``HostDispatcher(layout,
table)``) its HOST_CALL and GRAPH_LAUNCH entries (the graphs launched on worker streams
from the host); each answers requests for the entries it does not serve -2 (unknown
function). On a shared ring (``DispatcherConfig.shared_ring``) the device path leaves
HOST_CALL requests to the host dispatcher on the same ring, which leaves it the
GRAPH_LAUNCH ones.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DEVICE_CALL",
    "ENTRY_FLAG_PEER",
    "GRAPH_LAUNCH",
    "HOST_CALL",
    "MODE_NAMES",
    "SHAPE_LAUNCH",
    "SHAPE_THREAD",
    "FunctionEntry",
    "FunctionTable",
]

DEVICE_CALL = 0  # CUDAQ_DISPATCH_DEVICE_CALL
GRAPH_LAUNCH = 1  # CUDAQ_DISPATCH_GRAPH_LAUNCH
HOST_CALL = 2  # CUDAQ_DISPATCH_HOST_CALL
#: The dispatch modes by number, as messages name them.
MODE_NAMES = {DEVICE_CALL: "DEVICE_CALL", GRAPH_LAUNCH: "GRAPH_LAUNCH", HOST_CALL: "HOST_CALL"}
SHAPE_LAUNCH = 0  # CUDAQ_HANDLER_SHAPE_LAUNCH: every thread of the launch calls the handler
SHAPE_THREAD = 1  # CUDAQ_HANDLER_SHAPE_THREAD: one thread serves one request
#: ``CUDAQ_ENTRY_FLAG_PEER`` (byte 14): a shared ring's other consumer answers the entry.
ENTRY_FLAG_PEER = 0x01
_SHAPES = {"launch": SHAPE_LAUNCH, "thread": SHAPE_THREAD}
# cudaq_function_entry_t: handler, function_id, dispatch_mode, reserved[3] (shape, flags, 0)
_ENTRY = struct.Struct("<QIBBBx")
assert _ENTRY.size == 16


@dataclass(frozen=True)
class FunctionEntry:
    """One function-table entry: a device handler address, a graph or a host callable."""

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
    #: the exported name of the handler at ``address`` (a ``DeviceHandler``'s), if known
    handler_name: str | None = None
    #: the ``CUgraphExec`` (GRAPH_LAUNCH)
    graph_exec: int = 0
    #: the graph's :class:`~skbuild_cudaq.realtime.GraphMailbox` (GRAPH_LAUNCH)
    mailbox: Any = None
    #: the graph as it was given (kept alive with the entry, as a ``DeviceGraph`` owns its exec)
    graph: Any = None

    @property
    def mode_name(self) -> str:
        return MODE_NAMES.get(self.dispatch_mode, f"mode {self.dispatch_mode}")

    def pack(
        self, shape: int | None = None, *, handler: int | None = None, flags: int = 0
    ) -> bytes:
        """The 16-byte ``cudaq_function_entry_t`` (``shape`` fills an unresolved one).

        ``handler``: the word to put in the handler field instead of :attr:`address`
        (a GRAPH_LAUNCH entry's I/O context, or 0 where the entry is not served);
        ``flags``: ``ENTRY_FLAG_*`` (byte 14).
        """
        resolved = self.shape if self.shape is not None else (shape or SHAPE_LAUNCH)
        word = self.address if handler is None else handler
        return _ENTRY.pack(word, self.function_id, self.dispatch_mode, resolved, flags)


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
        exported = getattr(address, "name", None)
        checked: object = address  # callers without type checking may pass anything
        msg = (
            f"{name!r}: the address is an int (get_device_handler(module, name)), not "
            f"{type(checked).__name__}"
        )
        if isinstance(checked, bool):
            raise TypeError(msg)
        try:
            address = operator.index(address)  # an int, a numpy integer
        except TypeError:
            raise TypeError(msg) from None
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
            address=int(address),
            shape=code,
            device=looked_up_for if isinstance(looked_up_for, int) else None,
            handler_name=exported if isinstance(exported, str) else None,
        )
        return self._add(entry)

    def add_graph(self, name: str, graph: Any, mailbox: Any) -> FunctionEntry:
        """A GRAPH_LAUNCH entry: the CUDA graph ``graph`` answers ``name``'s requests.

        ``graph``: a :class:`~skbuild_cudaq.realtime.graph.DeviceGraph`, or a ``CUgraphExec`` /
        ``cudaGraphExec_t`` made with ``cuda.bindings`` or returned by an extension (its
        int value), instantiated with ``CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH``.
        ``mailbox``: the :class:`~skbuild_cudaq.realtime.GraphMailbox` whose device
        address its kernels were captured with. A device dispatcher with the built-in
        kernel on sm_90+ launches it from the GPU for each request, a
        :class:`~skbuild_cudaq.realtime.HostDispatcher` from the host on a worker stream
        (any executable graph there); a device dispatcher that cannot answers its
        requests -2. See :mod:`skbuild_cudaq.realtime.graph` and
        :mod:`skbuild_cudaq.realtime.host.graphs`.
        """
        from skbuild_cudaq.realtime.errors import InvalidArgumentError
        from skbuild_cudaq.realtime.graph import GraphMailbox, graph_exec_handle
        from skbuild_cudaq.realtime.wire import function_id

        handle = graph_exec_handle(graph)
        if not isinstance(mailbox, GraphMailbox):
            msg = (
                f"{name!r}: the mailbox must be a GraphMailbox (the one its kernels were "
                f"captured with), got {mailbox!r}"
            )
            raise InvalidArgumentError(msg)
        if mailbox.closed:
            msg = f"{name!r}: its GraphMailbox is closed"
            raise InvalidArgumentError(msg)
        for old in self._entries:
            if old.dispatch_mode == GRAPH_LAUNCH and old.mailbox is mailbox:
                msg = (
                    f"{name!r}: its mailbox is {old.name!r}'s already; each graph entry needs "
                    "a GraphMailbox of its own (it holds that entry's I/O context)"
                )
                raise InvalidArgumentError(msg)
        entry = FunctionEntry(
            name,
            function_id(name),
            GRAPH_LAUNCH,
            graph_exec=handle,
            mailbox=mailbox,
            graph=graph,
        )
        return self._add(entry)

    def add_host(self, name: str, handler: Callable[..., Any]) -> FunctionEntry:
        """A HOST_CALL entry, served by the host path (``HostDispatcher(layout, table)``);
        a device :class:`Dispatcher` answers its requests -2 (or, on a shared ring, leaves
        them to the host dispatcher on the same ring)."""
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

    def graph_entries(self) -> list[FunctionEntry]:
        return [e for e in self._entries if e.dispatch_mode == GRAPH_LAUNCH]

    def pack(
        self,
        shapes: Mapping[int, int] | None = None,
        *,
        handlers: Mapping[str, int] | None = None,
        peer_host: bool = False,
    ) -> bytes:
        """Every entry as ``cudaq_function_entry_t[len(self)]``.

        ``shapes`` maps handler addresses to the shape they were exported with,
        for entries added without one (``Library.handler_shapes()``). ``handlers``
        maps entry names to the word their handler field holds instead of their own
        address (GRAPH_LAUNCH entries: their I/O context; DEVICE_CALL entries of a
        module linked again); a GRAPH_LAUNCH entry not in it packs 0 (not served:
        answered -2). ``peer_host``: flag HOST_CALL entries ``ENTRY_FLAG_PEER`` (a
        host dispatcher on the same ring answers them).
        """
        found = shapes or {}
        words = handlers or {}
        packed = []
        for e in self._entries:
            word = words.get(e.name)
            if word is None and e.dispatch_mode == GRAPH_LAUNCH:
                word = 0
            flags = ENTRY_FLAG_PEER if peer_host and e.dispatch_mode == HOST_CALL else 0
            packed.append(e.pack(found.get(e.address), handler=word, flags=flags))
        return b"".join(packed)

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[FunctionEntry]:
        return iter(self._entries)

    def __contains__(self, name: object) -> bool:
        return any(e.name == name for e in self._entries)
