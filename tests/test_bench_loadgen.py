"""The benchmarks' native load generator (``bench/loadgen.c``), without a GPU.

``bench/dispatch.py`` and ``bench/phases.py`` time round trips with it, back to back and with
random arrival (``lg_latency_gap``). Here a ``RingServer`` thread of this process answers in
place of a dispatch kernel (ctypes releases the GIL while the C code spins), so the protocol
side of the measurement is checked where CI runs: every request written, answered, its
response checked by the generator, the position carried between calls, the think time not
counted in the round trip. No timing is asserted beyond that.
"""

from __future__ import annotations

import ctypes
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _bench import load_bench

from skbuild_cudaq.realtime.ring import RingLayout, RingServer

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Any:
    if shutil.which("gcc") is None and shutil.which("cc") is None:
        pytest.skip("no C compiler to build bench/loadgen.c")
    module = load_bench("dispatch")
    module.LOADGEN_SO = module.build_loadgen(tmp_path_factory.mktemp("loadgen"))
    return module


@pytest.fixture
def served_ring(bench: Any) -> Iterator[tuple[Any, int, list[int]]]:
    """A ring of the benchmark's layout in process memory, echoed by a RingServer thread."""
    layout = RingLayout(bench.NUM_SLOTS, bench.SLOT_SIZE)
    memory = ctypes.create_string_buffer(layout.total_bytes)
    server = RingServer(memory, layout)
    stop = threading.Event()
    answered = [0]

    def serve() -> None:
        while not stop.is_set():
            request = server.poll()
            if request is None:
                time.sleep(0)
                continue
            server.publish(0, request.args)
            answered[0] += 1

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield bench.LoadGen(bench.LOADGEN_SO), ctypes.addressof(memory), answered
    finally:
        stop.set()
        thread.join()
        server.close()


def _think_times_ns(count: int, max_gap_ns: int) -> list[int]:
    """The pauses lg_latency_gap draws (its xorshift, fixed seed, per call)."""
    mask, x, out = (1 << 64) - 1, 0x9E3779B97F4A7C15, []
    for _ in range(count):
        x ^= (x << 13) & mask
        x ^= x >> 7
        x ^= (x << 17) & mask
        out.append(x % (max_gap_ns + 1))
    return out


def test_back_to_back_and_random_arrival_round_trips(
    bench: Any, served_ring: tuple[Any, int, list[int]]
) -> None:
    gen, ring, answered = served_ring
    fid = bench.fnv1a("echo")
    t0 = time.perf_counter_ns()
    back_to_back = gen.latency(ring, fid, 300)
    t1 = time.perf_counter_ns()
    assert gen.next.value == 300  # the ring's position, carried to the next call
    gapped = gen.latency(ring, fid, 300, gap_ns=20_000)
    t2 = time.perf_counter_ns()
    assert gen.next.value == 600 and answered[0] == 600  # past the ring's 256 slots twice
    for samples in (back_to_back, gapped):
        assert samples.shape == (300,) and (samples > 0).all()
    # The think times were waited, and none of them is in a round trip: the call took the
    # round trips plus at least the pauses, which back to back are not there.
    think_us = sum(_think_times_ns(300, 20_000)) / 1000.0
    assert think_us > 1000.0  # ~3 ms at a mean of 10 us
    assert (t2 - t1) / 1000.0 - float(gapped.sum()) >= think_us
    assert (t1 - t0) / 1000.0 - float(back_to_back.sum()) < think_us / 2


def test_a_wrong_answer_stops_the_generator(bench: Any) -> None:
    """The generator checks each response (magic, status, length, request id echoed)."""
    layout = RingLayout(bench.NUM_SLOTS, bench.SLOT_SIZE)
    memory = ctypes.create_string_buffer(layout.total_bytes)
    server = RingServer(memory, layout)

    def serve_one_wrong() -> None:
        while (request := server.poll()) is None:
            time.sleep(0)
        server.publish(5, request.args)  # status 5: not what an echo answers

    thread = threading.Thread(target=serve_one_wrong)
    thread.start()
    gen = bench.LoadGen(bench.LOADGEN_SO)
    with pytest.raises(RuntimeError, match=r"lg_latency failed \(-2\) at request 1"):
        gen.latency(ctypes.addressof(memory), bench.fnv1a("echo"), 1, gap_ns=1000)
    thread.join()
    server.close()


@pytest.mark.parametrize("compiled", [None, False], ids=["compiled", "pure"])
def test_the_host_consumer_answers_every_client_in_order(bench: Any, compiled: bool | None) -> None:
    """``lg_serve_start`` plays the dispatch kernel's part (bench/python_host.py measures the
    clients' host-side work against it): RingClient.call and the native client take turns
    on one ring, past its 256 slots, each continuing at the ring's position; every answer is
    the echo of its own request (the native client checks its responses itself)."""
    from skbuild_cudaq.realtime.ring import RingClient

    layout = RingLayout(bench.NUM_SLOTS, bench.SLOT_SIZE)
    memory = ctypes.create_string_buffer(layout.total_bytes)
    ring = ctypes.addressof(memory)
    gen = bench.LoadGen(bench.LOADGEN_SO)
    fid = bench.fnv1a("echo")
    with gen.serving(ring, 0):
        for turn in range(3):
            with RingClient(memory, layout, compiled=compiled) as client:
                for k in range(100):
                    payload = bytes([turn, k]) * (k % 17)
                    assert client.call("echo", payload) == (0, payload)
            gen.next.value = RingClient(memory, layout).submitted
            assert gen.latency(ring, fid, 50).shape == (50,)
        with RingClient(memory, layout) as client:
            assert client.submitted == 450
    # stopped: a request now stays unanswered (the client's spin runs out, then its wait)
    with RingClient(memory, layout, compiled=compiled) as client, pytest.raises(TimeoutError):
        client.call("echo", b"late", timeout=0.05)


def test_the_host_consumer_refuses_a_second_start(bench: Any) -> None:
    layout = RingLayout(bench.NUM_SLOTS, bench.SLOT_SIZE)
    memory = ctypes.create_string_buffer(layout.total_bytes)
    gen = bench.LoadGen(bench.LOADGEN_SO)
    refused = pytest.raises(RuntimeError, match=r"lg_serve_start failed \(-1\)")
    with (
        gen.serving(ctypes.addressof(memory), 0),
        refused,
        gen.serving(ctypes.addressof(memory), 0),
    ):
        pass
    with gen.serving(ctypes.addressof(memory), 0):  # and starts again once stopped
        pass
