"""Graph handlers (dispatch mode GRAPH_LAUNCH): CUDA graphs a device dispatcher launches
from the GPU for each of their requests.

A graph handler is what one device function cannot be: several kernels, any grids, the
whole GPU (a decoder). Build it like any CUDA graph, from kernels of your extension that
read the request and publish the response through the header's graph helpers
(``cudaq_graph_io``, ``cudaq_graph_args``, ``cudaq_graph_result``, ``cudaq_graph_publish``),
each launched with the device address of a :class:`GraphMailbox`; instantiate it for
device launch (:func:`capture_device_graph` does both); add it to the table::

    mailbox = GraphMailbox(device=0)
    stage = get_device_kernel(ext, "decode_stage")
    last = get_device_kernel(ext, "decode_last")
    box = ctypes.c_void_p(mailbox.device_address)

    def record(stream):
        launch_kernel(stage, LaunchConfig(grid=8, block=256), stream, box)
        launch_kernel(last, LaunchConfig(grid=1, block=256), stream, box)

    graph = capture_device_graph(record, device=0)
    dispatcher.function_table.add_graph("decode", graph, mailbox)

At ``start()`` the dispatcher (built-in kernel, sm_90+) gives each graph entry an I/O
context in device memory (``cudaq_graph_io_t``: the request copied there, the response
slot, the response flag and its value, the slot size), writes its address into the
entry's mailbox, uploads the graph and launches its graph dispatch kernel
``cudaq_realtime_graph_dispatch`` as the node of a graph of its own (device graph launch
is allowed only from a kernel that runs in a graph). That kernel, linked with the device
runtime (``libcudadevrt.a`` from the ``nvidia-cuda-runtime`` wheel, found by
:func:`find_device_runtime`), launches the entry's graph fire-and-forget for each
request and goes on serving the ring; every :data:`GRAPH_LAUNCHES_PER_EXECUTION` launches
(a graph execution may make 120) it records its ring position and relaunches its own
graph as a tail launch.

A :class:`~skbuild_cudaq.realtime.HostDispatcher` serves the same entry from the host: it
launches the graph on a worker stream per entry and fills the same I/O context
(:mod:`skbuild_cudaq.realtime.host.graphs`). See ``docs/guides/graph-handlers.md``.

Nothing here touches CUDA at import.
"""

from __future__ import annotations

import contextlib
import ctypes
import struct
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from skbuild_cudaq.realtime import _driver
from skbuild_cudaq.realtime._arguments import typed_arguments
from skbuild_cudaq.realtime._closing import Closing
from skbuild_cudaq.realtime.errors import InvalidArgumentError

__all__ = [
    "GRAPH_DISPATCH_KERNEL",
    "GRAPH_IO_SIZE",
    "GRAPH_LAUNCHES_PER_EXECUTION",
    "GRAPH_MIN_ARCH",
    "STATUS_GRAPH_LAUNCH_FAILED",
    "DeviceGraph",
    "GraphIO",
    "GraphMailbox",
    "capture_device_graph",
    "graph_exec_handle",
]

#: The built-in kernel that serves GRAPH_LAUNCH entries (``skbuild_cudaq/device/
#: graph_dispatch_kernel.cu``), linked with the device runtime only where it is used.
GRAPH_DISPATCH_KERNEL = "cudaq_realtime_graph_dispatch"
#: Graph launches the graph dispatch kernel makes per execution of its own graph before
#: it relaunches itself (CUDA allows 120 fire-and-forget launches per graph execution).
GRAPH_LAUNCHES_PER_EXECUTION = 100
#: Device graph launch needs sm_90 or newer (on older GPUs graph entries are answered -2).
GRAPH_MIN_ARCH = 90
#: Bytes of a graph entry's device record before its copy of the request
#: (``CUDAQ_GRAPH_IO_SIZE``; the record is this plus one slot).
GRAPH_IO_SIZE = 64
#: The status of a request whose graph could not be launched (refused past a deadline on
#: the device path; refused by the driver, or failed on the GPU, on the host path), which
#: ``CUDAQ_RPC_STATUS_GRAPH_LAUNCH_FAILED`` names (reserved range, see ``host_path``).
STATUS_GRAPH_LAUNCH_FAILED = 0x7FFFFF04
# cudaq_graph_io_t: request, response, response_flag (pointers), response_flag_value,
# slot_size, sequence, released (u32), graph_exec (u64), launch_error, launch_failures,
# phase_record (u64: the measurement build's, 0 otherwise)
_IO = struct.Struct("<QQQIIIIQIIQ")
assert _IO.size <= GRAPH_IO_SIZE
_CU_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH = 4


