"""Graph handlers: the round trip of a graph handler against a device-function handler
and a bare graph-launch floor, on one GPU (sm_90+): ``python bench/graph.py [--out
bench/results/graph.json] [--repeats 20000]``. Needs example_app, nvcc and the
``nvidia-cuda-runtime`` wheel (libcudadevrt). Every case is timed alike: the Python
``RingClient.call`` (compiled where built), one request at a time, 8-byte arguments,
``--warmup`` calls, then ``--repeats`` calls timed with ``perf_counter_ns``; median
and p99 in microseconds. Cases:

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
import datetime
import json
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PAYLOAD = bytes(range(8))


def timed_calls(client: Any, name: str, warmup: int, repeats: int) -> dict[str, float]:
    expected = bytes((b + 1) & 0xFF for b in PAYLOAD) if name != "floor" else PAYLOAD
    call = client.call
    fid = "floor" if name == "floor" else name
    for _ in range(warmup):
        assert call(fid, PAYLOAD, timeout=10) == (0, expected)
    samples = []
    clock = time.perf_counter_ns
    for _ in range(repeats):
        t0 = clock()
        status, result = call(fid, PAYLOAD, timeout=10)
        samples.append(clock() - t0)
        if status != 0 or result != expected:
            raise SystemExit(f"{name}: wrong answer ({status}, {result!r})")
    samples.sort()
    return {
        "median_us": samples[len(samples) // 2] / 1e3,
        "p99_us": samples[int(len(samples) * 0.99)] / 1e3,
        "n": len(samples),
    }


def build_floor(arch: str) -> Any:
    """``bench/graph.cu`` -> LTO-IR (nvcc) -> cubin with libcudadevrt (nvJitLink) -> loaded."""
    from skbuild_cudaq._paths import include_dir
    from skbuild_cudaq.fatbin import read_fatbin_file
    from skbuild_cudaq.realtime._nvjitlink import link_blobs
    from skbuild_cudaq.realtime.graph import find_device_runtime
    from skbuild_cudaq.realtime.library import Library

    number = arch[3:]
    with tempfile.TemporaryDirectory() as tmp:
        fatbin = Path(tmp) / "graph.fatbin"
        subprocess.run(
            ["nvcc", "-fatbin", "-rdc=true", "-std=c++17", f"-I{include_dir()}",
             f"-gencode=arch=compute_{number},code=lto_{number}",
             "-o", str(fatbin), str(HERE / "graph.cu")],
            check=True,
        )  # fmt: skip
        inputs = [(f"graph.cu:{i}", c.data) for i, c in enumerate(read_fatbin_file(fatbin))]
    devrt = find_device_runtime()
    cubin = link_blobs(inputs, [f"-arch={arch}", "-lto"], "bench/graph.cu", [
        (devrt.name, devrt.read_bytes())
    ])  # fmt: skip
    return Library.from_cubin(cubin)


def run_floor(args: argparse.Namespace, library: Any) -> dict[str, float]:
    from skbuild_cudaq.realtime import HostRingBridge, LaunchConfig, _driver, launch_kernel
    from skbuild_cudaq.realtime.graph import (
        capture_device_graph,
        capture_stream_graph,
        instantiate_for_device_launch,
    )

    drv = _driver.driver()
    dispatch, answer = library.get_kernel("floor_dispatch"), library.get_kernel("floor_answer")
    bridge = HostRingBridge(8, 64).open()
    lay = bridge.layout
    base = bridge.device_ring

    class Ring(ctypes.Structure):
        _fields_ = [(n, ctypes.c_void_p) for n in ("rx", "tx", "rx_flags", "tx_flags")] + [
            ("num_slots", ctypes.c_uint32), ("slot_size", ctypes.c_uint32)
        ]  # fmt: skip

    ring = Ring(base + lay.rx_slots_offset, base + lay.tx_slots_offset,
                base + lay.rx_flags_offset, base + lay.tx_flags_offset,
                lay.num_slots, lay.slot_size)  # fmt: skip
    state = _driver.ptr(_driver.check(drv.cuMemAlloc(16), "cuMemAlloc"))
    start = bytes((ctypes.c_uint32 * 4)(0, 1, 0, 0))  # slot 0, sequence 1
    _driver.check(drv.cuMemcpyHtoD(state, start, 16), "cuMemcpyHtoD")
    flag_host = _driver.ptr(_driver.check(drv.cuMemHostAlloc(16, 3), "cuMemHostAlloc"))
    ctypes.memset(flag_host, 0, 16)
    flag_dev = _driver.ptr(_driver.check(drv.cuMemHostGetDevicePointer(flag_host, 0), "ptr"))
    one = LaunchConfig(grid=1, block=1)
    child = capture_device_graph(
        lambda s: launch_kernel(answer, one, s, ring, ctypes.c_void_p(state))
    )
    stream = _driver.check(drv.cuStreamCreate(1), "cuStreamCreate")
    side = _driver.check(drv.cuStreamCreate(1), "cuStreamCreate")
    args_ = (ring, ctypes.c_void_p(state), ctypes.c_void_p(flag_dev), ctypes.c_uint64(child.handle))
    graph = capture_stream_graph(lambda s: launch_kernel(dispatch, one, s, *args_), side)
    exec_ = instantiate_for_device_launch(graph, side)
    _driver.check(drv.cuGraphLaunch(exec_, stream), "cuGraphLaunch")
    try:
        return timed_calls(bridge.client(), "floor", args.warmup, args.repeats)
    finally:
        ctypes.c_int32.from_address(flag_host).value = 1
        _driver.check(drv.cuStreamSynchronize(stream), "cuStreamSynchronize(floor)")
        for call, handle in (("cuGraphExecDestroy", exec_), ("cuGraphDestroy", graph),
                             ("cuStreamDestroy", stream), ("cuStreamDestroy", side),
                             ("cuMemFree", state), ("cuMemFreeHost", flag_host)):  # fmt: skip
            _driver.check(getattr(drv, call)(handle), call)
        child.close()
        bridge.close()


def run_dispatchers(args: argparse.Namespace, library: Any) -> dict[str, dict[str, float]]:
    import example_app._core as core

    from example_app import graphs
    from skbuild_cudaq.realtime import (
        Dispatcher,
        DispatcherConfig,
        GraphMailbox,
        LaunchConfig,
        capture_device_graph,
        get_device_handler,
        launch_kernel,
    )

    found = {}
    config = DispatcherConfig(num_slots=8, slot_size=64)
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
            for case, name in (
                ("graph_handler", "graph_increment"),
                ("graph_handler_one_kernel", "graph_one_kernel"),
                ("device_function", "rpc_increment"),
            ):
                found[case] = timed_calls(client, name, args.warmup, args.repeats)
            d.stop()
        single.close()
    with Dispatcher(config, module=core) as d:
        d.function_table.add_device("rpc_increment", get_device_handler(core, "rpc_increment"))
        d.start()
        found["device_function_builtin"] = timed_calls(
            d.bridge.client(), "rpc_increment", args.warmup, args.repeats
        )
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "results" / "graph.json")
    parser.add_argument("--warmup", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=20000)
    args = parser.parse_args(argv)
    from skbuild_cudaq.realtime import _driver

    _driver.ensure_context()
    drv = _driver.driver()
    arch = _driver.current_arch()
    library = build_floor(arch)
    cases = {"floor": run_floor(args, library), **run_dispatchers(args, library)}
    dev = _driver.check(drv.cuCtxGetDevice(), "cuCtxGetDevice")
    name = _driver.check(drv.cuDeviceGetName(256, dev), "cuDeviceGetName")
    versions = {}
    for dist in ("skbuild-cudaq", "cuda-bindings", "nvidia-nvjitlink", "nvidia-cuda-runtime"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    result = {
        "device": bytes(name).split(b"\0", 1)[0].decode(),
        "arch": arch,
        "driver": _driver.check(drv.cuDriverGetVersion(), "cuDriverGetVersion"),
        "versions": versions,
        "python": sys.version.split()[0],
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "payload_bytes": len(PAYLOAD),
        "warmup": args.warmup,
        "repeats": args.repeats,
        "client": "RingClient.call, one request at a time",
        "cases": cases,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for case, figures in cases.items():
        print(f"{case:26s} median {figures['median_us']:7.2f} us  p99 {figures['p99_us']:7.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
