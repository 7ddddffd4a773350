"""The native core's threads against the threads that drive and read them: stress tests of
the interleavings ``tools/sanitize.sh --thread`` checks under ThreadSanitizer.

Each test checks exact results in the plain tier and takes well under two seconds; under
ThreadSanitizer the same interleavings are checked for data races (the serving thread's
bookkeeping read by another thread while it writes it, an answer published by a "GPU"
thread and read by the client through the loop).

The graph workers here run on ``INSTANT_GPU_C``: the CUDA driver's entry points the loop
calls, in C, with no GIL anywhere (as the real driver), and a thread that plays the GPU
(runs each launched graph as ``cudaq_graph_publish`` would). ``tests/test_host_graphs.py``'s
fake driver is Python: each of its calls takes the GIL, which orders the serving thread
with every Python thread and hides exactly the races looked for here.
"""

from __future__ import annotations

import contextlib
import ctypes
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from skbuild_cudaq.realtime.graph import GRAPH_IO_SIZE, STATUS_GRAPH_LAUNCH_FAILED
from skbuild_cudaq.realtime.host import _native
from skbuild_cudaq.realtime.host.dispatcher import STATUS_GRAPH_NOT_PUBLISHED
from skbuild_cudaq.realtime.ring import RingClient, RingLayout