# -- handles ---------------------------------------------------------------------------------
def graph_exec_handle(graph: Any) -> int:
    """The ``CUgraphExec`` / ``cudaGraphExec_t`` value of ``graph`` as an int.

    Accepts a :class:`DeviceGraph`, a ``cuda.bindings`` ``CUgraphExec`` or runtime
    ``cudaGraphExec_t`` (driver and runtime handles are the same pointer), an object
    with ``getPtr()`` or ``handle``, or the int an extension returned.
    """
    value: Any = graph
    if isinstance(value, DeviceGraph):
        value = value.handle
    if not isinstance(value, int) and hasattr(value, "getPtr"):
        value = value.getPtr()
    elif not isinstance(value, int) and hasattr(value, "handle"):
        value = value.handle
    try:
        handle = int(value)
    except (TypeError, ValueError):
        msg = f"{graph!r} is not a CUDA graph exec (CUgraphExec, cudaGraphExec_t or int)"
        raise InvalidArgumentError(msg) from None
    if not 0 < handle < 1 << 64:
        msg = f"{graph!r}: {handle:#x} is not a CUDA graph exec handle"
        raise InvalidArgumentError(msg)
    return handle


class GraphMailbox(Closing):
    """Where a graph handler's kernels find their request: 8 bytes of device memory holding
    the address of the graph entry's I/O context (``cudaq_graph_io_t``).

    Capture the graph's kernels with :attr:`device_address` as their mailbox parameter
    (``void *const *`` in device code, ``cudaq_graph_io(mailbox)``); the dispatcher that
    serves the graph writes the address of the entry's I/O context at ``start()`` (a copy
    to the device, while no graph of it runs) and clears it at ``stop()``. Device memory, so
    that each kernel of the graph reads it from the GPU's own memory, not across PCIe.
    Allocated on construction (device ``device``'s primary context); :meth:`close` frees it
    (only once no graph that reads it can run); a context manager.
    """

    def __init__(self, device: int = 0) -> None:
        self.device = device
        self._dev = 0
        self._value = 0
        self._finalizer: weakref.finalize[Any, Any] | None = None
        _driver.init()
        drv = _driver.driver()
        with _driver.pushed(_driver.primary_context(device)):
            dev = _driver.ptr(_driver.check(drv.cuMemAlloc(8), "cuMemAlloc(mailbox)"))
            try:
                _driver.check(drv.cuMemsetD8(dev, 0, 8), "cuMemsetD8(mailbox)")
            except BaseException:
                _driver.check(drv.cuMemFree(dev), "cuMemFree(mailbox)")
                raise
        self._dev = dev
        self._finalizer = weakref.finalize(self, _free_device, dev, device)
        self._finalizer.atexit = False

    @property
    def closed(self) -> bool:
        return self._dev == 0

    def _require_open(self) -> None:
        if self._dev == 0:
            msg = "the graph mailbox is closed"
            raise InvalidArgumentError(msg)

    @property
    def device_address(self) -> int:
        """The mailbox's device address (the parameter to capture the graph's kernels with)."""
        self._require_open()
        return self._dev

    @property
    def value(self) -> int:
        """The device address of the I/O context it holds (0 while no dispatcher serves it)."""
        self._require_open()
        return self._value

    @value.setter
    def value(self, address: int) -> None:
        self._require_open()
        word = ctypes.c_uint64(int(address))
        drv = _driver.driver()
        with _driver.pushed(_driver.primary_context(self.device)):
            _driver.check(
                drv.cuMemcpyHtoD(self._dev, ctypes.addressof(word), 8), "cuMemcpyHtoD(mailbox)"
            )
        self._value = int(address)

    def close(self) -> None:
        """Free the mailbox (idempotent); no graph that reads it may run any more.

        Refused (:class:`InvalidArgumentError`) while a dispatcher serves it (it holds an
        I/O context's address, from that dispatcher's ``start()`` to its ``stop()``)."""
        if self._dev != 0 and self._value != 0:
            msg = (
                f"the graph mailbox is in use by a dispatcher (it holds {self._value:#x}): "
                "stop() that dispatcher before closing it (its graph may be reading it)"
            )
            raise InvalidArgumentError(msg)
        finalizer, self._finalizer = self._finalizer, None
        self._dev = 0
        if finalizer is not None:
            finalizer()

    def __enter__(self) -> GraphMailbox:
        return self

    def __repr__(self) -> str:
        where = "closed" if self._dev == 0 else f"device address {self._dev:#x}"
        return f"GraphMailbox(device={self.device}, {where})"


