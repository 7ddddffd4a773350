"""The realtime dispatcher: a persistent GPU kernel serving a bridge's ring.

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

import contextlib
import ctypes
import struct
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import ModuleType, TracebackType
from typing import Any, Generic, TypeVar, cast, overload

from . import _driver
from .bridge import Bridge, HostRingBridge, validate_ring_shape

__all__ = [
    "BUILTIN_KERNEL",
    "DEVICE_CALL",
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

BUILTIN_KERNEL = "cudaq_realtime_unified_dispatch"
DEVICE_CALL = 0  # CUDAQ_DISPATCH_DEVICE_CALL
HOST_CALL = 2  # CUDAQ_DISPATCH_HOST_CALL
SHAPE_LAUNCH = 0  # CUDAQ_HANDLER_SHAPE_LAUNCH: every thread of the launch calls the handler
SHAPE_THREAD = 1  # CUDAQ_HANDLER_SHAPE_THREAD: one thread serves one request
_SHAPES = {"launch": SHAPE_LAUNCH, "thread": SHAPE_THREAD}
# cudaq_function_entry_t: handler, function_id, dispatch_mode, shape, reserved[2]
_ENTRY = struct.Struct("<QIBB2x")
assert _ENTRY.size == 16

_NOT_READY = 600  # CUDA_ERROR_NOT_READY (cuStreamQuery while work is pending)
ALIVE_CHECK_S = 0.002  #: start() looks this long after the launch for a kernel that returned


@dataclass(frozen=True)
class DispatcherConfig:
    """What the dispatcher serves: device ordinal, ring shape, built-in kernel block size."""

    device: int = 0
    num_slots: int = 64
    slot_size: int = 256  #: bytes per slot (24-byte header and payload), a multiple of 8
    block_size: int = 128  #: threads of the built-in kernel's one block
    stop_timeout: float = 10.0  #: seconds stop() waits for the kernel to exit

    def __post_init__(self) -> None:
        from .errors import InvalidArgumentError

        validate_ring_shape(self.num_slots, self.slot_size)
        if not 1 <= self.block_size <= 1024:
            msg = f"block_size={self.block_size}: the built-in kernel runs 1..1024 threads"
            raise InvalidArgumentError(msg)
        if self.device < 0:
            msg = f"device={self.device}: a CUDA device ordinal is >= 0"
            raise InvalidArgumentError(msg)

    @property
    def max_payload(self) -> int:
        return self.slot_size - 24


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
        from .errors import InvalidArgumentError

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
        from .errors import InvalidArgumentError
        from .wire import function_id

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
        """A HOST_CALL entry, served by the host path (the GPU answers it as unknown)."""
        from .errors import InvalidArgumentError
        from .wire import function_id

        candidate: object = handler
        if not callable(candidate):
            msg = f"{name!r}: a HOST_CALL handler must be callable, got {handler!r}"
            raise InvalidArgumentError(msg)
        return self._add(FunctionEntry(name, function_id(name), HOST_CALL, callable=handler))

    def device_entries(self) -> list[FunctionEntry]:
        return [e for e in self._entries if e.dispatch_mode == DEVICE_CALL]

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


@dataclass(frozen=True)
class LaunchArgs:
    """Everything a dispatch kernel needs, handed to a launcher by :meth:`Dispatcher.start`.

    Pointers are device addresses as ints. :meth:`kernel_args` gives the six
    parameters every dispatch kernel takes, in its signature's order
    (``transport_ctx, slot_size, table, table_count, shutdown_flag, stats``), as
    ctypes values for ``launch_kernel``.
    """

    transport_ctx: int
    slot_size: int
    table: int
    table_count: int
    shutdown_flag: int
    stats: int
    stream: Any  #: the dispatcher's non-blocking ``CUstream``: launch on it
    device: int = 0
    num_slots: int = 0  #: the ring's slot count (warp-parallel kernels need a multiple of 32)

    def kernel_args(
        self,
    ) -> tuple[
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_void_p,
        ctypes.c_void_p,
    ]:
        """``(transport_ctx, slot_size, table, table_count, shutdown_flag, stats)``."""
        return (
            ctypes.c_void_p(self.transport_ctx),
            ctypes.c_uint32(self.slot_size),
            ctypes.c_void_p(self.table),
            ctypes.c_uint32(self.table_count),
            ctypes.c_void_p(self.shutdown_flag),
            ctypes.c_void_p(self.stats),
        )


#: A launcher, which launches a dispatch kernel on ``args.stream``; returns None/True (ok) or
#: False (failed), or raises.
Launcher = Callable[[LaunchArgs], "bool | None"]


def _start_error(message: str) -> Exception:
    from .errors import RealtimeError

    return RealtimeError(message)


BridgeT = TypeVar("BridgeT", bound=Bridge)


class Dispatcher(Generic[BridgeT]):
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
        from .errors import InvalidArgumentError

        self.config = config if config is not None else DispatcherConfig()
        self._owns_bridge = bridge is None
        self.bridge: BridgeT = cast(
            "BridgeT",
            bridge
            if bridge is not None
            else HostRingBridge(self.config.num_slots, self.config.slot_size),
        )
        if (self.bridge.num_slots, self.bridge.slot_size) != (
            self.config.num_slots,
            self.config.slot_size,
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
        self._drv: ModuleType | None = None
        self._cu_device: Any = None
        self._context: Any = None
        self._stream: Any = None  # the kernel's stream (non-blocking)
        self._reader: Any = None  # reads the counter while the kernel runs (non-blocking)
        self._table_ptr = 0
        self._stats_ptr = 0
        self._pinned_ptr = 0  # [0:4] shutdown flag (mapped), [8:16] counter read-back
        self._pinned_dev = 0
        self._library: Any = None  # keeps the linked module alive while the kernel may run
        self._running = False
        self._processed = 0
        self._launch_args: LaunchArgs | None = None
        self._abandoned = False

    # -- configuration ----------------------------------------------------
    def set_unified_launch(
        self, launcher: Launcher | None, transport_ctx: int | None = None
    ) -> None:
        """``start()`` will call ``launcher(LaunchArgs)`` instead of launching the built-in kernel.

        ``transport_ctx=None`` keeps the bridge's own context (the host-ring
        context); pass another device address to serve a different transport.
        ``launcher=None`` goes back to the built-in kernel.
        """
        from .errors import InvalidArgumentError

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

    # -- start ------------------------------------------------------------
    def _ensure_context(self) -> ModuleType:
        drv = self._drv
        if drv is None:
            _driver.init()  # no bindings or no driver: RealtimeError, not the loader's error
            drv = _driver.driver()
            self._cu_device = _driver.check(drv.cuDeviceGet(self.config.device), "cuDeviceGet")
            self._context = _driver.check(
                drv.cuDevicePrimaryCtxRetain(self._cu_device), "cuDevicePrimaryCtxRetain"
            )
            self._drv = drv
        _driver.check(drv.cuCtxSetCurrent(self._context), "cuCtxSetCurrent")
        if self._stream is None:
            flags = int(drv.CUstream_flags.CU_STREAM_NON_BLOCKING)
            self._stream = _driver.check(drv.cuStreamCreate(flags), "cuStreamCreate")
            self._reader = _driver.check(drv.cuStreamCreate(flags), "cuStreamCreate")
        return drv

    def _in_context(self) -> contextlib.AbstractContextManager[Any]:
        """This dispatcher's context made current for a block (the caller's is restored)."""
        if self._context is None:
            return contextlib.nullcontext()
        return _driver.pushed(self._context)

    def _resolve_library(self) -> Any:
        from ._binary import bridge_files

        wanted = bridge_files(getattr(self.bridge, "device_code", None))
        launcher_library = getattr(self._launcher, "library", None)
        if launcher_library is None:
            launcher_library = getattr(getattr(self._launcher, "kernel", None), "library", None)
        if self.module is not None:
            from .library import get_library

            linked = get_library(self.module, bridge=wanted, device=self.config.device)
            self._check_launcher_arch(launcher_library, getattr(linked, "arch", None))
            return linked
        library = launcher_library
        if getattr(library, "arch", None) is not None:
            self._check_launcher_arch(library, _driver.ordinal_arch(self.config.device))
        if library is not None and wanted is not None and library.bridge != wanted:
            from .errors import LibraryConflictError

            msg = (
                f"the launcher's kernel was linked without this bridge's device code "
                f"({', '.join(map(str, wanted))}): look it up after get_library(module, "
                "bridge=bridge.device_code)"
            )
            raise LibraryConflictError(msg)
        return library

    def _check_launcher_arch(self, launcher_library: Any, arch: str | None) -> None:
        """A launcher's kernel must be linked for this dispatcher's GPU architecture."""
        linked = getattr(launcher_library, "arch", None)
        if linked is None or arch is None or linked == arch:
            return
        from .errors import LibraryConflictError

        device = self.config.device
        msg = (
            f"the launcher's kernel is linked for {linked}, but device {device} is {arch}: "
            f"look the kernel up for this GPU (get_device_kernel(module, name, "
            f"device={device})) before making the launcher"
        )
        raise LibraryConflictError(msg)

    def _check_table(self, library: Any) -> None:
        from .errors import InvalidArgumentError

        entries = self.function_table.device_entries()
        if not entries:
            return
        if library is None:
            msg = (
                "cannot check the DEVICE_CALL entries: pass module= to Dispatcher (the "
                "extension whose handlers it serves) or a launcher with a .kernel"
            )
            raise InvalidArgumentError(msg)
        device = self.config.device
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
        elsewhere = self._other_devices(foreign, library)
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

    def _other_devices(self, entries: list[FunctionEntry], library: Any) -> list[Any]:
        """``(entry, device, handler)`` for entries that are handler addresses of another GPU."""
        if not entries:
            return []
        from .library import loaded_libraries

        libraries = [library, *(lib for lib in loaded_libraries().values() if lib is not library)]
        found = []
        for entry in entries:
            owners = [
                (device, name)
                for lib in libraries
                for device, name in lib.owners(entry.address)
                if device != self.config.device
            ]
            if owners:
                found.append((entry, *owners[0]))
        return found

    def start(self) -> None:
        """Allocate, check, launch. Raises (and leaves nothing running) on any failure."""
        from .errors import InvalidArgumentError

        if self._running:
            msg = "the dispatcher is already running"
            raise InvalidArgumentError(msg)
        if self._abandoned:
            msg = "a previous kernel of this dispatcher never exited; make a new Dispatcher"
            raise _start_error(msg)
        library = self._resolve_library()
        self._check_table(library)
        drv = self._ensure_context()
        try:
            self.bridge.open()
            self.bridge.reset()
            self._allocate(drv, library)
            transport = (
                self._transport_ctx
                if self._transport_ctx is not None
                else self.bridge.transport_ctx
            )
            args = LaunchArgs(
                transport_ctx=transport,
                slot_size=self.config.slot_size,
                table=self._table_ptr,
                table_count=len(self.function_table),
                shutdown_flag=self._pinned_dev,
                stats=self._stats_ptr,
                stream=self._stream,
                device=self.config.device,
                num_slots=self.config.num_slots,
            )
            self._library = library
            self._launch_args = args
            self._running = True  # from here on a kernel may be enqueued
            self._launch(args, library)
        except BaseException:
            self._teardown_after_failure()
            raise

    def _allocate(self, drv: ModuleType, library: Any) -> None:
        shapes = library.handler_shapes(device=self.config.device) if library is not None else None
        table = self.function_table.pack(shapes)
        size = max(len(table), 16)
        self._table_ptr = _driver.ptr(
            _driver.check(drv.cuMemAlloc(size), "cuMemAlloc(function table)")
        )
        if table:
            _driver.check(
                drv.cuMemcpyHtoD(self._table_ptr, table, len(table)), "cuMemcpyHtoD(table)"
            )
        self._stats_ptr = _driver.ptr(_driver.check(drv.cuMemAlloc(8), "cuMemAlloc(stats)"))
        _driver.check(drv.cuMemsetD8(self._stats_ptr, 0, 8), "cuMemsetD8(stats)")
        flags = drv.CU_MEMHOSTALLOC_DEVICEMAP | drv.CU_MEMHOSTALLOC_PORTABLE
        self._pinned_ptr = _driver.ptr(
            _driver.check(drv.cuMemHostAlloc(16, flags), "cuMemHostAlloc(flag)")
        )
        ctypes.memset(self._pinned_ptr, 0, 16)
        self._pinned_dev = _driver.ptr(
            _driver.check(
                drv.cuMemHostGetDevicePointer(self._pinned_ptr, 0), "cuMemHostGetDevicePointer"
            )
        )

    def _launch(self, args: LaunchArgs, library: Any) -> None:
        launcher = self._launcher
        if launcher is None:
            from .launch import LaunchConfig, launch_kernel
            from .library import get_device_kernel

            if self.module is None:
                from .errors import InvalidArgumentError

                msg = "the built-in kernel needs module= (the extension linked with it)"
                raise InvalidArgumentError(msg)
            kernel = get_device_kernel(self.module, BUILTIN_KERNEL, device=self.config.device)
            self._check_block_size(kernel)
            config = LaunchConfig(grid=(1, 1, 1), block=(self.config.block_size, 1, 1))
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

    def _check_block_size(self, kernel: Any) -> None:
        """Refuse a block the built-in kernel, as linked for this GPU, cannot run.

        ``DispatcherConfig`` accepts 1..1024 threads (CUDA's own bound); the kernel's
        limit (``CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK``: its registers per thread,
        or its ``__launch_bounds__``) may be lower. Asked before any launch, so
        the answer is this message rather than ``CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES``.
        """
        from .errors import InvalidArgumentError

        drv = self._drv
        if drv is None:
            return
        attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK
        limit = int(
            _driver.check(
                drv.cuKernelGetAttribute(attr, kernel.handle, self._cu_device),
                "cuKernelGetAttribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)",
            )
        )
        if self.config.block_size > limit:
            msg = (
                f"DispatcherConfig.block_size={self.config.block_size}: the built-in kernel "
                f"{BUILTIN_KERNEL} as linked for device {self.config.device} runs at most "
                f"{limit} threads per block (CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK); set "
                f"block_size to {limit} or less"
            )
            raise InvalidArgumentError(msg)

    def _check_alive(self) -> None:
        """A persistent kernel only returns on shutdown: one that is gone at once never served.

        Waits ``ALIVE_CHECK_S`` and fails start() if the stream is already idle
        (no transport session: a bad launch shape, a ring the kernel cannot
        serve) or the kernel faulted.
        """
        drv = self._drv
        if drv is None or self._stream is None:
            return
        time.sleep(ALIVE_CHECK_S)
        result = drv.cuStreamQuery(self._stream)
        code = int(result[0] if isinstance(result, tuple) else result)
        if code == 0:
            msg = (
                "the dispatch kernel returned right after its launch without serving (no "
                "transport session: check the launch shape and the ring it was given)"
            )
            raise _start_error(msg)
        if code != _NOT_READY:
            _driver.check(result, "dispatch kernel launch")

    # -- stop -------------------------------------------------------------
    def _signal_shutdown(self) -> None:
        if self._pinned_ptr:
            ctypes.c_int32.from_address(self._pinned_ptr).value = 1

    def _wait_stream(self, timeout: float) -> bool:
        """Wait for the kernel's stream without blocking forever. True once it is idle."""
        drv = self._drv
        if drv is None or self._stream is None:
            return True
        deadline = time.monotonic() + timeout
        delay = 1e-5
        while True:
            result = drv.cuStreamQuery(self._stream)
            code = int(result[0] if isinstance(result, tuple) else result)
            if code == 0:
                return True
            if code != _NOT_READY:
                _driver.check(result, "dispatch kernel")  # a fault of the kernel: raise it
            if time.monotonic() >= deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 1e-3)

    def _read_counter(self) -> int:
        drv = self._drv
        if drv is None or not self._stats_ptr:
            return self._processed
        dst = self._pinned_ptr + 8
        _driver.check(
            drv.cuMemcpyDtoHAsync(dst, self._stats_ptr, 8, self._reader), "cuMemcpyDtoHAsync(stats)"
        )
        _driver.check(drv.cuStreamSynchronize(self._reader), "cuStreamSynchronize(reader)")
        return int(ctypes.c_uint64.from_address(dst).value)

    @property
    def processed(self) -> int:
        """Requests the kernel has answered since the last ``start()`` (live while running,
        final after ``stop()``; each start counts from zero, like the host path's)."""
        if self._running:
            with self._in_context():
                self._processed = self._read_counter()
        return self._processed

    def _free(self) -> None:
        drv = self._drv
        table, stats, pinned = self._table_ptr, self._stats_ptr, self._pinned_ptr
        self._table_ptr = self._stats_ptr = self._pinned_ptr = self._pinned_dev = 0
        if drv is None:
            return
        if table:
            _driver.check(drv.cuMemFree(table), "cuMemFree(function table)")
        if stats:
            _driver.check(drv.cuMemFree(stats), "cuMemFree(stats)")
        if pinned:
            _driver.check(drv.cuMemFreeHost(pinned), "cuMemFreeHost(flag)")

    def _teardown_after_failure(self) -> None:
        """start() failed: make sure no kernel runs, then free. Never frees under a live kernel."""
        with self._in_context():
            self._teardown_in_context()

    def _teardown_in_context(self) -> None:
        self._signal_shutdown()
        try:
            idle = self._wait_stream(self.config.stop_timeout)
        except Exception:
            idle = True  # the kernel faulted: it no longer runs
        self._running = False
        self._launch_args = None
        if not idle:
            # The enqueued kernel ignores the shutdown flag: leak rather than free under it.
            self._abandoned = True
            return
        self._free()
        self._library = None

    def stop(self, timeout: float | None = None) -> int:
        """Signal shutdown, wait for the kernel to exit, return the processed count. Idempotent."""
        if not self._running:
            return self._processed
        with self._in_context():
            return self._stop_in_context(timeout)

    def _stop_in_context(self, timeout: float | None) -> int:
        timeout = self.config.stop_timeout if timeout is None else timeout
        self._signal_shutdown()
        if not self._wait_stream(timeout):
            self._abandoned = True
            self._running = False
            msg = (
                f"the dispatch kernel did not exit within {timeout} s of the shutdown flag; "
                "its memory and module are kept alive"
            )
            raise _start_error(msg)
        self._processed = self._read_counter()
        self._running = False
        self._launch_args = None
        self._free()
        self._library = None
        return self._processed

    def close(self) -> None:
        """stop(), then free the streams, the bridge (if the dispatcher made it), the context."""
        self.stop()
        if self._abandoned:
            return
        drv = self._drv
        with self._in_context():
            if drv is not None:
                for stream in (self._stream, self._reader):
                    if stream is not None:
                        _driver.check(drv.cuStreamDestroy(stream), "cuStreamDestroy")
                self._stream = self._reader = None
            if self._owns_bridge:
                self.bridge.close()
        if drv is not None:
            _driver.check(
                drv.cuDevicePrimaryCtxRelease(self._cu_device), "cuDevicePrimaryCtxRelease"
            )
            self._drv = None
            self._context = None

    def __enter__(self) -> Dispatcher[BridgeT]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "running" if self._running else "stopped"
        kernel = "builtin" if self._launcher is None else repr(self._launcher)
        return f"Dispatcher({self.config!r}, {kernel}, {state})"