#: The driver entry points of a graph worker (``cu_entry_points_t`` of ``host/native/internal.h``)
#: and a thread that plays the GPU, in stream order. A graph's exec handle is its record's address
#: (the graph's mailbox), a stream is a number from 1 to 64 with a queue of operations the GPU
#: thread runs in turn: cuMemcpyHtoDAsync and cuGraphLaunch enqueue (host memory stands in for
#: device memory). A copy reads its source when its turn comes (a source changed since the call is
#: counted as a hazard: the loop wrote an image a pending copy was still to read). A graph writes
#: the response (the request's arguments plus one, byte by byte) and stores the launch's number into
#: the publish word (a release), then runs on for ``TAIL_NS`` (its tail) before the next operation
#: of its stream runs; cuStreamQuery says NOT_READY while its stream holds anything. A request whose
#: first argument byte is ``REFUSED`` is refused by cuGraphLaunch (999) after its copy was enqueued;
#: one whose first byte is ``SILENT`` runs a graph that ends without publishing. ``queries(s)``,
#: ``copies_behind()`` (copies enqueued behind a graph still running) and ``hazards_seen()`` say
#: what happened.
INSTANT_GPU_C = r"""
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define STREAMS 64
#define DEPTH 8        /* a worker's stream holds at most an answered graph, a copy and a graph */
#define IO_SIZE 64     /* GRAPH_IO_SIZE: the request follows the I/O context in an image */
#define TAIL_NS 30000u /* a graph runs on this long after it published */
typedef struct {
  uint64_t request, response, response_flag;
  uint32_t response_flag_value, slot_size, sequence, released;
  uint64_t graph_exec;
  uint32_t launch_error, launch_failures;
} io_t;

typedef struct {
  uint64_t dst;       /* a copy's destination; a graph's record */
  const uint8_t *src; /* a copy's source; NULL: a graph */
  uint64_t n, sum;    /* a copy's size, its source's checksum at the call */
} op_t;

static struct {
  op_t ops[DEPTH];
  uint32_t head, tail;  /* next to run (the GPU thread's), next free (the serving thread's) */
  const uint8_t *image; /* serving thread: the source of the last copy enqueued */
  uint64_t queries;     /* serving thread: cuStreamQuery calls */
  int running;          /* GPU thread: the graph at head published and is in its tail */
  uint64_t tail_until;  /* GPU thread: when that tail ends */
} streams[STREAMS + 1];
static uint64_t hazards, behind;
static pthread_t gpu;
static uint32_t gpu_stop;

static void copy(uint8_t *dst, const uint8_t *src, uint64_t n) { /* no libc: all of it seen */
  for (uint64_t i = 0; i < n; ++i)
    dst[i] = src[i];
}

static uint64_t checksum(const uint8_t *p, uint64_t n) { /* FNV-1a */
  uint64_t h = 1469598103934665603ull;
  for (uint64_t i = 0; i < n; ++i)
    h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void run_graph(uint64_t record) {
  io_t io;
  copy((uint8_t *)&io, (const uint8_t *)(uintptr_t)record, sizeof io);
  const uint8_t *req = (const uint8_t *)(uintptr_t)io.request;
  uint8_t *resp = (uint8_t *)(uintptr_t)io.response;
  uint32_t head[4];
  copy((uint8_t *)head, req, 16);
  if (head[2] > 0 && req[24] == 0xFE) /* SILENT */
    return;
  const uint32_t out[4] = {0x43555153u, 0, head[2], head[3]};
  copy(resp, (const uint8_t *)out, 16);
  copy(resp + 16, req + 16, 8);
  for (uint32_t i = 0; i < head[2]; ++i)
    resp[24 + i] = (uint8_t)(req[24 + i] + 1);
  __atomic_store_n((uint32_t *)(uintptr_t)io.response_flag, io.response_flag_value,
                   __ATOMIC_RELEASE);
}

/* Runs stream s's next operation as far as it goes now; 1: something ran. */
static int gpu_step(int s) {
  const uint32_t h = __atomic_load_n(&streams[s].head, __ATOMIC_RELAXED);
  if (h == __atomic_load_n(&streams[s].tail, __ATOMIC_ACQUIRE))
    return 0;
  const op_t *op = &streams[s].ops[h % DEPTH];
  if (op->src != NULL) {
    if (checksum(op->src, op->n) != op->sum)
      __atomic_fetch_add(&hazards, 1, __ATOMIC_RELAXED);
    copy((uint8_t *)(uintptr_t)op->dst, op->src, op->n);
  } else if (!streams[s].running) {
    run_graph(op->dst);
    streams[s].running = 1;
    streams[s].tail_until = now_ns() + TAIL_NS;
    return 1;
  } else if (now_ns() < streams[s].tail_until) {
    return 0;
  } else {
    streams[s].running = 0;
  }
  __atomic_store_n(&streams[s].head, h + 1, __ATOMIC_RELEASE);
  return 1;
}

static void *gpu_main(void *arg) {
  (void)arg;
  while (!__atomic_load_n(&gpu_stop, __ATOMIC_RELAXED)) {
    int ran = 0;
    for (int s = 1; s <= STREAMS; ++s)
      ran |= gpu_step(s);
    if (!ran)
      sched_yield();
  }
  return NULL;
}

int gpu_start(void) {
  __atomic_store_n(&gpu_stop, 0, __ATOMIC_RELAXED);
  return pthread_create(&gpu, NULL, gpu_main, NULL);
}

int gpu_join(void) {
  __atomic_store_n(&gpu_stop, 1, __ATOMIC_RELAXED);
  return pthread_join(gpu, NULL);
}

/* Appends an operation to stream s (the serving thread): 1 for a stream the loop should not
 * use, 2 for one holding more than a worker ever enqueues. */
static int enqueue(uintptr_t s, uint64_t dst, const uint8_t *src, uint64_t n) {
  if (s < 1 || s > STREAMS)
    return 1;
  const uint32_t t = streams[s].tail, h = __atomic_load_n(&streams[s].head, __ATOMIC_ACQUIRE);
  if (t - h >= DEPTH)
    return 2;
  if (src != NULL && t != h)
    __atomic_fetch_add(&behind, 1, __ATOMIC_RELAXED);
  op_t *op = &streams[s].ops[t % DEPTH];
  op->dst = dst;
  op->src = src;
  op->n = n;
  op->sum = src != NULL ? checksum(src, n) : 0;
  __atomic_store_n(&streams[s].tail, t + 1, __ATOMIC_RELEASE);
  return 0;
}

int ctx_set_current(void *ctx) { return ctx ? 0 : 201; }

int memcpy_htod_async(unsigned long long dst, const void *src, uint64_t n, void *stream) {
  const int rc = enqueue((uintptr_t)stream, dst, (const uint8_t *)src, n);
  if (rc == 0)
    streams[(uintptr_t)stream].image = (const uint8_t *)src;
  return rc;
}

int graph_launch(void *exec, void *stream) {
  const uintptr_t s = (uintptr_t)stream;
  if (s < 1 || s > STREAMS || streams[s].image == NULL)
    return 1;
  const uint8_t *req = streams[s].image + IO_SIZE; /* what the copy before it brings */
  if (req[8] > 0 && req[24] == 0xFF) /* REFUSED (arg_len's low byte: arguments are short) */
    return 999;
  return enqueue(s, (uint64_t)(uintptr_t)exec, NULL, 0);
}

int stream_query(void *stream) {
  const uintptr_t s = (uintptr_t)stream;
  __atomic_store_n(&streams[s].queries, streams[s].queries + 1, __ATOMIC_RELAXED);
  return __atomic_load_n(&streams[s].head, __ATOMIC_ACQUIRE) == streams[s].tail ? 0 : 600;
}

uint64_t queries(int s) { return __atomic_load_n(&streams[s].queries, __ATOMIC_RELAXED); }
uint64_t hazards_seen(void) { return __atomic_load_n(&hazards, __ATOMIC_RELAXED); }
uint64_t copies_behind(void) { return __atomic_load_n(&behind, __ATOMIC_RELAXED); }
"""