def _free_device(dev: int, device: int) -> None:
    """Free a mailbox in its device's context (``close()`` or the finalizer may run where no
    context is current: the driver then refuses, and the memory would be lost)."""
    with (
        contextlib.suppress(Exception),  # finalizers must not raise
        _driver.pushed(_driver.primary_context(device)),
    ):
        _driver.driver().cuMemFree(dev)


class DeviceGraph(Closing):
    """A CUDA graph instantiated for device launch (and uploaded): a graph handler.

    Owns its ``CUgraph`` and ``CUgraphExec``; :meth:`close` destroys both (only once no
    dispatcher serves it). :func:`capture_device_graph` makes one.
    """

    def __init__(self, graph: Any, exec_: Any, device: int) -> None:
        self.graph = graph
        self.exec = exec_
        self.device = device
        #: the runs that serve it (a device dispatcher's graphs, a host dispatcher's workers)
        self._servers: weakref.WeakSet[Any] = weakref.WeakSet()

    @property
    def handle(self) -> int:
        """The ``CUgraphExec`` as an int (what a GRAPH_LAUNCH entry holds)."""
        if self.exec is None:
            msg = "the device graph is closed"
            raise InvalidArgumentError(msg)
        return int(self.exec)

    def close(self) -> None:
        """Destroy the executable graph and the graph (idempotent).

        Refused (:class:`InvalidArgumentError`) while a dispatcher serves it, from its
        ``start()`` to its ``stop()`` (the GPU or a worker stream may launch it)."""
        if self._servers and self.exec is not None:
            msg = (
                "the device graph is served by a running dispatcher: stop() that dispatcher "
                "before closing it (the GPU or a worker stream may be launching it)"
            )
            raise InvalidArgumentError(msg)
        exec_, graph, self.exec, self.graph = self.exec, self.graph, None, None
        if exec_ is None and graph is None:
            return
        drv = _driver.driver()
        with _driver.pushed(_driver.primary_context(self.device)):
            if exec_ is not None:
                _driver.check(drv.cuGraphExecDestroy(exec_), "cuGraphExecDestroy")
            if graph is not None:
                _driver.check(drv.cuGraphDestroy(graph), "cuGraphDestroy")

    def __enter__(self) -> DeviceGraph:
        return self

    def __repr__(self) -> str:
        state = "closed" if self.exec is None else f"exec {int(self.exec):#x}"
        return f"DeviceGraph(device={self.device}, {state})"


