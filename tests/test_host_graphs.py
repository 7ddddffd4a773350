"""Graph handlers on the host path, without a GPU: the table and mailbox checks, the typed
errors, and the graph workers' bookkeeping (launch, idle mask, recycling, the queue of a busy
worker, the next launch once a graph answered, stop with graphs in flight, reserved statuses
for what fails, before and after an answer).

The CUDA driver is ``tests/_fake_driver.py``'s: its C-callable entry points keep stream order
(a copy reads its source when its turn comes; a graph starts once what was before it on its
stream has run), and a graph "runs" until the test publishes and ends it
(``FakeDriver.publish_graph`` does what ``cudaq_graph_publish`` does, ``FakeDriver.end_graph``
ends it). That proves bookkeeping and error paths only; that a real graph answers is
``tests/test_parity_gpu.py``'s ``test_graph_launch_host_path_10000_checked_round_trips``.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _fake_driver import FakeDriver, FakeGraphRun, UseDriver

from skbuild_cudaq.realtime.dispatcher.table import FunctionTable
from skbuild_cudaq.realtime.errors import ClientError, HostDispatcherError
from skbuild_cudaq.realtime.graph import GRAPH_IO_SIZE, STATUS_GRAPH_LAUNCH_FAILED, GraphMailbox
from skbuild_cudaq.realtime.host import _native
from skbuild_cudaq.realtime.host.dispatcher import STATUS_GRAPH_NOT_PUBLISHED, HostDispatcher, echo
from skbuild_cudaq.realtime.host.graphs import DRIVER_ENTRY_POINTS, MAX_GRAPH_WORKERS
from skbuild_cudaq.realtime.ring import RingLayout
from skbuild_cudaq.realtime.wire import STATUS_UNKNOWN_FUNCTION

ROOT = Path(__file__).resolve().parent.parent
INCLUDE = ROOT / "skbuild_cudaq" / "include" / "cudaq" / "realtime"
DEADLINE = 10.0
LAYOUT = RingLayout(8, 64)


@pytest.fixture
def drv(use_driver: UseDriver) -> FakeDriver:
    return use_driver(FakeDriver())


@pytest.fixture
def mailboxes(drv: FakeDriver) -> Iterator[list[GraphMailbox]]:
    boxes = [GraphMailbox(), GraphMailbox()]
    yield boxes
    for box in boxes:
        box.close()


def until(condition: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.001)
    raise AssertionError(f"not within {DEADLINE} s: {what}")


def runs(drv: FakeDriver, n: int) -> list[FakeGraphRun]:
    """The host path's first ``n`` graph launches, once it has made them."""
    until(lambda: len(drv.graph_runs) >= n, f"{n} graph launch(es)")
    return drv.graph_runs[:n]


def increment(payload: bytes) -> bytes:
    return bytes((b + 1) & 0xFF for b in payload)


def graph_table(mailboxes: list[GraphMailbox], graphs: int = 1) -> FunctionTable:
    table = FunctionTable()
    table.add_host("host_echo", echo)
    table.add_device("rpc_increment", 0x7000_0000_1000)  # the device path's: -2 here
    for index in range(graphs):
        table.add_graph(f"decode{index}", 0x6E0000 + index, mailboxes[index])
    return table


def pinned_allocations(drv: FakeDriver) -> list[int]:
    return [ctypes.sizeof(buf) for buf in drv.host.values()]


# -- the ring and the entries ------------------------------------------------------------------


