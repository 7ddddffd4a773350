"""The one stand-in for ``cuda.bindings.driver``: the run time's error paths and call order.

Never the proof that a feature works (the GPU tests are); it lets CPU tests drive
start-up, lookup, dispatcher and bridge code down paths a real driver rarely takes.
Install it with the ``use_driver`` fixture of ``tests/conftest.py`` (the one seam,
``skbuild_cudaq.realtime._driver.driver``, with the module's per-process state reset).

- :class:`FakeDriver`: GPUs of given architectures with what the run time's
  per-device logic, the dispatcher and the host-ring bridge depend on: per-thread
  context stacks, primary contexts, context-independent libraries whose handler
  addresses differ per context, real ctypes "pinned" memory, a "device" memory map,
  and a persistent "kernel" that keeps its stream busy until it sees the shutdown flag.
  For the host path's graph workers it hands out C-callable entry points
  (``cuGetProcAddress``) that keep stream order: each worker stream runs what was enqueued
  on it in turn (a copy reads its pinned source when it runs, not when it is enqueued; a
  graph starts once everything before it has run and runs until a test publishes and ends
  it: :meth:`FakeDriver.publish_graph`, :meth:`FakeDriver.end_graph`). Bookkeeping and
  error paths only, never the proof that a graph answers (``tests/test_parity_gpu.py`` is).
- :func:`startup_driver`: device 0 an sm_90, no context current, a given
  ``cuDevicePrimaryCtxRetain``; records the call order of the start-up.
- :func:`failing_driver`: the calls example_app's launchers make, one of them failing.
"""

from __future__ import annotations

import ctypes
import struct
import threading
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Protocol, TypeVar

__all__ = [
    "NOT_READY",
    "OK",
    "FakeDriver",
    "FakeGraphRun",
    "FakeKernel",
    "FakeStream",
    "Result",
    "UseDriver",
    "failing_driver",
    "startup_driver",
]

NOT_READY = 600  # CUDA_ERROR_NOT_READY: what cuStreamQuery says of a running kernel


class Result(int):
    """Stands in for a CUresult member (an int with a name)."""

    def __new__(cls, code: int, name: str) -> Result:
        obj = super().__new__(cls, code)
        obj.name = name  # type: ignore[attr-defined]
        return obj


OK = Result(0, "CUDA_SUCCESS")

_Fake = TypeVar("_Fake")


class UseDriver(Protocol):
    """The ``use_driver`` fixture's type (``tests/conftest.py``): installs and returns a fake."""

    def __call__(self, fake: _Fake) -> _Fake: ...


_ARCH_ATTRIBUTES = SimpleNamespace(
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR="major",
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR="minor",
)


class FakeStream(str):
    """A stream handle: its name (``"stream0"``, ...) as a string, a handle as an int."""

    handle: int

    def __new__(cls, name: str, handle: int) -> FakeStream:
        obj = super().__new__(cls, name)
        obj.handle = handle
        return obj

    def __int__(self) -> int:
        return self.handle


@dataclass
class FakeGraphRun:
    """A graph the host path launched on a worker stream. It starts once what was enqueued
    before it on its stream has run (the copy of its request among them) and runs until the
    test ends it; a failure before it on its stream ends it unstarted."""

    graph_exec: int
    stream: FakeStream
    record: int  #: the device record the copy before it fills (its I/O context)
    started: bool = False  #: everything before it on its stream has run: it runs
    published: bool = False  #: it did what ``cudaq_graph_publish`` does
    done: bool = False
    error: int = 0  #: what the stream reports once it has ended (0: success)


@dataclass
class _FakeCopy:
    """A ``cuMemcpyHtoDAsync`` waiting its turn on its stream: it reads ``src`` when it runs."""

    dst: int
    src: int
    size: int
    enqueued: bytes  #: the source as it was at the call (a change before the copy ran: a hazard)


#: Calls the driver refuses (CUDA_ERROR_INVALID_CONTEXT) while no context is current: memory
#: and streams are allocated and freed in a context.
_NEEDS_CONTEXT = frozenset(
    (
        "cuMemAlloc",
        "cuMemFree",
        "cuMemHostAlloc",
        "cuMemFreeHost",
        "cuStreamCreate",
        "cuStreamDestroy",
    )
)

