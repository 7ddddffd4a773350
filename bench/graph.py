"""Graph handlers against their floors: what a graph handler's round trip costs over launching
the same graph bare, from the GPU (the device path) and from the host (the host path), on one
GPU (sm_90+).

    python bench/graph.py [--out bench/results/graph.json] [--rounds 15] [--repeats 4000]

Needs example_app, nvcc, a C++ compiler and the ``nvidia-cuda-runtime`` wheel (libcudadevrt).
Every row is timed alike: ``RingClient.call`` on a ring of 8 slots of 64 bytes, one request at
a time, 8-byte arguments, each answered with each byte plus one and checked; per round, ``--warmup``
calls then ``--repeats`` timed ones, every row once a round (a drift over the run moves a row
and its floor together). The graphs are the same in a row and its floor: ``one_kernel``,
``bench/graph.cu``'s ``bench_graph_increment`` (one thread); ``two_kernels``, example_app's
``graph_increment`` (4 x 128 threads stage the bytes into scratch memory, 1 x 128 copy them into
the response and publish it).

- ``floor_*``: ``bench/graph.cu``'s ``floor_graph_dispatch``, a bare persistent kernel in a
  device graph that copies each request after an I/O context and launches the graph from the
  GPU; no dispatcher;
- ``graph_*``: the same graphs as GRAPH_LAUNCH entries of a ``Dispatcher`` (the built-in
  graph dispatch kernel);
- ``host_floor_*``: ``bench/graph.cu``'s ``floor_host_serve``, a thread that copies each
  request's context (``cuMemcpyHtoDAsync``) and launches the graph (``cuGraphLaunch``) on one
  stream;
- ``host_graph_*``: the same graphs served by a ``HostDispatcher`` (its graph workers);
- ``device_function``: ``rpc_increment`` through the graph dispatch kernel;
  ``device_function_builtin``: the same through the default built-in kernel.

graph.json: the header (card, driver, versions), ``settings``, ``cases`` (each row's
percentiles over every round's samples, µs, and its ``round_p50``), ``goals`` (each
``{value, goal, met}``: a row's p50 over its floor's, the median of the rounds' ratios; the
worst p99 over p50 of the graph rows, its floor's own as ``floor_value``), ``phases`` (after
the rounds, unless ``--no-phases``: ``skbuild-cudaq phases --json`` on ``graph_increment``,
where the device path's time goes).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from ctypes import byref
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as c  # bench/ is not a package

EXAMPLE_GRAPHS = c.BENCH.parent / "example_app" / "src" / "graph_handlers.cu"
PAYLOAD = bytes(range(8))
WANT = bytes((b + 1) & 0xFF for b in PAYLOAD)
NUM_SLOTS, SLOT_SIZE = 8, 64
SHAPES = ("one_kernel", "two_kernels")
#: Each goal: its row, the row's floor, the bound.
GOALS = {
    "graph_one_kernel_p50_over_floor": ("graph_one_kernel", "floor_one_kernel", "<= 1.15"),
    "graph_two_kernels_p50_over_floor": ("graph_two_kernels", "floor_two_kernels", "<= 1.15"),
    "graph_host_p50_over_floor": ("host_graph_two_kernels", "host_floor_two_kernels", "<= 1.2"),
    "graph_host_one_kernel_p50_over_floor": (
        "host_graph_one_kernel", "host_floor_one_kernel", "<= 1.2",
    ),
}  # fmt: skip
P99_ROWS = tuple(f"{p}graph_{s}" for p in ("", "host_") for s in SHAPES)


def measure(client: Any, name: str, args: argparse.Namespace) -> np.ndarray:
    """``args.warmup`` calls of ``name``, then ``args.repeats`` timed ones (us), each answer
    checked (each byte plus one)."""
    c.timed_calls(client.call, PAYLOAD, args.warmup, name=name, expected=WANT)
    return c.timed_calls(client.call, PAYLOAD, args.repeats, name=name, expected=WANT)


# -- building ---------------------------------------------------------------------------------
def build(arch: str, work: Path) -> tuple[Any, ctypes.CDLL]:
    """``bench/graph.cu`` -> LTO-IR (nvcc) -> cubin with libcudadevrt (nvJitLink) -> loaded;
    its host floor -> a shared library (c++)."""
    from skbuild_cudaq import include_dir
    from skbuild_cudaq.build._toolchain import find_nvcc
    from skbuild_cudaq.fatbin import read_fatbin_file
    from skbuild_cudaq.realtime.library import Library
    from skbuild_cudaq.realtime.link._nvjitlink import link_blobs
    from skbuild_cudaq.realtime.link.device_runtime import find_device_runtime

    sm = arch.removeprefix("sm_")
    fatbin = work / "graph.fatbin"
    subprocess.run(
        [str(find_nvcc()), "-fatbin", "-rdc=true", "-std=c++17", f"-I{include_dir()}",
         f"-gencode=arch=compute_{sm},code=lto_{sm}",
         "-o", str(fatbin), str(c.BENCH / "graph.cu")],
        check=True,
    )  # fmt: skip
    inputs = [(f"graph.cu:{i}", box.data) for i, box in enumerate(read_fatbin_file(fatbin))]
    devrt = find_device_runtime()
    libraries = [(devrt.name, devrt.read_bytes())]
    cubin = link_blobs(inputs, [f"-arch={arch}", "-lto"], "bench/graph.cu", libraries)
    so = work / "graph_host_floor.so"
    source = str(c.BENCH / "graph.cu")
    flags = ["-O2", "-shared", "-fPIC", "-x", "c++", "-DGRAPH_HOST_FLOOR"]
    subprocess.run(["c++", *flags, "-o", str(so), source], check=True)
    host = ctypes.CDLL(str(so))
    host.floor_host_serve.restype = ctypes.c_int
    host.floor_host_serve.argtypes = [ctypes.c_void_p]
    return Library.from_cubin(cubin), host


@contextmanager
def graphs(library: Any) -> Iterator[dict[str, tuple[Any, Any]]]:
    """The two graphs (instantiated for device launch) and their mailboxes, by shape."""
    import example_app._core as core
    from example_app.graphs import graph_increment

    from skbuild_cudaq.realtime.graph import GraphMailbox, capture_device_graph
    from skbuild_cudaq.realtime.launch import LaunchConfig, launch_kernel

    one = library.get_kernel("bench_graph_increment")
    with graph_increment(core) as two, GraphMailbox() as box:
        arg = ctypes.c_void_p(box.device_address)
        single = capture_device_graph(lambda s: launch_kernel(one, LaunchConfig(1, 1), s, arg))
        try:
            yield {"one_kernel": (single, box), "two_kernels": (two.graph, two.mailbox)}
        finally:
            single.close()


@contextmanager
def record_for(mailbox: Any, graph: Any) -> Iterator[int]:
    """A graph's record in device memory (an I/O context, then room for a request), its
    mailbox pointed at it meanwhile."""
    from skbuild_cudaq.realtime import _driver
    from skbuild_cudaq.realtime.graph import GRAPH_IO_SIZE, GraphIO

    drv, check = _driver.driver(), _driver.check
    record = _driver.ptr(check(drv.cuMemAlloc(GRAPH_IO_SIZE + SLOT_SIZE), "cuMemAlloc"))
    initial = GraphIO.initial(graph.handle, SLOT_SIZE)
    check(drv.cuMemcpyHtoD(record, initial, len(initial)), "cuMemcpyHtoD")
    mailbox.value = record
    try:
        yield record
    finally:
        mailbox.value = 0
        check(drv.cuMemFree(record), "cuMemFree")


# -- the device path --------------------------------------------------------------------------
def device_floor(library: Any, graph: Any, mailbox: Any, args: argparse.Namespace) -> np.ndarray:
    """``floor_graph_dispatch`` in a device-launchable graph on a ring of its own, launching
    ``graph`` for each request; stopped by its shutdown flag."""
    from skbuild_cudaq.realtime import _driver
    from skbuild_cudaq.realtime.bridge import HostRingBridge
    from skbuild_cudaq.realtime.graph import capture_stream_graph, instantiate_for_device_launch
    from skbuild_cudaq.realtime.launch import LaunchConfig, launch_kernel

    drv, check = _driver.driver(), _driver.check
    dispatch = library.get_kernel("floor_graph_dispatch")
    bridge = HostRingBridge(NUM_SLOTS, SLOT_SIZE).open()

    class Ring(ctypes.Structure):  # graph.cu's FloorRing
        _fields_ = [(n, ctypes.c_void_p) for n in ("rx", "tx", "rx_flags", "tx_flags")] + [
            ("num_slots", ctypes.c_uint32), ("slot_size", ctypes.c_uint32)
        ]  # fmt: skip

    ring = Ring(*c.ring_pointers(bridge))
    state = _driver.ptr(check(drv.cuMemAlloc(8), "cuMemAlloc"))  # graph.cu's FloorState
    check(drv.cuMemcpyHtoD(state, bytes((ctypes.c_uint32 * 2)(0, 1)), 8), "cuMemcpyHtoD")
    flag_host = _driver.ptr(check(drv.cuMemHostAlloc(16, 3), "cuMemHostAlloc"))  # mapped
    ctypes.memset(flag_host, 0, 16)
    flag_dev = _driver.ptr(check(drv.cuMemHostGetDevicePointer(flag_host, 0), "device pointer"))
    stream = check(drv.cuStreamCreate(1), "cuStreamCreate")  # 1: non-blocking
    vp = ctypes.c_void_p
    try:
        with record_for(mailbox, graph) as record:
            params = (ring, vp(state), vp(record), vp(flag_dev))
            one = LaunchConfig(grid=1, block=1)
            floor = capture_stream_graph(lambda s: launch_kernel(dispatch, one, s, *params), stream)
            exec_ = instantiate_for_device_launch(floor, stream)
            check(drv.cuGraphLaunch(exec_, stream), "cuGraphLaunch")
            try:
                return measure(bridge.client(), "floor", args)
            finally:
                ctypes.c_int32.from_address(flag_host).value = 1
                check(drv.cuStreamSynchronize(stream), "cuStreamSynchronize(floor)")
                check(drv.cuGraphExecDestroy(exec_), "cuGraphExecDestroy")
                check(drv.cuGraphDestroy(floor), "cuGraphDestroy")
    finally:
        for call, handle in (("cuStreamDestroy", stream), ("cuMemFree", state),
                             ("cuMemFreeHost", flag_host)):  # fmt: skip
            check(getattr(drv, call)(handle), call)
        bridge.close()


def device_rows(found: dict[str, tuple[Any, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """One dispatcher serving both graphs and the device function (the graph dispatch
    kernel), then one serving the device function alone (the built-in kernel)."""
    import example_app._core as core

    from skbuild_cudaq.realtime.dispatcher import Dispatcher, DispatcherConfig
    from skbuild_cudaq.realtime.library import get_device_handler

    rows = {}
    config = DispatcherConfig(num_slots=NUM_SLOTS, slot_size=SLOT_SIZE)
    increment = get_device_handler(core, "rpc_increment")
    with Dispatcher(config, module=core) as d:
        d.function_table.add_device("rpc_increment", increment)
        for shape, (graph, mailbox) in found.items():
            d.function_table.add_graph(shape, graph, mailbox)
        d.start()
        client = d.bridge.client()
        for shape in found:
            rows[f"graph_{shape}"] = measure(client, shape, args)
        rows["device_function"] = measure(client, "rpc_increment", args)
        d.stop()
    with Dispatcher(config, module=core) as d:
        d.function_table.add_device("rpc_increment", increment)
        d.start()
        rows["device_function_builtin"] = measure(d.bridge.client(), "rpc_increment", args)
    return rows


# -- the host path ----------------------------------------------------------------------------
class FloorHost(ctypes.Structure):  # graph.cu's floor_host_t
    _fields_ = [
        *((n, ctypes.c_void_p) for n in ("ctx_set", "graph_launch", "memcpy_htod_async")),
        *((n, ctypes.c_void_p) for n in ("context", "stream", "exec", "rx", "rx_flags")),
        ("tx", ctypes.c_uint64), ("tx_flags", ctypes.c_uint64),
        ("num_slots", ctypes.c_uint32), ("slot_size", ctypes.c_uint32),
        ("record", ctypes.c_uint64), ("images", ctypes.c_void_p), ("shutdown", ctypes.c_void_p),
    ]  # fmt: skip


def host_floor(host: ctypes.CDLL, graph: Any, mailbox: Any, args: argparse.Namespace) -> Any:
    """``floor_host_serve`` on a thread of its own over a host ring bridge's ring, launching
    ``graph`` for each request; stopped by its shutdown word."""
    from skbuild_cudaq.realtime import _driver
    from skbuild_cudaq.realtime.bridge import HostRingBridge
    from skbuild_cudaq.realtime.host.graphs import DRIVER_ENTRY_POINTS, PinnedMemory, _entry_points
    from skbuild_cudaq.realtime.ring.client import RingClient

    drv, check = _driver.driver(), _driver.check
    points = dict(zip(DRIVER_ENTRY_POINTS, _entry_points(drv), strict=True))
    context = _driver.primary_context(0)
    bridge = HostRingBridge(NUM_SLOTS, SLOT_SIZE).open()
    lay = bridge.layout
    images = PinnedMemory(NUM_SLOTS * (64 + SLOT_SIZE) + 64, context, "floor images")
    shutdown = images.host + NUM_SLOTS * (64 + SLOT_SIZE)
    stream = check(drv.cuStreamCreate(1), "cuStreamCreate")
    _, tx, _, tx_flags, *_ = c.ring_pointers(bridge)
    base = bridge.host_address
    try:
        with record_for(mailbox, graph) as record:
            f = FloorHost(
                points["cuCtxSetCurrent"], points["cuGraphLaunch"], points["cuMemcpyHtoDAsync"],
                int(context), int(stream), graph.handle,
                base + lay.rx_slots_offset, base + lay.rx_flags_offset,
                tx, tx_flags, NUM_SLOTS, SLOT_SIZE, record, images.host, shutdown,
            )  # fmt: skip
            rc: list[int] = []
            thread = threading.Thread(target=lambda: rc.append(host.floor_host_serve(byref(f))))
            thread.start()
            try:
                client = RingClient(bridge.buffer, lay, spin=16, release_gil=True)
                return measure(client, "floor", args)
            finally:
                ctypes.c_int32.from_address(shutdown).value = 1
                thread.join()
                check(drv.cuStreamSynchronize(stream), "cuStreamSynchronize(host floor)")
                if rc != [0]:
                    raise SystemExit(f"the host floor stopped on CUDA error {rc}")
    finally:
        check(drv.cuStreamDestroy(stream), "cuStreamDestroy")
        images.close()
        bridge.close()


def host_rows(found: dict[str, tuple[Any, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """One host dispatcher serving both graphs (a graph worker each)."""
    from skbuild_cudaq.realtime.dispatcher import FunctionTable
    from skbuild_cudaq.realtime.host.dispatcher import HostDispatcher
    from skbuild_cudaq.realtime.ring import RingLayout

    table = FunctionTable()
    for shape, (graph, mailbox) in found.items():
        table.add_graph(shape, graph, mailbox)
    with HostDispatcher(RingLayout(NUM_SLOTS, SLOT_SIZE), table) as d:
        client = d.client()
        return {f"host_graph_{shape}": measure(client, shape, args) for shape in found}


# -- the run ----------------------------------------------------------------------------------
def one_round(
    library: Any, host: ctypes.CDLL, found: dict[str, tuple[Any, Any]], args: argparse.Namespace
) -> dict[str, np.ndarray]:
    rows: dict[str, np.ndarray] = {}
    for shape, (graph, mailbox) in found.items():
        rows[f"floor_{shape}"] = device_floor(library, graph, mailbox, args)
        rows[f"host_floor_{shape}"] = host_floor(host, graph, mailbox, args)
    return rows | device_rows(found, args) | host_rows(found, args)


def phases() -> dict[str, Any]:
    """``skbuild-cudaq phases --json`` on example_app's ``graph_increment`` (run outside the
    source tree: the package as installed), this benchmark's payload."""
    with tempfile.TemporaryDirectory(prefix="cudaq-bench-phases-") as tmp:
        run = [sys.executable, "-m", "skbuild_cudaq", "phases", str(EXAMPLE_GRAPHS), "--graph"]
        run += ["graph_increment", "--payload", str(len(PAYLOAD)), "--json", f"{tmp}/p.json"]
        subprocess.run(run, check=True, cwd=tmp)
        return dict(json.loads(Path(tmp, "p.json").read_text(encoding="utf-8")))


