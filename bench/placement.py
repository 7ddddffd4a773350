"""Does where the driver puts a kernel's code change its round trip?

One run on one GPU::

    python bench/placement.py [--out bench/results/placement.json] [--trials 16]

Session 16 found the one-thread kernels of ``bench/phases.py`` in two groups about 0.1 us
apart (the *staged* step: the acquire saw the flag -> the request is in the stage), with
kernels whose instructions up to the end of that step are the same in both groups
(``ladder_validate`` and ``ladder_stats``: the same SASS at the same offsets up to the
stats counter, after the stage). This benchmark asks whether the code's *placement* is the
cause. Each trial loads, lazily as the run time does (``cuLibraryLoadData``, each kernel
placed on first use), a spacer library and launches a chosen subset of its kernels (straight
code of 256 B + 128 B * 2^i, i = 0..8: a trial's spacer is up to 68 KB), then a
fresh copy of the measured module, and serves each of its kernels (the ping-pong floor,
``ladder_validate``, ``ladder_stats``, the single-thread example and the built-in kernel, the
handlers thread-shaped) in rounds, each right after a round of a reference floor loaded once
at the start (so that its placement never changes). Trial 0 has no spacer.

If placement does not matter, a kernel measures the same in every trial, within the spread
of its two rounds in one trial. If it does, the spread over trials is larger, and a kernel
may change group from one trial to the next. Needs nvcc, gcc and example_app (for its
launcher class).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dispatch as bench  # bench/dispatch.py: load generator, floors, versions
import phases  # bench/phases.py: the ladder kernels, the link

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "placement.json"
SPACER_KERNELS = 9
#: spacer_i's code on sm_90 (nvcc 13.0): 256 B of its own and 128 B * 2^i of multiply-adds.
SPACER_BYTES = tuple(256 + (128 << i) for i in range(SPACER_KERNELS))

_SPACER = r"""
template <int N>
__device__ __forceinline__ unsigned int chain(unsigned int x, unsigned int k, unsigned int c) {
#pragma unroll
  for (int i = 0; i < N; ++i)
    x = x * k + c; // one IMAD each: 16 bytes of code
  return x;
}
#define SPACER(i, n)                                                                             \
  extern "C" __global__ void spacer_##i(unsigned int *out, unsigned int k, unsigned int c) {    \
    const unsigned int x = chain<n>(threadIdx.x, k, c);                                          \
    if (x == 0x9e3779b9u)                                                                        \
      out[0] = x;                                                                                \
  }