#: cudaq_graph_io_t (graph.py's GraphIO)
_GRAPH_IO = struct.Struct("<QQQIIIIQIIQ")


class FakeKernel:
    """What a launched persistent kernel looks like to the host: busy until shutdown."""

    def __init__(self, drv: FakeDriver, shutdown_flag: int, ignores_shutdown: bool) -> None:
        self.drv = drv
        self.shutdown_flag = shutdown_flag
        self.ignores_shutdown = ignores_shutdown
        self.exited = False

    def poll(self) -> bool:
        flag = ctypes.c_int32.from_address(self.shutdown_flag).value
        if not self.exited and not self.ignores_shutdown and flag != 0:
            self.exited = True
            self.drv.log.append("kernel exited")
        return self.exited


class FakeDriver:
    """GPUs of the given architectures (device 0 sm_90, device 1 sm_80 by default).

    Records:

    - ``log``: the name of every call that does something (not the queries of the
      current context or of device attributes), plus ``"launch"`` and
      ``"kernel exited"``; a call named in ``fail`` returns that code instead, and the
      memory and stream calls of ``_NEEDS_CONTEXT`` return CUDA_ERROR_INVALID_CONTEXT while
      no context is current, as the driver does.
    - ``calls``: ``(call, current context)`` of the context-sensitive calls
      (primary-context retains, library loads, handler-address reads).

    The stream ``"stream0"`` (the first one created) is the persistent kernel's:
    ``cuStreamQuery`` says NOT_READY on it while the launched :class:`FakeKernel`
    has not seen its shutdown flag. ``processed`` is the counter the kernel reports.
    """

    CTX_BASE = 0x1000

    CU_MEMHOSTALLOC_DEVICEMAP = 2
    CU_MEMHOSTALLOC_PORTABLE = 1
    CUstream_flags = SimpleNamespace(CU_STREAM_NON_BLOCKING=1)
    CUdriverProcAddress_flags = SimpleNamespace(CU_GET_PROC_ADDRESS_LEGACY_STREAM=1)
    CUpointer_attribute = SimpleNamespace(CU_POINTER_ATTRIBUTE_DEVICE_POINTER=3)
    CUfunction_attribute = SimpleNamespace(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK=0)
    CUdevice_attribute = _ARCH_ATTRIBUTES

    def __init__(self, archs: tuple[tuple[int, int], ...] = ((9, 0), (8, 0))) -> None:
        self.archs = archs
        self.log: list[str] = []
        self.calls: list[tuple[str, int | None]] = []
        self.fail: dict[str, Any] = {}
        self.retained: dict[int, int] = {}
        self.loaded: list[str] = []
        self._globals: dict[int, int] = {}  # fake dptr -> the handler address it holds
        self._tls = threading.local()
        self.host: dict[int, Any] = {}  # address -> ctypes buffer (keeps it alive)
        self.device: dict[int, bytearray] = {}
        self.next_device = 0x7F00_0000_0000
        self.kernel: FakeKernel | None = None
        self.ignores_shutdown = False
        self.processed = 0
        self.max_threads = 1024  # the linked built-in kernel's limit on this "GPU"
        self.max_threads_1024 = 1024  # its __launch_bounds__(1024) build's
        self.streams: dict[int, FakeStream] = {}  # handle -> stream
        self.graph_runs: list[FakeGraphRun] = []  # graphs launched by the host path
        self.proc_versions: list[int] = []  # the ABI each cuGetProcAddress asked for
        self.missing_procs: set[str] = set()  # entry points cuGetProcAddress says are absent
        self._copied: dict[int, int] = {}  # stream handle -> the record its last copy fills
        self._queues: dict[int, list[_FakeCopy | FakeGraphRun]] = {}  # what a stream has not run
        self._order = threading.Lock()  # the streams' state: the loop's calls and the test's
        self.graph_queries: dict[int, int] = {}  # stream handle -> cuStreamQuery calls (loop's)
        #: copies whose pinned source changed between the call and the copy's turn (the host
        #: wrote memory a pending copy was still to read)
        self.hazards: list[str] = []
        self._procs: dict[str, Any] | None = None

    def _ok(self, name: str, *values: Any) -> tuple[Any, ...]:
        self.log.append(name)
        if name in _NEEDS_CONTEXT and self.current() is None:
            return (Result(201, "CUDA_ERROR_INVALID_CONTEXT"),) + (None,) * len(values)
        code = self.fail.get(name, 0)
        return (OK, *values) if code == 0 else (code,) + (None,) * len(values)

    # -- contexts -------------------------------------------------------------------
    def _stack(self) -> list[int]:
        stack: list[int] | None = getattr(self._tls, "stack", None)
        if stack is None:
            stack = self._tls.stack = []
        return stack

    def current(self) -> int | None:
        stack = self._stack()
        return stack[-1] if stack else None

    def _record(self, call: str) -> None:
        self.calls.append((call, self.current()))

    def cuInit(self, flags: int) -> tuple[Any, ...]:
        return self._ok("cuInit")

    def cuDeviceGetCount(self) -> tuple[Result, int]:
        return (OK, len(self.archs))

    def cuDeviceGet(self, ordinal: int) -> tuple[Any, ...]:
        if not 0 <= ordinal < len(self.archs):
            self.log.append("cuDeviceGet")
            return (Result(101, "CUDA_ERROR_INVALID_DEVICE"), None)
        return self._ok("cuDeviceGet", ordinal)

    def cuDeviceGetAttribute(self, attr: str, dev: int) -> tuple[Result, int]:
        major, minor = self.archs[dev]
        return (OK, major if attr == "major" else minor)

    def cuDevicePrimaryCtxRetain(self, dev: int) -> tuple[Any, ...]:
        self._record(f"cuDevicePrimaryCtxRetain({dev})")
        self.retained[dev] = self.retained.get(dev, 0) + 1
        return self._ok("cuDevicePrimaryCtxRetain", self.CTX_BASE + dev)

    def cuDevicePrimaryCtxRelease(self, dev: int) -> tuple[Any, ...]:
        self.retained[dev] = self.retained.get(dev, 0) - 1
        return self._ok("cuDevicePrimaryCtxRelease")

    def cuCtxGetCurrent(self) -> tuple[Result, int | None]:
        return (OK, self.current())

    def cuCtxGetDevice(self) -> tuple[Result, int | None]:
        ctx = self.current()
        if ctx is None:
            return (Result(201, "CUDA_ERROR_INVALID_CONTEXT"), None)
        return (OK, ctx - self.CTX_BASE)

    def cuCtxSetCurrent(self, ctx: Any) -> tuple[Any, ...]:
        stack = self._stack()
        if stack:
            stack[-1] = ctx
        else:
            stack.append(ctx)
        return self._ok("cuCtxSetCurrent")

    def cuCtxPushCurrent(self, ctx: Any) -> tuple[Any, ...]:
        self._stack().append(ctx)
        return self._ok("cuCtxPushCurrent")

    def cuCtxPopCurrent(self) -> tuple[Any, ...]:
        stack = self._stack()
        if not stack:
            return (Result(201, "CUDA_ERROR_INVALID_CONTEXT"), None)
        return self._ok("cuCtxPopCurrent", stack.pop())

    # -- libraries ------------------------------------------------------------------
    def cuLibraryLoadData(self, cubin: bytes, *rest: Any) -> tuple[Any, ...]:
        self._record("cuLibraryLoadData")
        handle = f"library{len(self.loaded)}"
        self.loaded.append(handle)
        return self._ok("cuLibraryLoadData", handle)

    def cuLibraryUnload(self, handle: str) -> tuple[Any, ...]:
        return self._ok("cuLibraryUnload")

    def cuLibraryGetKernel(self, library: str, name: bytes) -> tuple[Result, str]:
        return (OK, f"{library}:{name.decode()}")

    def cuKernelGetFunction(self, kernel: str) -> tuple[Result, str | None]:
        ctx = self.current()
        if ctx is None:
            return (Result(201, "CUDA_ERROR_INVALID_CONTEXT"), None)
        return (OK, f"{kernel}@{ctx:#x}")

    def cuLibraryGetGlobal(self, library: str, name: bytes) -> tuple[Result, int | None, int]:
        ctx = self.current()
        if ctx is None:
            return (Result(201, "CUDA_ERROR_INVALID_CONTEXT"), None, 0)
        self._record(f"cuLibraryGetGlobal({name.decode()})")
        device = ctx - self.CTX_BASE
        dptr = 0x7000_0000 + len(self._globals) * 8
        # the handler's code address: a different range per device, as with UVA
        self._globals[dptr] = (0x7F00_0000_0000 + device * 0x10_0000_0000) | (
            sum(name) * 0x100 + len(self._globals) * 0x10
        )
        return (OK, dptr, 8)

    def cuGetErrorString(self, result: Any) -> tuple[Result, bytes]:
        return (OK, b"described")

    # -- streams --------------------------------------------------------------------
    def cuStreamCreate(self, flags: int) -> tuple[Any, ...]:
        assert flags == 1, "dispatcher streams must be non-blocking"
        number = self.log.count("cuStreamCreate")
        stream = FakeStream(f"stream{number}", 0x5000 + number)
        self.streams[stream.handle] = stream
        return self._ok("cuStreamCreate", stream)

    def cuStreamDestroy(self, stream: Any) -> tuple[Any, ...]:
        return self._ok("cuStreamDestroy")

    def cuStreamQuery(self, stream: Any) -> tuple[Any, ...]:
        self.log.append("cuStreamQuery")
        if stream == "stream0" and self.kernel is not None and not self.kernel.poll():
            return (NOT_READY,)
        return (OK,)

    def cuStreamSynchronize(self, stream: Any) -> tuple[Any, ...]:
        assert stream != "stream0", "never block on the persistent kernel's stream"
        return self._ok("cuStreamSynchronize")

    # -- memory ---------------------------------------------------------------------
    def cuMemHostAlloc(self, size: int, flags: int) -> tuple[Any, ...]:
        assert flags == 3, "DEVICEMAP | PORTABLE"
        buf = (ctypes.c_uint8 * size)(*([0xAB] * size))  # garbage: the code must clear it
        addr = ctypes.addressof(buf)
        self.host[addr] = buf
        return self._ok("cuMemHostAlloc", addr)

    def cuMemHostGetDevicePointer(self, addr: int, flags: int) -> tuple[Any, ...]:
        for base, buf in self.host.items():
            if base <= addr < base + ctypes.sizeof(buf):
                return self._ok("cuMemHostGetDevicePointer", addr)  # UVA: same address
        self.log.append("cuMemHostGetDevicePointer")
        return (Result(1, "CUDA_ERROR_INVALID_VALUE"), None)  # not pinned memory

    def cuPointerGetAttribute(self, attribute: int, addr: int) -> tuple[Any, ...]:
        """UVA's lookup; of the attributes, only the device address of pinned memory."""
        assert attribute == 3, "CU_POINTER_ATTRIBUTE_DEVICE_POINTER"
        return self.cuMemHostGetDevicePointer(addr, 0)

    def cuMemFreeHost(self, addr: int) -> tuple[Any, ...]:
        assert addr in self.host
        del self.host[addr]
        return self._ok("cuMemFreeHost")

    def cuMemAlloc(self, size: int) -> tuple[Any, ...]:
        addr = self.next_device
        self.next_device += max(0x1000, (size + 0xFFF) & ~0xFFF)
        self.device[addr] = bytearray(size)
        return self._ok("cuMemAlloc", addr)

    def read_device(self, addr: int, size: int) -> bytes:
        """``size`` bytes of "device memory" at ``addr`` (inside one allocation)."""
        for base, buf in self.device.items():
            if base <= addr and addr + size <= base + len(buf):
                return bytes(buf[addr - base : addr - base + size])
        msg = f"no device allocation holds {size} bytes at {addr:#x}"
        raise AssertionError(msg)

    def _write_device(self, addr: int, data: bytes) -> None:
        for base, buf in self.device.items():
            if base <= addr and addr + len(data) <= base + len(buf):
                buf[addr - base : addr - base + len(data)] = data
                return
        msg = f"no device allocation holds {len(data)} bytes at {addr:#x}"
        raise AssertionError(msg)

    def cuMemFree(self, addr: int) -> tuple[Any, ...]:
        del self.device[addr]
        return self._ok("cuMemFree")

    def cuMemcpyHtoD(self, dst: int, src: Any, size: int) -> tuple[Any, ...]:
        data = ctypes.string_at(src, size) if isinstance(src, int) else bytes(src)[:size]
        self.device[dst][:size] = data
        return self._ok("cuMemcpyHtoD")

    def cuMemsetD8(self, dst: int, value: int, size: int) -> tuple[Any, ...]:
        self.device[dst][:size] = bytes([value]) * size
        return self._ok("cuMemsetD8")

    def cuMemcpyDtoH(self, dst: int, src: int, size: int) -> tuple[Any, ...]:
        ctypes.c_uint64.from_address(dst).value = self._globals[src]  # a handler address
        return self._ok("cuMemcpyDtoH")

    def cuMemcpyDtoHAsync(self, dst: int, src: int, size: int, stream: Any) -> tuple[Any, ...]:
        assert stream != "stream0", "read the counter on the reader stream"
        assert size == 8
        ctypes.c_uint64.from_address(dst).value = self.processed
        return self._ok("cuMemcpyDtoHAsync")

    # -- the "kernel" ---------------------------------------------------------------
    def cuKernelGetAttribute(self, attr: int, kernel: Any, dev: Any) -> tuple[Any, ...]:
        assert attr == 0 and kernel.endswith("kernel-handle")
        limit = (
            self.max_threads_1024 if kernel == "builtin-1024-kernel-handle" else self.max_threads
        )
        return self._ok("cuKernelGetAttribute", limit)

    def launch(self, args: Any) -> None:
        """What a launcher's enqueue does: the persistent kernel starts (``args.shutdown_flag``)."""
        self.log.append("launch")
        self.kernel = FakeKernel(self, args.shutdown_flag, self.ignores_shutdown)

    # -- graphs: stream capture records launches; a launched graph starts the kernel -------
    CUstreamCaptureMode = SimpleNamespace(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL=1)
    CUgraphExec = staticmethod(lambda value=0: int(value))
    graph_exec_flags = 4  # CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH: what graphs report

    def cuStreamBeginCapture(self, stream: Any, mode: int) -> tuple[Any, ...]:
        self.capturing: list[Any] = []
        return self._ok("cuStreamBeginCapture")

    def cuStreamEndCapture(self, stream: Any) -> tuple[Any, ...]:
        graph = ("graph", tuple(self.__dict__.pop("capturing", [])))
        return self._ok("cuStreamEndCapture", graph)

    def cuGraphInstantiate(self, graph: Any, flags: int) -> tuple[Any, ...]:
        self.instantiated = (graph, flags)
        return self._ok(f"cuGraphInstantiate(flags={flags})", 0x6E0000)

    def cuGraphExecGetFlags(self, exec_: Any) -> tuple[Any, ...]:
        return self._ok("cuGraphExecGetFlags", self.graph_exec_flags)

    def cuGraphUpload(self, exec_: Any, stream: Any) -> tuple[Any, ...]:
        return self._ok(f"cuGraphUpload({int(exec_):#x})")

    def cuGraphLaunch(self, exec_: Any, stream: Any) -> tuple[Any, ...]:
        graph = self.instantiated[0]
        for args in graph[1]:  # the captured launches run (the persistent kernel starts)
            self.launch(args)
        return self._ok("cuGraphLaunch")

    def cuGraphExecDestroy(self, exec_: Any) -> tuple[Any, ...]:
        return self._ok("cuGraphExecDestroy")

    def cuGraphDestroy(self, graph: Any) -> tuple[Any, ...]:
        return self._ok("cuGraphDestroy")

    # -- the host path's graph workers: entry points the native loop calls -------------
    def cuGetProcAddress(self, symbol: bytes, version: int, flags: Any) -> tuple[Any, ...]:
        name = symbol.decode()
        self.proc_versions.append(version)
        fn = None if name in self.missing_procs else self._entry_points().get(name)
        address = ctypes.cast(fn, ctypes.c_void_p).value if fn is not None else 0
        return self._ok(f"cuGetProcAddress({name})", address or 0, 0)

    def _entry_points(self) -> dict[str, Any]:
        """C-callable stand-ins (kept alive with the driver) of what the native loop calls;
        each takes the GIL when called (ctypes), on the serving thread."""
        if self._procs is None:
            c_int, c_void_p = ctypes.c_int, ctypes.c_void_p
            self._procs = {
                "cuCtxSetCurrent": ctypes.CFUNCTYPE(c_int, c_void_p)(self._c_ctx_set_current),
                "cuGraphLaunch": ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p)(self._c_graph_launch),
                "cuStreamQuery": ctypes.CFUNCTYPE(c_int, c_void_p)(self._c_stream_query),
                "cuMemcpyHtoDAsync": ctypes.CFUNCTYPE(
                    c_int, ctypes.c_uint64, c_void_p, ctypes.c_size_t, c_void_p
                )(self._c_memcpy_htod_async),
                "cuGetErrorName": ctypes.CFUNCTYPE(c_int, c_int, ctypes.POINTER(ctypes.c_char_p))(
                    self._c_get_error_name
                ),
            }
            self._names = {700: ctypes.c_char_p(b"CUDA_ERROR_ILLEGAL_ADDRESS")}
        return self._procs

    def _code(self, call: str) -> int:
        self.log.append(call)
        return int(self.fail.get(call, 0))

    def _c_ctx_set_current(self, ctx: int | None) -> int:
        self.cuCtxSetCurrent(ctx)
        return int(self.fail.get("cuCtxSetCurrent", 0))

    def _c_memcpy_htod_async(self, dst: int, src: int | None, size: int, stream: int | None) -> int:
        code = self._code("cuMemcpyHtoDAsync")
        if code == 0:
            assert self.current() is not None, "no context current on the serving thread"
            handle = stream or 0
            copy = _FakeCopy(dst, src or 0, size, ctypes.string_at(src or 0, size))
            with self._order:
                self._queues.setdefault(handle, []).append(copy)
                self._copied[handle] = dst
                self._advance(handle)
        return code

    def _c_graph_launch(self, graph_exec: int | None, stream: int | None) -> int:
        code = self._code("cuGraphLaunch")
        if code == 0:
            handle = stream or 0
            with self._order:
                run = FakeGraphRun(graph_exec or 0, self.streams[handle], self._copied[handle])
                self.graph_runs.append(run)
                self._queues.setdefault(handle, []).append(run)
                self._advance(handle)
        return code

    def _c_stream_query(self, stream: int | None) -> int:
        handle = stream or 0
        with self._order:
            self.graph_queries[handle] = self.graph_queries.get(handle, 0) + 1
            if self._queues.get(handle):
                return NOT_READY
            runs = [r for r in self.graph_runs if r.stream.handle == handle]
            return runs[-1].error if runs else 0  # what the stream's last graph ended with

    def _advance(self, handle: int) -> None:
        """Run what stream ``handle`` holds, in order, up to a graph that has not ended (it
        starts: it runs until the test ends it). Under ``_order``."""
        queue = self._queues.get(handle, [])
        while queue:
            op = queue[0]
            if isinstance(op, FakeGraphRun):
                if not op.done:
                    op.started = True
                    return
            else:
                data = ctypes.string_at(op.src, op.size)
                if data != op.enqueued:
                    self.hazards.append(
                        f"the source of a copy into {op.dst:#x} changed before the copy ran"
                    )
                self._write_device(op.dst, data)
            queue.pop(0)

    def _c_get_error_name(self, code: int, out: Any) -> int:
        name = self._names.get(code)
        if name is None:
            return 1  # CUDA_ERROR_INVALID_VALUE: the loop then names it by number
        # the string's own buffer, alive with the driver as the real driver's are static
        # (``name.value`` is a copy the callback's return frees: the loop read freed memory)
        out[0] = name
        return 0

    def graph_io(self, run: FakeGraphRun) -> tuple[int, ...]:
        """The I/O context the host path wrote for ``run`` (``cudaq_graph_io_t``'s fields)."""
        return _GRAPH_IO.unpack(self.read_device(run.record, _GRAPH_IO.size))

    def graph_request(self, run: FakeGraphRun) -> bytes:
        """The arguments of the request ``run`` serves (its copy in the record)."""
        request = self.graph_io(run)[0]
        arg_len = struct.unpack_from("<I", self.read_device(request + 8, 4))[0]
        return self.read_device(request + 24, arg_len)

    def publish_graph(
        self, run: FakeGraphRun, *, status: int = 0, result: bytes | None = None
    ) -> bytes:
        """What ``cudaq_graph_publish`` does in the running ``run``: the response header and
        ``result`` (by default its arguments plus one, byte by byte) into the response slot,
        then the flag value into the response flag. The graph runs on (its tail) until
        :meth:`end_graph`. Returns the request's arguments."""
        assert run.started and not run.done, "a graph publishes while it runs"
        assert not run.published, "a graph publishes once"
        request, response, flag, value, slot_size, *_ = self.graph_io(run)
        _magic, _fid, arg_len, request_id, timestamp = struct.unpack(
            "<IIIIQ", self.read_device(request, 24)
        )
        args = self.read_device(request + 24, arg_len)
        out = bytes((b + 1) & 0xFF for b in args) if result is None else result
        out = out[: slot_size - 24]
        head = struct.pack("<IiIIQ", 0x43555153, status, len(out), request_id, timestamp)
        ctypes.memmove(response, head + out, len(head) + len(out))  # mapped: same address
        run.published = True
        ctypes.c_uint32.from_address(flag).value = value
        return args

    def end_graph(
        self,
        run: FakeGraphRun,
        *,
        publish: bool = True,
        status: int = 0,
        result: bytes | None = None,
        error: int = 0,
    ) -> bytes:
        """End the running ``run`` as a graph would: with ``publish`` (unless it has
        published already), :meth:`publish_graph` first, else nothing; its stream then
        reports ``error``. With an error, what was enqueued behind it on its stream never
        runs (as after a fault): its copies are dropped, its graphs end unstarted with the
        same error. Then the stream runs on. Returns the request's arguments."""
        assert run.started and not run.done, "a graph ends once it has started (stream order)"
        request = self.graph_io(run)[0]
        arg_len = struct.unpack_from("<I", self.read_device(request + 8, 4))[0]
        args = self.read_device(request + 24, arg_len)
        if publish and not run.published:
            self.publish_graph(run, status=status, result=result)
        handle = run.stream.handle
        with self._order:
            run.error = error
            run.done = True
            queue = self._queues[handle]
            assert queue[0] is run
            queue.pop(0)
            if error:
                for op in queue:
                    if isinstance(op, FakeGraphRun):
                        op.error, op.done = error, True
                queue.clear()
            self._advance(handle)
        return args


