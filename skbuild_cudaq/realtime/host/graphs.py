"""Graph handlers on the host path: the graph workers of a
:class:`~skbuild_cudaq.realtime.HostDispatcher` (the GRAPH_LAUNCH entries of its
:class:`~skbuild_cudaq.realtime.FunctionTable`).

The same entry serves both paths: ``table.add_graph(name, graph, mailbox)``. On the device
path the dispatch kernel launches the graph from the GPU; on the host path the serving
thread (the native loop's, ``host/native/graphs.c``) launches it on a **worker stream**, the
way CUDA-Q realtime's host dispatcher does. One worker per graph entry (its graph exec and
mailbox hold one I/O context, so one request of an entry runs at a time, as on the device
path), at most
:data:`MAX_GRAPH_WORKERS`, each with

- a stream of its own (non-blocking);
- the entry's **record** in device memory: its I/O context (``cudaq_graph_io_t``, filled as
  the device path fills it) followed by the copy of the request; its mailbox points at it
  while the dispatcher runs;
- a pinned image of that record (the source of the per-request copy) and a **publish
  word** in pinned mapped memory, where the graph's ``cudaq_graph_publish`` stores (the I/O
  context's ``response_flag``).

For a request the loop fills the image (the request copied after the context), enqueues
``cuMemcpyHtoDAsync`` into the record and ``cuGraphLaunch`` on the worker's stream, clears
the worker's bit in the idle mask and serves on. The graph writes the response into the
ring's response slot (``response`` is the slot's device address: the ring must be pinned,
mapped memory) and stores the launch's number into the publish word; the loop's sweep sees
it, counts the answer and publishes it in the ring (the response flag: exactly once, counted
first, like every answer of the host path), and launches the worker's next request at once:
the graph ran after its copy, so the image is free, and stream order runs the next copy and
graph after whatever the graph still does after its publish (its tail). The sweep asks a
busy worker's stream whether it is done (``cuStreamQuery``, at most every 20 µs, before the
answer and after it) and then sets the worker's bit in the idle mask again; ``stop()`` waits
for every stream to be done. A request for a worker whose graph has not answered yet waits
in that worker's queue while the loop serves every other request (the ring orders answers
per slot, not across slots). A launch the driver refuses, a graph whose stream reports an
error and a graph that ended without publishing are answered by the loop with a reserved
status and counted as handler errors; an error after the answer is recorded
(``launch_error``, ``last_handler_error``) and the answer stands. A launch refused after its
copy was enqueued holds the worker until its stream is done (the copy still reads the
image).

The loop links nothing of CUDA: it calls the driver through the addresses of its entry
points (:data:`DRIVER_ENTRY_POINTS`, from ``cuGetProcAddress``) and makes the mailboxes'
GPU's primary context current on its own thread. Nothing here touches CUDA at import.
"""

from __future__ import annotations

import contextlib
import ctypes
import weakref
from typing import TYPE_CHECKING, Any

from skbuild_cudaq.realtime import _driver
from skbuild_cudaq.realtime.errors import CUDAError, HostDispatcherError

if TYPE_CHECKING:
    from skbuild_cudaq.realtime.dispatcher.table import FunctionEntry
    from skbuild_cudaq.realtime.ring.layout import RingLayout

__all__ = ["DRIVER_ENTRY_POINTS", "MAX_GRAPH_WORKERS", "HostGraphs", "PinnedMemory"]

#: Graph entries one host dispatcher serves (a worker each; one bit each in the idle mask).
MAX_GRAPH_WORKERS = 64
#: The driver functions the serving loop calls, in the order ``_native.Loop.set_graphs``
#: takes their addresses (``cuGetErrorName`` only names errors).
DRIVER_ENTRY_POINTS = (
    "cuCtxSetCurrent",
    "cuGraphLaunch",
    "cuStreamQuery",
    "cuMemcpyHtoDAsync",
    "cuGetErrorName",
)
#: The ABI asked of ``cuGetProcAddress``: CUDA 12.0's (the run time supports 12 and 13).
_ENTRY_POINT_ABI = 12000
_LINE = 64  # each publish word on a cache line of its own


