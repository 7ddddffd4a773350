"""The realtime dispatcher: a persistent GPU kernel serving a bridge's ring.

One module per job: :mod:`.config` (``DispatcherConfig`` -> ``LaunchArgs``),
:mod:`.table` (the function table, shared with the host path), :mod:`.resolve`
(which linked module it serves), :mod:`.resources` (context, streams, memory),
:mod:`.core` (the start/stop state machine, :class:`Dispatcher`).

Three steps from the application's side (docs/guides/dispatcher.md)::

    kernel = get_device_kernel(my_ext, "my_dispatcher")
    with Dispatcher(DispatcherConfig(num_slots=64, slot_size=256), module=my_ext) as d:
        d.function_table.add_device("rpc_increment", get_device_handler(my_ext, "rpc_increment"))
        d.set_unified_launch(my_launcher)        # or nothing: the built-in kernel
        d.start()
        d.bridge.client().call("rpc_increment", b"...")

``start()`` packs the function table into device memory, allocates the shutdown
flag (mapped pinned ``int32``) and the processed counter (device ``u64``), and
then either launches the built-in kernel ``cudaq_realtime_unified_dispatch``
(grid 1, block ``config.block_size``) or calls the launcher with a
:class:`LaunchArgs`. The launcher launches on ``args.stream`` with any grid and
launch attributes and reports success (returns ``None`` or ``True``) or failure
(returns ``False`` or raises). Whatever fails after resources exist, the
dispatcher signals shutdown and waits for the stream *before* it frees anything
or lets the module go: a kernel the launcher enqueued never runs on freed memory.

The persistent kernel never returns while it serves, so nothing here blocks on
its stream while it runs: the dispatcher's streams are non-blocking (the legacy
default stream would serialise with it) and :attr:`Dispatcher.processed` reads
the counter with an asynchronous copy on a second non-blocking stream.
"""

from __future__ import annotations

from skbuild_cudaq.realtime.dispatcher.config import (
    BUILTIN_KERNEL,
    BUILTIN_KERNEL_1024,
    BUILTIN_KERNEL_SHARED,
    DispatcherConfig,
    LaunchArgs,
    Launcher,
)
from skbuild_cudaq.realtime.dispatcher.core import ALIVE_CHECK_S, Dispatcher
from skbuild_cudaq.realtime.dispatcher.table import (
    DEVICE_CALL,
    GRAPH_LAUNCH,
    HOST_CALL,
    SHAPE_LAUNCH,
    SHAPE_THREAD,
    FunctionEntry,
    FunctionTable,
)

__all__ = [
    "ALIVE_CHECK_S",
    "BUILTIN_KERNEL",
    "BUILTIN_KERNEL_1024",
    "BUILTIN_KERNEL_SHARED",
    "DEVICE_CALL",
    "GRAPH_LAUNCH",
    "HOST_CALL",
    "SHAPE_LAUNCH",
    "SHAPE_THREAD",
    "Dispatcher",
    "DispatcherConfig",
    "FunctionEntry",
    "FunctionTable",
    "LaunchArgs",
    "Launcher",
]