def test_a_graph_entry_needs_a_ring_the_gpu_can_reach(
    drv: FakeDriver, mailboxes: list[GraphMailbox]
) -> None:
    """A buffer that is not pinned and mapped (all of it) is refused at construction, naming
    what to pass, with nothing left allocated; a HostRingBridge's buffer is served; without
    a buffer the dispatcher allocates pinned, mapped memory itself and frees it at close."""
    from skbuild_cudaq.realtime import _driver
    from skbuild_cudaq.realtime.bridge import HostRingBridge

    table = graph_table(mailboxes)
    before = sorted(pinned_allocations(drv))
    with pytest.raises(HostDispatcherError, match=r"need a ring the GPU can reach") as info:
        HostDispatcher(LAYOUT, table, buffer=bytearray(LAYOUT.total_bytes))
    assert "buffer=bridge.buffer" in str(info.value) and "leave buffer out" in str(info.value)
    bridge = HostRingBridge(layout=LAYOUT)
    with _driver.pushed(_driver.primary_context(0)):
        bridge.open()
    try:
        shifted = (ctypes.c_uint8 * LAYOUT.total_bytes).from_address(bridge.host_address + 8)
        with pytest.raises(HostDispatcherError, match="not pinned, mapped memory"):
            HostDispatcher(LAYOUT, table, buffer=shifted)  # its last 8 bytes are not
        assert drv.log.count("cuStreamCreate") == drv.log.count("cuStreamDestroy")
        with HostDispatcher(LAYOUT, table, buffer=bridge.buffer) as d:
            client = d.client()
            ticket = client.submit("decode0", b"\x01")
            drv.end_graph(runs(drv, 1)[0])
            assert client.wait(ticket, timeout=DEADLINE).result == b"\x02"
    finally:
        bridge.close()
    assert sorted(pinned_allocations(drv)) == before
    own = HostDispatcher(LAYOUT, table)
    assert LAYOUT.total_bytes in pinned_allocations(drv)  # its own ring, pinned and mapped
    client = own.client()
    own.close()
    assert sorted(pinned_allocations(drv)) == before
    with pytest.raises(ClientError, match="closed"):  # not a write to freed memory
        client.submit("host_echo", b"late")
    assert drv.log.count("cuStreamCreate") == drv.log.count("cuStreamDestroy")


def test_graph_entries_the_host_path_refuses(drv: FakeDriver) -> None:
    """More graph entries than workers, graphs of two GPUs, a mailbox closed after its entry
    was added, a host handler named like a graph entry: typed errors."""
    boxes = [GraphMailbox() for _ in range(MAX_GRAPH_WORKERS + 1)]
    try:
        table = FunctionTable()
        for index, box in enumerate(boxes):
            table.add_graph(f"g{index}", 0x1000 + index, box)
        with pytest.raises(HostDispatcherError, match=f"at most {MAX_GRAPH_WORKERS} GRAPH_LAUNCH"):
            HostDispatcher(LAYOUT, table)
        two = FunctionTable()
        two.add_graph("a", 0x10, boxes[0])
        with GraphMailbox(device=1) as other:
            two.add_graph("b", 0x20, other)
            with pytest.raises(HostDispatcherError, match="launches the graphs of one GPU"):
                HostDispatcher(LAYOUT, two)
        one = FunctionTable()
        one.add_graph("a", 0x10, boxes[1])
        d = HostDispatcher(LAYOUT, one)
        with pytest.raises(HostDispatcherError, match="named 'a' is already registered"):
            d.add_handler("a", echo)
        with pytest.raises(HostDispatcherError, match="serves no graph handlers"):
            d.serve_one()
        boxes[1].close()
        with pytest.raises(HostDispatcherError, match="its GraphMailbox is closed"):
            d.start()
        d.close()
    finally:
        for box in boxes:
            box.close()


def test_the_loop_takes_the_drivers_entry_points_at_run_time(
    drv: FakeDriver, mailboxes: list[GraphMailbox]
) -> None:
    """The native core links nothing of CUDA: the loop calls the driver through the
    addresses cuGetProcAddress gives (CUDA 12.0's ABI); one missing is a typed error."""
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    with Path(_native.__file__).open("rb") as f:
        needed = [
            tag.needed
            for section in ELFFile(f).iter_sections()
            if isinstance(section, DynamicSection)
            for tag in section.iter_tags()
            if tag.entry.d_tag == "DT_NEEDED"
        ]
    assert needed and not [n for n in needed if "cuda" in n], needed
    HostDispatcher(LAYOUT, graph_table(mailboxes)).close()
    assert [c for c in drv.log if c.startswith("cuGetProcAddress")] == [
        f"cuGetProcAddress({name})" for name in DRIVER_ENTRY_POINTS
    ]
    assert set(drv.proc_versions) == {12000}
    drv.missing_procs.add("cuGraphLaunch")
    with pytest.raises(HostDispatcherError, match="has no cuGraphLaunch"):
        HostDispatcher(LAYOUT, graph_table(mailboxes))
    assert drv.log.count("cuStreamCreate") == drv.log.count("cuStreamDestroy")


