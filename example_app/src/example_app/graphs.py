"""example_app's graph handler: ``graph_increment``, a CUDA graph of two kernels.

The built-in dispatch kernel (sm_90+) launches it from the GPU for each request of
its GRAPH_LAUNCH entry, a ``HostDispatcher`` from the host on a worker stream; it
answers like ``rpc_increment`` (each byte plus one). The kernels are in
``src/graph_handlers.cu``; this module captures them into a graph instantiated for
device launch (which the host path launches as well)::

    from example_app import _core, graphs

    handler = graphs.graph_increment(_core, device=0)
    dispatcher.function_table.add_graph("graph_increment", handler.graph, handler.mailbox)
    ...
    handler.close()  # after the dispatcher stopped

:func:`graph_handler` is the factory ``cudaq-realtime-test-server --graphs`` calls, and
``skbuild-cudaq phases src/graph_handlers.cu --graph graph_increment`` (which gives it the
measurement build's linked module in place of the extension).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from skbuild_cudaq.realtime import (
    GraphMailbox,
    InvalidArgumentError,
    LaunchConfig,
    capture_device_graph,
    check_driver_result,
    get_device_kernel,
    launch_kernel,
)
from skbuild_cudaq.realtime.graph import DeviceGraph
from skbuild_cudaq.realtime.library import Kernel, Library

__all__ = ["GRAPH_HANDLERS", "GraphHandler", "graph_handler", "graph_increment"]

#: The graph handlers example_app builds (``graph_handler(name, ...)``).
GRAPH_HANDLERS = ("graph_increment",)


@dataclass
class GraphHandler:
    """A graph handler and what it owns: the graph, its mailbox, its scratch memory."""

    graph: DeviceGraph
    mailbox: GraphMailbox
    scratch: int  #: device memory the first kernel writes and the second reads
    device: int

    def close(self) -> None:
        """Free it all (idempotent); only once no dispatcher serves the graph."""
        from cuda.bindings import driver

        from skbuild_cudaq.realtime import _driver

        self.graph.close()
        self.mailbox.close()
        scratch, self.scratch = self.scratch, 0
        if scratch:
            with _driver.pushed(_driver.primary_context(self.device)):
                check_driver_result(driver.cuMemFree(scratch), "cuMemFree(scratch)")

    def __enter__(self) -> GraphHandler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _kernel(code: ModuleType | Library, name: str, device: int) -> Kernel:
    """The kernel ``name`` of ``code``: an extension module (its device code, linked), or a
    module linked already (``skbuild-cudaq phases`` passes its measurement build)."""
    if isinstance(code, Library):
        return code.get_kernel(name)
    return get_device_kernel(code, name, device=device)


def graph_increment(
    core: ModuleType | Library,
    *,
    device: int = 0,
    max_bytes: int = 1 << 16,
    grid: int = 4,
    block: int = 128,
) -> GraphHandler:
    """The two-kernel graph of ``graph_increment``, for requests of up to ``max_bytes``.

    ``grid`` x ``block`` threads stage the bytes (kernel 1), one block of ``block``
    threads copies them into the response and publishes it (kernel 2). ``core``: the
    extension module, or a linked :class:`~skbuild_cudaq.realtime.library.Library` holding
    the two kernels.
    """
    from cuda.bindings import driver

    from skbuild_cudaq.realtime import _driver

    stage = _kernel(core, "graph_increment_stage", device)
    publish = _kernel(core, "graph_increment_publish", device)
    mailbox = GraphMailbox(device)
    try:
        with _driver.pushed(_driver.primary_context(device)):
            scratch = int(check_driver_result(driver.cuMemAlloc(max_bytes), "cuMemAlloc"))
        box = ctypes.c_void_p(mailbox.device_address)
        buf = ctypes.c_void_p(scratch)
        size = ctypes.c_uint32(max_bytes)

        def record(stream: Any) -> None:
            launch_kernel(stage, LaunchConfig(grid=grid, block=block), stream, box, buf, size)
            launch_kernel(publish, LaunchConfig(grid=1, block=block), stream, box, buf, size)

        try:
            graph = capture_device_graph(record, device=device)
        except BaseException:
            with _driver.pushed(_driver.primary_context(device)):
                driver.cuMemFree(scratch)
            raise
    except BaseException:
        mailbox.close()
        raise
    return GraphHandler(graph, mailbox, scratch, device)


def graph_handler(name: str, module: ModuleType | Library, device: int = 0) -> GraphHandler:
    """The graph handler ``name`` (one of :data:`GRAPH_HANDLERS`) of ``module``'s device code
    (what ``cudaq-realtime-test-server --graphs`` calls), or of a linked module (what
    ``skbuild-cudaq phases --graph`` calls)."""
    if name not in GRAPH_HANDLERS:
        msg = f"example_app has no graph handler {name!r}; it has {', '.join(GRAPH_HANDLERS)}"
        raise InvalidArgumentError(msg)
    return graph_increment(module, device=device)
