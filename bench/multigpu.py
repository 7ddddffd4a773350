"""Several GPUs: one dispatcher per GPU, each alone and all at once.

    python bench/multigpu.py [--devices all|N,M] [--out bench/results/dispatch_multigpu.json]

Each GPU gets its own dispatcher, ring and native client thread (``bench/loadgen.c``, pinned to
a CPU local to its GPU unless ``--no-pin``). Over ``--rounds`` rounds, every GPU alone, then all
at once (started together at a barrier): the single-thread dispatcher's p50/p99 (``echo``) and
the warp-parallel dispatcher's throughput (``echo_thread``) at 64 and 256 in flight per GPU
(aggregate: all requests over the wall time from the common start to the last finish). The
summary is the median over rounds. Goals: aggregate >= 0.95 x N x one GPU; each GPU's p50
while all serve <= 1.05 x alone.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as c  # bench/ is not a package

DEFAULT_OUT = c.RESULTS / "dispatch_multigpu.json"
median = np.median
IN_FLIGHT = (64, 256)


def measure(opts: argparse.Namespace, devices: list[int]) -> dict[str, Any]:
    from example_app import launchers
    from skbuild_cudaq.realtime.dispatcher import Dispatcher, DispatcherConfig
    from skbuild_cudaq.realtime.library import get_device_handler
    from skbuild_cudaq.realtime.wire import function_id

    core = importlib.import_module(opts.module)
    echo, echo_thread = function_id("echo"), function_id("echo_thread")
    doc = c.header("dispatch_multigpu", devices)
    buses = {d["ordinal"]: d["pci_bus_id"] for d in doc["devices"]}
    cpus = c.pick_cpus(buses) if opts.pin else {}
    for info in doc["devices"]:
        info["load_generator_cpu"] = cpus.get(info["ordinal"])

    def latency(gen: c.LoadGen, ring: int, go: Any) -> dict[str, float]:
        gen.rewind()
        gen.latency(ring, echo, opts.warmup)
        go()
        return c.percentiles(gen.latency(ring, echo, opts.samples))

    def throughput(gen: c.LoadGen, ring: int, go: Any) -> dict[str, Any]:
        gen.rewind()
        gen.throughput(ring, echo_thread, 10_000, 64)  # warm-up
        point: dict[str, Any] = {}
        for n in IN_FLIGHT:
            go()
            start = time.perf_counter()
            rate = gen.throughput(ring, echo_thread, opts.requests, n)
            point[str(n)] = {"mrps": rate, "start": start, "end": time.perf_counter()}
        return point

    def on_device(device: int, kind: str, what: Any, go: Any) -> Any:
        """On the device's own thread, pinned near the GPU (the ring is allocated there)."""
        cpu = cpus.get(device)
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})  # this thread only (Linux)
        config = DispatcherConfig(device=device, num_slots=c.NUM_SLOTS, slot_size=c.SLOT_SIZE)
        with Dispatcher(config, module=core) as d:
            for name in ("echo", "echo_thread"):
                d.function_table.add_device(name, get_device_handler(core, name, device=device))
            d.set_unified_launch(getattr(launchers, kind)(core, device=device))
            d.start()
            return what(gens[device], d.bridge.host_address, go)

    def on_threads(group: list[int], kind: str, what: Any) -> dict[int, Any]:
        found: dict[int, Any] = {}
        failures: list[BaseException] = []
        barrier = threading.Barrier(len(group), timeout=120)

        def work(device: int) -> None:
            try:
                go = barrier.wait if len(group) > 1 else (lambda: None)
                found[device] = on_device(device, kind, what, go)
            except BaseException as exc:  # reported below
                failures.append(exc)
                barrier.abort()

        threads = [threading.Thread(target=work, args=(d,)) for d in group]
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
        if failures:
            raise failures[0]
        return found

    def run(mode: str, kind: str, what: Any) -> dict[int, Any]:
        if mode == "together":
            return on_threads(devices, kind, what)
        return {k: v for d in devices for k, v in on_threads([d], kind, what).items()}

    keys = [str(d) for d in devices]
    lat: dict[str, Any] = {m: {k: [] for k in keys} for m in ("alone", "together")}
    thr: dict[str, Any] = {
        m: {k: {str(n): [] for n in IN_FLIGHT} for k in keys} for m in ("alone", "together")
    }
    thr["aggregate_together"] = {str(n): [] for n in IN_FLIGHT}
    errors: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="cudaq-bench-") as tmp:
        so = c.build_loadgen(Path(tmp))
        gens = {d: c.LoadGen(so) for d in devices}
        try:
            for round_ in range(opts.rounds):
                for mode in ("alone", "together"):
                    for device, p in run(mode, "single_thread", latency).items():
                        lat[mode][str(device)].append(p)
                    points = run(mode, "warp_parallel", throughput)
                    for device, point in points.items():
                        for n, v in point.items():
                            thr[mode][str(device)][n].append(v["mrps"])
                    for n in map(str, IN_FLIGHT) if mode == "together" else ():
                        start = min(p[n]["start"] for p in points.values())
                        end = max(p[n]["end"] for p in points.values())
                        total = opts.requests * len(points) / (end - start) / 1e6
                        thr["aggregate_together"][n].append(total)
                print(f"round {round_ + 1} of {opts.rounds} done", file=sys.stderr)
        except Exception as exc:  # keep what was measured; report it
            errors["multi_gpu"] = f"{type(exc).__name__}: {exc}"
            print(f"several-GPU run failed: {exc}", file=sys.stderr)

    summary: dict[str, Any] = {"single_thread_latency_us": {}, "warp_parallel_mrps": {}}
    goals: dict[str, Any] = {}
    for k in keys:
        if lat["alone"][k] and lat["together"][k]:
            row = {
                f"{mode}_{q}": median([p[q] for p in lat[mode][k]])
                for mode in ("alone", "together")
                for q in ("p50", "p99")
            }
            summary["single_thread_latency_us"][k] = row
            goals[f"single_thread_p50_gpu{k}_together_over_alone"] = c.goal(
                row["together_p50"] / row["alone_p50"], "<= 1.05"
            )
    for n in map(str, IN_FLIGHT):
        if not thr["aggregate_together"][n]:
            continue
        one = median([median(thr["alone"][k][n]) for k in keys])  # the median GPU alone
        aggregate = median(thr["aggregate_together"][n])
        summary["warp_parallel_mrps"][n] = {
            "one_gpu": one,
            "each_alone": {k: median(thr["alone"][k][n]) for k in keys},
            "each_together": {k: median(thr["together"][k][n]) for k in keys},
            "aggregate": aggregate,
            "scaling": aggregate / one,
        }
        goals[f"warp_parallel_aggregate_over_one_gpu_at_{n}"] = c.goal(
            aggregate / one, f">= {0.95 * len(keys):.2f}"
        )
    return {
        **doc,
        "config": {
            "num_slots": c.NUM_SLOTS,
            "slot_size": c.SLOT_SIZE,
            "arg_len": c.ARG_LEN,
            "samples": opts.samples,
            "warmup": opts.warmup,
            "requests_per_throughput_point": opts.requests,
            "in_flight": list(IN_FLIGHT),
            "rounds": opts.rounds,
        },
        "single_thread_latency_us": lat,
        "warp_parallel_throughput_mrps": thr,
        "summary": summary,
        "goals": goals,
        "errors": errors,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--devices", default="all", metavar="all|N,M")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-pin", dest="pin", action="store_false", help="leave clients free")
    parser.add_argument("--module", default="example_app._core")
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--warmup", type=int, default=2_000)
    parser.add_argument("--requests", type=int, default=200_000, help="per throughput point")
    opts = parser.parse_args(argv)
    from skbuild_cudaq.realtime._driver import device_count

    count = device_count()
    if opts.devices == "all":
        devices = list(range(count))
    else:
        devices = [int(d) for d in opts.devices.split(",")]
    if len(devices) < 2 or len(set(devices)) != len(devices) or max(devices) >= count:
        parser.error(f"--devices {opts.devices}: need 2 or more distinct GPUs of the {count} seen")
    results = measure(opts, devices)
    c.write_json(opts.out, results)
    return 0 if not results["errors"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