def test_the_io_context_layout_and_statuses_are_the_headers() -> None:
    device = (INCLUDE / "unified_dispatch_device.cuh").read_text()
    device += (INCLUDE / "detail" / "graph.cuh").read_text()
    host = (INCLUDE / "host_handler.h").read_text()
    assert _native.GRAPH_IO_SIZE == GRAPH_IO_SIZE
    assert f"#define CUDAQ_GRAPH_IO_SIZE {GRAPH_IO_SIZE}u" in device
    assert (
        f"#define CUDAQ_RPC_STATUS_GRAPH_LAUNCH_FAILED 0x{STATUS_GRAPH_LAUNCH_FAILED:X}" in device
    )
    assert f"CUDAQ_HOST_STATUS_GRAPH_LAUNCH_FAILED 0x{STATUS_GRAPH_LAUNCH_FAILED:X}" in host
    assert f"CUDAQ_HOST_STATUS_GRAPH_NOT_PUBLISHED 0x{STATUS_GRAPH_NOT_PUBLISHED:X}" in host
    assert _native.STATUS_GRAPH_LAUNCH_FAILED == STATUS_GRAPH_LAUNCH_FAILED
    assert _native.STATUS_GRAPH_NOT_PUBLISHED == STATUS_GRAPH_NOT_PUBLISHED
    assert _native.MAX_GRAPH_WORKERS == MAX_GRAPH_WORKERS


# -- the workers' bookkeeping --------------------------------------------------------------


def test_a_graph_request_is_launched_on_its_worker_and_published_once_the_graph_answered(
    drv: FakeDriver, mailboxes: list[GraphMailbox]
) -> None:
    """The I/O context is filled as the device path fills it (the request copied after it,
    the ring's response slot, the worker's publish word and the launch's number); other
    requests are answered while the graph runs; the answer is counted and published once
    the graph has published; the worker is recycled once its stream is done."""
    with HostDispatcher(LAYOUT, graph_table(mailboxes)) as d:
        loop = d._loop
        client = d.client()
        assert loop.num_workers == 1 and loop.idle_mask == 1
        ticket = client.submit("decode0", b"abc", timestamp=77)
        (run,) = runs(drv, 1)
        request, response, flag, value, slot_size, sequence, released, graph_exec, *_ = (
            drv.graph_io(run)
        )
        assert mailboxes[0].value == run.record and request == run.record + GRAPH_IO_SIZE
        assert drv.read_device(request, 27)[24:] == b"abc"  # the request copied after it
        ring = ctypes.addressof(ctypes.c_char.from_buffer(d._mem.mv))
        assert response == ring + LAYOUT.tx_slot_offset(ticket.slot)  # mapped: same address
        assert (value, sequence, released, slot_size, graph_exec) == (1, 1, 0, 64, 0x6E0000)
        assert loop.idle_mask == 0 and loop.graphs_outstanding == 1
        assert client.call("host_echo", b"meanwhile", timeout=DEADLINE) == (0, b"meanwhile")
        assert client.call("rpc_increment", b"x", timeout=DEADLINE)[0] == STATUS_UNKNOWN_FUNCTION
        time.sleep(0.01)
        assert client.poll(ticket) is None and d.processed == 2  # not answered, not counted
        assert drv.end_graph(run) == b"abc"
        resp = client.wait(ticket, timeout=DEADLINE)
        assert (resp.status, resp.result, resp.header.ptp_timestamp) == (0, b"bcd", 77)
        assert d.processed == 3 and ctypes.c_uint32.from_address(flag).value == 1
        until(lambda: loop.idle_mask == 1, "the worker recycled")
        assert loop.graphs_outstanding == 0 and d.handler_errors == 0
        assert d.graph_stats() == {
            "decode0": {"requests": 1, "launch_failures": 0, "launch_error": 0}
        }
    assert mailboxes[0].value == 0