DEADLINE = 10.0
REFUSED, SILENT = 0xFF, 0xFE


def _under_thread_sanitizer() -> bool:
    return hasattr(ctypes.CDLL(None), "__tsan_init")


@pytest.fixture(scope="module")
def instant_gpu(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``INSTANT_GPU_C`` built and loaded (instrumented too under ThreadSanitizer, so that
    the GPU thread's accesses are checked with the loop's); a skip without a C compiler."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler (cc) on PATH")
    work = tmp_path_factory.mktemp("instant_gpu")
    src, lib = work / "instant_gpu.c", work / "instant_gpu.so"
    src.write_text(INSTANT_GPU_C)
    sanitize = ["-fsanitize=thread", "-g"] if _under_thread_sanitizer() else []
    subprocess.run(
        [cc, "-std=c11", "-O2", "-fPIC", "-shared", "-pthread", *sanitize, str(src), "-o",
         str(lib)],
        check=True,
    )  # fmt: skip
    gpu = ctypes.CDLL(str(lib))
    for name in ("queries", "hazards_seen", "copies_behind"):
        getattr(gpu, name).restype = ctypes.c_uint64
    return gpu


def _address(lib: Any, name: str) -> int:
    address = ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
    assert address
    return int(address)


def _graph_loop(gpu: Any, layout: RingLayout, workers: int) -> tuple[Any, np.ndarray]:
    """A native loop over a ring of its own whose handlers are ``workers`` graph entries,
    function ids 0x6E00 + w, each with its record, pinned image and publish word in host
    memory (the ring's "device" address is its host address)."""
    ring = np.zeros(layout.total_bytes, dtype=np.uint8)
    stride = GRAPH_IO_SIZE + layout.slot_size
    memory = np.zeros(workers * (2 * stride + 64), dtype=np.uint8)
    base = memory.ctypes.data
    loop = _native.Loop(ring.ctypes.data, layout.num_slots, layout.slot_size, (ring, memory))
    entry_points = (
        *(_address(gpu, n) for n in ("ctx_set_current", "graph_launch", "stream_query")),
        _address(gpu, "memcpy_htod_async"),
        0,  # cuGetErrorName: none (errors named by number)
    )
    items = []
    for w in range(workers):
        record = base + w * stride
        staging = base + (workers + w) * stride
        flag = base + 2 * workers * stride + w * 64
        items.append((0x6E00 + w, f"graph{w}", record, w + 1, record, staging, flag, flag))
    loop.set_graphs(1, entry_points, ring.ctypes.data, items, memory)
    loop.set_table([(0x6E00 + w, f"graph{w}", 0, None, w) for w in range(workers)])
    return loop, ring


