"""CUDA-Q realtime parity on a GPU: graph launch on the device path and on the host path,
1024 threads, mixed tables on each path, a shared ring (a host and a device dispatcher on one
ring), and the test server serving a graph handler on each path.

Needs a CUDA GPU (``gpu`` marker), example_app installed (``pip install ./example_app``)
and, for graph handlers, sm_90+ (example_app captures its graph for device launch) and, on the
device path, the ``nvidia-cuda-runtime`` wheel (libcudadevrt). Every test checks every byte of
10,000 round trips where it says so; every wait has a deadline.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.gpu

ROUND_TRIPS = 10_000
WINDOW = 16  # requests in flight
DEADLINE = 30.0


def increment(payload: bytes) -> bytes:
    return bytes((b + 1) & 0xFF for b in payload)


def _needs_graph_launch(device: int = 0) -> None:
    from skbuild_cudaq.realtime._driver import ordinal_arch
    from skbuild_cudaq.realtime.errors import DeviceRuntimeNotFoundError
    from skbuild_cudaq.realtime.link.device_runtime import find_device_runtime

    arch = ordinal_arch(device)
    if int(arch[3:].rstrip("af")) < 90:
        pytest.skip(f"device graph launch needs sm_90+, device {device} is {arch}")
    try:
        find_device_runtime()
    except DeviceRuntimeNotFoundError as exc:
        pytest.skip(str(exc))


@pytest.fixture
def graph_handler(core: Any) -> Iterator[Any]:
    _needs_graph_launch()
    from example_app import graphs

    handler = graphs.graph_increment(core)
    yield handler
    handler.close()


@pytest.fixture
def host_graph_handler(core: Any) -> Iterator[Any]:
    """example_app's graph for the host path, which launches it from the host: no device
    runtime needed (example_app captures it for device launch: sm_90+)."""
    from skbuild_cudaq.realtime._driver import ordinal_arch

    arch = ordinal_arch(0)
    if int(arch[3:].rstrip("af")) < 90:
        pytest.skip(f"example_app's graph is instantiated for device launch: sm_90+, not {arch}")
    from example_app import graphs

    handler = graphs.graph_increment(core)
    yield handler
    handler.close()


def run_traffic(
    client: Any,
    requests: list[tuple[str, bytes, Callable[[Any], None]]],
    window: int = WINDOW,
) -> None:
    """Submit ``requests`` (name, payload, check(response)), ``window`` in flight, and
    check each response in order."""
    pending: list[tuple[Any, Callable[[Any], None]]] = []
    for name, payload, check in requests:
        pending.append((client.submit(name, payload), check))
        if len(pending) >= window:
            ticket, check_one = pending.pop(0)
            check_one(client.wait(ticket, timeout=DEADLINE))
    for ticket, check_one in pending:
        check_one(client.wait(ticket, timeout=DEADLINE))


def expect(status: int, result: bytes | None = None) -> Callable[[Any], None]:
    def check(resp: Any) -> None:
        assert resp.status == status, (resp.status, status)
        if result is not None:
            assert resp.result == result

    return check


def mixed_requests(
    rng: random.Random, served: dict[str, Callable[[bytes], bytes]], unserved: list[str], n: int
) -> tuple[list[tuple[str, bytes, Callable[[Any], None]]], dict[str, int]]:
    """``n`` requests spread over the served names (checked against their expected result)
    and the unserved ones (answered -2); their counts by name."""
    from skbuild_cudaq.realtime.wire import STATUS_UNKNOWN_FUNCTION

    names = [*served, *unserved]
    counts = dict.fromkeys(names, 0)
    out = []
    for i in range(n):
        name = names[i % len(names)] if i < len(names) else rng.choice(names)
        payload = rng.randbytes(rng.randint(0, 200))
        counts[name] += 1
        if name in served:
            out.append((name, payload, expect(0, served[name](payload))))
        else:
            out.append((name, payload, expect(STATUS_UNKNOWN_FUNCTION, b"")))
    return out, counts


# -- graph launch on the device path ---------------------------------------------------------


def test_graph_launch_device_path_10000_checked_round_trips(core: Any, graph_handler: Any) -> None:
    """The built-in kernel launches example_app's two-kernel graph from the GPU for every
    graph_increment request, beside rpc_increment (a device function) on one ring: 10,000
    requests, every byte checked; far more graph launches than one graph execution may make
    (the dispatch graph relaunches itself every 100)."""
    from skbuild_cudaq.realtime import Dispatcher, DispatcherConfig, get_device_handler

    config = DispatcherConfig(num_slots=64, slot_size=256, stop_timeout=DEADLINE)
    with Dispatcher(config, module=core) as d:
        d.function_table.add_device("rpc_increment", get_device_handler(core, "rpc_increment"))
        d.function_table.add_graph("graph_increment", graph_handler.graph, graph_handler.mailbox)
        d.start()
        rng = random.Random(1)
        served = {"graph_increment": increment, "rpc_increment": increment}
        requests, counts = mixed_requests(rng, served, ["nobody"], ROUND_TRIPS)
        client = d.bridge.client()
        run_traffic(client, requests)
        stats = d.graph_stats()
        assert d.stop() == ROUND_TRIPS
    assert stats == {
        "graph_increment": {
            "requests": counts["graph_increment"],
            "launch_failures": 0,
            "launch_error": 0,
        }
    }
    assert counts["graph_increment"] > 30 * 100  # dozens of relaunches of the dispatch graph


def test_graph_launch_device_path_one_request_at_a_time(core: Any, graph_handler: Any) -> None:
    """Back to back (each request after the last response: the graph's previous execution
    may still be ending when the next launch comes), and a request longer than the slot,
    which the dispatch kernel answers itself (-3) without launching the graph."""
    from skbuild_cudaq.realtime import Dispatcher, DispatcherConfig
    from skbuild_cudaq.realtime.wire import STATUS_ARGS_TOO_LONG

    config = DispatcherConfig(num_slots=8, slot_size=256, stop_timeout=DEADLINE)
    with Dispatcher(config, module=core) as d:
        d.function_table.add_graph("graph_increment", graph_handler.graph, graph_handler.mailbox)
        d.start()
        client = d.bridge.client()
        for i in range(500):
            payload = bytes([i & 0xFF]) * (i % 232)
            assert client.call("graph_increment", payload, timeout=DEADLINE) == (
                0,
                increment(payload),
            )
        ticket = client.submit("graph_increment", b"x", arg_len=1000)
        assert client.wait(ticket, timeout=DEADLINE).status == STATUS_ARGS_TOO_LONG
        stats = d.graph_stats()
        assert d.stop() == 501
    assert stats["graph_increment"]["requests"] == 500


# -- graph launch on the host path -----------------------------------------------------------


def test_graph_launch_host_path_10000_checked_round_trips(
    core: Any, host_graph_handler: Any
) -> None:
    """A HostDispatcher launches example_app's two-kernel graph on its worker stream for
    every graph_increment request, beside a Python HOST_CALL handler and a DEVICE_CALL entry
    (answered -2) on one ring it allocates in pinned, mapped memory: 10,000 requests, 16 in
    flight, every byte checked; each graph answer published once by the serving thread;
    every count exact; the mailbox released at stop()."""
    from skbuild_cudaq.realtime import FunctionTable, HostDispatcher, RingLayout, get_device_handler

    handler = host_graph_handler
    table = FunctionTable()
    table.add_graph("graph_increment", handler.graph, handler.mailbox)
    table.add_host("host_increment", increment)
    table.add_device("rpc_increment", get_device_handler(core, "rpc_increment"))
    with HostDispatcher(RingLayout(64, 256), table) as host:
        assert handler.mailbox.value != 0  # the worker's record, while serving
        served = {"graph_increment": increment, "host_increment": increment}
        requests, counts = mixed_requests(
            random.Random(7), served, ["rpc_increment", "nobody"], ROUND_TRIPS
        )
        run_traffic(host.client(), requests)
        stats = host.graph_stats()
        host.stop()
        assert host.processed == ROUND_TRIPS
        assert host.rejected == counts["rpc_increment"] + counts["nobody"]
        assert host.handler_errors == 0, host.last_handler_error
        assert handler.mailbox.value == 0
    assert stats == {
        "graph_increment": {
            "requests": counts["graph_increment"],
            "launch_failures": 0,
            "launch_error": 0,
        }
    }
    assert counts["graph_increment"] > 2000


def test_graph_launch_host_path_one_request_at_a_time_on_a_bridge_ring(
    core: Any, host_graph_handler: Any
) -> None:
    """On a HostRingBridge's ring (buffer=bridge.buffer): back to back, so that each request
    comes while the graph's previous execution may still be ending on the worker's stream,
    every length up to the slot's payload; a request longer than the slot is answered -3 by
    the serving thread without a launch."""
    from skbuild_cudaq.realtime import (
        FunctionTable,
        HostDispatcher,
        HostRingBridge,
        RingLayout,
        _driver,
    )
    from skbuild_cudaq.realtime.wire import STATUS_ARGS_TOO_LONG

    layout = RingLayout(8, 256)
    table = FunctionTable()
    table.add_graph("graph_increment", host_graph_handler.graph, host_graph_handler.mailbox)
    bridge = HostRingBridge(layout=layout)
    with _driver.pushed(_driver.primary_context(0)):
        bridge.open()
    try:
        with HostDispatcher(layout, table, buffer=bridge.buffer) as host:
            client = host.client()
            for i in range(1000):
                payload = bytes([i & 0xFF]) * (i % (layout.max_payload + 1))
                assert client.call("graph_increment", payload, timeout=DEADLINE) == (
                    0,
                    increment(payload),
                )
            ticket = client.submit("graph_increment", b"x", arg_len=1000)
            assert client.wait(ticket, timeout=DEADLINE).status == STATUS_ARGS_TOO_LONG
            host.stop()
            assert host.processed == 1001 and host.handler_errors == 0
            assert host.graph_stats()["graph_increment"]["requests"] == 1000
    finally:
        bridge.close()


def test_graph_launch_same_entry_serves_the_device_path_then_the_host_path(
    core: Any, graph_handler: Any
) -> None:
    """One table entry, one graph, one mailbox: the device dispatcher serves it (device graph
    launch), stops, and a host dispatcher over the same table serves it (host launch);
    every answer checked on both."""
    from skbuild_cudaq.realtime import Dispatcher, DispatcherConfig, HostDispatcher

    config = DispatcherConfig(num_slots=16, slot_size=256, stop_timeout=DEADLINE)
    rng = random.Random(8)
    with Dispatcher(config, module=core) as d:
        d.function_table.add_graph("graph_increment", graph_handler.graph, graph_handler.mailbox)
        d.start()
        served = {"graph_increment": increment}
        requests, _ = mixed_requests(rng, served, [], 1000)
        run_traffic(d.bridge.client(), requests)
        assert d.stop() == 1000
        assert graph_handler.mailbox.value == 0
        with HostDispatcher(d.layout, d.function_table) as host:
            requests, _ = mixed_requests(rng, served, [], 1000)
            run_traffic(host.client(), requests)
            host.stop()
            assert host.processed == 1000 and host.handler_errors == 0


# -- 1024 threads ----------------------------------------------------------------------------


def test_1024_threads_builtin_kernel_10000_checked_round_trips(core: Any) -> None:
    """block_size=1024 (the default build runs 512 on sm_90): the 1024-thread build serves
    a block-cooperative handler over large slots, every byte checked."""
    from skbuild_cudaq.realtime import Dispatcher, DispatcherConfig, get_device_handler

    config = DispatcherConfig(num_slots=32, slot_size=4096, block_size=1024, stop_timeout=DEADLINE)
    with Dispatcher(config, module=core) as d:
        for name in ("block_reverse", "rpc_increment"):
            d.function_table.add_device(name, get_device_handler(core, name))
        d.start()
        rng = random.Random(2)
        requests = []
        for i in range(ROUND_TRIPS):
            payload = rng.randbytes(rng.randint(0, 4072) if i % 10 == 0 else rng.randint(0, 600))
            if i % 2:
                requests.append(("block_reverse", payload, expect(0, payload[::-1])))
            else:
                requests.append(("rpc_increment", payload, expect(0, increment(payload))))
        run_traffic(d.bridge.client(), requests)
        assert d.stop() == ROUND_TRIPS


# -- mixed tables ----------------------------------------------------------------------------


def test_mixed_table_device_path_10000_checked_round_trips(core: Any) -> None:
    """A table holding DEVICE_CALL, HOST_CALL and GRAPH_LAUNCH entries on the device path
    (a custom kernel, which serves no graph): device ones served, the others answered -2."""
    from example_app import launchers
    from skbuild_cudaq.realtime import (
        Dispatcher,
        DispatcherConfig,
        GraphMailbox,
        get_device_handler,
    )

    config = DispatcherConfig(num_slots=64, slot_size=256, stop_timeout=DEADLINE)
    with GraphMailbox() as mailbox, Dispatcher(config, module=core) as d:
        d.function_table.add_device("rpc_increment", get_device_handler(core, "rpc_increment"))
        d.function_table.add_device("echo", get_device_handler(core, "echo"))
        d.function_table.add_host("host_echo", lambda args: args)
        d.function_table.add_graph("decode", 0x1000, mailbox)  # never launched: not served
        d.set_unified_launch(launchers.single_thread(core))
        d.start()
        served = {"rpc_increment": increment, "echo": lambda p: p}
        requests, _ = mixed_requests(random.Random(3), served, ["host_echo", "decode"], ROUND_TRIPS)
        run_traffic(d.bridge.client(), requests)
        assert d.stop() == ROUND_TRIPS


def test_mixed_table_host_path_10000_checked_round_trips(
    core: Any, host_graph_handler: Any, native_handlers: Path
) -> None:
    """Every kind of entry in one table on the host path: a Python and a native HOST_CALL
    handler and a GRAPH_LAUNCH entry served (the graph launched from the host), a DEVICE_CALL
    entry (a real handler address) and an unknown name answered -2; every count exact."""
    from skbuild_cudaq.realtime import (
        FunctionTable,
        HostDispatcher,
        RingLayout,
        get_device_handler,
        get_host_handler,
    )

    table = FunctionTable()
    table.add_device("rpc_increment", get_device_handler(core, "rpc_increment"))
    table.add_graph("graph_increment", host_graph_handler.graph, host_graph_handler.mailbox)
    table.add_host("host_increment", increment)
    table.add_host("echo", get_host_handler(native_handlers, "echo"))
    served = {"graph_increment": increment, "host_increment": increment, "echo": lambda p: p}
    with HostDispatcher(RingLayout(64, 256), table) as host:
        requests, counts = mixed_requests(
            random.Random(4), served, ["rpc_increment", "nobody"], ROUND_TRIPS
        )
        run_traffic(host.client(), requests)
        stats = host.graph_stats()["graph_increment"]
        host.stop()
        assert host.processed == ROUND_TRIPS
        assert host.rejected == counts["rpc_increment"] + counts["nobody"]
        assert host.handler_errors == 0, host.last_handler_error
    assert stats["requests"] == counts["graph_increment"] and stats["launch_failures"] == 0
    assert min(counts.values()) > 1500


# -- a shared ring ---------------------------------------------------------------------------


@pytest.mark.parametrize("with_graph", [False, True], ids=["device_call", "graph_launch"])
def test_shared_ring_host_and_device_10000_checked_round_trips(
    core: Any, request: pytest.FixtureRequest, with_graph: bool
) -> None:
    """A host dispatcher and a device dispatcher on one ring, each serving only its own
    entries (as CUDA-Q realtime's interleaved host-and-device test): every request answered
    once and by the right side, bad and unknown ones by the device; each count exact."""
    from skbuild_cudaq.realtime import (
        Dispatcher,
        DispatcherConfig,
        HostDispatcher,
        get_device_handler,
    )
    from skbuild_cudaq.realtime.wire import STATUS_BAD_MAGIC

    handler = request.getfixturevalue("graph_handler") if with_graph else None
    config = DispatcherConfig(num_slots=32, slot_size=256, stop_timeout=DEADLINE, shared_ring=True)
    with Dispatcher(config, module=core) as d:
        table = d.function_table
        table.add_device("rpc_increment", get_device_handler(core, "rpc_increment"))
        table.add_host("host_echo", bytes)
        if handler is not None:
            table.add_graph("graph_increment", handler.graph, handler.mailbox)
        d.start()
        host = HostDispatcher(d.layout, table, buffer=d.bridge.buffer, shared_ring=True)
        host.start()
        try:
            client = d.bridge.client()
            served = {"rpc_increment": increment, "host_echo": lambda p: p}
            if handler is not None:
                served["graph_increment"] = increment
            requests, counts = mixed_requests(
                random.Random(5), served, ["nobody"], ROUND_TRIPS - 100
            )
            pending: list[tuple[Any, Any]] = []
            for index, (name, payload, check) in enumerate(requests):
                pending.append((client.submit(name, payload), check))
                if index % 99 == 0:  # bad magic: the device answers it, whatever the id
                    ticket = client.submit("host_echo", b"x", magic=0xDEADBEEF)
                    pending.append((ticket, expect(STATUS_BAD_MAGIC)))
                while len(pending) >= WINDOW:
                    ticket, check_one = pending.pop(0)
                    check_one(client.wait(ticket, timeout=DEADLINE))
            for ticket, check_one in pending:
                check_one(client.wait(ticket, timeout=DEADLINE))
            host.stop()
            host_count = host.processed
        finally:
            host.close()
        device_count = d.stop()
    assert host_count == counts["host_echo"]
    assert device_count == ROUND_TRIPS - counts["host_echo"]
    assert counts["nobody"] > 0  # answered STATUS_UNKNOWN_FUNCTION (-2) by the device


# -- the test server -------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["device", "host"])
def test_graph_launch_test_server_serves_graph_handler(core: Any, path: str) -> None:
    """cudaq-realtime-test-server --graphs=graph_increment: UDP round trips to the graph
    (launched by the device dispatcher, or by the host path on a worker stream) and to
    rpc_increment beside it (a device handler, or the host path's Python one)."""
    from skbuild_cudaq.realtime._driver import ordinal_arch

    if path == "device":
        _needs_graph_launch()  # the device path links libcudadevrt
    elif int(ordinal_arch(0)[3:].rstrip("af")) < 90:
        pytest.skip("example_app's graph is instantiated for device launch: sm_90+")
    from test_server import start_server

    server = start_server(f"--path={path}", "--graphs=graph_increment", "--num-slots=16")
    try:
        assert f"path={path}" in server.ready_line
        with server.client() as client:
            rng = random.Random(6)
            for _ in range(300):
                payload = rng.randbytes(rng.randint(0, 200))
                assert client.call("graph_increment", payload) == (0, increment(payload))
                assert client.call("rpc_increment", payload) == (0, increment(payload))
        processed, _, _ = server.stop()
        assert processed == 600
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.communicate()
