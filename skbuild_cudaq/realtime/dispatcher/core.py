"""The device dispatcher's start/stop state machine: :class:`Dispatcher`.

See :mod:`skbuild_cudaq.realtime.dispatcher` for the flow. What it holds on the
GPU is :mod:`.resources`; which module it serves, :mod:`.resolve`; what it
launches with, :mod:`.config`; its table, :mod:`.table`.
"""

from __future__ import annotations

import time
import weakref
from types import ModuleType
from typing import Any, Generic, TypeVar, cast, overload

from skbuild_cudaq.realtime import _driver
from skbuild_cudaq.realtime._closing import Closing
from skbuild_cudaq.realtime._logging import get_logger
from skbuild_cudaq.realtime._timeouts import UNSET, Timeout, check_timeout
from skbuild_cudaq.realtime.bridge import Bridge, HostRingBridge
from skbuild_cudaq.realtime.dispatcher.config import (
    BUILTIN_KERNEL,
    BUILTIN_KERNEL_1024,
    BUILTIN_KERNEL_SHARED,
    DispatcherConfig,
    LaunchArgs,
    Launcher,
)
from skbuild_cudaq.realtime.dispatcher.plan import (
    GraphRun,
    StartPlan,
    device_call_names,
    plan_start,
)
from skbuild_cudaq.realtime.dispatcher.resolve import check_table, resolve_library
from skbuild_cudaq.realtime.dispatcher.resources import NOT_READY, DeviceResources
from skbuild_cudaq.realtime.dispatcher.table import FunctionTable
from skbuild_cudaq.realtime.ring.layout import RingLayout

__all__ = ["ALIVE_CHECK_S", "Dispatcher"]

_logger = get_logger(__name__)

ALIVE_CHECK_S = 0.002  #: start() looks this long after the launch for a kernel that returned


def _start_error(message: str) -> Exception:
    from skbuild_cudaq.realtime.errors import RealtimeError

    return RealtimeError(message)


BridgeT = TypeVar("BridgeT", bound=Bridge)

#: What dispatchers collected while a kernel that never exited may use: kept for the
#: process's life (never freed under a kernel).
_ABANDONED: list[tuple[DeviceResources, Bridge, _Served]] = []


class _Served:
    """What a dispatcher's kernel may use while it runs, beside its memory and bridge: the
    linked module(s) and the graph handlers' run, and whether the kernel was abandoned (it
    ignored the shutdown flag: nothing it may use is ever freed). Shared with the
    dispatcher's finalizer, which must not hold the dispatcher itself."""

    __slots__ = ("_library", "abandoned", "graphs")

    def __init__(self) -> None:
        self._library: Any = None
        self.graphs: GraphRun | None = None  # graph handlers served while running
        self.abandoned = False

    @property
    def library(self) -> Any:
        """The linked module(s) the kernel may run from: kept alive, and held (a ``Library``
        refuses ``close()`` and ``release_library()`` while held) until set to None."""
        return self._library

    @library.setter
    def library(self, value: Any) -> None:
        held: list[Any] = []
        try:
            for library in _libraries_in(value):
                hold = getattr(library, "_hold", None)
                if hold is not None:
                    hold()  # a closed Library refuses: start() fails before any launch
                    held.append(library)
        except BaseException:
            for library in held:
                library._let_go()
            raise
        for library in _libraries_in(self._library):
            let_go = getattr(library, "_let_go", None)
            if let_go is not None:
                let_go()
        self._library = value


def _libraries_in(value: Any) -> tuple[Any, ...]:
    if value is None:
        return ()
    return tuple(value) if isinstance(value, tuple) else (value,)


def _free_run(gpu: DeviceResources, served: _Served) -> None:
    """Free a run's memory and graphs and let its module go (no kernel runs): each step
    tried, so that a failed free still lets the module be closed; the first error."""
    try:
        gpu.free()
    finally:
        try:
            graphs, served.graphs = served.graphs, None
            if graphs is not None and gpu.drv is not None:
                graphs.release(gpu.drv)
        finally:
            served.library = None


