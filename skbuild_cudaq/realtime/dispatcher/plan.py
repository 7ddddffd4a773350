"""What a device dispatcher serves of its table, and with which kernel (:func:`plan_start`);
the graph handlers' resources while it runs (:class:`GraphRun`).

One table may hold every dispatch mode. The device path serves its DEVICE_CALL entries,
its GRAPH_LAUNCH entries where it can (the built-in kernel, on sm_90+: the graph dispatch
kernel, linked with the device runtime into a module of its own), and answers requests
for the others -2; on a shared ring (``DispatcherConfig.shared_ring``) it leaves the
HOST_CALL requests to the host dispatcher on the same ring. ``start()`` logs one line
naming what it does not serve.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

from skbuild_cudaq.realtime import _driver
from skbuild_cudaq.realtime._logging import get_logger
from skbuild_cudaq.realtime.dispatcher.table import FunctionEntry, FunctionTable

__all__ = ["GraphRun", "StartPlan", "device_call_names", "plan_start"]

_logger = get_logger(__name__)
_DEVICE_LAUNCH_FLAG = 4  # CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH


@dataclass
class StartPlan:
    """Which entries the device path serves at this ``start()``, and how."""

    #: GRAPH_LAUNCH entries the graph dispatch kernel serves
    graphs: list[FunctionEntry] = field(default_factory=list)
    #: entries whose requests are answered -2, and why (for the log line)
    unserved: list[FunctionEntry] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    #: HOST_CALL entries left to the host dispatcher on a shared ring
    peer: list[FunctionEntry] = field(default_factory=list)
    #: whether the built-in kernel must poll a shared ring
    shared_kernel: bool = False

    def announce(self, device: int) -> None:
        """The one log line of ``start()`` about entries the device path does not serve."""
        parts = []
        if self.unserved:
            names = ", ".join(f"{e.name!r} ({e.mode_name})" for e in self.unserved)
            why = "; ".join(self.reasons)
            parts.append(f"answers {names} -2 (unknown function){': ' + why if why else ''}")
        if self.peer:
            names = ", ".join(repr(e.name) for e in self.peer)
            parts.append(f"leaves {names} (HOST_CALL) to the host dispatcher on the shared ring")
        if parts:
            _logger.info("device dispatcher on device %d %s", device, "; ".join(parts))


def plan_start(
    table: FunctionTable, *, builtin: bool, shared_ring: bool, arch: str | None, device: int
) -> StartPlan:
    """Which of ``table``'s entries a dispatcher on ``device`` (``arch``) serves.

    ``builtin``: the built-in kernel (no launcher). Raises :class:`InvalidArgumentError`
    for a shared ring with a launcher of your own (only the built-in kernels leave a
    request to the ring's other consumer).
    """
    from skbuild_cudaq.realtime.errors import InvalidArgumentError
    from skbuild_cudaq.realtime.graph import GRAPH_MIN_ARCH

    plan = StartPlan()
    if shared_ring and not builtin:
        msg = (
            "DispatcherConfig.shared_ring needs the built-in kernel (set_unified_launch(None)): "
            "a dispatch kernel of your own would answer the host dispatcher's requests too"
        )
        raise InvalidArgumentError(msg)
    host = table.host_entries()
    if shared_ring:
        plan.peer = host
        plan.shared_kernel = True
    elif host:
        plan.unserved += host
        plan.reasons.append("HOST_CALL entries are the host path's (HostDispatcher)")
    graphs = table.graph_entries()
    if graphs:
        number = int(arch[3:].rstrip("af")) if arch and arch.startswith("sm_") else 0
        if not builtin:
            plan.unserved += graphs
            plan.reasons.append(
                "GRAPH_LAUNCH entries are served by the built-in kernel only, not by a launcher "
                "(or by a HostDispatcher, on the host path)"
            )
        elif number < GRAPH_MIN_ARCH:
            plan.unserved += graphs
            plan.reasons.append(
                f"device graph launch needs sm_{GRAPH_MIN_ARCH} or newer, device {device} is "
                f"{arch} (a HostDispatcher launches graphs from the host on any GPU)"
            )
        else:
            plan.graphs = graphs
    ordered = {id(e): e for e in table}
    plan.unserved.sort(key=lambda e: list(ordered).index(id(e)))
    return plan


def device_call_names(table: FunctionTable, library: Any, device: int) -> dict[str, str]:
    """Entry name -> the exported name of its DEVICE_CALL handler (to look it up again in
    the graph module, where its address differs)."""
    from skbuild_cudaq.realtime.errors import InvalidArgumentError

    found = {}
    for entry in table.device_entries():
        name = entry.handler_name
        if name is None:
            owners = [n for d, n in library.owners(entry.address) if d == device]
            name = owners[0] if owners else None
        if name is None:
            msg = (
                f"DEVICE_CALL entry {entry.name!r} at {entry.address:#x}: cannot tell which "
                "exported handler it is (look it up with get_device_handler)"
            )
            raise InvalidArgumentError(msg)
        found[entry.name] = name
    return found


class GraphRun:
    """A dispatcher's graph handlers while it runs: their device records
    (``cudaq_graph_io_t`` + a request copy each), their mailboxes, the baton and the two
    dispatch graphs (the graph dispatch kernel as the one node of a device-launchable graph,
    roles 0 and 1, taking turns: see ``device/graph_dispatch_kernel.cu``)."""

    def __init__(self, entries: list[FunctionEntry], slot_size: int) -> None:
        self.entries = entries
        self.slot_size = slot_size
        self.records = 0  # device allocation of every record, then the baton
        self.dispatch_graphs: list[Any] = []
        self.dispatch_execs: list[Any] = []

    @property
    def record_size(self) -> int:
        from skbuild_cudaq.realtime.graph import GRAPH_IO_SIZE

        return GRAPH_IO_SIZE + self.slot_size

    def record_of(self, index: int) -> int:
        return self.records + index * self.record_size

    @property
    def baton(self) -> int:
        """Device address of the word naming the dispatch kernel that serves (0 first)."""
        return self.record_of(len(self.entries))

    def prepare(self, drv: Any, stream: Any, device: int) -> dict[str, int]:
        """Check and upload each graph (on ``stream``, one no kernel runs on, of GPU
        ``device``), allocate and fill its record, point its mailbox at it; returns entry
        name -> record address (their handler word)."""
        from skbuild_cudaq.realtime.errors import InvalidArgumentError
        from skbuild_cudaq.realtime.graph import GraphIO, hold_graphs

        for entry in self.entries:
            # A graph of another GPU can be neither uploaded on this GPU's stream nor
            # launched by its kernel: say so before any driver call.
            graph_device = getattr(entry.graph, "device", None)
            where = graph_device if isinstance(graph_device, int) else entry.mailbox.device
            if where != device:
                msg = (
                    f"GRAPH_LAUNCH entry {entry.name!r}: its graph and mailbox are of device "
                    f"{where}, this dispatcher runs on device {device}: capture the graph "
                    f"with a GraphMailbox(device={device}) on that device "
                    f"(capture_device_graph(..., device={device}))"
                )
                raise InvalidArgumentError(msg)
            flags = int(
                _driver.check(
                    drv.cuGraphExecGetFlags(drv.CUgraphExec(entry.graph_exec)),
                    f"cuGraphExecGetFlags({entry.name!r})",
                )
            )
            if not flags & _DEVICE_LAUNCH_FLAG:
                msg = (
                    f"GRAPH_LAUNCH entry {entry.name!r}: its graph was not instantiated for "
                    "device launch: instantiate it with CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH "
                    "(capture_device_graph does)"
                )
                raise InvalidArgumentError(msg)
            if entry.mailbox.closed:
                msg = f"GRAPH_LAUNCH entry {entry.name!r}: its GraphMailbox is closed"
                raise InvalidArgumentError(msg)
            if entry.mailbox.value != 0:
                msg = (
                    f"GRAPH_LAUNCH entry {entry.name!r}: its GraphMailbox is in use by another "
                    f"dispatcher (it holds {entry.mailbox.value:#x}); a mailbox serves one "
                    "dispatcher at a time: stop that one first"
                )
                raise InvalidArgumentError(msg)
            _driver.check(
                drv.cuGraphUpload(drv.CUgraphExec(entry.graph_exec), stream),
                f"cuGraphUpload({entry.name!r})",
            )
        size = self.record_size * len(self.entries) + 8  # the records, then the baton
        self.records = _driver.ptr(
            _driver.check(drv.cuMemAlloc(size), "cuMemAlloc(graph I/O contexts)")
        )
        _driver.check(drv.cuMemsetD8(self.records, 0, size), "cuMemsetD8(graph I/O contexts)")
        words = {}
        for index, entry in enumerate(self.entries):
            record = self.record_of(index)
            raw = GraphIO.initial(entry.graph_exec, self.slot_size)
            _driver.check(
                drv.cuMemcpyHtoD(record, raw, len(raw)), "cuMemcpyHtoD(graph I/O context)"
            )
            entry.mailbox.value = record
            words[entry.name] = record
        hold_graphs(self.entries, self)
        _driver.check(drv.cuStreamSynchronize(stream), "cuStreamSynchronize(graph upload)")
        return words

    def launch(
        self, kernel: Any, config: Any, streams: tuple[Any, Any], args: tuple[Any, ...], side: Any
    ) -> None:
        """Launch ``kernel`` twice, roles 0 and 1 (``args``, then the baton and the role), each
        the node of a graph instantiated for device launch (captured and uploaded on the idle
        stream ``side``), on ``streams[0]`` and ``streams[1]``."""
        from skbuild_cudaq.realtime.graph import capture_stream_graph, instantiate_for_device_launch
        from skbuild_cudaq.realtime.launch import launch_kernel

        drv = _driver.driver()
        baton = ctypes.c_void_p(self.baton)
        for role in (0, 1):
            params = (*args, baton, ctypes.c_uint32(role))

            def record(stream: Any, params: tuple[Any, ...] = params) -> None:
                launch_kernel(kernel, config, stream, *params)

            graph = capture_stream_graph(record, side)
            self.dispatch_graphs.append(graph)
            self.dispatch_execs.append(instantiate_for_device_launch(graph, side))
        for exec_, stream in zip(self.dispatch_execs, streams, strict=True):
            _driver.check(drv.cuGraphLaunch(exec_, stream), "cuGraphLaunch(dispatch)")

    def read(self, drv: Any, index: int) -> Any:
        """The device record of graph entry ``index`` (:class:`GraphIO`)."""
        from skbuild_cudaq.realtime.graph import GRAPH_IO_SIZE, GraphIO

        raw = (ctypes.c_uint8 * GRAPH_IO_SIZE)()
        _driver.check(
            drv.cuMemcpyDtoH(ctypes.addressof(raw), self.record_of(index), GRAPH_IO_SIZE),
            "cuMemcpyDtoH(graph I/O context)",
        )
        return GraphIO(bytes(raw))

    def release(self, drv: Any) -> None:
        """Free everything (only once no kernel and no graph of this run can run); clear the
        mailboxes this run pointed at its records (not another dispatcher's)."""
        from skbuild_cudaq.realtime.graph import let_go_graphs

        let_go_graphs(self.entries, self)
        for index, entry in enumerate(self.entries):
            mailbox = entry.mailbox
            if self.records and not mailbox.closed and mailbox.value == self.record_of(index):
                mailbox.value = 0
        execs, graphs = self.dispatch_execs, self.dispatch_graphs
        self.dispatch_execs, self.dispatch_graphs = [], []
        records, self.records = self.records, 0
        for exec_ in execs:
            _driver.check(drv.cuGraphExecDestroy(exec_), "cuGraphExecDestroy(dispatch)")
        for graph in graphs:
            _driver.check(drv.cuGraphDestroy(graph), "cuGraphDestroy(dispatch)")
        if records:
            _driver.check(drv.cuMemFree(records), "cuMemFree(graph I/O contexts)")