def test_requests_for_a_busy_graph_wait_in_its_queue_while_the_rest_is_served(
    drv: FakeDriver, mailboxes: list[GraphMailbox]
) -> None:
    """Two graph entries, three requests each: one request per worker at a time (the next
    launched once its graph answered), both workers busy at once, the queued requests
    launched in order, host requests answered all along, every graph answer published out
    of ring order where it came late."""
    with HostDispatcher(LAYOUT, graph_table(mailboxes, graphs=2)) as d:
        client = d.client()
        tickets = [(name, bytes([i]), client.submit(name, bytes([i]))) for i in range(3)
                   for name in ("decode0", "decode1")]  # fmt: skip
        first = runs(drv, 2)
        assert {r.graph_exec for r in first} == {0x6E0000, 0x6E0001}
        # the two launches may come before the loop has taken the last requests from the ring
        until(lambda: d._loop.graphs_outstanding == 6, "the loop holding all six requests")
        assert d._loop.idle_mask == 0
        time.sleep(0.02)
        assert len(drv.graph_runs) == 2  # the others wait for their worker
        assert client.call("host_echo", b"h", timeout=DEADLINE) == (0, b"h")
        ended = 0
        while ended < 6:
            run = runs(drv, ended + 1)[ended]
            drv.end_graph(run)
            ended += 1
        by_exec = {0x6E0000: "decode0", 0x6E0001: "decode1"}
        order = [by_exec[r.graph_exec] for r in drv.graph_runs]
        assert order.count("decode0") == order.count("decode1") == 3
        for name, payload, ticket in tickets:
            resp = client.wait(ticket, timeout=DEADLINE)
            assert (resp.status, resp.result) == (0, increment(payload)), name
        assert d.processed == 7
        assert {k: v["requests"] for k, v in d.graph_stats().items()} == {
            "decode0": 3,
            "decode1": 3,
        }


def test_many_requests_of_every_kind_are_each_answered_once(
    drv: FakeDriver, mailboxes: list[GraphMailbox]
) -> None:
    """600 requests over two graph entries, a host handler and an unknown id, 16 in flight,
    while a thread ends each graph launch as it appears (a tenth of them without
    publishing): every request gets its own answer, once; every count is exact."""
    import random
    import threading

    stop = threading.Event()

    def graphs() -> None:
        ended = 0
        while not stop.is_set():
            if len(drv.graph_runs) == ended:
                time.sleep(0.0002)
                continue
            run = drv.graph_runs[ended]
            drv.end_graph(run, publish=drv.graph_request(run)[0] % 10 != 0)
            ended += 1

    ender = threading.Thread(target=graphs, daemon=True)
    ender.start()
    rng = random.Random(5)
    expected = {"graph": 0, "unpublished": 0, "unknown": 0}
    try:
        with HostDispatcher(LAYOUT, graph_table(mailboxes, graphs=2)) as d:
            client = d.client()
            pending: list[tuple[Any, int, bytes]] = []
            for i in range(600):
                name = ("decode0", "decode1", "host_echo", "nobody")[rng.randrange(4)]
                payload = bytes([i % 256]) + rng.randbytes(rng.randrange(LAYOUT.max_payload))
                if name == "nobody":
                    want, result = STATUS_UNKNOWN_FUNCTION, b""
                    expected["unknown"] += 1
                elif name == "host_echo":
                    want, result = 0, payload
                elif payload[0] % 10 == 0:
                    want, result = STATUS_GRAPH_NOT_PUBLISHED, b""  # the reason: not checked
                    expected["unpublished"] += 1
                else:
                    want, result = 0, increment(payload)
                    expected["graph"] += 1
                pending.append((client.submit(name, payload), want, result))
                while len(pending) >= 16 or (i == 599 and pending):
                    ticket, want, result = pending.pop(0)
                    resp = client.wait(ticket, timeout=DEADLINE)
                    assert resp.status == want, (resp.status, want)
                    if want != STATUS_GRAPH_NOT_PUBLISHED:
                        assert resp.result == result
            d.stop()
            assert d.processed == 600
            assert d.rejected == expected["unknown"]
            assert d.handler_errors == expected["unpublished"]
            stats = d.graph_stats()
            assert sum(v["requests"] for v in stats.values()) == len(drv.graph_runs)
            assert len(drv.graph_runs) == expected["graph"] + expected["unpublished"]
            assert d._loop.idle_mask == 3 and d._loop.graphs_outstanding == 0
    finally:
        stop.set()
        ender.join(DEADLINE)


