"""One linked CUDA module, :class:`Library`: links lazily (a worker thread while the
context is created), loads with ``cuLibraryLoadData``, looks kernels and handlers up."""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import threading
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skbuild_cudaq.realtime import _driver
from skbuild_cudaq.realtime._closing import Closing
from skbuild_cudaq.realtime.errors import CUDAError, InvalidArgumentError, RealtimeError
from skbuild_cudaq.realtime.library.symbols import HANDLER_PREFIX, ModuleSymbols, cubin_symbols
from skbuild_cudaq.realtime.link._binary import Binary, BridgeCode, binary_path, bridge_files

if TYPE_CHECKING:
    from collections.abc import Callable

    from skbuild_cudaq.realtime.link.cache import LinkCache
    from skbuild_cudaq.realtime.link.linker import LeftOut, LinkResult

__all__ = ["DeviceHandler", "Kernel", "Library"]


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


#: What the usual next step (a Dispatcher) imports, imported on the link worker once the
#: cubin is there, while the caller still waits for the driver to create the context (it
#: releases the GIL): off the first answer's critical path (~17 ms on the H200 host).
_NEXT_STEP_MODULES = ("skbuild_cudaq.realtime.dispatcher",)


def _prefetch_next_step() -> None:
    for name in _NEXT_STEP_MODULES:
        with contextlib.suppress(Exception):  # the caller's own import reports any problem
            importlib.import_module(name)


