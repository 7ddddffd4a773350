"""CUDA-Q realtime parity without a GPU: dispatch modes and the table encoding, mixed
tables on the host path, the shared ring's protocol, the device runtime's search, and
(toolchain) the graph module linked with libcudadevrt by nvJitLink. Graph handlers on the
host path: ``tests/test_host_graphs.py``.

The GPU side of each (graph launch on the device and host paths, 1024 threads, mixed tables
and a shared ring on the H200) is ``tests/test_parity_gpu.py``.
"""

from __future__ import annotations

import struct
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from _fake_driver import FakeDriver, UseDriver

from skbuild_cudaq.realtime.dispatcher.table import (
    DEVICE_CALL,
    ENTRY_FLAG_PEER,
    GRAPH_LAUNCH,
    HOST_CALL,
    FunctionTable,
)
from skbuild_cudaq.realtime.errors import (
    DeviceRuntimeNotFoundError,
    HostDispatcherError,
    InvalidArgumentError,
)
from skbuild_cudaq.realtime.host.dispatcher import HostDispatcher, echo, rpc_increment
from skbuild_cudaq.realtime.ring import RingClient, RingLayout, RingServer
from skbuild_cudaq.realtime.wire import STATUS_BAD_MAGIC, STATUS_UNKNOWN_FUNCTION, function_id

ROOT = Path(__file__).resolve().parent.parent
HEADER = ROOT / "skbuild_cudaq" / "include" / "cudaq" / "realtime" / "unified_dispatch_device.cuh"


@pytest.fixture
def drv(use_driver: UseDriver) -> FakeDriver:
    return use_driver(FakeDriver())


# -- dispatch modes and the table ---------------------------------------------------------


def test_dispatch_modes_are_numbered_as_cuda_q_realtime_numbers_them() -> None:
    assert (DEVICE_CALL, GRAPH_LAUNCH, HOST_CALL) == (0, 1, 2)
    text = HEADER.read_text()
    assert "#define CUDAQ_DISPATCH_DEVICE_CALL 0 " in text
    assert "#define CUDAQ_DISPATCH_GRAPH_LAUNCH 1 " in text
    assert "#define CUDAQ_DISPATCH_HOST_CALL 2 " in text
    assert "#define CUDAQ_ENTRY_FLAG_PEER 0x01u" in text and ENTRY_FLAG_PEER == 1


def test_mixed_table_encoding_every_mode_in_16_bytes(drv: FakeDriver) -> None:
    """One table holds all three modes; handler words, the flag byte (14) and the shape
    byte (13) are where cudaq_function_entry_t has them."""
    from skbuild_cudaq.realtime.graph import GraphMailbox

    table = FunctionTable()
    table.add_device("rpc_increment", 0x7000_0000_1000, shape="thread")
    table.add_host("host_echo", echo)
    with GraphMailbox() as mailbox:
        entry = table.add_graph("decode", 0x6E0000, mailbox)
        assert (entry.graph_exec, entry.mailbox, entry.mode_name) == (
            0x6E0000,
            mailbox,
            "GRAPH_LAUNCH",
        )
        plain = table.pack()
        served = table.pack(handlers={"decode": 0x7F00_0000_0040}, peer_host=True)
    rows = [struct.unpack_from("<QIBBBx", plain, 16 * i) for i in range(3)]
    assert rows == [
        (0x7000_0000_1000, function_id("rpc_increment"), DEVICE_CALL, 1, 0),
        (0, function_id("host_echo"), HOST_CALL, 0, 0),
        (0, function_id("decode"), GRAPH_LAUNCH, 0, 0),  # not served: -2 on the device
    ]
    rows = [struct.unpack_from("<QIBBBx", served, 16 * i) for i in range(3)]
    assert rows[1][4] == ENTRY_FLAG_PEER and rows[0][4] == rows[2][4] == 0
    assert rows[2][0] == 0x7F00_0000_0040