def test_what_fails_on_the_way_is_answered_with_a_reserved_status(
    drv: FakeDriver, mailboxes: list[GraphMailbox]
) -> None:
    """A copy or a launch the driver refuses, a graph whose stream reports an error, a graph
    that ended without publishing: each answered by the loop (a reserved status, the reason
    as the result), counted in handler_errors, the worker idle again; serving goes on."""
    with HostDispatcher(LAYOUT, graph_table(mailboxes)) as d:
        client = d.client()
        drv.fail["cuGraphLaunch"] = 999
        status, text = client.call("decode0", b"a", timeout=DEADLINE)
        assert (status, text) == (
            STATUS_GRAPH_LAUNCH_FAILED,
            b"cuGraphLaunch failed: CUresult (999)",
        )
        until(lambda: d._loop.idle_mask == 1, "recycled after its copy ran")
        del drv.fail["cuGraphLaunch"]
        drv.fail["cuMemcpyHtoDAsync"] = 2
        assert client.call("decode0", b"b", timeout=DEADLINE)[0] == STATUS_GRAPH_LAUNCH_FAILED
        assert d._loop.idle_mask == 1  # nothing was enqueued
        del drv.fail["cuMemcpyHtoDAsync"]
        ticket = client.submit("decode0", b"c")
        drv.end_graph(runs(drv, 1)[0], publish=False, error=700)
        resp = client.wait(ticket, timeout=DEADLINE)
        assert (resp.status, resp.result) == (
            STATUS_GRAPH_LAUNCH_FAILED,
            b"the graph failed: CUDA_ERROR_ILLEGAL_ADDRESS (700)"[: LAYOUT.max_payload],
        )
        ticket = client.submit("decode0", b"d")
        drv.end_graph(runs(drv, 2)[1], publish=False)
        resp = client.wait(ticket, timeout=DEADLINE)
        assert resp.status == STATUS_GRAPH_NOT_PUBLISHED
        assert d.last_handler_error == (
            "decode0: the graph ended without publishing its response (cudaq_graph_publish)"
        )
        ticket = client.submit("decode0", b"e")
        drv.end_graph(runs(drv, 3)[2])
        assert client.wait(ticket, timeout=DEADLINE).result == b"f"
        assert client.call("host_echo", b"ok", timeout=DEADLINE) == (0, b"ok")
        assert d.handler_errors == 4 and d.processed == 6
        assert d.graph_stats()["decode0"] == {
            "requests": 5,
            "launch_failures": 3,
            "launch_error": 700,
        }


def test_the_next_request_is_launched_once_the_graph_answered_not_once_its_stream_is_done(
    drv: FakeDriver, mailboxes: list[GraphMailbox]
) -> None:
    """A graph that published and runs on (its tail): its worker launches the next request
    at once, before its stream is done; stream order runs that copy and graph after the
    tail. Its bit in the idle mask comes back only once the stream is seen done, and the
    stream is asked at most every GRAPH_QUERY_NS, before the answer and after it."""
    began = time.monotonic_ns()
    with HostDispatcher(LAYOUT, graph_table(mailboxes)) as d:
        loop, client = d._loop, d.client()
        stream = int(d._graphs._streams[0]) if d._graphs is not None else 0
        first = client.submit("decode0", b"\x01")
        (run,) = runs(drv, 1)
        drv.publish_graph(run)
        assert client.wait(first, timeout=DEADLINE).result == b"\x02"
        second = client.submit("decode0", b"\x05")
        after = runs(drv, 2)[1]  # launched while the graph before it still runs
        assert not run.done and not after.started
        assert loop.idle_mask == 0 and loop.graphs_outstanding == 1
        time.sleep(0.05)  # the tail runs on: the worker stays busy, its stream asked now and then
        assert loop.idle_mask == 0 and d._loop.graph_stats()[0][5] is True
        drv.end_graph(run, publish=False)  # the tail ends: the second copy and graph run
        assert after.started and drv.graph_request(after) == b"\x05"
        assert drv.graph_io(after)[3] == 2  # the launch's number, for its publish
        drv.end_graph(after)
        assert client.wait(second, timeout=DEADLINE).result == b"\x06"
        until(lambda: loop.idle_mask == 1, "the worker idle once its stream is done")
        assert d._loop.graph_stats()[0][4:] == (0, False)
        d.stop()
        assert d.processed == 2 and d.handler_errors == 0 and drv.hazards == []
    elapsed = time.monotonic_ns() - began
    assert 0 < drv.graph_queries[stream] <= elapsed // _native.GRAPH_QUERY_NS + 1, (
        drv.graph_queries[stream],
        elapsed,
    )


