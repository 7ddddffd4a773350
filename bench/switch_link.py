"""What the handler switch costs at link time: example_app linked with and without it.

    python bench/switch_link.py --with-switch <_core.so> --without-switch <_core.so> \\
        [--runs 7] [--out bench/results/switch_link.json]

The two extension modules are example_app built as usual and with
``-C cmake.define.SKBUILD_CUDAQ_HANDLER_SWITCH=OFF`` (``tools/gpu-check.sh`` builds
the second one). Each is linked ``--runs`` times with nvJitLink for this machine's
GPU, the link cache off (what a cold start pays; the cache serves every later one),
alternating the two; the report gives the median link time, the cubin sizes and the
ratio. Needs a GPU only to name its architecture.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dispatch as bench  # bench/dispatch.py: driver helpers, versions

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "switch_link.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--with-switch", type=Path, required=True)
    parser.add_argument("--without-switch", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    opts = parser.parse_args(argv)

    from skbuild_cudaq.realtime.cache import LinkCache
    from skbuild_cudaq.realtime.library import cubin_symbols
    from skbuild_cudaq.realtime.link import link_device_code

    drv = bench._drv()
    dev = bench.primary_context_current(drv, 0)
    device_name, major, minor = bench.device_identity(drv, dev)
    arch = f"sm_{major}{minor}"
    modules = {"with_switch": opts.with_switch, "without_switch": opts.without_switch}
    times: dict[str, list[float]] = {k: [] for k in modules}
    sizes: dict[str, int] = {}
    handlers: dict[str, list[str]] = {}
    for _ in range(opts.runs):
        for key, path in modules.items():
            t0 = time.perf_counter()
            cubin = link_device_code(path, arch, cache=LinkCache(None))
            times[key].append(time.perf_counter() - t0)
            sizes[key] = len(cubin)
            handlers[key] = list(cubin_symbols(cubin).handlers)
    results: dict[str, Any] = {
        key: {
            "median_ms": statistics.median(v) * 1e3,
            "min_ms": min(v) * 1e3,
            "runs_ms": [x * 1e3 for x in v],
            "cubin_bytes": sizes[key],
            "handlers": handlers[key],
        }
        for key, v in times.items()
    }
    ratio = results["with_switch"]["median_ms"] / results["without_switch"]["median_ms"]
    doc = {
        "benchmark": "switch_link",
        # the shapes whose handlers the switch calls directly (both since session 11)
        "switch_shapes": ["thread", "launch"],
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": device_name,
        "compute_capability": f"{major}.{minor}",
        "versions": bench.versions(),
        "config": {"runs": opts.runs, "arch": arch, "cache": "off (cold link)"},
        "results": results,
        "link_time_ratio": ratio,
    }
    bench.ok(drv.cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease")
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(
        f"link with the switch {results['with_switch']['median_ms']:.1f} ms, without "
        f"{results['without_switch']['median_ms']:.1f} ms: {ratio:.2f}x; cubin "
        f"{sizes['with_switch']} vs {sizes['without_switch']} bytes",
        file=sys.stderr,
    )
    print(f"wrote {opts.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