def _collect(
    gpu: DeviceResources, bridge: Bridge, owns_bridge: bool, served: _Served, timeout: float
) -> None:
    """A dispatcher's finalizer (dropped without ``close()``, or alive at exit).

    A kernel that may still run is told to shut down and waited for (``stop_timeout``)
    before anything it reads is freed: the device memory, the graph records and, for a
    bridge the dispatcher made, the ring (the bridge frees it when it goes). One that does
    not exit, or was abandoned before, keeps all of it for the process's life. Never raises.
    """
    if served.abandoned:
        _ABANDONED.append((gpu, bridge, served))
        return
    if gpu.drv is None:  # never started, or closed: nothing of the GPU is held
        return
    try:
        with gpu.in_context():
            if gpu.pinned_ptr:  # allocated at start(), freed at stop(): a kernel may run
                gpu.signal_shutdown()
                try:
                    idle = gpu.wait_stream(timeout)
                except Exception:
                    idle = True  # the kernel faulted: it no longer runs
                if not idle:
                    served.abandoned = True
                    _ABANDONED.append((gpu, bridge, served))
                    _logger.warning(
                        "a Dispatcher dropped while running: its kernel did not exit within "
                        "%g s of the shutdown flag; its memory, module and ring are kept for "
                        "the life of the process",
                        timeout,
                    )
                    return
            _free_run(gpu, served)
            gpu.destroy_streams()
            if owns_bridge:
                bridge.close()
    except Exception:  # a finalizer must not raise (a driver already gone at exit)
        _logger.debug("freeing a dropped Dispatcher failed", exc_info=True)