def test_graph_bookkeeping_is_read_while_the_loop_serves_graphs_without_the_gil(
    instant_gpu: Any,
) -> None:
    """1,000 graph requests over four workers, up to 16 in flight, answered by a GPU thread
    in stream order (a tenth refused by cuGraphLaunch after their copy, a tenth ending without
    publishing, every graph running on after it published) while the serving thread launches,
    sweeps and recycles without ever taking the GIL; a second Python thread reads the
    bookkeeping all along (graph_stats(), the idle mask, graphs outstanding, the counters, the
    last handler error). Every answer is the right one; each value the reader sees is one the
    loop wrote (counts only grow, never more outstanding than slots); the final counts are
    exact. Next requests were launched behind a graph still running (once it answered), no
    image was written while a copy was still to read it, and no stream was asked more often
    than every GRAPH_QUERY_NS. Under ThreadSanitizer: what the serving thread writes and the
    reader reads meanwhile is atomic on both sides (a worker's counts and queue were plain
    stores read by graph_stats()'s atomic loads: a data race), and the images the serving
    thread writes are ordered with the GPU thread's copies of them."""
    layout, workers, total, window = RingLayout(16, 64), 4, 1000, 16
    loop, ring = _graph_loop(instant_gpu, layout, workers)
    assert instant_gpu.gpu_start() == 0
    done = threading.Event()
    seen: list[str] = []  # what the reader found inconsistent
    reads = [0]

    def read() -> None:
        last = [0] * (2 + 2 * workers)
        while not done.is_set():
            published, errors = loop.published, loop.handler_errors
            stats = loop.graph_stats()
            idle, outstanding = loop.idle_mask, loop.graphs_outstanding
            error = loop.last_handler_error
            # relaxed atomics: each read alone is consistent (a count never goes back), not
            # one with another (on a weakly ordered CPU they may be seen out of order)
            now = [published, errors, *(row[1] for row in stats), *(row[2] for row in stats)]
            if any(a < b for a, b in zip(now, last, strict=True)):
                seen.append(f"a count went back: {last} -> {now}")
            if outstanding > layout.num_slots or idle & ~((1 << workers) - 1):
                seen.append(f"outstanding {outstanding}, idle mask {idle:#x}")
            if any(row[4] > layout.num_slots for row in stats):
                seen.append(f"a queue longer than the ring: {stats}")
            if error is not None and not error.startswith("graph"):
                seen.append(f"last handler error {error!r}")
            last = now
            reads[0] += 1
            time.sleep(0)

    reader = threading.Thread(target=read, daemon=True)
    counts = {"refused": 0, "silent": 0}
    began = time.monotonic_ns()
    try:
        assert loop.start()
        reader.start()
        client = RingClient(ring, layout, release_gil=True, spin=16)
        rng = np.random.default_rng(7)
        pending: list[tuple[Any, int, bytes | None]] = []
        for i in range(total):
            payload = rng.integers(0, SILENT, size=1 + i % layout.max_payload, dtype=np.uint8)
            want: tuple[int, bytes | None] = (0, (payload + 1).tobytes())
            if i % 10 == 3:
                payload[0], want = REFUSED, (STATUS_GRAPH_LAUNCH_FAILED, None)
                counts["refused"] += 1
            elif i % 10 == 7:
                payload[0], want = SILENT, (STATUS_GRAPH_NOT_PUBLISHED, None)
                counts["silent"] += 1
            fid = 0x6E00 + int(rng.integers(workers))
            pending.append((client.submit(fid, payload.tobytes()), *want))
            while len(pending) >= window or (i == total - 1 and pending):
                ticket, status, result = pending.pop(0)
                response = client.wait(ticket, timeout=DEADLINE)
                assert response.status == status, (i, response)
                assert result is None or response.result == result, (i, response)
        end = time.monotonic() + DEADLINE
        while reads[0] <= 10 and time.monotonic() < end:  # a loaded machine: the reader's turn
            time.sleep(0.001)
        assert loop.stop(DEADLINE)
        elapsed = time.monotonic_ns() - began
    finally:
        done.set()
        reader.join(DEADLINE)
        loop.stop(DEADLINE)
        assert instant_gpu.gpu_join() == 0
    assert seen == []
    queries = [instant_gpu.queries(w + 1) for w in range(workers)]
    assert all(0 < q <= elapsed // _native.GRAPH_QUERY_NS + 1 for q in queries), (queries, elapsed)
    assert instant_gpu.copies_behind() > 0 and instant_gpu.hazards_seen() == 0
    assert reads[0] > 10, "the reader hardly ran while the loop served"
    stats = loop.graph_stats()
    assert sum(row[1] for row in stats) == total and all(row[1] > 0 for row in stats)
    assert sum(row[2] for row in stats) == counts["refused"]
    assert {row[3] for row in stats} == {999}  # each worker's last error: a refused launch
    assert [row[4:] for row in stats] == [(0, False)] * workers  # nothing queued, all idle
    assert (loop.published, loop.rejected) == (total, 0)
    assert loop.handler_errors == counts["refused"] + counts["silent"]
    assert (loop.idle_mask, loop.graphs_outstanding) == ((1 << workers) - 1, 0)


def test_the_serving_thread_stopped_and_started_under_a_clients_calls(
    native_handlers: Path,
) -> None:
    """A thread makes round trips (a native handler: the serving thread never takes the
    GIL) all along while the main thread stops and starts the serving thread 60 times, each
    way in turn: a stop that waits for the thread to go (then a new thread), and a stop that
    times out at once (then start() asks the same thread to serve on, or starts a new one
    if it went meanwhile). Every call is answered once, rightly; none is lost at a stop.
    Under ThreadSanitizer: the life of the thread (its state, the stop word, the request
    number handed from one thread to the next)."""
    from skbuild_cudaq.realtime import HostDispatcher, get_host_handler
    from skbuild_cudaq.realtime.errors import HostDispatcherError

    handler = get_host_handler(native_handlers, "rpc_increment")
    dispatcher = HostDispatcher(RingLayout(8, 64), {"rpc_increment": handler}).start()
    client = dispatcher.client()
    calls, wrong = [0], []
    going, finished = threading.Event(), threading.Event()

    def traffic() -> None:
        while not finished.is_set():
            i = calls[0]
            args = bytes([i % 256, (i >> 8) % 256])
            answer = client.call("rpc_increment", args, timeout=DEADLINE)
            if answer != (0, bytes((b + 1) % 256 for b in args)):
                wrong.append((i, answer))
            calls[0] += 1
            going.set()

    thread = threading.Thread(target=traffic)
    thread.start()
    try:
        assert going.wait(DEADLINE)
        cycle, end = 0, time.monotonic() + 6 * DEADLINE
        while cycle < 60 or calls[0] <= 60:  # on a loaded machine: more cycles, never fewer calls
            assert time.monotonic() < end, f"{calls[0]} calls in {cycle} cycles"
            cycle += 1
            if cycle % 2:
                dispatcher.stop(DEADLINE)  # gone: start() makes a new thread
            else:
                with contextlib.suppress(HostDispatcherError):
                    dispatcher.stop(0)  # "did not stop within 0 s": start() asks it to go on
            time.sleep(0.0005)
            dispatcher.start()
            time.sleep(0.001)
        finished.set()
        thread.join(DEADLINE)
        assert not thread.is_alive() and wrong == []
        assert calls[0] > 60
        dispatcher.stop(DEADLINE)
        assert dispatcher._loop.published == calls[0]
        assert client.in_flight == 0
    finally:
        finished.set()
        dispatcher.close(DEADLINE)


def test_the_udp_feeder_stopped_and_started_under_a_peers_calls(native_handlers: Path) -> None:
    """A peer makes calls over UDP (a native handler) all along while the main thread stops
    and starts the feeder 40 times: what arrives while it is stopped waits in the socket,
    what is in flight at a stop is answered after the next start. Every call is answered
    once; the feeder's counters add up. Under ThreadSanitizer: the feeder thread's life,
    its position handed back to the ring client at each stop and taken again at each
    start."""
    from skbuild_cudaq.realtime import HostDispatcher, get_host_handler
    from skbuild_cudaq.realtime.host.udp import UdpClient, UdpFeeder

    handler = get_host_handler(native_handlers, "echo")
    calls, wrong = [0], []
    going, finished = threading.Event(), threading.Event()
    with (
        HostDispatcher(RingLayout(8, 64), {"echo": handler}) as dispatcher,
        UdpFeeder(dispatcher.client()) as feeder,
        UdpClient(*feeder.address, timeout=DEADLINE) as peer,
    ):

        def traffic() -> None:
            while not finished.is_set():
                args = b"%d" % calls[0]
                answer = peer.call("echo", args)
                if answer != (0, args):
                    wrong.append((calls[0], answer))
                calls[0] += 1
                going.set()

        thread = threading.Thread(target=traffic)
        thread.start()
        try:
            assert going.wait(DEADLINE)
            cycle, end = 0, time.monotonic() + 6 * DEADLINE
            while cycle < 40 or calls[0] <= 40:  # loaded machine: more cycles, as many calls
                assert time.monotonic() < end, f"{calls[0]} calls in {cycle} cycles"
                cycle += 1
                feeder.stop(DEADLINE)
                time.sleep(0.0005)
                feeder.start()
                time.sleep(0.001)
        finally:
            finished.set()
            thread.join(DEADLINE)
        assert not thread.is_alive() and wrong == []
        assert calls[0] > 40
        counters = feeder.counters
        assert counters["received"] == counters["forwarded"] == counters["answered"] == calls[0]
        assert dispatcher.processed == calls[0]