def test_add_graph_refuses_what_is_not_a_graph_or_a_mailbox(drv: FakeDriver) -> None:
    from skbuild_cudaq.realtime.graph import GraphMailbox, graph_exec_handle

    table = FunctionTable()
    with GraphMailbox() as mailbox:
        with pytest.raises(InvalidArgumentError, match="not a CUDA graph exec"):
            table.add_graph("g", "exec", mailbox)
        with pytest.raises(InvalidArgumentError, match="must be a GraphMailbox"):
            table.add_graph("g", 0x10, object())
        table.add_graph("g", 0x10, mailbox)
        with pytest.raises(InvalidArgumentError, match="needs a GraphMailbox of its own"):
            table.add_graph("h", 0x20, mailbox)
        with pytest.raises(InvalidArgumentError, match="already in"):
            table.add_graph("g", 0x30, GraphMailbox())
    with pytest.raises(InvalidArgumentError, match="its GraphMailbox is closed"):
        table.add_graph("k", 0x40, mailbox)

    class Exec:  # what cuda.bindings' CUgraphExec / cudaGraphExec_t look like
        def getPtr(self) -> int:
            return 0x1234

    assert graph_exec_handle(Exec()) == 0x1234 and graph_exec_handle(0x99) == 0x99


def test_graph_mailbox_is_device_memory_and_frees_once(drv: FakeDriver) -> None:
    """The graph's kernels read their mailbox from device memory (not across PCIe): a write
    of the value is a copy to the device, read back from the host's own record of it."""
    import ctypes

    from skbuild_cudaq.realtime.graph import GraphMailbox

    mailbox = GraphMailbox()
    address = mailbox.device_address
    assert address in drv.device and mailbox.value == 0 and bytes(drv.device[address]) == bytes(8)
    mailbox.value = 0xABC  # what a dispatcher's start() writes: an I/O context's address
    assert mailbox.value == 0xABC
    assert bytes(drv.device[address][:8]) == bytes(ctypes.c_uint64(0xABC))
    with pytest.raises(InvalidArgumentError, match=r"in use by a dispatcher \(it holds 0xabc\)"):
        mailbox.close()  # its graph may be reading it: stop() that dispatcher first
    assert not mailbox.closed and "cuMemFree" not in drv.log
    mailbox.value = 0  # what its stop() writes
    mailbox.close()
    mailbox.close()
    assert mailbox.closed and drv.log.count("cuMemFree") == 1 and address not in drv.device
    assert "cuMemHostAlloc" not in drv.log
    with pytest.raises(InvalidArgumentError, match="closed"):
        _ = mailbox.device_address


# -- the host path with a mixed table ---------------------------------------------------------


def test_mixed_table_host_path_answers_device_entries_minus_two_and_serves_the_others(
    drv: FakeDriver,
) -> None:
    """The host path serves the table's HOST_CALL entries and launches its GRAPH_LAUNCH
    ones (on a worker stream: the fake driver's graph is ended by the test), and answers
    DEVICE_CALL requests -2, the rule the device path follows the other way round."""
    from skbuild_cudaq.realtime.graph import GraphMailbox

    table = FunctionTable()
    table.add_device("rpc_increment", 0x7000_0000_1000)
    table.add_host("host_echo", echo)
    with GraphMailbox() as mailbox:
        table.add_graph("decode", 0x6E0000, mailbox)
        with HostDispatcher(RingLayout(8, 64), table) as d:
            client = d.client()
            assert client.call("host_echo", b"abc") == (0, b"abc")
            assert client.call("rpc_increment", b"abc")[0] == STATUS_UNKNOWN_FUNCTION
            ticket = client.submit("decode", b"abc")
            deadline = time.monotonic() + 10
            while not drv.graph_runs and time.monotonic() < deadline:
                time.sleep(0.001)
            drv.end_graph(drv.graph_runs[0])
            assert client.wait(ticket, timeout=10).result == b"bcd"
            assert d.handler_names == ["host_echo"]
            assert d.processed == 3 and d.rejected == 1