class Dispatcher(Generic[BridgeT], Closing):
    """A realtime dispatcher on one GPU serving one bridge.

    ``module`` is the extension module whose linked code (handlers, custom
    kernels, the built-in kernel) the dispatcher serves; ``start()`` uses it to
    find the built-in kernel and to check that every DEVICE_CALL address comes
    from that module. Without it, the library of the launcher's ``kernel``
    attribute (the example launchers carry one) is used.

    Without a ``bridge`` the dispatcher makes (and owns) a :class:`HostRingBridge`
    of the config's shape; ``dispatcher.bridge`` is typed as the bridge given.
    """

    @overload
    def __init__(
        self: Dispatcher[HostRingBridge],
        config: DispatcherConfig | None = None,
        bridge: None = None,
        *,
        module: ModuleType | str | None = None,
    ) -> None: ...

    @overload
    def __init__(
        self: Dispatcher[BridgeT],
        config: DispatcherConfig | None,
        bridge: BridgeT,
        *,
        module: ModuleType | str | None = None,
    ) -> None: ...

    @overload
    def __init__(
        self: Dispatcher[BridgeT],
        config: DispatcherConfig | None = None,
        *,
        bridge: BridgeT,
        module: ModuleType | str | None = None,
    ) -> None: ...

    def __init__(
        self,
        config: DispatcherConfig | None = None,
        bridge: Bridge | None = None,
        *,
        module: ModuleType | str | None = None,
    ) -> None:
        from skbuild_cudaq.realtime.errors import InvalidArgumentError

        checked: object = config  # callers without type checking may pass anything
        if checked is not None and not isinstance(checked, DispatcherConfig):
            msg = (
                f"Dispatcher(config=...) takes a DispatcherConfig (or None for the defaults), "
                f"not {type(checked).__name__}"
            )
            raise TypeError(msg)
        if bridge is not None and not all(
            hasattr(bridge, name) for name in ("num_slots", "slot_size")
        ):
            msg = (
                f"Dispatcher(bridge=...) takes a bridge (the Bridge protocol: num_slots, "
                f"slot_size, device_code, open(), reset(), transport_ctx, close()), not "
                f"{type(bridge).__name__}"
            )
            raise TypeError(msg)
        self.config = config if config is not None else DispatcherConfig()
        #: The ring's shape (the config's, which the bridge must have), the one source
        #: of the launch arguments' ``num_slots`` and ``slot_size``.
        self.layout: RingLayout = self.config.layout
        self._owns_bridge = bridge is None
        self.bridge: BridgeT = cast(
            "BridgeT", bridge if bridge is not None else HostRingBridge(layout=self.layout)
        )
        if (self.bridge.num_slots, self.bridge.slot_size) != (
            self.layout.num_slots,
            self.layout.slot_size,
        ):
            msg = (
                f"bridge ring ({self.bridge.num_slots} x {self.bridge.slot_size} B) differs from "
                f"the config ({self.config.num_slots} x {self.config.slot_size} B)"
            )
            raise InvalidArgumentError(msg)
        self.module = module
        self.function_table = FunctionTable()
        self._launcher: Launcher | None = None
        self._transport_ctx: int | None = None
        self._gpu = DeviceResources(self.config.device)
        self._running = False
        self._closed = False  # close() was called: start() refuses (as a HostDispatcher's)
        self._processed = 0
        self._launch_args: LaunchArgs | None = None
        #: the linked module, the graph run and the abandoned mark, shared with the finalizer
        self._served = _Served()
        # Dropped without close() (or still running at exit): the kernel is stopped before
        # the bridge (whose own __del__ frees the ring) and the device memory may go.
        weakref.finalize(
            self,
            _collect,
            self._gpu,
            self.bridge,
            self._owns_bridge,
            self._served,
            self.config.stop_timeout,
        )

    # -- configuration ----------------------------------------------------
    def set_unified_launch(
        self, launcher: Launcher | None, transport_ctx: int | None = None
    ) -> None:
        """``start()`` will call ``launcher(LaunchArgs)`` instead of launching the built-in kernel.

        ``transport_ctx=None`` keeps the bridge's own context (the host-ring
        context); pass another device address to serve a different transport.
        ``launcher=None`` goes back to the built-in kernel.
        """
        from skbuild_cudaq.realtime.errors import InvalidArgumentError

        if self._running:
            msg = "set_unified_launch() while the dispatcher runs: stop() it first"
            raise InvalidArgumentError(msg)
        candidate: object = launcher
        if candidate is not None and not callable(candidate):
            msg = f"the launcher must be callable, got {launcher!r}"
            raise InvalidArgumentError(msg)
        self._launcher = launcher
        self._transport_ctx = None if transport_ctx is None else int(transport_ctx)

    @property
    def running(self) -> bool:
        return self._running

    @property
    def launch_args(self) -> LaunchArgs | None:
        """What the running kernel was launched with (None when stopped)."""
        return self._launch_args if self._running else None

    @property
    def _stream(self) -> Any:
        """The kernel's (non-blocking) stream, None before the first start()."""
        return self._gpu.stream

    def _resolve_library(self) -> Any:
        return resolve_library(self.module, self._launcher, self.bridge, self.config.device)

    def _check_table(self, library: Any) -> None:
        check_table(self.function_table, library, self.config.device)

    def start(self) -> None:
        """Allocate, check, launch. Raises (and leaves nothing running) on any failure."""
        from skbuild_cudaq.realtime.errors import InvalidArgumentError

        if self._running:
            msg = "the dispatcher is already running"
            raise InvalidArgumentError(msg)
        if self._closed:
            msg = "the dispatcher is closed; make a new Dispatcher"
            raise _start_error(msg)
        if self._served.abandoned:
            msg = "a previous kernel of this dispatcher never exited; make a new Dispatcher"
            raise _start_error(msg)
        self._check_shared_ring()
        library = self._resolve_library()
        self._check_table(library)
        drv = self._gpu.ensure_context()
        plan = plan_start(
            self.function_table,
            builtin=self._launcher is None,
            shared_ring=self.config.shared_ring,
            arch=_driver.ordinal_arch(self.config.device),
            device=self.config.device,
        )
        graph_library = self._graph_library(plan)
        plan.announce(self.config.device)
        try:
            self.bridge.open()
            self.bridge.reset()
            self._allocate(drv, library, plan, graph_library)
            transport = (
                self._transport_ctx
                if self._transport_ctx is not None
                else self.bridge.transport_ctx
            )
            gpu = self._gpu
            args = LaunchArgs.for_layout(
                self.layout,
                transport_ctx=transport,
                table=gpu.table_ptr,
                table_count=len(self.function_table),
                shutdown_flag=gpu.pinned_dev,
                stats=gpu.stats_ptr,
                stream=gpu.stream,
                device=self.config.device,
            )
            self._served.library = library if graph_library is None else (library, graph_library)
            self._launch_args = args
            self._running = True  # from here on a kernel may be enqueued
            self._launch(args, library, plan, graph_library)
        except BaseException:
            self._teardown_after_failure()
            raise

    def _check_shared_ring(self) -> None:
        """A shared ring needs the host-ring bridge: its hooks pass a request the host
        dispatcher answered first over (``CUDAQ_POLL_SHARED``)."""
        if self.config.shared_ring and not isinstance(self.bridge, HostRingBridge):
            from skbuild_cudaq.realtime.errors import InvalidArgumentError

            msg = (
                f"DispatcherConfig.shared_ring needs a HostRingBridge, not "
                f"{type(self.bridge).__name__}: only the host-ring hooks poll a shared ring"
            )
            raise InvalidArgumentError(msg)

    def _graph_library(self, plan: StartPlan) -> Any:
        """The module linked with the graph dispatch kernel, when the plan serves graphs."""
        if not plan.graphs:
            return None
        from skbuild_cudaq.realtime.library import get_graph_library

        if self.module is None:
            from skbuild_cudaq.realtime.errors import InvalidArgumentError

            msg = "graph handlers need module= (the extension linked with the graph kernel)"
            raise InvalidArgumentError(msg)
        return get_graph_library(self.module, device=self.config.device)

    def _allocate(self, drv: ModuleType, library: Any, plan: StartPlan, graph_library: Any) -> None:
        device = self.config.device
        shapes = library.handler_shapes(device=device) if library is not None else None
        words: dict[str, int] = {}
        self._served.graphs = None
        if graph_library is not None:
            # The graph module is linked on its own: its handlers have addresses of their own.
            names = device_call_names(self.function_table, library, device)
            found = graph_library.handler_addresses(device)
            words = {entry: found[name] for entry, name in names.items()}
            self._served.graphs = GraphRun(plan.graphs, self.layout.slot_size)
            words.update(self._served.graphs.prepare(drv, self._gpu.reader, device))
        table = self.function_table.pack(shapes, handlers=words, peer_host=plan.shared_kernel)
        self._gpu.allocate(drv, table)

    def _launch(self, args: LaunchArgs, library: Any, plan: StartPlan, graph_library: Any) -> None:
        launcher = self._launcher
        if launcher is None:
            from skbuild_cudaq.realtime.launch import LaunchConfig, launch_kernel
            from skbuild_cudaq.realtime.library import get_device_kernel

            config = LaunchConfig(grid=(1, 1, 1), block=(self.config.block_size, 1, 1))
            if self._served.graphs is not None:  # the graph module's kernel
                from skbuild_cudaq.realtime.graph import GRAPH_DISPATCH_KERNEL

                kernel = graph_library.get_kernel(GRAPH_DISPATCH_KERNEL)
                self._check_block(kernel, GRAPH_DISPATCH_KERNEL)
                streams = (args.stream, self._gpu.standby_stream())
                self._served.graphs.launch(
                    kernel, config, streams, args.kernel_args(), self._gpu.reader
                )
                self._check_alive()
                return
            if self.module is None:
                from skbuild_cudaq.realtime.errors import InvalidArgumentError

                msg = "the built-in kernel needs module= (the extension linked with it)"
                raise InvalidArgumentError(msg)
            if plan.shared_kernel:
                kernel = get_device_kernel(
                    self.module, BUILTIN_KERNEL_SHARED, device=self.config.device
                )
                self._check_block(kernel, BUILTIN_KERNEL_SHARED)
                launch_kernel(kernel, config, args.stream, *args.kernel_args())
            else:
                kernel = self._builtin_kernel(get_device_kernel)
                launch_kernel(kernel, config, args.stream, *args.kernel_args())
            self._check_alive()
            return
        try:
            outcome = launcher(args)
        except Exception as exc:
            msg = f"the dispatch launcher {launcher!r} failed: {exc}"
            raise _start_error(msg) from exc
        if outcome is False:
            msg = f"the dispatch launcher {launcher!r} reported failure"
            raise _start_error(msg)
        self._check_alive()

    def _builtin_kernel(self, lookup: Any) -> Any:
        """The build of the built-in kernel that runs ``config.block_size`` threads.

        ``cudaq_realtime_unified_dispatch`` (no launch bounds: the registers it wants)
        when it can run the block, else ``cudaq_realtime_unified_dispatch_1024``
        (``__launch_bounds__(1024)``). Each one's limit is its own
        ``CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`` as linked for this GPU, asked
        before any launch, so a block neither can run is refused with this message
        rather than ``CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES``.
        """
        from skbuild_cudaq.realtime.errors import InvalidArgumentError

        device = self.config.device
        wanted = self.config.block_size
        kernel = lookup(self.module, BUILTIN_KERNEL, device=device)
        limit = self._max_threads(kernel)
        if limit is None or wanted <= limit:
            return kernel
        wide = lookup(self.module, BUILTIN_KERNEL_1024, device=device)
        wide_limit = self._max_threads(wide)
        if wide_limit is None or wanted <= wide_limit:
            _logger.info(
                "block_size=%d is over %s's %d threads: launching %s",
                wanted,
                BUILTIN_KERNEL,
                limit,
                BUILTIN_KERNEL_1024,
            )
            return wide
        most = max(limit, wide_limit)
        msg = (
            f"DispatcherConfig.block_size={wanted}: the built-in kernel {BUILTIN_KERNEL} "
            f"as linked for device {device} runs at most {most} threads per block "
            f"(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK of its builds: {limit}, and {wide_limit} "
            f"for {BUILTIN_KERNEL_1024}); set block_size to {most} or less"
        )
        raise InvalidArgumentError(msg)

    def _check_block(self, kernel: Any, name: str) -> None:
        """Refuse a block ``kernel`` (one build, ``name``) cannot run, before any launch."""
        limit = self._max_threads(kernel)
        if limit is not None and self.config.block_size > limit:
            from skbuild_cudaq.realtime.errors import InvalidArgumentError

            msg = (
                f"DispatcherConfig.block_size={self.config.block_size}: the built-in kernel "
                f"{name} as linked for device {self.config.device} runs at most {limit} "
                f"threads per block (CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK); set block_size "
                f"to {limit} or less"
            )
            raise InvalidArgumentError(msg)

    def _max_threads(self, kernel: Any) -> int | None:
        """``CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`` of ``kernel`` here (None: no driver)."""
        drv = self._gpu.drv
        if drv is None:
            return None
        attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK
        return int(
            _driver.check(
                drv.cuKernelGetAttribute(attr, kernel.handle, self._gpu.cu_device),
                "cuKernelGetAttribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)",
            )
        )

    def _check_alive(self) -> None:
        """A persistent kernel only returns on shutdown: one that is gone at once never served.

        Waits ``ALIVE_CHECK_S`` and fails start() if the stream is already idle
        (no transport session: a bad launch shape, a ring the kernel cannot
        serve) or the kernel faulted.
        """
        if self._gpu.drv is None or self._gpu.stream is None:
            return
        time.sleep(ALIVE_CHECK_S)
        code, result = self._gpu.stream_state()
        if code == 0:
            msg = (
                "the dispatch kernel returned right after its launch without serving (no "
                "transport session: check the launch shape and the ring it was given)"
            )
            raise _start_error(msg)
        if code != NOT_READY:
            _driver.check(result, "dispatch kernel launch")

    # -- stop -------------------------------------------------------------
    @property
    def processed(self) -> int:
        """Requests the kernel has answered since the last ``start()`` (live while running,
        final after ``stop()``; each start counts from zero, like the host path's)."""
        if self._running:
            with self._gpu.in_context():
                self._processed = self._gpu.read_counter(self._processed)
        return self._processed

    def _teardown_after_failure(self) -> None:
        """start() failed: make sure no kernel runs, then free. Never frees under a live kernel.

        Never raises: start()'s own error is the one to see (a kernel that faulted leaves
        a context that refuses every free as well); a failure here is logged."""
        try:
            with self._gpu.in_context():
                self._teardown_in_context()
        except Exception:
            _logger.warning(
                "freeing a failed start()'s memory on device %d failed too",
                self.config.device,
                exc_info=True,
            )

    def _teardown_in_context(self) -> None:
        self._gpu.signal_shutdown()
        try:
            idle = self._gpu.wait_stream(self.config.stop_timeout)
        except Exception:
            idle = True  # the kernel faulted: it no longer runs
        self._running = False
        self._launch_args = None
        if not idle:
            # The enqueued kernel ignores the shutdown flag: leak rather than free under it.
            self._served.abandoned = True
            return
        _free_run(self._gpu, self._served)

    def stop(self, timeout: Timeout = UNSET) -> int:
        """Signal shutdown, wait for the kernel to exit, return the processed count. Idempotent.

        ``timeout``: seconds; left out, the config's ``stop_timeout``; None, no limit (read as
        the clients read it, and checked before the shutdown flag is set)."""
        seconds = self.config.stop_timeout if timeout is UNSET else check_timeout(timeout)
        if not self._running:
            return self._processed
        with self._gpu.in_context():
            return self._stop_in_context(seconds)

    def _stop_in_context(self, timeout: float | None) -> int:
        self._gpu.signal_shutdown()
        if not self._gpu.wait_stream(timeout):
            self._served.abandoned = True
            self._running = False
            msg = (
                f"the dispatch kernel did not exit within {timeout} s of the shutdown flag; "
                "its memory and module are kept alive"
            )
            raise _start_error(msg)
        self._processed = self._gpu.read_counter(self._processed)
        self._running = False
        self._launch_args = None
        _free_run(self._gpu, self._served)
        return self._processed

    def graph_stats(self) -> dict[str, dict[str, int]]:
        """Per GRAPH_LAUNCH entry the device path serves: ``requests`` handed to its graph,
        ``launch_failures`` (answered ``STATUS_GRAPH_LAUNCH_FAILED``) and the
        ``launch_error`` (``cudaError_t``) of the last failed launch. Empty when no graph
        entry is served; only while running."""
        graphs = self._served.graphs
        if graphs is None or not self._running or self._gpu.drv is None:
            return {}
        found = {}
        with self._gpu.in_context():
            for index, entry in enumerate(graphs.entries):
                io = graphs.read(self._gpu.drv, index)
                found[entry.name] = {
                    "requests": io.sequence,
                    "launch_failures": io.launch_failures,
                    "launch_error": io.launch_error,
                }
        return found

    def close(self) -> None:
        """stop(), then free the streams and the bridge (if the dispatcher made it).

        The device's primary context stays retained for the process (``_driver``'s one
        context helper), as the lookups and launches of the same GPU use it.
        """
        self.stop()
        self._closed = True
        if self._served.abandoned:
            return
        with self._gpu.in_context():
            self._gpu.destroy_streams()
            if self._owns_bridge:
                self.bridge.close()
        self._gpu.forget_context()

    def __enter__(self) -> Dispatcher[BridgeT]:
        return self

    def __repr__(self) -> str:
        state = "running" if self._running else ("closed" if self._closed else "stopped")
        kernel = "builtin" if self._launcher is None else repr(self._launcher)
        return f"Dispatcher({self.config!r}, {kernel}, {state})"
