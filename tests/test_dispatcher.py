"""Dispatcher and host-ring bridge without a GPU: value objects and error paths.

The error paths run against the fake CUDA driver (``tests/_fake_driver.FakeDriver``,
installed at the one seam by the ``use_driver`` fixture). Host "pinned" memory is real ctypes
memory, so the shutdown flag and the ring the code writes are really written;
the mocked stream stays busy (``cuStreamQuery`` -> NOT_READY) while a launched
"kernel" has not seen the shutdown flag, like a persistent kernel.
"""

from __future__ import annotations

import ctypes
import gc
import struct
import threading
import weakref
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from _fake_driver import FakeDriver, UseDriver

from skbuild_cudaq.realtime.bridge import HostRingBridge
from skbuild_cudaq.realtime.dispatcher import (
    DEVICE_CALL,
    GRAPH_LAUNCH,
    HOST_CALL,
    SHAPE_LAUNCH,
    SHAPE_THREAD,
    Dispatcher,
    DispatcherConfig,
    FunctionTable,
    LaunchArgs,
)
from skbuild_cudaq.realtime.dispatcher.table import ENTRY_FLAG_PEER
from skbuild_cudaq.realtime.errors import (
    ClientError,
    CUDAError,
    InvalidArgumentError,
    RealtimeError,
    RingError,
)
from skbuild_cudaq.realtime.ring import RingLayout


class FakeLibrary:
    def __init__(self, lo: int, hi: int) -> None:
        self.lo, self.hi = lo, hi

    def contains(self, address: int, device: int | None = None) -> bool:
        return self.lo <= address < self.hi

    def owners(self, address: int) -> list[tuple[int, str]]:
        return []

    def handler_shapes(self, device: int | None = None) -> dict[int, int]:
        return {0x1100: SHAPE_LAUNCH, 0x1200: SHAPE_THREAD}


@pytest.fixture
def drv(use_driver: UseDriver) -> FakeDriver:
    return use_driver(FakeDriver())


LIB = FakeLibrary(0x1000, 0x2000)
#: stop()'s wait where the fake kernel exits when asked: a hang guard, never a figure.
HANG_GUARD_S = 30.0


class HeldLibrary(FakeLibrary):
    """Counts the holds a dispatcher takes on its module (``Library._hold`` / ``_let_go``)."""

    holds = 0

    def _hold(self) -> None:
        self.holds += 1

    def _let_go(self) -> None:
        self.holds -= 1


def make(drv: FakeDriver, launcher: Any, **config: Any) -> Dispatcher:
    d = Dispatcher(
        DispatcherConfig(**{"num_slots": 4, "slot_size": 64, "stop_timeout": 0.5, **config})
    )
    d.function_table.add_device("rpc_increment", 0x1100)
    launcher.library = LIB
    d.set_unified_launch(launcher)
    return d


class Launcher:
    """A launcher that enqueues (fake) and can fail before or after."""

    def __init__(self, drv: FakeDriver, *, enqueue: bool = True, fail: str | None = None) -> None:
        self.drv, self.enqueue, self.fail = drv, enqueue, fail
        self.library: Any = None
        self.seen: LaunchArgs | None = None

    def __call__(self, args: LaunchArgs) -> bool | None:
        self.seen = args
        if self.fail == "before":
            raise RuntimeError("bad grid")
        if self.enqueue:
            self.drv.launch(args)
        if self.fail == "after":
            raise RuntimeError("attribute query failed after the launch")
        if self.fail == "false":
            return False
        return None


def frees_after_exit(log: list[str]) -> bool:
    exit_at = log.index("kernel exited")
    first_free = min(log.index(n) for n in ("cuMemFree", "cuMemFreeHost") if n in log)
    return first_free > exit_at


# -- value objects ---------------------------------------------------------------


def test_function_table_packs_16_byte_entries() -> None:
    table = FunctionTable()
    table.add_device("rpc_increment", 0xDEAD_BEEF_0000)
    table.add_host("host_echo", lambda *a: None)
    packed = table.pack()
    assert len(packed) == 32
    handler, fid, mode = struct.unpack_from("<QIB", packed, 0)
    assert (handler, fid, mode) == (0xDEAD_BEEF_0000, 0x191B6322, DEVICE_CALL)
    assert struct.unpack_from("<QIB", packed, 16)[2] == HOST_CALL
    assert packed[13:16] == b"\0\0\0"  # launch-wide (no shape given, none exported)
    with pytest.raises(InvalidArgumentError, match="already in"):
        table.add_device("rpc_increment", 0x10)
    with pytest.raises(InvalidArgumentError, match="not a device address"):
        table.add_device("echo", 0)


def test_function_table_carries_handler_shapes() -> None:
    table = FunctionTable()
    table.add_device("a", 0x1100, shape="thread")
    table.add_device("b", 0x1200, shape="launch")
    table.add_device("c", 0x1300)  # as exported: resolved from the module at start()
    table.add_device("d", 0x1400)
    packed = table.pack({0x1300: SHAPE_THREAD})
    assert [packed[16 * i + 13] for i in range(4)] == [1, 0, 1, 0]
    assert all(packed[16 * i + 14 : 16 * i + 16] == b"\0\0" for i in range(4))
    # an explicit shape wins over the exported one
    assert table.pack({0x1100: SHAPE_LAUNCH, 0x1200: SHAPE_THREAD})[13] == 1
    assert table.pack({0x1100: SHAPE_LAUNCH, 0x1200: SHAPE_THREAD})[29] == 0
    with pytest.raises(InvalidArgumentError, match=r"shape='warp'.*'launch' or 'thread'"):
        table.add_device("e", 0x1500, shape="warp")
    assert "e" not in table


