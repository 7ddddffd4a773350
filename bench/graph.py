"""Graph handlers: a graph handler's round trip against a device-function handler and a bare
graph launch, on one GPU (sm_90+).

    python bench/graph.py [--out bench/results/graph.json] [--repeats 20000]

Needs example_app, nvcc and the ``nvidia-cuda-runtime`` wheel (libcudadevrt). Every case is
timed alike (graph.json: each case's ``percentiles``, us): ``RingClient.call`` on a ring of 8
slots of 64 bytes, one request at a time, 8-byte arguments, ``--repeats`` timed calls after
``--warmup``:

- ``floor``: ``bench/graph.cu``'s bare floor: a persistent kernel (in a device graph)
  launching a one-kernel graph per request that answers it; no dispatcher;
- ``graph_handler``: example_app's ``graph_increment`` (two kernels) through the
  built-in graph dispatch kernel; ``graph_handler_one_kernel``: ``bench/graph.cu``'s
  one-kernel handler, the same way;
- ``device_function``: ``rpc_increment`` through the same dispatcher (graph kernel);
  ``device_function_builtin``: the same through the default built-in kernel.
"""

from __future__ import annotations

import argparse
import ctypes
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as c  # bench/ is not a package

PAYLOAD = bytes(range(8))
NUM_SLOTS, SLOT_SIZE = 8, 64


def measure(client: Any, name: str, args: argparse.Namespace) -> dict[str, float]:
    """``args.warmup`` calls of ``name``, then the percentiles of ``args.repeats`` timed ones
    (us). The floor echoes; the handlers answer each byte plus one."""
    want = PAYLOAD if name == "floor" else bytes((b + 1) & 0xFF for b in PAYLOAD)
    c.timed_calls(client.call, PAYLOAD, args.warmup, name=name, expected=want)
    samples = c.timed_calls(client.call, PAYLOAD, args.repeats, name=name, expected=want)
    return c.percentiles(samples)


def build_floor(arch: str, work: Path) -> Any:
    """``bench/graph.cu`` -> LTO-IR (nvcc) -> cubin with libcudadevrt (nvJitLink) -> loaded."""
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
    return Library.from_cubin(cubin)


def run_floor(library: Any, args: argparse.Namespace) -> dict[str, float]:
    """``floor_dispatch`` in a device-launchable graph on a ring of its own, launching the
    one-kernel graph of ``floor_answer`` for each request; stopped by its shutdown flag."""
    from skbuild_cudaq.realtime import _driver
    from skbuild_cudaq.realtime.bridge import HostRingBridge
    from skbuild_cudaq.realtime.graph import (
        capture_device_graph,
        capture_stream_graph,
        instantiate_for_device_launch,
    )
    from skbuild_cudaq.realtime.launch import LaunchConfig, launch_kernel

    drv, check = _driver.driver(), _driver.check
    dispatch, answer = library.get_kernel("floor_dispatch"), library.get_kernel("floor_answer")
    bridge = HostRingBridge(NUM_SLOTS, SLOT_SIZE).open()

    class Ring(ctypes.Structure):  # graph.cu's FloorRing
        _fields_ = [(n, ctypes.c_void_p) for n in ("rx", "tx", "rx_flags", "tx_flags")] + [
            ("num_slots", ctypes.c_uint32), ("slot_size", ctypes.c_uint32)
        ]  # fmt: skip

    ring = Ring(*c.ring_pointers(bridge))
    state = _driver.ptr(check(drv.cuMemAlloc(16), "cuMemAlloc"))  # graph.cu's FloorState
    start = bytes((ctypes.c_uint32 * 4)(0, 1, 0, 0))  # slot 0, sequence 1
    check(drv.cuMemcpyHtoD(state, start, 16), "cuMemcpyHtoD")
    flag_host = _driver.ptr(check(drv.cuMemHostAlloc(16, 3), "cuMemHostAlloc"))  # mapped
    ctypes.memset(flag_host, 0, 16)
    flag_dev = _driver.ptr(check(drv.cuMemHostGetDevicePointer(flag_host, 0), "device pointer"))
    one, vp = LaunchConfig(grid=1, block=1), ctypes.c_void_p
    child = capture_device_graph(lambda s: launch_kernel(answer, one, s, ring, vp(state)))
    stream = check(drv.cuStreamCreate(1), "cuStreamCreate")  # 1: non-blocking
    side = check(drv.cuStreamCreate(1), "cuStreamCreate")
    params = (ring, vp(state), vp(flag_dev), ctypes.c_uint64(child.handle))
    graph = capture_stream_graph(lambda s: launch_kernel(dispatch, one, s, *params), side)
    exec_ = instantiate_for_device_launch(graph, side)
    check(drv.cuGraphLaunch(exec_, stream), "cuGraphLaunch")
    try:
        return measure(bridge.client(), "floor", args)
    finally:
        ctypes.c_int32.from_address(flag_host).value = 1
        check(drv.cuStreamSynchronize(stream), "cuStreamSynchronize(floor)")
        for call, handle in (("cuGraphExecDestroy", exec_), ("cuGraphDestroy", graph),
                             ("cuStreamDestroy", stream), ("cuStreamDestroy", side),
                             ("cuMemFree", state), ("cuMemFreeHost", flag_host)):  # fmt: skip
            check(getattr(drv, call)(handle), call)
        child.close()
        bridge.close()