class _LinkJob:
    """Reads, looks up and links a binary's device code on a worker thread.

    Created once the arch is known; the worker waits for :meth:`go`, which the
    caller says right before the long driver call (creating the context), so
    that the caller never has to win the GIL back from a busy worker (Python
    hands the GIL over only every ``sys.getswitchinterval()``, 5 ms). The caller
    then collects the link's result with :meth:`result`. ``link`` imports the link
    modules on the worker, so they stay off the caller's path too.
    """

    def __init__(self, link: Callable[[], LinkResult]) -> None:
        self._link = link
        self._linked: LinkResult | None = None
        self._error: BaseException | None = None
        self._go = threading.Event()
        self._thread = threading.Thread(target=self._run, name="skbuild-cudaq-link", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self._go.wait()
        try:
            self._linked = self._link()  # imports the link modules on this thread
        except BaseException as exc:  # handed to the caller by result()
            self._error = exc
            return
        _prefetch_next_step()

    def go(self) -> None:
        """Let the worker start (call right before a long call that releases the GIL)."""
        self._go.set()

    def result(self) -> LinkResult:
        """The link's result; re-raises whatever the link raised."""
        self._go.set()
        self._thread.join()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        assert self._linked is not None
        return self._linked

    def wait(self) -> None:
        """Wait for the worker, dropping its result (the caller failed first)."""
        self._go.set()
        self._thread.join()


def _unload(handle: Any) -> None:
    with contextlib.suppress(Exception):  # finalizers must not raise
        _driver.driver().cuLibraryUnload(handle)


class Library(Closing):
    """One linked CUDA module: links and loads on first use; ``close()`` unloads it."""

    def __init__(
        self,
        binary: Binary | None = None,
        *,
        arch: str | None = None,
        cubin: bytes | None = None,
        cache: LinkCache | None = None,
        bridge: BridgeCode = None,
        graph_launch: bool = False,
    ) -> None:
        if binary is None and cubin is None:
            msg = "Library needs a binary (module or path) or a cubin"
            raise InvalidArgumentError(msg)
        self._path = binary_path(binary) if binary is not None else None
        self._binary = binary
        self._arch = arch
        self._cache = cache
        self._bridge = bridge_files(bridge)
        self._graph_launch = graph_launch
        self._cubin = cubin
        self._left_out: tuple[LeftOut, ...] = ()
        self._symbols: ModuleSymbols | None = None
        self._handle: Any = None
        # handler addresses per context: int(CUcontext) -> (device ordinal, name -> address)
        self._handlers: dict[int, tuple[int, dict[str, int]]] = {}
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._closed = False
        self._holders = 0  # running dispatchers serving from this module (_hold, _let_go)
        self._lock = threading.RLock()

    @classmethod
    def from_cubin(cls, cubin: bytes) -> Library:
        return cls(cubin=bytes(cubin))

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("loaded" if self._handle is not None else "lazy")
        return f"<Library {self._path or 'cubin'} {state}>"

    @property
    def path(self) -> Path | None:
        """The binary whose device code this is (None for a bare cubin)."""
        return self._path

    @property
    def bridge(self) -> tuple[Path, ...] | None:
        """The device code of the bridge linked in, or None for the built-in host-ring hooks."""
        return self._bridge

    @property
    def graph_launch(self) -> bool:
        """Whether the graph dispatch kernel and the device runtime are linked in."""
        return self._graph_launch

    @property
    def arch(self) -> str | None:
        """``sm_XY`` the cubin is linked for (None until a link or load tells)."""
        return self._arch

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def left_out(self) -> tuple[LeftOut, ...]:
        """The binary's containers left out of the link, which have no code for :attr:`arch`
        (see :attr:`~skbuild_cudaq.realtime.link.linker.LinkResult.left_out`). What they define is
        not in this module. Empty before the link and for a bare cubin."""
        return self._left_out

    def _check_open(self) -> None:
        if self._closed:
            msg = f"{self!r} is closed"
            raise RealtimeError(msg)

    @property
    def cubin(self) -> bytes:
        """The linked cubin (links on first use; with an explicit arch, no GPU is needed)."""
        with self._lock:
            self._check_open()
            if self._cubin is None:
                self._cubin = self._take(self._link(self._arch))
            return self._cubin

    def _link(self, arch: str | None) -> LinkResult:
        """Link (or take from the cache) this library's device code for ``arch``."""
        from skbuild_cudaq.realtime.link.linker import LinkOptions, link_device_code

        assert self._binary is not None
        options = LinkOptions(arch=arch, bridge=self._bridge, graph_launch=self._graph_launch)
        return link_device_code(self._binary, options, cache=self._cache)

    def _take(self, result: LinkResult) -> bytes:
        """Keep what the link says besides the cubin; the cubin."""
        self._left_out = result.left_out
        return result.cubin

    @property
    def symbols(self) -> ModuleSymbols:
        if self._symbols is None:
            self._symbols = cubin_symbols(self.cubin)
        return self._symbols

    def _link_while_creating_context(self, device: int | None) -> tuple[bytes, Any]:
        """Link on a worker thread while this one creates the context (see the module doc).

        ``device=None``: the current context's device (device 0's primary context is
        made current when none is). Otherwise device ``device``'s primary context is
        retained (not made current). Returns the cubin and the context to load in.
        """
        if device is None:
            ctx, dev = _driver.current_device()
            arch = self._arch or _driver.device_arch(dev)
        else:
            ctx, arch = None, self._arch or _driver.ordinal_arch(device)
        job = _LinkJob(lambda: self._link(arch))
        try:
            job.go()
            if device is not None:
                ctx = _driver.primary_context(device)
            elif ctx is None:
                ctx = _driver.make_primary_current(dev)
        except BaseException:
            job.wait()
            raise
        cubin = self._take(job.result())
        self._arch = arch
        return cubin, ctx

    def load(self, device: int | None = None) -> Any:
        """The ``CUlibrary`` handle (links and loads on first use).

        ``device``: the GPU whose architecture the link is for when no ``arch`` was
        given (None: the current context's device, or device 0). The handle is
        context-independent: it serves every GPU of that architecture.
        """
        with self._lock:
            self._check_open()
            if self._handle is None:
                if self._cubin is None:
                    self._cubin, ctx = self._link_while_creating_context(device)
                elif device is None:
                    ctx = _driver.ensure_context()
                else:
                    ctx = _driver.primary_context(device)
                cubin = self._cubin
                drv = _driver.driver()
                # device None: ctx is current already (as on one GPU: no extra driver call)
                current = contextlib.nullcontext() if device is None else _driver.pushed(ctx)
                with current:
                    handle = _driver.check(
                        drv.cuLibraryLoadData(cubin, None, None, 0, None, None, 0),
                        "cuLibraryLoadData",
                    )
                self._handle = handle
                self._finalizer = weakref.finalize(self, _unload, handle)
                self._finalizer.atexit = False
            return self._handle

    @property
    def handle(self) -> Any:
        return self.load()

    def get_kernel(self, name: str) -> Kernel:
        """The kernel ``name`` (``cuLibraryGetKernel``); InvalidArgumentError if absent."""
        handle = self.load()
        drv = _driver.driver()
        try:
            kernel = _driver.check(
                drv.cuLibraryGetKernel(handle, name.encode()), f"cuLibraryGetKernel({name!r})"
            )
        except CUDAError as exc:
            if not _driver.is_not_found(exc):
                raise
            symbols = self.symbols
            hint = ""
            if name in symbols.handlers or name.startswith(HANDLER_PREFIX):
                hint = " (that is a handler: use get_device_handler)"
            msg = (
                f"no kernel {name!r} in the device code of {self._path or 'the cubin'}{hint}; "
                f"kernels: {', '.join(symbols.kernels) or '(none)'}{self._left_out_note()}"
            )
            raise InvalidArgumentError(msg, symbols.kernels, self._left_out) from None
        return Kernel(self, name, kernel)

    def _left_out_note(self) -> str:
        """What a failed lookup adds when containers were left out of the link ('' if none)."""
        if not self._left_out or self._arch is None:
            return ""
        from skbuild_cudaq.realtime.link.linker import left_out_note

        return f"; {left_out_note(self._left_out, self._arch)}"

    def check_device(self, device: int) -> None:
        """Raise :class:`InvalidArgumentError` unless this module can run on GPU ``device``."""
        arch = _driver.ordinal_arch(device)
        if self._arch is not None and arch != self._arch:
            msg = (
                f"the device code of {self._path or 'the cubin'} is linked for {self._arch}, "
                f"but device {device} is {arch}: look it up for that GPU "
                f"(get_library(module, device={device}), get_device_handler(module, name, "
                f"device={device}))"
            )
            raise InvalidArgumentError(msg)

    def _context_of(self, device: int | None) -> tuple[Any, int]:
        """``(context, ordinal)`` lookups for ``device`` are made in (see the module doc)."""
        if device is not None:
            self.check_device(device)
            return _driver.primary_context(device), device
        ctx, dev = _driver.current_device()
        if ctx is None:
            ctx = _driver.make_primary_current(dev)
        return ctx, int(dev)

    def _read_handlers(self, device: int | None = None) -> dict[str, int]:
        """Every exported handler's address in ``device``'s context (read once per context)."""
        with self._lock:
            handle = self.load(device)
            ctx, ordinal = self._context_of(device)
            known = self._handlers.get(int(ctx))
            if known is not None:
                return known[1]
            drv = _driver.driver()
            found: dict[str, int] = {}
            with _driver.pushed(ctx):
                for name in self.symbols.handlers:
                    symbol = HANDLER_PREFIX + name
                    dptr, size = _driver.check(
                        drv.cuLibraryGetGlobal(handle, symbol.encode()),
                        f"cuLibraryGetGlobal({symbol!r})",
                    )
                    if int(size) != 8:
                        msg = f"device global {symbol} has {int(size)} bytes, expected a pointer"
                        raise RealtimeError(msg)
                    value = ctypes.c_uint64(0)
                    _driver.check(
                        drv.cuMemcpyDtoH(ctypes.addressof(value), dptr, 8),
                        f"cuMemcpyDtoH({symbol!r})",
                    )
                    found[name] = int(value.value)
            self._handlers[int(ctx)] = (ordinal, found)
            return found

    def get_handler(self, name: str, device: int | None = None) -> int:
        """Device address of the handler exported as ``cudaq_handler_<name>``.

        Addresses are per context: ``device`` picks the GPU (its primary context);
        None means the current context (device 0's primary context when none is).
        """
        if name.startswith(HANDLER_PREFIX):
            name = name[len(HANDLER_PREFIX) :]
        handlers = self._read_handlers(device)
        if name not in handlers:
            exported = sorted(handlers)
            hint = ""
            if name in self.symbols.kernels:
                hint = " (that is a kernel: use get_device_kernel)"
            msg = (
                f"no handler {name!r} exported in the device code of "
                f"{self._path or 'the cubin'}{hint} (export it with "
                f"CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION({name})); "
                f"exported handlers: {', '.join(exported) or '(none)'}{self._left_out_note()}"
            )
            raise InvalidArgumentError(msg, exported, self._left_out)
        address = handlers[name]
        if address == 0:
            msg = f"handler {name!r} is exported as a null pointer"
            raise RealtimeError(msg)
        return DeviceHandler(address, name, self._context_of(device)[1])

    def handler_addresses(self, device: int | None = None) -> dict[str, int]:
        """Every exported handler's device address on ``device`` (see :meth:`get_handler`)."""
        return dict(self._read_handlers(device))

    def handler_shapes(self, device: int | None = None) -> dict[int, int]:
        """The shape each exported handler was declared with, by its address on ``device``.

        1 (``SHAPE_THREAD``) for handlers exported with
        ``CUDAQ_REALTIME_EXPORT_THREAD_FUNCTION``, else 0 (``SHAPE_LAUNCH``).
        """
        thread = self.symbols.thread_handlers
        found = self._read_handlers(device)
        return {address: int(name in thread) for name, address in found.items()}

    def contains(self, address: int, device: int | None = None) -> bool:
        """Whether ``address`` is the address of a handler this module exports on ``device``.

        Device function addresses are code addresses (no driver call reports a
        module's code range), and every handler a function table may hold is
        exported through ``cudaq_handler_<name>``; so this is exact for the
        dispatcher's DEVICE_CALL check. An address looked up on another GPU is
        not contained (:meth:`owners` says where it is from).
        """
        return int(address) != 0 and int(address) in self._read_handlers(device).values()

    def owners(self, address: int) -> list[tuple[int, str]]:
        """``(device, handler name)`` of every context already read where ``address`` is a handler.

        Only contexts whose handlers were looked up are searched (no context is
        created for the question); used to explain a cross-device mistake.
        """
        with self._lock:
            return sorted(
                (ordinal, name)
                for ordinal, found in self._handlers.values()
                for name, value in found.items()
                if value == int(address)
            )

    def _hold(self) -> None:
        """A dispatcher serves from this module from now on: :meth:`close` refuses until it
        lets go (the package's dispatchers, at start and stop)."""
        with self._lock:
            self._check_open()
            self._holders += 1

    def _let_go(self) -> None:
        with self._lock:
            self._holders = max(0, self._holders - 1)

    def _refuse_close_in_use(self) -> None:
        if self._holders:
            noun = "a running Dispatcher" if self._holders == 1 else "running Dispatchers"
            msg = (
                f"{self!r} is in use by {noun}: stop() it before closing the module or "
                "calling release_library() (unloading it would pull the code out from under "
                "a running kernel)"
            )
            raise RealtimeError(msg)

    def close(self) -> None:
        """Unload the module (idempotent). Kernels and handler addresses become invalid.

        Refused (:class:`RealtimeError`) while a running dispatcher serves from it."""
        with self._lock:
            if self._closed:
                return
            self._refuse_close_in_use()
            self._closed = True
            if self._finalizer is not None:
                self._finalizer()  # unloads once
                self._finalizer = None
            self._handle = None
            self._handlers = {}

    def __enter__(self) -> Library:
        return self