def _round_up(value: int, to: int) -> int:
    return (value + to - 1) // to * to


def _free_pinned(host: int, context: Any) -> None:
    with contextlib.suppress(Exception):  # finalizers must not raise
        drv = _driver.driver()
        with _driver.pushed(context):
            drv.cuMemFreeHost(host)


class PinnedMemory:
    """``size`` bytes of pinned host memory mapped to the GPU, zeroed
    (``cuMemHostAlloc(DEVICEMAP | PORTABLE)`` in ``context``): ``host`` and ``device``
    are its two addresses. :meth:`close` frees it (idempotent; only once
    nothing uses it)."""

    def __init__(self, size: int, context: Any, what: str) -> None:
        drv = _driver.driver()
        with _driver.pushed(context):
            flags = drv.CU_MEMHOSTALLOC_DEVICEMAP | drv.CU_MEMHOSTALLOC_PORTABLE
            host = _driver.ptr(
                _driver.check(drv.cuMemHostAlloc(size, flags), f"cuMemHostAlloc({what})")
            )
            try:
                ctypes.memset(host, 0, size)
                device = _driver.ptr(
                    _driver.check(
                        drv.cuMemHostGetDevicePointer(host, 0), f"cuMemHostGetDevicePointer({what})"
                    )
                )
            except BaseException:
                drv.cuMemFreeHost(host)
                raise
        self.host, self.device, self.size = host, device, size
        self._finalizer: weakref.finalize[Any, Any] | None = weakref.finalize(
            self, _free_pinned, host, context
        )
        self._finalizer.atexit = False

    def view(self) -> Any:
        """The memory as a writable ctypes array, which keeps this object alive (the finalizer
        frees the memory only once no view is left; :meth:`close` frees it at once)."""
        view = (ctypes.c_uint8 * self.size).from_address(self.host)
        view.pinned = self  # type: ignore[attr-defined]  # keeps the memory alive
        return view

    def close(self) -> None:
        finalizer, self._finalizer = self._finalizer, None
        self.host = self.device = 0
        if finalizer is not None:
            finalizer()


def _entry_points(drv: Any) -> tuple[int, ...]:
    """The addresses of :data:`DRIVER_ENTRY_POINTS` (``cuGetProcAddress``, CUDA 12.0's ABI)."""
    flags = drv.CUdriverProcAddress_flags.CU_GET_PROC_ADDRESS_LEGACY_STREAM
    found = []
    for name in DRIVER_ENTRY_POINTS:
        values = _driver.check(
            drv.cuGetProcAddress(name.encode(), _ENTRY_POINT_ABI, flags),
            f"cuGetProcAddress({name})",
        )
        address = int(values[0] if isinstance(values, tuple) else values or 0)
        if address == 0 and name != "cuGetErrorName":
            msg = (
                f"the CUDA driver has no {name} of CUDA 12.0's ABI (cuGetProcAddress): graph "
                "handlers on the host path need a CUDA 12 or newer driver"
            )
            raise HostDispatcherError(msg)
        found.append(address)
    return tuple(found)


def _device_view(drv: Any, at: int) -> int:
    """The device address of host address ``at`` (inside a pinned, mapped range):
    ``cuMemHostGetDevicePointer``, else ``cuPointerGetAttribute(DEVICE_POINTER)`` (UVA's
    lookup, which takes any address of a range); :class:`CUDAError` of the first if neither
    knows it."""
    try:
        return _driver.ptr(_driver.check(drv.cuMemHostGetDevicePointer(at, 0), "ring"))
    except CUDAError as first:
        attribute = drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_POINTER
        ret = drv.cuPointerGetAttribute(attribute, at)
        if int(ret[0]) == 0 and _driver.ptr(ret[1]) != 0:
            return _driver.ptr(ret[1])
        raise first from None