def test_a_stream_error_after_the_answer_is_recorded_and_the_answer_stands(
    drv: FakeDriver, mailboxes: list[GraphMailbox]
) -> None:
    """The graph published, then its tail faulted, seen before another request came: the
    answer stands, the error is recorded (launch_error, last_handler_error; not a launch
    failure, not a handler error) and the worker is idle again. The same where the graph
    publishes and faults at once (the loop may see both in one look)."""
    with HostDispatcher(LAYOUT, graph_table(mailboxes)) as d:
        client = d.client()
        ticket = client.submit("decode0", b"a")
        (run,) = runs(drv, 1)
        drv.publish_graph(run)
        assert client.wait(ticket, timeout=DEADLINE).result == b"b"
        drv.end_graph(run, publish=False, error=700)
        until(lambda: d._loop.idle_mask == 1, "the worker idle once its stream is done")
        assert d.last_handler_error == (
            "decode0: its stream reported CUDA_ERROR_ILLEGAL_ADDRESS (700) after its request "
            "was answered"
        )
        assert d.graph_stats()["decode0"] == {
            "requests": 1,
            "launch_failures": 0,
            "launch_error": 700,
        }
        assert d.processed == 1 and d.handler_errors == 0 and d._loop.graphs_outstanding == 0
        ticket = client.submit("decode0", b"c")
        drv.end_graph(runs(drv, 2)[1], error=719)  # published as it ended, faulting
        assert client.wait(ticket, timeout=DEADLINE).result == b"d"
        until(lambda: d._loop.idle_mask == 1, "the worker idle once its stream is done")
        assert d.last_handler_error == (
            "decode0: its stream reported CUresult (719) after its request was answered"
        )
        assert d.graph_stats()["decode0"]["launch_error"] == 719
        assert d.processed == 2 and d.handler_errors == 0


def test_a_tail_that_faults_with_the_next_request_launched_behind_it(
    drv: FakeDriver, mailboxes: list[GraphMailbox]
) -> None:
    """The graph published and its tail faulted after the next request was launched behind
    it: that request's copy and graph never run (the fault is sticky: the fake then refuses
    every later call, as the context does). The next request is answered
    STATUS_GRAPH_LAUNCH_FAILED exactly once, naming the tail as a possible cause; the error
    is recorded; the worker is idle again, and a later request is refused at its copy
    (answered at once). Nothing hangs, every count is exact."""
    with HostDispatcher(LAYOUT, graph_table(mailboxes)) as d:
        client = d.client()
        first = client.submit("decode0", b"a")
        (run,) = runs(drv, 1)
        drv.publish_graph(run)
        assert client.wait(first, timeout=DEADLINE).result == b"b"
        second = client.submit("decode0", b"c")
        behind = runs(drv, 2)[1]
        assert not behind.started
        drv.fail["cuMemcpyHtoDAsync"] = drv.fail["cuGraphLaunch"] = 700  # sticky
        drv.end_graph(run, publish=False, error=700)
        resp = client.wait(second, timeout=DEADLINE)
        assert (resp.status, resp.result) == (
            STATUS_GRAPH_LAUNCH_FAILED,
            b"the graph failed: CUDA_ERROR_ILLEGAL_ADDRESS (700)"[: LAYOUT.max_payload],
        )
        assert behind.done and not behind.started and not behind.published
        until(lambda: d._loop.idle_mask == 1, "the worker idle once its stream is done")
        assert d.last_handler_error == (
            "decode0: the graph failed: CUDA_ERROR_ILLEGAL_ADDRESS (700) (or the tail of the "
            "graph before it, after that one answered)"
        )
        time.sleep(0.01)  # a second answer would come meanwhile
        assert d.processed == 2 and d.handler_errors == 1 and d._loop.graphs_outstanding == 0
        status, text = client.call("decode0", b"d", timeout=DEADLINE)
        assert (status, text) == (
            STATUS_GRAPH_LAUNCH_FAILED,
            b"cuMemcpyHtoDAsync failed: CUDA_ERROR_ILLEGAL_ADDRESS (700)"[: LAYOUT.max_payload],
        )
        assert client.call("host_echo", b"on", timeout=DEADLINE) == (0, b"on")
        d.stop()
        assert d.processed == 4 and d.handler_errors == 2 and len(drv.graph_runs) == 2
        assert d.graph_stats()["decode0"] == {
            "requests": 3,
            "launch_failures": 2,
            "launch_error": 700,
        }