SPACER(0, 4)
SPACER(1, 12)
SPACER(2, 28)
SPACER(3, 60)
SPACER(4, 124)
SPACER(5, 252)
SPACER(6, 508)
SPACER(7, 1020)
SPACER(8, 2044)
"""

#: (label, kernel, block threads, handler): what a trial serves; None: a bare floor.
MEASURED: tuple[tuple[str, str, int, str | None], ...] = (
    ("pingpong_floor", "pingpong_floor", 1, None),
    ("ladder_validate", "ladder_validate", 1, "echo_thread"),
    ("ladder_stats", "ladder_stats", 1, "echo_thread"),
    ("single_thread", "single_thread_dispatcher", 1, "echo_thread"),
    ("builtin", "cudaq_realtime_unified_dispatch", 128, "echo_thread"),
)


def build(nvcc: str, work: Path, arch: str) -> tuple[bytes, bytes]:
    """The measured module (bench/phases.py's floors and ladder, the single-thread example,
    the run time and the handler switch; production build, no stamps) and the spacer cubin."""
    floor, switch = phases.write_floor_and_switch(work, "bench/placement.py")
    sources = [
        phases.RUNTIME / "unified_dispatch_kernel.cu",
        phases.RUNTIME / "host_ring_bridge.cu",
        phases.EXAMPLE / "handlers.cu",
        phases.EXAMPLE / "block_handlers.cu",
        phases.EXAMPLE / "single_thread_dispatcher.cu",
        floor,
        switch,
    ]
    inputs = phases.compile_lto(nvcc, work, [(src, "80") for src in sources], stamps=False)
    module = phases.nvjitlink_link(inputs, arch)
    spacer_src = work / "spacer.cu"
    spacer_src.write_text(_SPACER)
    spacer = work / "spacer.cubin"
    subprocess.run(
        [nvcc, "-cubin", f"-arch=sm_{arch}", "-o", str(spacer), str(spacer_src)], check=True
    )
    return module, spacer.read_bytes()


def _anova(x: np.ndarray) -> dict[str, float]:
    """One-way analysis of variance of ``x`` (trials x rounds): the F ratio of the variance
    between trials to the variance within them (about 1 when placement adds nothing), and the
    standard deviation that placement adds to a round, as estimated from the two (0 when the
    trials differ no more than rounds do)."""
    trials, rounds = x.shape
    means = x.mean(axis=1)
    within = float(((x - means[:, None]) ** 2).sum()) / (trials * (rounds - 1))
    between = rounds * float(means.var(ddof=1))
    return {
        "f_ratio": between / within if within > 0 else float("inf"),
        "placement_sd_us": max(0.0, (between - within) / rounds) ** 0.5,
        "round_sd_us": within**0.5,
    }


def _over(rounds: list[dict[str, float]], key: str, floor_key: str) -> list[float]:
    """Each round's p50 (``key``) over the reference floor's round before it (``floor_key``)."""
    return [r[key] - r[floor_key] for r in rounds]


def summarize(trials: list[dict[str, Any]]) -> dict[str, Any]:
    """Per kernel, back to back and with random arrival: its excess over the reference floor
    (the median of its rounds) trial by trial, the range over trials, the spread of the rounds
    within a trial, and the analysis of variance (``_anova``) that says how much of the range
    placement explains."""
    out: dict[str, Any] = {}
    for label, *_ in MEASURED:
        for key, floor_key, name in (
            ("p50", "floor_p50", "back_to_back"),
            ("gap_p50", "floor_gap_p50", "random_arrival"),
        ):
            rows = [
                _over(t["kernels"][label]["rounds"], key, floor_key)
                for t in trials
                if t["kernels"].get(label, {}).get("rounds")
            ]
            if not rows:
                continue
            per_trial = [float(np.median(r)) for r in rows]
            within = [max(r) - min(r) for r in rows]
            entry: dict[str, Any] = {
                "over_reference_floor_us": per_trial,
                "min": min(per_trial),
                "median": float(np.median(per_trial)),
                "max": max(per_trial),
                "spread_over_trials": max(per_trial) - min(per_trial),
                "median_spread_within_trial": float(np.median(within)),
            }
            if len(rows) > 1 and len({len(r) for r in rows}) == 1 and len(rows[0]) > 1:
                entry.update(_anova(np.array(rows, dtype=np.float64)))
            out.setdefault(label, {})[name] = entry
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2, help="rounds a kernel, each trial")
    parser.add_argument("--samples", type=int, default=2000, help="round trips a round")
    parser.add_argument("--seed", type=int, default=17)
    opts = parser.parse_args(argv)
    if opts.trials < 1 or opts.rounds < 1 or opts.samples < 1:
        parser.error("--trials, --rounds and --samples must be at least 1")

    from example_app import launchers
    from skbuild_cudaq.realtime import (
        Dispatcher,
        DispatcherConfig,
        HostRingBridge,
        LaunchConfig,
        Library,
    )

    drv, dev, _, arch, nvcc = bench.gpu_and_nvcc(0)
    rng = random.Random(opts.seed)
    masks = [0] + [rng.randrange(1, 1 << SPACER_KERNELS) for _ in range(opts.trials - 1)]
    results: dict[str, Any] = {
        **bench.result_header("placement", 0, drv, dev),
        "config": {
            "trials": opts.trials,
            "rounds": opts.rounds,
            "samples": opts.samples,
            "seed": opts.seed,
            "gap_ns": bench.GAP_NS,
            "cuda_module_loading": os.environ.get("CUDA_MODULE_LOADING", "(unset: lazy)"),
            "measured": [
                {"label": m[0], "kernel": m[1], "block": m[2], "handler": m[3]} for m in MEASURED
            ],
        },
        "trials": [],
    }
    with tempfile.TemporaryDirectory(prefix="cudaq-placement-") as tmp:
        work = Path(tmp)
        so, _ = bench.build_tools(work, arch)
        module, spacer = build(nvcc, work, arch)
        (work / "module.cubin").write_bytes(module)
        gen = bench.LoadGen(so)
        bridge = HostRingBridge(bench.NUM_SLOTS, bench.SLOT_SIZE).open()
        ring = bridge.host_address
        reference = bench.Floors(work / "module.cubin", bridge)
        config = DispatcherConfig(num_slots=bench.NUM_SLOTS, slot_size=bench.SLOT_SIZE)
        sink = int(bench.ok(drv.cuMemAlloc(4), "cuMemAlloc"))
        stream = bench.ok(drv.cuStreamCreate(0), "cuStreamCreate")

        def p50s(fid: int) -> tuple[float, float]:
            return gen.p50s(ring, fid, opts.samples)

        # The reference floor placed (its first launch) before any trial's code.
        with reference.running("pingpong_floor", 1):
            p50s(bench.fnv1a("echo"))

        for trial, mask in enumerate(masks):
            spacer_lib = bench.ok(
                drv.cuLibraryLoadData(spacer, None, None, 0, None, None, 0), "cuLibraryLoadData"
            )
            spacer_bytes = 0
            for i in range(SPACER_KERNELS):
                if mask >> i & 1:
                    kernel = bench.ok(
                        drv.cuLibraryGetKernel(spacer_lib, f"spacer_{i}".encode()), "spacer"
                    )
                    function = bench.ok(drv.cuKernelGetFunction(kernel), "cuKernelGetFunction")
                    values = (sink, 3, 1)
                    types = (ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32)
                    bench.ok(
                        drv.cuLaunchKernel(
                            function, 1, 1, 1, 1, 1, 1, 0, stream, (values, types), 0
                        ),
                        "cuLaunchKernel(spacer)",
                    )
                    spacer_bytes += SPACER_BYTES[i]
            bench.ok(drv.cuStreamSynchronize(stream), "cuStreamSynchronize")
            own_floors = bench.Floors(work / "module.cubin", bridge)
            library = Library.from_cubin(module)
            library.load()
            row: dict[str, Any] = {"mask": mask, "spacer_bytes": spacer_bytes, "kernels": {}}
            for label, kernel_name, block, handler in MEASURED:
                fid = bench.fnv1a(handler or "echo")
                rounds = []
                for _ in range(opts.rounds):
                    with reference.running("pingpong_floor", 1):
                        f_b2b, f_gap = p50s(fid)
                    if handler is None:
                        with own_floors.running(kernel_name, 1):
                            b2b, gap = p50s(fid)
                    else:
                        launcher = launchers.KernelLauncher(
                            kernel_name,
                            library.get_kernel(kernel_name),
                            lambda kernel, args, block=block: LaunchConfig(
                                grid=(1, 1, 1), block=(block, 1, 1)
                            ),
                        )
                        with Dispatcher(config, bridge=bridge) as d:
                            d.function_table.add_device(handler, library.get_handler(handler))
                            d.set_unified_launch(launcher)
                            d.start()
                            b2b, gap = p50s(fid)
                    rounds.append(
                        {"floor_p50": f_b2b, "p50": b2b, "floor_gap_p50": f_gap, "gap_p50": gap}
                    )
                over = float(np.median(_over(rounds, "p50", "floor_p50")))
                over_gap = float(np.median(_over(rounds, "gap_p50", "floor_gap_p50")))
                row["kernels"][label] = {"rounds": rounds, "over": over, "over_gap": over_gap}
            library.close()
            own_floors.close()
            bench.ok(drv.cuLibraryUnload(spacer_lib), "cuLibraryUnload")
            results["trials"].append(row)
            print(
                f"trial {trial:>2} spacer {spacer_bytes:>6} B: "
                + " ".join(
                    f"{k} {v['over']:+.3f}/{v['over_gap']:+.3f}" for k, v in row["kernels"].items()
                ),
                file=sys.stderr,
            )
        drv.cuStreamDestroy(stream)
        drv.cuMemFree(sink)
        reference.close()
        bridge.close()
    results["summary"] = summarize(results["trials"])
    for label, s in results["summary"].items():
        for name, e in s.items():
            anova = (
                f", F {e['f_ratio']:.2f}, placement sd {e['placement_sd_us']:.3f} us"
                if "f_ratio" in e
                else ""
            )
            print(
                f"{label:>16} {name:>14}: over the reference floor {e['min']:+.3f} .. "
                f"{e['max']:+.3f} us (within a trial {e['median_spread_within_trial']:.3f}{anova})",
                file=sys.stderr,
            )
    bench.ok(drv.cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease")
    bench.write_results(opts.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