def _ring_device_address(drv: Any, address: int, size: int) -> int:
    """The ring's device address: every byte of ``size`` from ``address`` must be pinned and
    mapped, contiguously (the graph writes responses into it); else a typed error saying
    what to pass."""
    why = ""
    try:
        first, last = _device_view(drv, address), _device_view(drv, address + size - 1)
        if last - first != size - 1:
            why = "its pages are not one mapped range"
    except CUDAError as exc:
        why = f"cuMemHostGetDevicePointer: {exc.name}"
    if why:
        msg = (
            "graph handlers on the host path need a ring the GPU can reach: the buffer given "
            f"to HostDispatcher is not pinned, mapped memory ({why}); pass a HostRingBridge's "
            "(buffer=bridge.buffer) or memory from cuMemHostAlloc(DEVICEMAP) or "
            "cuMemHostRegister(DEVICEMAP), or leave buffer out: the dispatcher then "
            "allocates pinned, mapped memory itself"
        )
        raise HostDispatcherError(msg)
    return first


def _device_of(entries: list[FunctionEntry]) -> int:
    """The one GPU of ``entries``' mailboxes (and of their graphs, where a graph says)."""
    first = entries[0]
    for entry in entries:
        if entry.mailbox.closed:
            msg = f"GRAPH_LAUNCH entry {entry.name!r}: its GraphMailbox is closed"
            raise HostDispatcherError(msg)
        if entry.mailbox.device != first.mailbox.device:
            msg = (
                f"GRAPH_LAUNCH entries {first.name!r} (device {first.mailbox.device}) and "
                f"{entry.name!r} (device {entry.mailbox.device}): a host dispatcher launches "
                "the graphs of one GPU; serve each GPU's with a dispatcher of its own"
            )
            raise HostDispatcherError(msg)
        graph_device = getattr(entry.graph, "device", entry.mailbox.device)
        if isinstance(graph_device, int) and graph_device != entry.mailbox.device:
            msg = (
                f"GRAPH_LAUNCH entry {entry.name!r}: its graph is on device {graph_device}, "
                f"its mailbox on device {entry.mailbox.device}"
            )
            raise HostDispatcherError(msg)
    return int(first.mailbox.device)