def summarise(rounds: list[dict[str, np.ndarray]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each row's percentiles over all its samples and its p50 per round; the goals."""
    cases: dict[str, Any] = {}
    rows = list(rounds[0])
    for row in rows:
        pooled = np.concatenate([r[row] for r in rounds])
        cases[row] = c.percentiles(pooled) | {
            "round_p50": [float(np.percentile(r[row], 50)) for r in rounds]
        }
    goals: dict[str, Any] = {}
    for name, (row, floor, bound) in GOALS.items():
        paired = c.paired_ratio(cases[row]["round_p50"], cases[floor]["round_p50"])
        goals[name] = c.goal(paired["ratio"], bound, row=row, floor=floor, rounds=paired["ratios"])
    tails = {row: cases[row]["p99"] / cases[row]["p50"] for row in rows}
    floor_of = {row: floor for row, floor, _ in GOALS.values()}  # the same graph launched bare
    worst = max(P99_ROWS, key=tails.__getitem__)
    goals["graph_p99_over_p50"] = c.goal(
        tails[worst], "<= 2.0", row=worst, rows={r: tails[r] for r in P99_ROWS},
        floor_value=tails[floor_of[worst]],
        floor_rows={floor_of[r]: tails[floor_of[r]] for r in P99_ROWS},
    )  # fmt: skip
    return cases, goals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=c.RESULTS / "graph.json")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=4000)
    parser.add_argument("--no-phases", action="store_true", help="no phase breakdown")
    args = parser.parse_args(argv)
    from skbuild_cudaq.realtime import _driver

    _driver.ensure_context()  # device 0's primary context, current
    arch = _driver.current_arch()
    doc = c.header("graph", [0], extra=("nvidia-cuda-runtime",))
    with tempfile.TemporaryDirectory(prefix="cudaq-bench-") as tmp:
        library, host = build(arch, Path(tmp))
        with graphs(library) as found:
            rounds = []
            for i in range(args.rounds):
                rounds.append(one_round(library, host, found, args))
                print(f"round {i + 1}/{args.rounds} done", file=sys.stderr)
    cases, goals = summarise(rounds)
    extra = {} if args.no_phases else {"phases": phases()}
    settings = {"arch": arch, "ring": [NUM_SLOTS, SLOT_SIZE], "payload_bytes": len(PAYLOAD)}
    settings |= {"rounds": args.rounds, "warmup": args.warmup, "repeats": args.repeats}
    c.write_json(args.out, {**doc, "settings": settings, "cases": cases, "goals": goals, **extra})
    for case, p in cases.items():
        print(f"{case:26s} p50 {p['p50']:7.2f} us  p99 {p['p99']:7.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