# -- the shared ring's protocol ---------------------------------------------------------------


def test_ring_server_passes_over_slots_the_other_consumer_answered() -> None:
    layout = RingLayout(2, 64)
    buf = bytearray(layout.total_bytes)
    client = RingClient(buf, layout, spin=4)
    ours, theirs = RingServer(buf, layout), RingServer(buf, layout)
    first = client.submit("a", b"1")  # slot 0, seq 1: the other consumer answers it
    req = theirs.poll()
    assert req is not None
    theirs.publish(0, b"x")
    client.wait(first)
    second = client.submit("b", b"2")  # slot 1, seq 1
    third = client.submit("c", b"3")  # slot 0 again, seq 2: ahead of what `ours` expects
    got = ours.poll_shared()
    assert got is not None and got.slot == 1 and got.header.function_id == function_id("b")
    ours.publish(0, b"y")
    got = ours.poll_shared()
    assert got is not None and got.slot == 0 and got.seq == 2  # slot 0's request passed over
    ours.leave()
    with pytest.raises(Exception, match="without a polled request"):
        ours.leave()
    assert client.poll(second) is not None and client.poll(third) is None


def test_ring_server_drops_a_request_answered_while_it_was_read() -> None:
    layout = RingLayout(4, 64)
    buf = bytearray(layout.total_bytes)
    client = RingClient(buf, layout, spin=4)
    ours, theirs = RingServer(buf, layout), RingServer(buf, layout)
    client.submit("a", b"1")
    req = theirs.poll()
    assert req is not None
    theirs.publish(0, b"x")  # answered, not yet collected: the slot still holds it
    assert ours.poll_shared() is None  # dropped, and nothing else is there
    assert ours.published == 0


def _device_twin(buf: Any, layout: RingLayout, table: FunctionTable, stop: threading.Event) -> int:
    """The device kernel's rule on a shared ring, in Python (cudaq_validate_request, then
    cudaq_is_peer_request): answers everything but the table's HOST_CALL requests."""
    from skbuild_cudaq.realtime.wire import REQUEST_MAGIC

    server = RingServer(buf, layout)
    host_ids = {e.function_id for e in table.host_entries()}
    device = {e.function_id for e in table.device_entries()}
    while not stop.is_set():
        req = server.poll_shared()
        if req is None:
            continue
        h = req.header
        if h.magic != REQUEST_MAGIC:
            server.publish(STATUS_BAD_MAGIC)
        elif h.arg_len <= layout.max_payload and h.function_id in host_ids:
            server.leave()
        elif h.function_id in device:
            server.publish(0, rpc_increment(req.args))
        else:
            server.publish(STATUS_UNKNOWN_FUNCTION)
    return server.published


def test_shared_ring_each_request_answered_once_and_each_count_exact() -> None:
    """Two consumers on one ring (the host dispatcher and a Python twin of the device
    kernel's shared-ring rule), interleaved requests of both, bad ones too: every response
    is the right side's, and each side counts only its own."""
    layout = RingLayout(8, 64)
    buf = bytearray(layout.total_bytes)
    table = FunctionTable()
    table.add_device("rpc_increment", 0x7000_0000_1000)
    table.add_host("host_echo", echo)
    stop = threading.Event()
    device_count: list[int] = []
    twin = threading.Thread(
        target=lambda: device_count.append(_device_twin(buf, layout, table, stop)), daemon=True
    )
    twin.start()
    try:
        with HostDispatcher(layout, table, buffer=buf, shared_ring=True) as host:
            client = host.client()
            host_n = device_n = 0
            for i in range(600):
                payload = bytes([i % 256, (i * 7) % 256])
                tickets = []
                if i % 3 == 0:
                    tickets.append(("host_echo", payload, client.submit("host_echo", payload)))
                    host_n += 1
                tickets.append(("rpc_increment", payload, client.submit("rpc_increment", payload)))
                device_n += 1
                if i % 50 == 0:
                    tickets.append(("bad", b"", client.submit("host_echo", b"z", magic=0xBAD)))
                    tickets.append(("unknown", b"", client.submit("nobody", b"z")))
                    device_n += 2
                for name, sent, ticket in tickets:
                    resp = client.wait(ticket, timeout=10)
                    if name == "host_echo":
                        assert (resp.status, resp.result) == (0, sent)
                    elif name == "rpc_increment":
                        assert (resp.status, resp.result) == (0, rpc_increment(sent))
                    elif name == "bad":
                        assert resp.status == STATUS_BAD_MAGIC
                    else:
                        assert resp.status == STATUS_UNKNOWN_FUNCTION
            host.stop()
            assert host.processed == host_n == 200
    finally:
        stop.set()
        twin.join(10)
    assert device_count == [device_n]