def test_a_launch_refused_after_its_copy_holds_the_worker_until_its_stream_is_done(
    drv: FakeDriver, mailboxes: list[GraphMailbox]
) -> None:
    """The next request launched behind an answered graph's tail: its copy is enqueued,
    its cuGraphLaunch refused: answered at once (STATUS_GRAPH_LAUNCH_FAILED), but the copy
    still waits its turn and reads the worker's image then, so no request is launched on
    that worker (its image written) until its stream is done; then the one waiting is."""
    with HostDispatcher(LAYOUT, graph_table(mailboxes)) as d:
        client = d.client()
        first = client.submit("decode0", b"a")
        (run,) = runs(drv, 1)
        drv.publish_graph(run)
        assert client.wait(first, timeout=DEADLINE).result == b"b"
        drv.fail["cuGraphLaunch"] = 999
        status, text = client.call("decode0", b"b", timeout=DEADLINE)
        assert (status, text) == (
            STATUS_GRAPH_LAUNCH_FAILED,
            b"cuGraphLaunch failed: CUresult (999)",
        )
        del drv.fail["cuGraphLaunch"]
        third = client.submit("decode0", b"c")
        time.sleep(0.05)  # many times GRAPH_QUERY_NS: the loop had every chance to launch it
        assert drv.log.count("cuMemcpyHtoDAsync") == 2 and len(drv.graph_runs) == 1
        assert client.poll(third) is None and d._loop.graph_stats()[0][4] == 1  # queued
        drv.end_graph(run, publish=False)  # the tail ends, then the refused launch's copy runs
        later = runs(drv, 2)[1]
        assert drv.graph_request(later) == b"c"
        drv.end_graph(later)
        assert client.wait(third, timeout=DEADLINE).result == b"d"
        assert drv.hazards == []  # no copy's source was written before the copy ran
        assert d.processed == 3 and d.handler_errors == 1


def test_no_context_on_the_serving_thread_fails_each_launch_with_a_reserved_status(
    drv: FakeDriver, mailboxes: list[GraphMailbox]
) -> None:
    drv.fail["cuCtxSetCurrent"] = 201
    with HostDispatcher(LAYOUT, graph_table(mailboxes)) as d:
        status, text = d.client().call("decode0", b"a", timeout=DEADLINE)
        assert status == STATUS_GRAPH_LAUNCH_FAILED
        assert text == b"cuCtxSetCurrent failed: CUresult (201)"
        assert not drv.graph_runs and d._loop.idle_mask == 1