def startup_driver(events: list[str], retain: Any) -> SimpleNamespace:
    """A driver with no context current and device 0 an sm_90; ``events`` records the calls.

    ``retain`` stands in for ``cuDevicePrimaryCtxRetain``; loads succeed.
    """

    def record(name: str, value: Any = None) -> Any:
        events.append(name)
        return (OK, value)

    return SimpleNamespace(
        cuInit=lambda flags: OK,
        cuCtxGetCurrent=lambda: record("cuCtxGetCurrent", None),
        cuDeviceGet=lambda ordinal: (OK, ordinal),
        CUdevice_attribute=_ARCH_ATTRIBUTES,
        cuDeviceGetAttribute=lambda attr, dev: record(attr, 9 if attr == "major" else 0),
        cuDevicePrimaryCtxRetain=retain,
        cuCtxSetCurrent=lambda ctx: OK,
        cuLibraryLoadData=lambda *a: record("cuLibraryLoadData", "library-handle"),
        cuLibraryGetKernel=lambda lib, name: (OK, f"kernel:{name.decode()}"),
        cuLibraryUnload=lambda h: OK,
        cuGetErrorString=lambda r: (OK, b"described"),
    )


def failing_driver(fail: str, code: Any) -> SimpleNamespace:
    """The calls example_app's launchers make: ``fail`` returns ``code``, every other succeeds."""

    def call(name: str, value: Any) -> Any:
        return lambda *args: (code, None) if name == fail else (OK, value)

    attrs = SimpleNamespace(
        CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT="sms",
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR="major",
        CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN="optin",
    )
    return SimpleNamespace(
        CUdevice_attribute=attrs,
        CUfunction_attribute=SimpleNamespace(
            CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES="static",
            CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES="dynamic",
        ),
        cuDeviceGet=call("cuDeviceGet", 0),
        cuDeviceGetAttribute=call("cuDeviceGetAttribute", 1 << 20),  # every limit generous
        cuKernelGetFunction=call("cuKernelGetFunction", "function"),
        cuOccupancyMaxActiveBlocksPerMultiprocessor=call(
            "cuOccupancyMaxActiveBlocksPerMultiprocessor", 1
        ),
        cuFuncGetAttribute=call("cuFuncGetAttribute", 0),
        cuKernelSetAttribute=call("cuKernelSetAttribute", None),
    )