def test_shared_ring_flags_far_ahead_never_keep_stop_waiting() -> None:
    """On a shared ring the host loop skips slots the device answered (flags ahead of its
    position). Flags a corrupting writer set 2^30 laps ahead would be ~2^33 slots to skip:
    the loop takes them in bounded steps, checking for a stop between them."""
    layout = RingLayout(8, 64)
    buf = bytearray(layout.total_bytes)
    flags = memoryview(buf)[layout.rx_flags_offset : layout.tx_flags_offset].cast("I")
    for slot in range(layout.num_slots):
        flags[slot] = 1 + (1 << 30)  # lap 2^30: answered by the device, as far as it can tell
    table = FunctionTable()
    table.add_host("host_echo", echo)
    host = HostDispatcher(layout, table, buffer=buf, shared_ring=True)
    host.start()
    time.sleep(0.05)
    host.stop(timeout=30)  # HostDispatcherError were the loop still skipping the 2^33 slots
    assert not host.running
    host.close()


def test_shared_ring_host_dispatcher_needs_the_table() -> None:
    with pytest.raises(HostDispatcherError, match="needs the device dispatcher's FunctionTable"):
        HostDispatcher(RingLayout(8, 64), {"echo": echo}, shared_ring=True)
    table = FunctionTable()
    table.add_host("host_echo", echo)
    d = HostDispatcher(RingLayout(8, 64), table, shared_ring=True)
    with pytest.raises(HostDispatcherError, match="add it to the table"):
        d.add_handler("late", echo)
    d.close()


# -- the device runtime -----------------------------------------------------------------------


def test_device_runtime_found_in_the_wheel_layout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from skbuild_cudaq.realtime.link import _nvjitlink, device_runtime

    for major, sub in ((13, "nvidia/cu13/lib"), (12, "nvidia/cuda_runtime/lib")):
        site = tmp_path / f"site{major}"
        (site / sub).mkdir(parents=True)
        (site / sub / "libcudadevrt.a").write_bytes(b"!<arch>\n")
        monkeypatch.setattr(_nvjitlink, "_site_packages", lambda site=site: [str(site)])
        monkeypatch.delenv(device_runtime.DEVICE_RUNTIME_ENV, raising=False)
        found = device_runtime.find_device_runtime(major)
        assert found == (site / sub / "libcudadevrt.a").resolve()


def test_device_runtime_not_found_names_the_wheel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys
    import types

    from skbuild_cudaq.realtime.link import _nvjitlink, device_runtime

    monkeypatch.setattr(_nvjitlink, "_site_packages", lambda: [str(tmp_path)])
    monkeypatch.delenv(device_runtime.DEVICE_RUNTIME_ENV, raising=False)
    monkeypatch.delenv("CONDA_PREFIX", raising=False)
    nothing = types.ModuleType("cuda.pathfinder")  # no locate_static_lib: an old pathfinder
    monkeypatch.setitem(sys.modules, "cuda.pathfinder", nothing)
    with pytest.raises(DeviceRuntimeNotFoundError) as info:
        device_runtime.find_device_runtime(12)
    text = str(info.value)
    assert "pip install 'nvidia-cuda-runtime-cu12>=12.0,<13'" in text
    assert str(tmp_path / "nvidia/cuda_runtime/lib/libcudadevrt.a") in text
    monkeypatch.setenv(device_runtime.DEVICE_RUNTIME_ENV, str(tmp_path / "missing.a"))
    with pytest.raises(DeviceRuntimeNotFoundError, match="no such file"):
        device_runtime.find_device_runtime(13)


