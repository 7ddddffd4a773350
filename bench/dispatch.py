"""Dispatch latency and throughput: each kernel shape against the bare floor, on one GPU.

    python bench/dispatch.py [--repeat 3] [--out bench/results/dispatch.json]

Needs a GPU, example_app (its extension holds ``echo``, launch-wide, ``echo_thread``,
thread-shaped, and the custom kernels), nvcc and gcc. The floors (``bench/floors.cu``) and the
native client (``bench/loadgen.c``, pinned to a CPU near the GPU unless ``--no-pin``) are
compiled in the same run. On a ring of 256 slots of 128 bytes, 32-byte arguments:

- the round trip of the built-in, single-thread, cooperative-grid and cluster dispatchers with
  ``echo`` (``<kind>``) and ``echo_thread`` (``<kind>:thread``), back to back and with random
  arrival, in ``--latency-rounds`` rounds, each right after a round of the ping-pong floor on
  the same ring: a row's ratio is the median over rounds of its p50 over that round's floor
  (``paired``; the host drifts over a run by more than the goals' margins). The floor's own
  p99 / p50 over the same rounds stands next to each row's;
- throughput at 1-256 requests in flight (single-thread, and warp-parallel against the warp
  floor); the Python client against the native one in alternating rounds; ``call_batch``.

A run takes about 25 s on an H200, and its ratios move between runs by more than some goals'
margins: ``--repeat N`` judges each goal on the median of N whole runs (``min``, ``max``,
``values``, ``met_runs`` beside it; the tables are the last run's).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as c  # bench/ is not a package

DEFAULT_OUT = c.RESULTS / "dispatch.json"
IN_FLIGHT = (1, 8, 64, 256)
LATENCY_ROUNDS = 5  #: rounds of each latency label, each after a round of the floor
PYTHON_ROUNDS = 5  #: alternating rounds of the native and the Python client
KINDS = ("builtin", "single_thread", "cooperative_grid", "cluster", "warp_parallel")
#: p50 over the ping-pong floor, back to back and with random arrival. The cluster and
#: cooperative kernels' launch-wide rows have none: their hand-off alone (a bare kernel that
#: does nothing else) measured 1.16-1.18x (cluster) and 1.48x (cooperative) of the floor.
P50_BOUNDS = {
    "single_thread": 1.05,
    "single_thread:thread": 1.05,
    "builtin:thread": 1.10,
    "builtin": 1.25,
    "cluster:thread": 1.15,
    "cooperative_grid:thread": 1.30,
}
TAIL_BOUND = 1.25  #: p99 / p50 of every latency row


def measure_once(opts: argparse.Namespace) -> dict[str, Any]:
    """One measurement of every label on one GPU: its results, goals included."""
    started = time.monotonic()
    from example_app import launchers
    from skbuild_cudaq.realtime import _driver
    from skbuild_cudaq.realtime.bridge import HostRingBridge
    from skbuild_cudaq.realtime.dispatcher import Dispatcher, DispatcherConfig
    from skbuild_cudaq.realtime.library import get_device_handler as handler
    from skbuild_cudaq.realtime.wire import function_id

    dev_info = c.device_info(opts.device)
    _driver.ensure_context(opts.device)  # the device's primary context, current
    # The client runs on this thread: pinned before the ring is allocated (near the GPU).
    cpu = c.pick_cpus({opts.device: dev_info["pci_bus_id"]})[opts.device] if opts.pin else None
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    core = importlib.import_module(opts.module)
    echo, echo_thread = function_id("echo"), function_id("echo_thread")
    results: dict[str, Any] = {
        **c.header("dispatch", [opts.device]),
        "config": {
            "num_slots": c.NUM_SLOTS,
            "slot_size": c.SLOT_SIZE,
            "arg_len": c.ARG_LEN,
            "samples": opts.samples,
            "warmup": opts.warmup,
            "latency_rounds": opts.latency_rounds,
            "requests_per_throughput_point": opts.requests,
            "in_flight": list(IN_FLIGHT),
            "load_generator_cpu": cpu,
            "random_arrival_gap_ns": c.GAP_NS,
        },
        "latency_us": {},
        "latency_random_arrival_us": {},
        "throughput_mrps": {},
        "paired": {},
        "errors": {},
    }
    lat: dict[str, Any] = results["latency_us"]
    lat_random: dict[str, Any] = results["latency_random_arrival_us"]
    thr: dict[str, Any] = results["throughput_mrps"]

    with tempfile.TemporaryDirectory(prefix="cudaq-bench-") as tmp:
        cc = dev_info["compute_capability"].replace(".", "")
        gen = c.LoadGen(c.build_loadgen(Path(tmp)))
        bridge = HostRingBridge(c.NUM_SLOTS, c.SLOT_SIZE).open()
        ring = bridge.host_address
        floors = c.Floors(c.build_floors(Path(tmp), cc), bridge)
        rounds = opts.latency_rounds
        per_round = max(1, opts.samples // rounds)
        floor_samples: dict[str, list[np.ndarray]] = {"b2b": [], "random": []}

        def sample(fid: int, serial: bool) -> dict[str, Any]:
            """One round on whatever kernel serves the ring now."""
            gen.rewind()
            gen.latency(ring, fid, max(1, opts.warmup // rounds))
            out: dict[str, Any] = {
                "b2b": gen.latency(ring, fid, per_round),
                "random": gen.latency(ring, fid, per_round, gap_ns=c.GAP_NS),
            }
            if serial:
                out["serial"] = gen.throughput(ring, fid, max(1, opts.requests // rounds), 1)
            return out

        def floor_round(serial: bool) -> dict[str, Any]:
            with floors.running("pingpong_floor", 1):
                got = sample(echo, serial)
            floor_samples["b2b"].append(got["b2b"])
            floor_samples["random"].append(got["random"])
            return got

        def measure_latency(label: str, running: Callable[[], Any], fid: int, serial: bool) -> None:
            """``rounds`` rounds of ``label``, each right after a round of the floor."""
            got: list[dict[str, Any]] = []
            floor: list[dict[str, Any]] = []
            for _ in range(rounds):
                floor.append(floor_round(serial))
                with running():
                    got.append(sample(fid, serial))
            lat[label] = c.percentiles(np.concatenate([g["b2b"] for g in got]))
            lat_random[label] = c.percentiles(np.concatenate([g["random"] for g in got]))
            pair: dict[str, Any] = {}
            for key, own in (("b2b", lat[label]), ("random", lat_random[label])):
                mine = [float(np.median(g[key])) for g in got]
                under = [float(np.median(f[key])) for f in floor]
                floor_tail = c.percentiles(np.concatenate([f[key] for f in floor]))
                pair[key] = {
                    "p50_over_floor": c.paired_ratio(mine, under)["ratio"],
                    "p50": mine,
                    "floor_p50": under,
                    "p99_over_p50": own["p99"] / own["p50"],
                    "floor_p99_over_p50": floor_tail["p99"] / floor_tail["p50"],
                }
            if serial:
                mine, under = [g["serial"] for g in got], [f["serial"] for f in floor]
                pair["serial"] = {
                    "over_floor": c.paired_ratio(mine, under)["ratio"],
                    "mrps": mine,
                    "floor_mrps": under,
                }
            results["paired"][label] = pair
            ratios = f"{pair['b2b']['p50_over_floor']:.3f} / {pair['random']['p50_over_floor']:.3f}"
            print(f"{label:>24}: p50 / floor {ratios} (random arrival)", file=sys.stderr)

        def measure_throughput(label: str, fid: int) -> None:
            gen.rewind()
            gen.throughput(ring, fid, 10_000, 64)  # warm-up
            thr[label] = {str(n): gen.throughput(ring, fid, opts.requests, n) for n in IN_FLIGHT}
            print(f"{label:>24}: {thr[label]} M req/s", file=sys.stderr)

        with floors.running("pingpong_floor", 1):
            measure_throughput("pingpong_floor", echo)
        with floors.running("warp_floor", 32):
            measure_throughput("warp_floor", echo)
        config = DispatcherConfig(device=opts.device, num_slots=c.NUM_SLOTS, slot_size=c.SLOT_SIZE)
        for kind in KINDS:
            try:
                with Dispatcher(config, bridge=bridge, module=core) as d:
                    for name in ("echo", "echo_thread"):
                        d.function_table.add_device(name, handler(core, name))
                    d.set_unified_launch(
                        None if kind == "builtin" else getattr(launchers, kind)(core)
                    )

                    @contextmanager
                    def serving(d: Any = d) -> Iterator[None]:
                        d.start()  # a fresh ring for each round
                        try:
                            yield
                        finally:
                            d.stop()

                    for label, fid in ((kind, echo), (f"{kind}:thread", echo_thread)):
                        if kind != "warp_parallel":
                            measure_latency(label, serving, fid, serial=kind == "single_thread")
                        if kind in ("single_thread", "warp_parallel"):
                            with serving():
                                measure_throughput(label, fid)
            except Exception as exc:  # keep measuring the other shapes; report it
                results["errors"][kind] = f"{type(exc).__name__}: {exc}"
                print(f"{kind}: {exc}", file=sys.stderr)
        if floor_samples["b2b"]:  # the floor's rows: every round of it over the run
            lat["pingpong_floor"] = c.percentiles(np.concatenate(floor_samples["b2b"]))
            lat_random["pingpong_floor"] = c.percentiles(np.concatenate(floor_samples["random"]))
        try:
            results["python_client_us"] = python_client(opts, core, bridge, gen)
        except Exception as exc:
            results["errors"]["python_client"] = f"{type(exc).__name__}: {exc}"
        try:  # the batched Python path through the warp-parallel kernel (thread-shaped)
            with Dispatcher(config, bridge=bridge, module=core) as d:
                d.function_table.add_device("echo_thread", handler(core, "echo_thread"))
                d.set_unified_launch(launchers.warp_parallel(core))
                d.start()
                client = bridge.client()
                rng = np.random.default_rng(12)
                batch = rng.integers(0, 256, size=(opts.requests, c.ARG_LEN), dtype=np.uint8)
                client.call_batch("echo_thread", batch[:10_000])  # warm-up
                t0 = time.perf_counter()
                out = client.call_batch("echo_thread", batch)
                seconds = time.perf_counter() - t0
                if not (out.statuses == 0).all() or not np.array_equal(out.data, batch):
                    raise RuntimeError("call_batch returned wrong answers")
            results["python_call_batch_mrps"] = opts.requests / seconds / 1e6
        except Exception as exc:
            results["errors"]["python_call_batch"] = f"{type(exc).__name__}: {exc}"
        floors.close()
        bridge.close()
    results["goals"] = judge(results)
    results["elapsed_s"] = round(time.monotonic() - started, 1)
    return results


def python_client(opts: argparse.Namespace, core: Any, bridge: Any, gen: c.LoadGen) -> Any:
    """``RingClient.call`` against the native client on one single-thread dispatcher and ring,
    in alternating rounds (native, then Python; back to back, then with random arrival): the
    median over rounds of the Python p50 minus the native p50 of the same round."""
    from example_app import launchers
    from skbuild_cudaq.realtime.dispatcher import Dispatcher, DispatcherConfig
    from skbuild_cudaq.realtime.library import get_device_handler as handler
    from skbuild_cudaq.realtime.ring import RingClient
    from skbuild_cudaq.realtime.wire import function_id

    config = DispatcherConfig(device=opts.device, num_slots=c.NUM_SLOTS, slot_size=c.SLOT_SIZE)
    payload, n = bytes(range(c.ARG_LEN)), max(1_000, opts.samples // 5)
    warm = max(1, opts.warmup // 8)
    gaps = np.random.default_rng(7).integers(0, c.GAP_NS + 1, size=n)
    rounds: dict[str, list[np.ndarray]] = {}
    with Dispatcher(config, bridge=bridge, module=core) as d:
        d.function_table.add_device("echo", handler(core, "echo"))
        d.set_unified_launch(launchers.single_thread(core))
        d.start()
        for _ in range(PYTHON_ROUNDS):
            for key, gap in (("", 0), ("_random", c.GAP_NS)):
                gen.next.value = RingClient(bridge.buffer, bridge.layout).submitted
                gen.latency(bridge.host_address, function_id("echo"), warm)
                native = gen.latency(bridge.host_address, function_id("echo"), n, gap_ns=gap)
                with RingClient(bridge.buffer, bridge.layout) as client:
                    c.timed_calls(client.call, payload, warm)
                    got = c.timed_calls(client.call, payload, n, gaps if gap else None)
                rounds.setdefault("native" + key, []).append(native)
                rounds.setdefault("call" + key, []).append(got)

    def over(key: str) -> list[float]:
        pairs = zip(rounds["call" + key], rounds["native" + key], strict=True)
        return [float(np.median(p) - np.median(q)) for p, q in pairs]

    out: dict[str, Any] = dict(c.percentiles(np.concatenate(rounds["call"])))
    out["native"] = c.percentiles(np.concatenate(rounds["native"]))
    out["random_arrival"] = c.percentiles(np.concatenate(rounds["call_random"]))
    out["native_random_arrival"] = c.percentiles(np.concatenate(rounds["native_random"]))
    out["over_native_p50_us"] = float(np.median(over("")))
    out["over_native_random_arrival_p50_us"] = float(np.median(over("_random")))
    out["rounds_over_native_us"] = {"b2b": over(""), "random": over("_random")}
    print(f"{'python call':>24}: {out['over_native_p50_us']:+.3f} us over native", file=sys.stderr)
    return out


def judge(results: dict[str, Any]) -> dict[str, Any]:
    """Every goal the results can be judged on (what is missing is left out)."""
    goals: dict[str, Any] = {}

    def add(name: str, value: float, bound: str, label: str, **extra: Any) -> None:
        shape = "thread" if label.endswith(":thread") else "launch"
        goals[name] = c.goal(value, bound, handler_shape=shape, **extra)

    paired = results.get("paired", {})
    for label, bound in ((k, b) for k, b in P50_BOUNDS.items() if k in paired):
        for key, suffix in (("b2b", ""), ("random", "_random_arrival")):
            ratio = paired[label][key]["p50_over_floor"]
            add(f"{label}_p50_over_floor{suffix}", ratio, f"<= {bound}", label)
    for label, pair in paired.items():
        tail = pair["b2b"]
        floor = {"floor_value": tail["floor_p99_over_p50"]}  # the floor's own tail, beside it
        add(f"{label}_p99_over_p50", tail["p99_over_p50"], f"<= {TAIL_BOUND}", label, **floor)
        if "serial" in pair:
            ratio = pair["serial"]["over_floor"]
            add(f"{label}_serial_over_pingpong_serial", ratio, ">= 0.95", label)
    thr = results.get("throughput_mrps", {})
    if "warp_parallel:thread" in thr and "warp_floor" in thr:
        ratio = thr["warp_parallel:thread"]["64"] / thr["warp_floor"]["64"]
        add("warp_parallel:thread_over_warp_floor_at_64", ratio, ">= 0.8", ":thread")
    py = results.get("python_client_us") or {}
    for suffix in ("", "_random_arrival"):
        if f"over_native{suffix}_p50_us" in py:
            over = py[f"over_native{suffix}_p50_us"]
            add(f"python_call_over_native_client{suffix}_us", over, "<= 0.4", "launch")
    if "python_call_batch_mrps" in results:
        rate = results["python_call_batch_mrps"]
        add("python_call_batch_mrps_warp_parallel", rate, ">= 1.0", ":thread")
    return goals


def combine_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """``--repeat``: one result of several whole runs in one process.

    A goal's value is the median over the runs, its ``met`` judged on that median; ``min``,
    ``max``, ``values`` and ``met_runs`` keep the spread (and ``floor_values`` the floor's own
    tail, run by run). The latency and throughput tables are the last run's; ``runs`` has
    every run's date, goals and errors.
    """
    results = dict(runs[-1])
    goals: dict[str, Any] = {}
    for name, last in runs[-1]["goals"].items():
        values = [run["goals"][name]["value"] for run in runs if name in run["goals"]]
        median = float(np.median(values))
        goals[name] = {
            **last,
            "value": median,
            "met": c.meets(median, last["goal"]),
            "min": min(values),
            "max": max(values),
            "values": values,
            "met_runs": sum(c.meets(v, last["goal"]) for v in values),
        }
        own = (r["goals"].get(name, {}) for r in runs)  # the floor's own tail, run by run
        floors = [g["floor_value"] for g in own if "floor_value" in g]
        if floors:
            goals[name]["floor_value"] = float(np.median(floors))
            goals[name]["floor_values"] = floors
    results["goals"] = goals
    results["repeat"] = len(runs)
    results["runs"] = [
        {
            "date": run["date"],
            "elapsed_s": run.get("elapsed_s"),
            "goals": {k: v["value"] for k, v in run["goals"].items()},
            "errors": run["errors"],
        }
        for run in runs
    ]
    results["errors"] = {
        f"run {i + 1}: {k}": v for i, run in enumerate(runs) for k, v in run["errors"].items()
    }
    results["elapsed_s"] = round(sum(run.get("elapsed_s") or 0.0 for run in runs), 1)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=1, help="whole runs; goals on their median")
    parser.add_argument("--no-pin", dest="pin", action="store_false", help="leave the client free")
    parser.add_argument("--module", default="example_app._core")
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--warmup", type=int, default=2_000)
    parser.add_argument("--requests", type=int, default=200_000, help="per throughput point")
    parser.add_argument("--latency-rounds", type=int, default=LATENCY_ROUNDS)
    opts = parser.parse_args(argv)
    if opts.latency_rounds < 1 or opts.repeat < 1:
        parser.error("--latency-rounds and --repeat must be at least 1")
    runs = []
    for i in range(opts.repeat):
        if opts.repeat > 1:
            print(f"== run {i + 1} of {opts.repeat}", file=sys.stderr)
        runs.append(measure_once(opts))
    results = runs[0] if len(runs) == 1 else combine_runs(runs)
    c.write_json(opts.out, results)
    return 0 if not results["errors"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