class HostGraphs:
    """The graph workers of one host dispatcher (see the module docstring): made from its
    table's GRAPH_LAUNCH entries (checked here, no CUDA), :meth:`open` over the ring,
    :meth:`install` into the serving loop; :meth:`claim` points the mailboxes at the
    records (``start()``), :meth:`release_mailboxes` (``stop()``), :meth:`close` frees
    everything (only once the loop's thread has stopped)."""

    def __init__(self, entries: list[FunctionEntry], layout: RingLayout) -> None:
        if len(entries) > MAX_GRAPH_WORKERS:
            msg = (
                f"the host path serves at most {MAX_GRAPH_WORKERS} GRAPH_LAUNCH entries (a "
                f"worker stream each); the table has {len(entries)}: serve the others with a "
                "second dispatcher"
            )
            raise HostDispatcherError(msg)
        self.entries = entries
        self.layout = layout
        self.device = _device_of(entries)
        self.context: Any = None
        self.ring_device = 0
        self._drv: Any = None
        self._streams: list[Any] = []
        self._records = 0  # device allocation: one record per worker
        self._pinned: PinnedMemory | None = None  # the records' images, then the words
        self._entry_points: tuple[int, ...] = ()
        self._claimed = False

    @property
    def record_size(self) -> int:
        from skbuild_cudaq.realtime.graph import GRAPH_IO_SIZE

        return GRAPH_IO_SIZE + self.layout.slot_size

    @property
    def _image_stride(self) -> int:
        return _round_up(self.record_size, _LINE)

    def record_of(self, index: int) -> int:
        """Device address of worker ``index``'s record (what its mailbox holds while served)."""
        return self._records + index * self.record_size

    def _context(self) -> Any:
        if self.context is None:
            _driver.init()
            self._drv = _driver.driver()
            self.context = _driver.primary_context(self.device)
        return self.context

    def pinned_ring(self) -> PinnedMemory:
        """Pinned, mapped memory for the ring (the dispatcher's own, when no buffer is given)."""
        return PinnedMemory(self.layout.total_bytes, self._context(), "ring")

    def open(self, ring_address: int) -> None:
        """Check the ring at ``ring_address`` (host view) is mapped; make each worker's
        stream, record and pinned image and publish word. On failure, what was made is freed."""
        context = self._context()
        drv = self._drv
        try:
            with _driver.pushed(context):
                self.ring_device = _ring_device_address(drv, ring_address, self.layout.total_bytes)
                self._entry_points = _entry_points(drv)
                n = len(self.entries)
                flags = int(drv.CUstream_flags.CU_STREAM_NON_BLOCKING)
                for _ in range(n):
                    self._streams.append(
                        _driver.check(drv.cuStreamCreate(flags), "cuStreamCreate(graph worker)")
                    )
                size = self.record_size * n
                self._records = _driver.ptr(
                    _driver.check(drv.cuMemAlloc(size), "cuMemAlloc(graph I/O contexts)")
                )
                _driver.check(
                    drv.cuMemsetD8(self._records, 0, size), "cuMemsetD8(graph I/O contexts)"
                )
            self._pinned = PinnedMemory(
                self._image_stride * n + _LINE * n, context, "graph workers"
            )
        except BaseException:
            self.close()
            raise

    def install(self, loop: Any) -> None:
        """Give ``loop`` (``_native.Loop``) the workers (``set_graphs``)."""
        pinned = self._pinned
        assert pinned is not None, "open() first"
        words = self._image_stride * len(self.entries)
        workers = [
            (
                entry.function_id,
                entry.name,
                entry.graph_exec,
                int(stream),
                self.record_of(index),
                pinned.host + index * self._image_stride,
                pinned.host + words + index * _LINE,
                pinned.device + words + index * _LINE,
            )
            for index, (entry, stream) in enumerate(zip(self.entries, self._streams, strict=True))
        ]
        loop.set_graphs(int(self.context), self._entry_points, self.ring_device, workers, self)

    def table_items(self) -> list[tuple[int, str, int, None, int]]:
        """The graph entries as ``_native.Loop.set_table`` items (each naming its worker)."""
        return [(e.function_id, e.name, 0, None, i) for i, e in enumerate(self.entries)]

    def claim(self) -> None:
        """Point each mailbox at its worker's record (``start()``); a mailbox another
        dispatcher points elsewhere is refused."""
        for index, entry in enumerate(self.entries):
            if entry.mailbox.closed:
                msg = f"GRAPH_LAUNCH entry {entry.name!r}: its GraphMailbox is closed"
                raise HostDispatcherError(msg)
            value = entry.mailbox.value
            if value not in (0, self.record_of(index)):
                msg = (
                    f"GRAPH_LAUNCH entry {entry.name!r}: its GraphMailbox is in use by another "
                    f"dispatcher (it holds {value:#x}); a mailbox serves one dispatcher at a "
                    "time: stop that one first"
                )
                raise HostDispatcherError(msg)
        from skbuild_cudaq.realtime.graph import hold_graphs

        for index, entry in enumerate(self.entries):
            entry.mailbox.value = self.record_of(index)
        hold_graphs(self.entries, self)
        self._claimed = True

    def release_mailboxes(self) -> None:
        """Clear the mailboxes this dispatcher claimed (no graph of it runs any more)."""
        if not self._claimed:
            return
        from skbuild_cudaq.realtime.graph import let_go_graphs

        self._claimed = False
        let_go_graphs(self.entries, self)
        for index, entry in enumerate(self.entries):
            if not entry.mailbox.closed and entry.mailbox.value == self.record_of(index):
                entry.mailbox.value = 0

    def close(self) -> None:
        """Free the streams, records and pinned memory (idempotent; the loop has stopped)."""
        self.release_mailboxes()
        drv, context = self._drv, self.context
        streams, self._streams = self._streams, []
        records, self._records = self._records, 0
        pinned, self._pinned = self._pinned, None
        if pinned is not None:
            pinned.close()
        if drv is None or context is None:
            return
        with _driver.pushed(context):
            _driver.release_each(
                [
                    *((s, drv.cuStreamDestroy, "cuStreamDestroy(graph worker)") for s in streams),
                    (records, drv.cuMemFree, "cuMemFree(graph I/O contexts)"),
                ]
            )