def hold_graphs(entries: Iterable[Any], server: object) -> None:
    """Mark the :class:`DeviceGraph` of each GRAPH_LAUNCH entry in ``entries`` as served by
    ``server`` (its ``close()`` is refused until :func:`let_go_graphs`, or until ``server``
    is gone); graphs given as a bare ``CUgraphExec`` are the caller's to keep."""
    for entry in entries:
        if isinstance(entry.graph, DeviceGraph):
            entry.graph._servers.add(server)


def let_go_graphs(entries: Iterable[Any], server: object) -> None:
    """Undo :func:`hold_graphs` (no graph of ``server``'s can be launched any more)."""
    for entry in entries:
        if isinstance(entry.graph, DeviceGraph):
            entry.graph._servers.discard(server)


def instantiate_for_device_launch(graph: Any, stream: Any) -> Any:
    """``cuGraphInstantiate(graph, DEVICE_LAUNCH)`` and ``cuGraphUpload`` on ``stream``."""
    drv = _driver.driver()
    exec_ = _driver.check(
        drv.cuGraphInstantiate(graph, _CU_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH),
        "cuGraphInstantiate(CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH)",
    )
    try:
        _driver.check(drv.cuGraphUpload(exec_, stream), "cuGraphUpload")
        _driver.check(drv.cuStreamSynchronize(stream), "cuStreamSynchronize")
    except BaseException:
        drv.cuGraphExecDestroy(exec_)
        raise
    return exec_


def capture_stream_graph(record: Callable[[Any], None], stream: Any) -> Any:
    """The ``CUgraph`` of what ``record(stream)`` enqueues (stream capture, thread-local)."""
    drv = _driver.driver()
    mode = drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
    _driver.check(drv.cuStreamBeginCapture(stream, mode), "cuStreamBeginCapture")
    try:
        record(stream)
    except BaseException:
        with contextlib.suppress(Exception):
            graph = drv.cuStreamEndCapture(stream)[1]
            if graph is not None:
                drv.cuGraphDestroy(graph)
        raise
    return _driver.check(drv.cuStreamEndCapture(stream), "cuStreamEndCapture")


@typed_arguments(record="a function that launches the graph's kernels on the stream it gets")
def capture_device_graph(record: Callable[[Any], None], *, device: int = 0) -> DeviceGraph:
    """A graph handler from what ``record(stream)`` enqueues on ``stream``.

    ``record`` launches the graph's kernels on the stream it is given (e.g. with
    :func:`~skbuild_cudaq.realtime.launch_kernel`, each with its mailbox's
    :attr:`GraphMailbox.device_address` as a parameter); the work is captured into a
    graph, instantiated for device launch and uploaded, on device ``device``. A device
    graph holds only kernel, memcpy, memset and child-graph nodes, all on one GPU.
    """
    _driver.init()
    drv = _driver.driver()
    with _driver.pushed(_driver.primary_context(device)):
        flags = int(drv.CUstream_flags.CU_STREAM_NON_BLOCKING)
        stream = _driver.check(drv.cuStreamCreate(flags), "cuStreamCreate")
        try:
            graph = capture_stream_graph(record, stream)
            try:
                exec_ = instantiate_for_device_launch(graph, stream)
            except BaseException:
                drv.cuGraphDestroy(graph)
                raise
        finally:
            drv.cuStreamDestroy(stream)
    return DeviceGraph(graph, exec_, device)


class GraphIO:
    """The host's view of a graph entry's device record (``cudaq_graph_io_t``)."""

    def __init__(self, raw: bytes) -> None:
        (
            self.request,
            self.response,
            self.response_flag,
            self.response_flag_value,
            self.slot_size,
            self.sequence,
            self.released,
            self.graph_exec,
            self.launch_error,
            self.launch_failures,
            self.phase_record,
        ) = _IO.unpack_from(raw)

    @staticmethod
    def initial(graph_exec: int, slot_size: int) -> bytes:
        """A fresh record: no request handed over yet, the graph to launch."""
        head = _IO.pack(0, 0, 0, 0, slot_size, 0, 0, graph_exec, 0, 0, 0)
        return head + bytes(GRAPH_IO_SIZE - len(head))
