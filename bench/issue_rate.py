"""What an instruction on a one-thread kernel's round trip costs: straight-line code vs a loop.

    python bench/issue_rate.py [--out bench/results/issue_rate.json]

A persistent kernel served by one thread issues every instruction of a round trip in
turn, so each instruction a dispatcher adds between seeing a request and publishing its
answer costs it something. This measures what: the ping-pong
floor of ``bench/dispatch.py`` with W multiply-adds (8 independent chains) between seeing
the flag and loading the request, fully unrolled (W instructions of straight-line code, so
instruction fetch would show) or in a loop (a few instructions, W/8 times), each paired
round by round with the bare floor on the same ring (the median over rounds of the p50
difference). Needs nvcc and gcc; no package beyond skbuild-cudaq's run time.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dispatch as bench  # bench/dispatch.py: load generator, floors, versions

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "issue_rate.json"
WORK = (64, 256, 1024)

_KERNEL = r"""
extern "C" __global__ void %(name)s(const uint8_t *rx, uint8_t *tx,
                                    volatile uint32_t *rx_flags, volatile uint32_t *tx_flags,
                                    uint32_t num_slots, uint32_t slot_size,
                                    volatile int *shutdown) {
  uint32_t slot = 0, seq = 1, polls = 0;
  const uint32_t k = slot_size | 1u, c = num_slots;
  for (;;) {
    if (ld_acquire_sys(&rx_flags[slot]) == seq) {
      uint32_t a0 = seq, a1 = seq + 1, a2 = seq + 2, a3 = seq + 3, a4 = seq + 4, a5 = seq + 5,
               a6 = seq + 6, a7 = seq + 7;
      %(pragma)s
      for (uint32_t i = 0; i < %(iters)du; ++i) {
        a0 = a0 * k + c; a1 = a1 * k + c; a2 = a2 * k + c; a3 = a3 * k + c;
        a4 = a4 * k + c; a5 = a5 * k + c; a6 = a6 * k + c; a7 = a7 * k + c;
      }
      const uint32_t acc = a0 ^ a1 ^ a2 ^ a3 ^ a4 ^ a5 ^ a6 ^ a7;
      const size_t off = static_cast<size_t>(slot) * slot_size;
      if (acc == 0x9e3779b9u)
        tx_flags[num_slots] = acc; // never taken: keeps the work
      serve(rx + off, tx + off, &tx_flags[slot], slot_size, seq);
      if (++slot == num_slots) {
        slot = 0;
        ++seq;
      }
    } else if ((++polls & 15u) == 0 && *shutdown != 0) {
      return;
    }
  }
}
"""


def kernels() -> list[tuple[str, int, bool]]:
    return [(f"work{w}_{'unrolled' if u else 'loop'}", w, u) for w in WORK for u in (True, False)]


def source() -> str:
    """bench/dispatch.py's floors plus one kernel a (work, unrolled) point."""
    extra = "".join(
        _KERNEL
        % {"name": name, "iters": w // 8, "pragma": "#pragma unroll" if u else "#pragma unroll 1"}
        for name, w, u in kernels()
    )
    return bench.FLOOR_CU + extra


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=3000, help="round trips a round")
    opts = parser.parse_args(argv)
    if opts.rounds < 1 or opts.samples < 1:
        parser.error("--rounds and --samples must be at least 1")

    from skbuild_cudaq.realtime import HostRingBridge

    drv = bench._drv()
    dev = bench.primary_context_current(drv, 0)
    _, major, minor = bench.device_identity(drv, dev)
    results: dict[str, Any] = {
        **bench.result_header("issue_rate", 0, drv, dev),
        "config": {"rounds": opts.rounds, "samples": opts.samples, "gap_ns": bench.GAP_NS},
        "kernels": {},
    }
    bench.FLOOR_CU = source()
    with tempfile.TemporaryDirectory(prefix="cudaq-issue-") as tmp:
        so, cubin = bench.build_tools(Path(tmp), f"{major}{minor}")
        gen = bench.LoadGen(so)
        bridge = HostRingBridge(bench.NUM_SLOTS, bench.SLOT_SIZE).open()
        ring = bridge.host_address
        floors = bench.Floors(cubin, bridge)
        fid = bench.fnv1a("echo")

        def p50s() -> tuple[float, float]:
            return gen.p50s(ring, fid, opts.samples)

        for name, work, unrolled in kernels():
            rows = []
            for _ in range(opts.rounds):
                with floors.running("pingpong_floor", 1):
                    f_b2b, f_gap = p50s()
                with floors.running(name, 1):
                    b2b, gap = p50s()
                rows.append(
                    {"floor_p50": f_b2b, "p50": b2b, "floor_gap_p50": f_gap, "gap_p50": gap}
                )
            over = float(np.median([r["p50"] - r["floor_p50"] for r in rows]))
            over_gap = float(np.median([r["gap_p50"] - r["floor_gap_p50"] for r in rows]))
            results["kernels"][name] = {
                "work": work,
                "unrolled": unrolled,
                "over_floor_us": over,
                "over_floor_random_arrival_us": over_gap,
                "ns_per_multiply_add": over * 1000 / work,
                "rounds": rows,
            }
            print(
                f"{name:>18}: +{over:.3f} us (random arrival +{over_gap:.3f}),"
                f" {over * 1000 / work:.2f} ns a multiply-add",
                file=sys.stderr,
            )
        floors.close()
        bridge.close()
    bench.ok(drv.cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease")
    bench.write_results(opts.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