def run_dispatchers(library: Any, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """One dispatcher serving both graph handlers and the device function (the graph
    dispatch kernel), then one serving the device function alone (the built-in kernel)."""
    import example_app._core as core

    from example_app import graphs
    from skbuild_cudaq.realtime.dispatcher import Dispatcher, DispatcherConfig
    from skbuild_cudaq.realtime.graph import GraphMailbox, capture_device_graph
    from skbuild_cudaq.realtime.launch import LaunchConfig, launch_kernel
    from skbuild_cudaq.realtime.library import get_device_handler

    found = {}
    config = DispatcherConfig(num_slots=NUM_SLOTS, slot_size=SLOT_SIZE)
    one = library.get_kernel("bench_graph_increment")
    with graphs.graph_increment(core) as handler, GraphMailbox() as box:
        arg = ctypes.c_void_p(box.device_address)
        single = capture_device_graph(lambda s: launch_kernel(one, LaunchConfig(1, 1), s, arg))
        with Dispatcher(config, module=core) as d:
            table = d.function_table
            table.add_device("rpc_increment", get_device_handler(core, "rpc_increment"))
            table.add_graph("graph_increment", handler.graph, handler.mailbox)
            table.add_graph("graph_one_kernel", single, box)
            d.start()
            client = d.bridge.client()
            cases = ("graph_handler", "graph_handler_one_kernel", "device_function")
            names = ("graph_increment", "graph_one_kernel", "rpc_increment")
            for case, name in zip(cases, names, strict=True):
                found[case] = measure(client, name, args)
            d.stop()
        single.close()
    with Dispatcher(config, module=core) as d:
        d.function_table.add_device("rpc_increment", get_device_handler(core, "rpc_increment"))
        d.start()
        found["device_function_builtin"] = measure(d.bridge.client(), "rpc_increment", args)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=c.RESULTS / "graph.json")
    parser.add_argument("--warmup", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=20000)
    args = parser.parse_args(argv)
    from skbuild_cudaq.realtime import _driver

    _driver.ensure_context()  # device 0's primary context, current
    arch = _driver.current_arch()
    doc = c.header("graph", [0], extra=("nvidia-cuda-runtime",))
    with tempfile.TemporaryDirectory(prefix="cudaq-bench-") as tmp:
        library = build_floor(arch, Path(tmp))
    cases = {"floor": run_floor(library, args), **run_dispatchers(library, args)}
    settings = {"arch": arch, "ring": [NUM_SLOTS, SLOT_SIZE], "payload_bytes": len(PAYLOAD)}
    settings |= {"warmup": args.warmup, "repeats": args.repeats}
    c.write_json(args.out, {**doc, "settings": settings, "cases": cases})
    for case, p in cases.items():
        print(f"{case:26s} p50 {p['p50']:7.2f} us  p99 {p['p99']:7.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