def test_graph_module_link_needs_the_device_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without libcudadevrt the graph run time cannot be read: a typed error before any
    link (the plain run time needs none)."""
    from skbuild_cudaq.realtime.link import device_runtime
    from skbuild_cudaq.realtime.link.device_runtime import runtime_device_code, runtime_dir

    root = runtime_dir()
    if not (root / "graph").is_dir():
        pytest.skip(f"no graph dispatch kernel in {root} (an older build)")

    def missing(major: int | None = None) -> Path:
        raise DeviceRuntimeNotFoundError("no device runtime")

    monkeypatch.setattr(device_runtime, "find_device_runtime", missing)
    assert runtime_device_code(root).libraries == ()
    with pytest.raises(DeviceRuntimeNotFoundError):
        runtime_device_code(root, graph_launch=True)


@pytest.mark.toolchain
@pytest.mark.parametrize("arch", ["sm_90", "sm_100"])
def test_graph_dispatch_kernel_links_with_cudadevrt_offline(arch: str) -> None:
    """nvJitLink links the run time, the graph dispatch kernel and example_app's code with
    the wheel's libcudadevrt.a (a LIBRARY input) into one cubin, in this process and in an
    isolated child, for a GPU that is not here; without graph_launch nothing changes."""
    pytest.importorskip("cuda.bindings.nvjitlink")
    core = pytest.importorskip("example_app._core")
    from skbuild_cudaq.realtime.graph import GRAPH_DISPATCH_KERNEL
    from skbuild_cudaq.realtime.library.symbols import cubin_symbols
    from skbuild_cudaq.realtime.link.cache import LinkCache
    from skbuild_cudaq.realtime.link.device_runtime import find_device_runtime
    from skbuild_cudaq.realtime.link.linker import LinkOptions, link_device_code

    try:
        find_device_runtime()
    except DeviceRuntimeNotFoundError as exc:
        pytest.skip(str(exc))
    off = LinkCache(None)
    plain = cubin_symbols(link_device_code(core, LinkOptions(arch=arch), cache=off).cubin)
    assert GRAPH_DISPATCH_KERNEL not in plain.kernels
    for isolated in (False, True):
        options = LinkOptions(arch=arch, graph_launch=True, isolated=isolated)
        linked = cubin_symbols(link_device_code(core, options, cache=off).cubin)
        assert {GRAPH_DISPATCH_KERNEL, "graph_increment_stage", "graph_increment_publish"} <= set(
            linked.kernels
        )
        assert set(plain.handlers) == set(linked.handlers)


@pytest.mark.toolchain
def test_graph_module_cache_key_covers_the_device_runtime(tmp_path: Path) -> None:
    pytest.importorskip("cuda.bindings.nvjitlink")
    core = pytest.importorskip("example_app._core")
    from skbuild_cudaq.realtime.link.cache import LinkCache
    from skbuild_cudaq.realtime.link.linker import LinkOptions, prepare_link

    cache = LinkCache(tmp_path)
    plain = prepare_link(core, LinkOptions(arch="sm_90"), cache)
    try:
        graph = prepare_link(core, LinkOptions(arch="sm_90", graph_launch=True), cache)
    except DeviceRuntimeNotFoundError as exc:
        pytest.skip(str(exc))
    assert plain.digest != graph.digest
    assert graph.runtime.libraries and graph.runtime.libraries[0].name == "libcudadevrt.a"