def test_stop_and_close_wait_for_the_graphs_in_flight(
    drv: FakeDriver, mailboxes: list[GraphMailbox]
) -> None:
    """stop() answers the graph requests in hand first (a queued one is launched meanwhile):
    past its timeout it raises, the thread still serving them; nothing is freed while a
    graph may run; once they are answered stop() succeeds, the mailbox is released, and
    close() frees the streams and memory."""
    d = HostDispatcher(LAYOUT, graph_table(mailboxes), idle_sleep=1e-4)
    d.start()
    client = d.client()
    first, second = client.submit("decode0", b"1"), client.submit("decode0", b"2")
    (run,) = runs(drv, 1)
    with pytest.raises(HostDispatcherError, match=r"\(2 graph request\(s\) not answered yet\)"):
        d.stop(timeout=0.05)
    with pytest.raises(HostDispatcherError, match="did not stop"):
        d.close(timeout=0.05)
    assert d.running and mailboxes[0].value != 0 and "cuStreamDestroy" not in drv.log
    drv.end_graph(run)
    drv.end_graph(runs(drv, 2)[1])  # launched while stopping
    d.stop()
    assert not d.running and d.processed == 2 and mailboxes[0].value == 0
    assert client.wait(first, timeout=DEADLINE).result == b"2"
    assert client.wait(second, timeout=DEADLINE).result == b"3"
    d.close()
    assert drv.log.count("cuStreamDestroy") == 1 and drv.log.count("cuMemFree") == 1
    with pytest.raises(HostDispatcherError, match="closed"):
        d.start()


def test_a_mailbox_serves_one_dispatcher_at_a_time(
    drv: FakeDriver, mailboxes: list[GraphMailbox]
) -> None:
    table = graph_table(mailboxes)
    first, second = HostDispatcher(LAYOUT, table), HostDispatcher(LAYOUT, table)
    try:
        first.start()
        with pytest.raises(HostDispatcherError, match="in use by another dispatcher"):
            second.start()
        assert not second.running
        first.stop()
        second.start()
        assert mailboxes[0].value != 0 and second.running
    finally:
        second.close()
        first.close()
    assert mailboxes[0].value == 0


def test_a_device_graph_is_not_closed_while_a_host_dispatcher_serves_it(
    drv: FakeDriver, mailboxes: list[GraphMailbox]
) -> None:
    """DeviceGraph.close() is refused from start() to stop(): a worker stream may be
    launching it; after stop() it destroys both graphs once."""
    from skbuild_cudaq.realtime import InvalidArgumentError
    from skbuild_cudaq.realtime.graph import DeviceGraph

    graph = DeviceGraph(graph=0x6F0000, exec_=0x6E0000, device=0)
    table = FunctionTable()
    table.add_graph("decode", graph, mailboxes[0])
    with HostDispatcher(LAYOUT, table) as host:
        with pytest.raises(InvalidArgumentError, match="served by a running dispatcher"):
            graph.close()
        assert graph.handle == 0x6E0000
        host.stop()
        graph.close()
    assert graph.exec is None and drv.log.count("cuGraphExecDestroy") == 1


def test_on_a_shared_ring_the_graph_entries_are_the_device_dispatchers(
    drv: FakeDriver, mailboxes: list[GraphMailbox]
) -> None:
    """shared_ring=True: no worker, no stream, no pinned ring needed, the mailbox left
    alone (the device dispatcher on the same ring serves the graphs)."""
    buf = bytearray(LAYOUT.total_bytes)
    with HostDispatcher(LAYOUT, graph_table(mailboxes), buffer=buf, shared_ring=True) as d:
        assert d._loop.num_workers == 0 and d.graph_stats() == {}
        assert "cuStreamCreate" not in drv.log and mailboxes[0].value == 0


def test_the_fake_drivers_error_names_outlive_the_call(drv: FakeDriver) -> None:
    """cuGetErrorName hands out the driver's own string (static in libcuda), which the loop
    formats after the call returned, without the GIL: the fake's must outlive the call too.
    (It once handed out a copy that the callback's return freed; ThreadSanitizer saw the
    serving thread read it while the main thread reused the memory.)"""
    get_name = drv._entry_points()["cuGetErrorName"]
    name = ctypes.c_char_p()
    assert get_name(700, ctypes.byref(name)) == 0
    reuse = [bytes(26) for _ in range(64)]  # a freed block of the name's size is reused here
    assert name.value == b"CUDA_ERROR_ILLEGAL_ADDRESS", len(reuse)