def test_start_fills_exported_shapes_into_the_device_table(drv: FakeDriver) -> None:
    launcher = Launcher(drv)
    d = make(drv, launcher)  # rpc_increment at 0x1100: launch-wide in the fake module
    d.function_table.add_device("echo_thread", 0x1200)  # exported thread-shaped
    d.function_table.add_device("forced", 0x1100 + 0x40, shape="thread")
    d.start()
    assert launcher.seen is not None
    table = bytes(drv.device[launcher.seen.table])
    assert [table[16 * i + 13] for i in range(3)] == [SHAPE_LAUNCH, SHAPE_THREAD, SHAPE_THREAD]
    d.close()


def test_launch_args_kernel_args_in_spec_order() -> None:
    args = LaunchArgs(1, 256, 3, 4, 5, 6, stream="s")
    values = args.kernel_args()
    assert [type(v) for v in values] == [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_void_p,
        ctypes.c_void_p,
    ]
    assert [v.value for v in values] == [1, 256, 3, 4, 5, 6]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"slot_size": 24}, "slot_size=24"),
        ({"slot_size": 100}, "multiple of 8"),
        ({"num_slots": 0}, "num_slots=0"),
        ({"block_size": 2048}, "block_size=2048"),
    ],
)
def test_config_rejects_bad_values(kwargs: dict[str, int], match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        DispatcherConfig(**kwargs)


def test_bridge_shape_must_match_config() -> None:
    with pytest.raises(InvalidArgumentError, match="differs"):
        Dispatcher(DispatcherConfig(num_slots=8, slot_size=64), bridge=HostRingBridge(4, 64))


def test_nothing_touches_cuda_before_start() -> None:
    d = Dispatcher(DispatcherConfig())
    assert not d.bridge.is_open
    assert d.processed == 0
    assert d.stop() == 0  # stop before start: nothing to do


# -- bridge ----------------------------------------------------------------------


def _host_ring_ctx(raw: bytes) -> SimpleNamespace:
    """Decode the header of a cudaq_host_ring_ctx_t (host_ring.cuh)."""
    fields = ("magic", "num_slots", "slot_size", "reserved", "rx_slots", "tx_slots")
    fields += ("rx_flags", "tx_flags")
    return SimpleNamespace(**dict(zip(fields, struct.unpack_from("<IIIIQQQQ", raw), strict=True)))


@pytest.fixture
def current(drv: FakeDriver) -> Iterator[None]:
    """Device 0's primary context current, as a HostRingBridge's open() needs."""
    from skbuild_cudaq.realtime import _driver

    with _driver.pushed(_driver.primary_context(0)):
        yield


@pytest.mark.usefixtures("current")
def test_bridge_allocates_one_mapped_ring_and_a_device_context(drv: FakeDriver) -> None:
    with HostRingBridge(num_slots=8, slot_size=64) as bridge:
        total = RingLayout(8, 64).total_bytes
        assert drv.log.count("cuMemHostAlloc") == 1
        assert len(bridge.buffer) == total == 2 * 8 * 64 + 8 * 8 + 8  # + the id source
        assert bytes(bridge.buffer) == bytes(total)  # cleared
        ctx = _host_ring_ctx(bytes(drv.device[bridge.transport_ctx]))
        base = bridge.device_ring
        assert (ctx.magic, ctx.num_slots, ctx.slot_size) == (0x474E4952, 8, 64)
        assert ctx.rx_slots == base
        assert ctx.tx_slots == base + 512
        assert ctx.rx_flags == base + 1024
        assert ctx.tx_flags == base + 1024 + 32
        bridge.buffer[1024:1088] = b"\x07" * 64  # flags of a used ring
        bridge.reset()
        assert bytes(bridge.buffer[1024:1088]) == bytes(64)
    assert not bridge.is_open
    assert drv.host == {}
    assert drv.device == {}
    bridge.close()  # idempotent


@pytest.mark.usefixtures("current")
def test_bridge_frees_what_it_got_when_open_fails(drv: FakeDriver) -> None:
    drv.fail["cuMemAlloc"] = 2  # CUDA_ERROR_OUT_OF_MEMORY
    bridge = HostRingBridge(4, 64)
    with pytest.raises(CUDAError):
        bridge.open()
    assert drv.host == {}
    assert not bridge.is_open


def test_bridge_and_mailbox_free_in_the_context_they_were_allocated_in(drv: FakeDriver) -> None:
    """The driver frees memory only with a context current: a bridge opened on device 1
    and closed where no context is (another thread, a finalizer, after the block that
    opened it) frees in device 1's context; so does a mailbox. Neither leaks."""
    from skbuild_cudaq.realtime import _driver
    from skbuild_cudaq.realtime.graph import GraphMailbox

    with _driver.pushed(_driver.primary_context(1)):
        bridge = HostRingBridge(4, 64).open()
    mailbox = GraphMailbox(device=1)
    assert drv.current() is None and drv.host and drv.device
    bridge.close()
    mailbox.close()
    assert drv.host == {} and drv.device == {}
    assert drv.current() is None  # the caller's (no) context is restored


# -- dispatcher error paths ------------------------------------------------------


def test_start_hands_the_launcher_everything_and_stop_is_idempotent(drv: FakeDriver) -> None:
    launcher = Launcher(drv)
    d = make(drv, launcher)
    d.start()
    args = launcher.seen
    assert args is not None
    assert args.transport_ctx == d.bridge.transport_ctx
    assert (args.slot_size, args.table_count, args.num_slots) == (64, 1, 4)
    assert struct.unpack_from("<QI", bytes(drv.device[args.table]), 0) == (0x1100, 0x191B6322)
    assert ctypes.c_int32.from_address(args.shutdown_flag).value == 0
    drv.processed = 7
    assert d.processed == 7  # live read through the reader stream
    assert d.stop() == 7
    assert frees_after_exit(drv.log)
    log_len = len(drv.log)
    assert d.stop() == 7
    assert len(drv.log) == log_len  # second stop does nothing
    d.close()
    assert drv.device == {}
    assert drv.host == {}


def test_explicit_transport_ctx_replaces_the_bridges(drv: FakeDriver) -> None:
    launcher = Launcher(drv)
    d = make(drv, launcher)
    d.set_unified_launch(launcher, transport_ctx=0xCAFE000)
    d.start()
    assert launcher.seen is not None
    assert launcher.seen.transport_ctx == 0xCAFE000
    d.close()


@pytest.mark.parametrize("fail", ["before", "false"])
def test_launcher_failing_before_enqueue_fails_start(drv: FakeDriver, fail: str) -> None:
    launcher = Launcher(drv, enqueue=False, fail=fail)
    d = make(drv, launcher)
    with pytest.raises(RealtimeError, match="launcher"):
        d.start()
    assert not d.running
    assert launcher.seen is not None
    assert "launch" not in drv.log
    assert "cuMemFree" in drv.log  # table and counter freed
    d.close()
    assert drv.device == {}
    assert drv.host == {}


def test_launcher_failing_after_enqueue_shuts_down_and_waits_before_freeing(
    drv: FakeDriver,
) -> None:
    launcher = Launcher(drv, fail="after")
    d = make(drv, launcher)
    with pytest.raises(RealtimeError, match="after the launch") as info:
        d.start()
    assert isinstance(info.value.__cause__, RuntimeError)
    log = drv.log
    assert "launch" in log
    assert "kernel exited" in log  # the shutdown flag was set and the stream drained
    assert frees_after_exit(log)
    assert d._served.library is None  # the module is let go only after the exit
    d.close()
    assert drv.device == {}


def test_kernel_ignoring_shutdown_is_never_freed_under(drv: FakeDriver) -> None:
    drv.ignores_shutdown = True
    launcher = Launcher(drv, fail="after")
    d = make(drv, launcher)
    with pytest.raises(RealtimeError):
        d.start()
    assert "cuMemFree" not in drv.log  # leaked on purpose: the kernel may still run
    assert d._served.library is LIB  # module kept alive
    with pytest.raises(RealtimeError, match="never exited"):
        d.start()


def test_stop_timeout_reports_a_kernel_that_does_not_exit(drv: FakeDriver) -> None:
    drv.ignores_shutdown = True
    d = make(drv, Launcher(drv))
    d.start()
    with pytest.raises(RealtimeError, match="did not exit"):
        d.stop(timeout=0.05)
    assert "cuMemFree" not in drv.log


def test_a_running_dispatcher_dropped_stops_its_kernel_before_anything_is_freed(
    drv: FakeDriver,
) -> None:
    d = make(drv, Launcher(drv))
    d.start()
    client = d.bridge.client()
    del d
    gc.collect()
    # the kernel saw its shutdown flag before its ring (the bridge's) or memory went
    assert "kernel exited" in drv.log
    assert frees_after_exit(drv.log)
    assert drv.device == {}
    assert drv.host == {}
    assert drv.log.count("cuStreamDestroy") == 2
    with pytest.raises(ClientError, match="closed"):
        client.call("rpc_increment", b"x")


def test_a_dispatcher_dropped_with_a_kernel_that_never_exited_frees_nothing(
    drv: FakeDriver,
) -> None:
    drv.ignores_shutdown = True
    d = make(drv, Launcher(drv))
    d.start()
    with pytest.raises(RealtimeError, match="did not exit"):
        d.stop(timeout=0.05)
    bridge = weakref.ref(d.bridge)
    del d
    gc.collect()
    assert "cuMemFree" not in drv.log
    assert "cuMemFreeHost" not in drv.log  # the ring the kernel polls stays
    assert bridge() is not None


def test_a_closed_dispatcher_refuses_to_start(drv: FakeDriver) -> None:
    """As a closed HostDispatcher: close() is the end (its ring and streams are gone), so a
    later start() says so instead of quietly making them again."""
    d = make(drv, Launcher(drv))
    d.start()
    d.close()
    assert "closed" in repr(d)
    with pytest.raises(RealtimeError, match="the dispatcher is closed; make a new Dispatcher"):
        d.start()
    d.close()  # idempotent


@pytest.mark.parametrize("ending", ["stop", "drop", "never exits"])
def test_a_running_dispatcher_holds_its_module_until_its_kernel_is_gone(
    drv: FakeDriver, ending: str
) -> None:
    """While the kernel may run, its module is held (a Library refuses close() and
    release_library()): from start() to stop(), or to the finalizer of a dispatcher dropped
    running; for ever when the kernel never exited."""
    lib = HeldLibrary(0x1000, 0x2000)
    drv.ignores_shutdown = ending == "never exits"
    launcher = Launcher(drv)
    d = make(drv, launcher)
    launcher.library = lib
    d.start()
    assert lib.holds == 1
    if ending == "stop":
        d.stop()
    elif ending == "never exits":
        with pytest.raises(RealtimeError, match="did not exit"):
            d.stop(timeout=0.05)
    del d, launcher
    gc.collect()
    assert lib.holds == (1 if ending == "never exits" else 0)


def test_stop_timeout_left_out_is_the_configs_and_none_waits_without_limit(
    drv: FakeDriver,
) -> None:
    """Dispatcher.stop reads ``timeout`` as the clients and the host path do: left out, the
    config's stop_timeout; None, no limit (it meant the config's); a bad value is refused
    before the shutdown flag is set."""
    import math

    drv.ignores_shutdown = True
    d = make(drv, Launcher(drv), stop_timeout=0.05)
    d.start()
    for bad, error in ((-1, InvalidArgumentError), (math.nan, InvalidArgumentError),
                       ("1", TypeError)):  # fmt: skip
        with pytest.raises(error, match="a number of seconds >= 0, or None"):
            d.stop(bad)
        assert d.running
    kernel = drv.kernel
    assert kernel is not None
    let_go = threading.Event()

    def release() -> None:
        let_go.set()
        kernel.ignores_shutdown = False

    exits = threading.Timer(0.3, release)
    exits.start()
    d.stop(None)  # waits for the kernel however long it takes: returns only after release()
    assert let_go.is_set() and not d.running
    exits.join()
    d.start()
    drv.kernel.ignores_shutdown = True
    with pytest.raises(RealtimeError, match=r"did not exit within 0\.05 s"):
        d.stop()  # left out: the config's 0.05 s
    d.close()


def test_a_with_block_error_is_not_masked_by_a_stop_that_fails(drv: FakeDriver) -> None:
    drv.ignores_shutdown = True
    d = make(drv, Launcher(drv), stop_timeout=0.05)
    with pytest.raises(KeyError, match="the block's") as raised, d:
        d.start()
        raise KeyError("the block's")
    assert any("did not exit within 0.05 s" in note for note in raised.value.__notes__)


def test_a_clean_with_block_raises_the_stop_that_fails(drv: FakeDriver) -> None:
    drv.ignores_shutdown = True
    d = make(drv, Launcher(drv), stop_timeout=0.05)
    with pytest.raises(RealtimeError, match="did not exit"), d:
        d.start()


def test_device_call_outside_the_module_is_rejected_before_anything_runs(
    drv: FakeDriver,
) -> None:
    launcher = Launcher(drv)
    d = make(drv, launcher)
    d.function_table.add_device("echo", 0x9000)  # not in LIB
    with pytest.raises(InvalidArgumentError, match="'echo' at 0x9000"):
        d.start()
    assert launcher.seen is None
    assert drv.log == []


def test_device_calls_need_a_module_to_check_against(drv: FakeDriver) -> None:
    d = Dispatcher(DispatcherConfig(num_slots=4, slot_size=64))
    d.function_table.add_device("echo", 0x1100)
    d.set_unified_launch(lambda args: None)
    with pytest.raises(InvalidArgumentError, match="module="):
        d.start()


def test_kernel_fault_surfaces_as_cuda_error(drv: FakeDriver) -> None:
    d = make(drv, Launcher(drv))
    d.start()
    drv.kernel = None
    drv.cuStreamQuery = lambda stream: (700,)  # type: ignore[method-assign]
    with pytest.raises(CUDAError):
        d.stop()


def test_a_kernel_that_faults_at_start_is_the_error_start_raises(drv: FakeDriver) -> None:
    """A kernel that faults right after its launch leaves a context that refuses every free
    (a sticky error): start() raises the fault, not the first refused cuMemFree; every
    allocation is still tried and the module is let go (release_library() is not refused)."""
    from _fake_driver import Result

    fault = Result(700, "CUDA_ERROR_ILLEGAL_ADDRESS")

    def launch_and_fault(args: LaunchArgs) -> None:
        drv.launch(args)
        drv.kernel = None
        drv.cuStreamQuery = lambda stream: (fault,)  # type: ignore[method-assign]
        drv.fail.update({"cuMemFree": fault, "cuMemFreeHost": fault})

    d = make(drv, launch_and_fault)
    with pytest.raises(CUDAError, match="dispatch kernel launch failed: CUDA_ERROR_ILLEGAL"):
        d.start()
    assert not d.running and d._served.library is None
    assert drv.log.count("cuMemFree") == 2 and drv.log.count("cuMemFreeHost") == 1


def test_context_manager_stops_and_frees(drv: FakeDriver) -> None:
    with make(drv, Launcher(drv)) as d:
        d.start()
        assert d.running
    assert not d.running
    assert "kernel exited" in drv.log
    assert drv.device == {}
    assert drv.host == {}


def test_kernel_returning_at_once_fails_start(drv: FakeDriver) -> None:
    def launch_and_exit(args: LaunchArgs) -> None:
        drv.launch(args)
        assert drv.kernel is not None
        drv.kernel.exited = True  # e.g. enter_lane refused the ring: nothing is served

    d = make(drv, Launcher(drv))
    launch_and_exit.library = LIB  # type: ignore[attr-defined]
    d.set_unified_launch(launch_and_exit)
    with pytest.raises(RealtimeError, match="returned right after its launch"):
        d.start()
    assert not d.running
    d.close()
    assert drv.device == {}


# -- issue 11: the built-in kernel's own limit, bridge clients, a failed __init__ -------------


@pytest.fixture
def builtin(drv: FakeDriver, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The built-in kernel path on the fake driver: lookups and the launch helper recorded."""
    from skbuild_cudaq.realtime import launch, library

    launched: list[int] = []
    kernels = {
        "cudaq_realtime_unified_dispatch": SimpleNamespace(handle="builtin-kernel-handle"),
        "cudaq_realtime_unified_dispatch_1024": SimpleNamespace(
            handle="builtin-1024-kernel-handle"
        ),
        "cudaq_realtime_unified_dispatch_shared": SimpleNamespace(
            handle="builtin-shared-kernel-handle"
        ),
    }
    monkeypatch.setattr(library, "get_library", lambda module, bridge=None, device=None: LIB)
    monkeypatch.setattr(
        library, "get_device_kernel", lambda module, name, device=None: kernels[name]
    )

    def launch_kernel(k: Any, config: Any, stream: Any, *args: Any) -> None:
        launched.append(config.block[0])
        launch = SimpleNamespace(shutdown_flag=args[4].value, table=args[2].value)
        launch.extra = tuple(a.value for a in args[6:])  # the graph kernel's baton and role
        if hasattr(drv, "capturing"):  # inside a stream capture: a node of the graph
            drv.log.append(f"captured {k.handle}")
            drv.capturing.append(launch)
            return
        drv.log.append(f"launch {k.handle}")
        drv.launch(launch)

    monkeypatch.setattr(launch, "launch_kernel", launch_kernel)
    return launched


def test_block_size_over_both_builds_limits_is_refused_before_any_launch(
    drv: FakeDriver, builtin: list[int]
) -> None:
    drv.max_threads = 512  # e.g. the registers of the kernel as linked for this GPU
    drv.max_threads_1024 = 640  # a GPU with fewer registers than 64 x 1024
    config = DispatcherConfig(num_slots=4, slot_size=64, block_size=1024, stop_timeout=HANG_GUARD_S)
    with Dispatcher(config, module="fake_ext") as d:
        with pytest.raises(
            InvalidArgumentError,
            match=r"block_size=1024: .* at most 640 threads .*MAX_THREADS_PER_BLOCK.*: 512, "
            r"and 640 for cudaq_realtime_unified_dispatch_1024.* 640 or less",
        ):
            d.start()
        assert builtin == [] and "launch" not in drv.log and not d.running
    assert drv.device == {} and drv.host == {}


def test_block_size_at_the_kernels_limit_launches_the_default_build(
    drv: FakeDriver, builtin: list[int]
) -> None:
    drv.max_threads = 640
    config = DispatcherConfig(num_slots=4, slot_size=64, block_size=640, stop_timeout=HANG_GUARD_S)
    with Dispatcher(config, module="fake_ext") as d:
        d.start()  # at the limit: launched
        assert builtin == [640] and d.running
        assert "launch builtin-kernel-handle" in drv.log
        assert d.stop() == 0


@pytest.mark.parametrize("block_size", [513, 1024])
def test_1024_threads_launch_the_launch_bounds_build_over_the_default_limit(
    drv: FakeDriver, builtin: list[int], block_size: int
) -> None:
    """Blocks the default build cannot run (512 threads on sm_90) go to its
    __launch_bounds__(1024) build; the default build keeps every smaller block."""
    drv.max_threads = 512
    config = DispatcherConfig(
        num_slots=4, slot_size=64, block_size=block_size, stop_timeout=HANG_GUARD_S
    )
    with Dispatcher(config, module="fake_ext") as d:
        d.start()
        assert builtin == [block_size] and d.running
        assert "launch builtin-1024-kernel-handle" in drv.log
        assert "launch builtin-kernel-handle" not in drv.log
        assert d.stop() == 0


@pytest.mark.usefixtures("current")
def test_bridge_clients_keep_ring_ids_across_resets(drv: FakeDriver) -> None:
    from skbuild_cudaq.realtime.ring import RingClient, RingServer

    with HostRingBridge(num_slots=4, slot_size=64) as bridge:
        server = RingServer(bridge.buffer, bridge.layout)  # stands in for the GPU's hooks
        client = bridge.client()
        ids = []
        for round_ in range(3):
            for _ in range(5):
                t = client.submit("f", b"x")
                req = server.poll()
                assert req is not None
                server.publish(0, req.args)
                ids.append(client.wait(t).request_id)
            own = RingClient(bridge.buffer, bridge.layout)
            assert own.submitted == 5
            bridge.reset()  # what Dispatcher.start() does
            server.reset()
            assert client.submitted == 0
            if round_ == 0:
                with pytest.raises(RingError, match="reset under it"):
                    own.submit("f")  # a client of its own is stale after the reset: refused
        assert ids == list(range(15))
        kept = bridge.client()
    assert kept.closed  # closed with the ring: a ClientError, never a write to freed memory
    with pytest.raises(ClientError, match="closed"):
        kept.call("f")


def test_a_bridge_whose_init_fails_leaves_no_finalizer_noise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import gc
    import sys

    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    for shape in ((0, 256), (4, 20), (4, 60)):
        with pytest.raises(InvalidArgumentError):
            HostRingBridge(*shape)
    gc.collect()
    assert unraisable == []


# -- issue 16: one function table, the path chosen by the dispatcher --------------------------


def _entries(drv: FakeDriver, table_ptr: int, count: int) -> list[tuple[int, int, int, int]]:
    """``(handler, function_id, mode, flags)`` of the packed table the kernel got."""
    raw = bytes(drv.device[table_ptr][: 16 * count])
    return [struct.unpack_from("<QIBxBx", raw, 16 * i) for i in range(count)]


def test_mixed_table_device_path_answers_host_and_graph_entries_minus_two(
    drv: FakeDriver, caplog: pytest.LogCaptureFixture
) -> None:
    """A table holding every mode starts on the device path (a launcher of your own): its
    HOST_CALL and GRAPH_LAUNCH entries are packed so that the kernel answers -2 (mode not
    DEVICE_CALL, or a null handler), and start() says so in one log line."""
    import logging

    from skbuild_cudaq.realtime.graph import GraphMailbox

    launcher = Launcher(drv)
    d = make(drv, launcher)
    d.function_table.add_host("host_echo", lambda args: args)
    with GraphMailbox() as mailbox:
        d.function_table.add_graph("decode", 0x6E0000, mailbox)
        with caplog.at_level(logging.INFO, logger="skbuild_cudaq"):
            d.start()
        try:
            assert launcher.seen is not None and launcher.seen.table_count == 3
            device, host, graph = _entries(drv, launcher.seen.table, 3)
            assert device[0] == 0x1100 and device[2] == DEVICE_CALL
            assert host[0] == 0 and host[2] == HOST_CALL and host[3] == 0
            assert graph[0] == 0 and graph[2] == GRAPH_LAUNCH  # not served: no I/O context
            assert mailbox.value == 0
        finally:
            d.stop()
    lines = [r.getMessage() for r in caplog.records if r.name.endswith("dispatcher.plan")]
    assert len(lines) == 1, lines
    assert "'host_echo' (HOST_CALL), 'decode' (GRAPH_LAUNCH) -2" in lines[0]
    assert "not by a launcher" in lines[0] and "host path" in lines[0]


@pytest.fixture
def graph_library(monkeypatch: pytest.MonkeyPatch, builtin: list[int]) -> SimpleNamespace:
    """The module linked with the graph dispatch kernel, as the run time gets it."""
    from skbuild_cudaq.realtime import library

    lib = SimpleNamespace(
        kernel=SimpleNamespace(handle="graph-kernel-handle"),
        handler_addresses=lambda device=None: {"rpc_increment": 0x9100},
        get_kernel=lambda name: lib.kernel,
    )
    monkeypatch.setattr(library, "get_graph_library", lambda module, device=None: lib)
    return lib


def _handler(address: int, name: str) -> int:
    from skbuild_cudaq.realtime.library import DeviceHandler

    return DeviceHandler(address, name, 0)


def test_graph_launch_entries_get_io_records_and_a_device_launched_dispatch_graph(
    drv: FakeDriver, graph_library: SimpleNamespace
) -> None:
    """Built-in kernel on sm_90: the graph dispatch kernel is captured twice (roles 0 and 1,
    taking turns through a baton after the records) into graphs instantiated for device
    launch and launched on two streams; each graph entry's handler word is its I/O context
    (the graph to launch, the slot size), its mailbox points there; DEVICE_CALL entries carry
    the graph module's addresses. stop() waits for both streams and frees it all, mailboxes
    cleared."""
    from skbuild_cudaq.realtime.graph import GRAPH_IO_SIZE, GraphIO, GraphMailbox

    config = DispatcherConfig(num_slots=4, slot_size=64, stop_timeout=HANG_GUARD_S)
    with GraphMailbox() as mailbox, Dispatcher(config, module="fake_ext") as d:
        d.function_table.add_device("rpc_increment", _handler(0x1100, "rpc_increment"))
        d.function_table.add_graph("decode", 0x6E0000, mailbox)
        d.start()
        assert drv.log.count("captured graph-kernel-handle") == 2
        assert drv.log.count("cuGraphInstantiate(flags=4)") == 2  # device launch, both
        assert "cuGraphUpload(0x6e0000)" in drv.log  # the handler's graph, uploaded
        assert drv.log.index("cuGraphLaunch") > drv.log.index("cuGraphInstantiate(flags=4)")
        assert drv.log.count("cuGraphLaunch") == 2
        args = d.launch_args
        assert args is not None
        device, graph = _entries(drv, args.table, 2)
        assert device[0] == 0x9100  # rpc_increment in the graph module
        record = graph[0]
        assert graph[2] == GRAPH_LAUNCH and record == mailbox.value != 0
        io = GraphIO(bytes(drv.device[record][:GRAPH_IO_SIZE]))
        assert (io.graph_exec, io.slot_size, io.sequence, io.released) == (0x6E0000, 64, 0, 0)
        # the record holds a copy of one request; the baton follows it, zeroed (role 0 first)
        assert bytes(drv.device[record][GRAPH_IO_SIZE + 64 :]) == bytes(8)
        graphs = d._served.graphs
        assert graphs is not None and graphs.baton == record + GRAPH_IO_SIZE + 64
        roles = [n.extra for _, nodes in graphs.dispatch_graphs for n in nodes]
        assert roles == [(graphs.baton, 0), (graphs.baton, 1)]
        assert d._gpu.standby is not None and d._gpu.standby != d._gpu.stream
        assert d.stop() == 0
        assert mailbox.value == 0 and record not in drv.device
        assert drv.log.count("cuGraphExecDestroy") == drv.log.count("cuGraphDestroy") == 2


def test_a_device_graph_is_not_closed_while_a_device_dispatcher_serves_it(
    drv: FakeDriver, graph_library: SimpleNamespace
) -> None:
    """DeviceGraph.close() is refused from start() to stop() (the GPU may launch it); after
    stop() it destroys both graphs."""
    from skbuild_cudaq.realtime.graph import DeviceGraph, GraphMailbox

    graph = DeviceGraph(graph=0x6F0000, exec_=0x6E0000, device=0)
    config = DispatcherConfig(num_slots=4, slot_size=64, stop_timeout=HANG_GUARD_S)
    with GraphMailbox() as mailbox, Dispatcher(config, module="fake_ext") as d:
        d.function_table.add_graph("decode", graph, mailbox)
        d.start()
        with pytest.raises(InvalidArgumentError, match="served by a running dispatcher"):
            graph.close()
        assert graph.exec is not None
        assert d.stop() == 0
        destroyed = drv.log.count("cuGraphExecDestroy")
        graph.close()
    assert graph.exec is None and drv.log.count("cuGraphExecDestroy") == destroyed + 1


def test_the_phase_measurement_serves_graphs_from_its_own_linked_module(
    drv: FakeDriver, builtin: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``skbuild-cudaq phases --graph``'s dispatcher: no module= (nothing of an extension is
    linked), its graph entries served by the graph dispatch kernel of the measurement build
    it was given, launched twice (roles 0 and 1) in blocks of the config's threads, that
    module held while it runs."""
    from skbuild_cudaq.realtime import library
    from skbuild_cudaq.realtime._phases import _measured_graph_dispatcher
    from skbuild_cudaq.realtime.graph import GraphMailbox

    def no_link(*_: object, **__: object) -> None:
        raise AssertionError("the measured module is linked already")

    monkeypatch.setattr(library, "get_graph_library", no_link)
    monkeypatch.setattr(library, "get_library", no_link)

    class Measured(HeldLibrary):  # the measurement build: a linked module of its own
        def handler_addresses(self, device: int | None = None) -> dict[str, int]:
            return {}

        def get_kernel(self, name: str) -> SimpleNamespace:
            assert name == "cudaq_realtime_graph_dispatch"
            return SimpleNamespace(handle="measured-graph-kernel-handle")

    measured = Measured(0x1000, 0x2000)
    config = DispatcherConfig(num_slots=4, slot_size=64, block_size=64, stop_timeout=HANG_GUARD_S)
    with GraphMailbox() as mailbox, _measured_graph_dispatcher(config, measured) as d:
        d.function_table.add_graph("decode", 0x6E0000, mailbox)
        d.start()
        assert drv.log.count("captured measured-graph-kernel-handle") == 2
        assert builtin == [64, 64] and measured.holds == 1
        assert d.stop() == 0
        assert measured.holds == 0 and mailbox.value == 0


def test_graph_launch_entry_not_instantiated_for_device_launch_is_refused(
    drv: FakeDriver, graph_library: SimpleNamespace
) -> None:
    from skbuild_cudaq.realtime.graph import GraphMailbox

    drv.graph_exec_flags = 0  # instantiated for host launch only
    config = DispatcherConfig(num_slots=4, slot_size=64, stop_timeout=HANG_GUARD_S)
    with GraphMailbox() as mailbox, Dispatcher(config, module="fake_ext") as d:
        d.function_table.add_graph("decode", 0x6E0000, mailbox)
        with pytest.raises(
            InvalidArgumentError,
            match=r"'decode': its graph was not instantiated for device launch.*"
            r"CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH",
        ):
            d.start()
        assert not d.running and mailbox.value == 0 and "cuGraphLaunch" not in drv.log


def test_graph_launch_entry_whose_mailbox_another_dispatcher_holds_is_refused(
    drv: FakeDriver, graph_library: SimpleNamespace
) -> None:
    """A mailbox serves one dispatcher at a time (it holds that one's I/O context): start()
    refuses one another dispatcher points elsewhere, and leaves it as it was."""
    from skbuild_cudaq.realtime.graph import GraphMailbox

    config = DispatcherConfig(num_slots=4, slot_size=64, stop_timeout=HANG_GUARD_S)
    with GraphMailbox() as mailbox, Dispatcher(config, module="fake_ext") as d:
        d.function_table.add_graph("decode", 0x6E0000, mailbox)
        mailbox.value = 0x7F00_1234_0000  # e.g. a HostDispatcher's worker record
        with pytest.raises(InvalidArgumentError, match="'decode': its GraphMailbox is in use"):
            d.start()
        assert not d.running and mailbox.value == 0x7F00_1234_0000
        assert "cuGraphLaunch" not in drv.log
        mailbox.value = 0  # the other dispatcher stopped (else the mailbox refuses to close)


def test_graph_launch_entry_of_another_gpu_is_refused_before_any_upload(
    drv: FakeDriver, graph_library: SimpleNamespace, builtin: list[int]
) -> None:
    """Two sm_90s: a graph captured on device 1 (its mailbox, or its DeviceGraph, says so)
    in the table of a dispatcher on device 0 is named at start(); nothing is uploaded on
    device 0's stream and no kernel is launched (the GPU would refuse the upload, or its
    dispatch kernel every launch)."""
    from skbuild_cudaq.realtime.graph import DeviceGraph, GraphMailbox

    drv.archs = ((9, 0), (9, 0))  # asked lazily: two GPUs that both serve graphs
    config = DispatcherConfig(num_slots=4, slot_size=64, stop_timeout=HANG_GUARD_S)
    with GraphMailbox(device=1) as mailbox, Dispatcher(config, module="fake_ext") as d:
        d.function_table.add_graph("decode", 0x6E0000, mailbox)
        with pytest.raises(
            InvalidArgumentError,
            match=r"'decode': its graph and mailbox are of "
            r"device 1, this dispatcher runs on device 0",
        ):
            d.start()
        assert not d.running and mailbox.value == 0 and not builtin
        assert not any(call.startswith(("cuGraphUpload", "cuGraphLaunch")) for call in drv.log)
    with GraphMailbox(device=0) as mailbox, Dispatcher(config, module="fake_ext") as d:
        graph = DeviceGraph(graph=None, exec_=0x6E0000, device=1)
        d.function_table.add_graph("decode", graph, mailbox)
        with pytest.raises(InvalidArgumentError, match=r"are of device 1, .* on device 0"):
            d.start()
        graph.exec = None  # nothing to destroy: the fake's handle
    assert not any(call.startswith("cuGraphUpload") for call in drv.log)


def test_graph_launch_entries_before_sm_90_are_answered_minus_two(
    drv: FakeDriver, builtin: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from skbuild_cudaq.realtime.graph import GraphMailbox

    config = DispatcherConfig(
        device=1, num_slots=4, slot_size=64, stop_timeout=HANG_GUARD_S
    )  # sm_80
    with GraphMailbox(device=1) as mailbox, Dispatcher(config, module="fake_ext") as d:
        d.function_table.add_graph("decode", 0x6E0000, mailbox)
        with caplog.at_level(logging.INFO, logger="skbuild_cudaq"):
            d.start()
        assert "launch builtin-kernel-handle" in drv.log and "cuGraphLaunch" not in drv.log
        args = d.launch_args
        assert args is not None and _entries(drv, args.table, 1)[0][0] == 0
        d.stop()
    assert "needs sm_90 or newer, device 1 is sm_80" in caplog.text


def test_shared_ring_flags_host_call_entries_and_launches_the_shared_build(
    drv: FakeDriver, builtin: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    config = DispatcherConfig(
        num_slots=4, slot_size=64, stop_timeout=HANG_GUARD_S, shared_ring=True
    )
    with Dispatcher(config, module="fake_ext") as d:
        d.function_table.add_device("rpc_increment", 0x1100)
        d.function_table.add_host("host_echo", lambda args: args)
        with caplog.at_level(logging.INFO, logger="skbuild_cudaq"):
            d.start()
        assert "launch builtin-shared-kernel-handle" in drv.log
        args = d.launch_args
        assert args is not None
        device, host = _entries(drv, args.table, 2)
        assert device[3] == 0 and host[2] == HOST_CALL and host[3] == ENTRY_FLAG_PEER
        d.stop()
    assert "leaves 'host_echo' (HOST_CALL) to the host dispatcher on the shared ring" in caplog.text


def test_shared_ring_needs_the_builtin_kernel_and_the_host_ring(drv: FakeDriver) -> None:
    launcher = Launcher(drv)
    d = make(drv, launcher, shared_ring=True)
    with pytest.raises(InvalidArgumentError, match=r"shared_ring needs the built-in kernel"):
        d.start()
    assert launcher.seen is None

    other = Dispatcher(
        DispatcherConfig(num_slots=4, slot_size=64, shared_ring=True),
        bridge=SimpleNamespace(num_slots=4, slot_size=64),  # type: ignore[arg-type]
        module="fake_ext",
    )
    with pytest.raises(InvalidArgumentError, match=r"shared_ring needs a HostRingBridge"):
        other.start()


def test_ring_shape_flows_from_the_config_to_the_launch_args(drv: FakeDriver) -> None:
    launcher = Launcher(drv)
    d = make(drv, launcher)
    assert d.layout is d.config.layout and d.bridge.layout is d.config.layout
    d.start()
    try:
        assert launcher.seen is not None
        assert (launcher.seen.num_slots, launcher.seen.slot_size) == (4, 64)
        assert d.config.max_payload == d.layout.max_payload == 64 - 24
    finally:
        d.close()
