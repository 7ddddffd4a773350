"""Write ``docs/performance.md`` and its figures from ``bench/results/*.json``.

    python bench/report.py [--results DIR] [--out PAGE] [--figures DIR] [--no-figures]

A headline table (each path against its floor, with the GPU, driver and date it ran on), a
section per benchmark (tables, PNG figures, goals) and how to reproduce. Files are recognised
by their ``"benchmark"`` key (of two, the newer ``"date"`` wins and the other is named); a
benchmark without one is "not measured yet". ``tests/test_docs.py`` checks the page is fresh.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
KNOWN = ("dispatch", "dispatch_multigpu", "startup", "startup_cu12", "build_overhead")
HOW_TO = {
    "dispatch": ("python bench/dispatch.py --repeat 3", "a GPU, example_app, nvcc and gcc"),
    "dispatch_multigpu": ("python bench/multigpu.py", "two or more GPUs"),
    "startup": ("python bench/startup.py", "a GPU"),
    "startup_cu12": ("bash tools/gpu-cu12.sh", "a GPU; the CUDA 12 stack"),
    "build_overhead": ("python bench/build_overhead.py", "no GPU"),
}
LABELS = {
    "pingpong_floor": "floor: bare ping-pong kernel",
    "warp_floor": "floor: bare warp kernel",
    "builtin": "built-in",
    "single_thread": "single-thread",
    "cooperative_grid": "cooperative grid",
    "cluster": "cluster",
    "warp_parallel": "warp-parallel",
}
START = {
    "floor": "raw load of a linked cubin (floor)",
    "cold": "cold: import -> kernel, linking",
    "warm": "warm: import -> kernel, link cache hit",
    "answer_cold": "first answer, cold",
    "answer_warm": "first answer, warm",
    "cuda_core": "cuda.core's Linker",
}
Json = dict[str, Any]
Figure = Callable[[Path], None]


def label(key: str) -> str:
    kind, _, shape = key.partition(":")
    name = LABELS.get(kind, kind)
    if kind.endswith("_floor"):
        return name
    return f"{name}, {'thread-shaped `echo_thread`' if shape else 'launch-wide `echo`'}"


def fmt(value: Any, digits: int = 2) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return "—"
    return f"{value:,.{digits}f}"


def get(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, Mapping):
            return None
        data = data.get(key)
    return data


def table(header: list[str], rows: Iterable[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    return [*lines, *("| " + " | ".join(r) + " |" for r in rows), ""]


def where(data: Json) -> dict[str, str]:
    """GPU, driver and date of a results file, as the page prints them."""
    devices = [d for d in data.get("devices") or [] if isinstance(d, Mapping)]
    names = sorted({str(d.get("name")) for d in devices})
    gpu = "none (CPU only)" if not devices else " + ".join(names)
    if len(devices) > 1:
        gpu = f"{len(devices)} × {gpu}"
    nvidia, cuda = get(data, "driver", "nvidia"), get(data, "driver", "cuda")
    driver = " / CUDA ".join(str(v) for v in (nvidia, cuda) if v) or "—"
    return {"gpu": gpu, "driver": driver, "date": str(data.get("date") or "?")[:10]}


def provenance(name: str, path: Path, data: Json) -> list[str]:
    w, v = where(data), data.get("versions") or {}
    versions = ", ".join(f"{k} {x}" for k, x in v.items() if x is not None)
    host = data.get("host") or {}
    cpu = ", ".join(
        str(x) for x in (host.get("cpu"), host.get("cpus") and f"{host['cpus']} CPUs") if x
    )
    return [
        f"`bench/results/{path.name}`, written by `{HOW_TO[name][0]}`: {w['gpu']}, driver "
        f"{w['driver']}, {data.get('date')}; host {cpu or 'not recorded'}; {versions}.",
        "",
    ]


def goals_table(goals: Any) -> list[str]:
    """Every goal of a file: value (the median of the runs, with their range, when repeated)."""
    goals = goals or {}
    repeated = any("met_runs" in g for g in goals.values())
    floors = any("floor_value" in g for g in goals.values())
    rows = []
    for name, g in goals.items():
        row = [f"`{name}`", fmt(g.get("value"), 3), g.get("goal", "?")]
        row.append("yes" if g.get("met") else "**no**")
        if repeated:
            row.append(f"{fmt(g.get('min'), 3)} to {fmt(g.get('max'), 3)}")
            row.append(f"{g.get('met_runs')} of {len(g.get('values') or [])}")
        rows.append([*row, fmt(g.get("floor_value"), 3)] if floors else row)
    header = ["Goal", "Value", "Target", "Met"]
    header += ["Range over runs", "Runs met"] if repeated else []
    header += ["Floor's own"] if floors else []
    return table(header, rows) if rows else []


# -- the headline ---------------------------------------------------------------------------
def headline(found: dict[str, tuple[Path, Json]]) -> list[str]:
    rows: list[tuple[str, str, str, str, Json]] = []
    d = found["dispatch"][1] if "dispatch" in found else {}
    lat, paired, thr = d.get("latency_us") or {}, d.get("paired") or {}, d.get("throughput_mrps")
    floor = f"{fmt(get(lat, 'pingpong_floor', 'p50'))} µs"
    for kind in ("single_thread", "builtin", "cluster", "cooperative_grid"):
        for key in (kind, f"{kind}:thread") if paired else ():
            if key in paired:
                ratio = f"{fmt(get(paired, key, 'b2b', 'p50_over_floor'), 3)}×"
                value = f"{fmt(get(lat, key, 'p50'))} µs"
                rows.append((f"{label(key)}: round trip p50", value, floor, ratio, d))
    if thr and "warp_parallel:thread" in thr:
        value, under = get(thr, "warp_parallel:thread", "64"), get(thr, "warp_floor", "64")
        ratio = f"{fmt(value / under if value and under else None, 3)}×"
        what = "warp-parallel, thread-shaped `echo_thread`: 64 in flight"
        rows.append((what, f"{fmt(value)} M/s", f"{fmt(under)} M/s", ratio, d))
    py = d.get("python_client_us")
    if py:
        over, native = f"{py.get('over_native_p50_us', 0):+.2f} µs", get(py, "native", "p50")
        value, under = f"{fmt(py.get('p50'))} µs", f"{fmt(native)} µs (native client)"
        rows.append(("Python `RingClient.call`: round trip p50", value, under, over, d))
    for name in ("startup", "startup_cu12"):
        s = found[name][1] if name in found else {}
        results, stack = s.get("results") or {}, " (CUDA 12)" if name == "startup_cu12" else ""
        for key in ("cold", "warm", "answer_warm") if results else ():
            ms = [
                (get(results, k, "median_in_process_s") or math.nan) * 1e3 for k in (key, "floor")
            ]
            ratio = f"{fmt(get(results, key, 'ratio_to_floor'), 3)}×"
            what = f"start-up{stack}, {START[key]}"
            rows.append((what, f"{fmt(ms[0], 0)} ms", f"{fmt(ms[1], 0)} ms", ratio, s))
    if "dispatch_multigpu" in found:
        m = found["dispatch_multigpu"][1]
        point = get(m, "summary", "warp_parallel_mrps", "64") or {}
        what = f"{len(m.get('devices') or [])} GPUs: warp-parallel aggregate, 64 in flight each"
        value, one = f"{fmt(point.get('aggregate'))} M/s", f"{fmt(point.get('one_gpu'))} M/s"
        rows.append((what, value, f"{one} (one GPU)", f"{fmt(point.get('scaling'), 3)}×", m))
    if "build_overhead" in found:
        b = found["build_overhead"][1]
        value, nvcc = f"{fmt(b.get('plugin_overhead_s'))} s", get(b, "median_s", "nvcc_kernels")
        share = get(b, "goals", "plugin_overhead_over_nvcc_kernels", "value")
        share = f"{fmt(share * 100 if share is not None else None, 1)} % of nvcc"
        rows.append(("what the build adds to a wheel", value, f"{fmt(nvcc)} s (nvcc)", share, b))
    header = ["Path", "Measured", "Floor", "Against the floor", "GPU", "Driver", "Date"]
    lines = ([*r[:4], *where(r[4]).values()] for r in rows)
    return ["## Headline", "", *table(header, lines)] if rows else []


# -- sections -------------------------------------------------------------------------------
def dispatch_section(name: str, path: Path, d: Json, figs: dict[str, Figure]) -> list[str]:
    lat, lat_r = d.get("latency_us") or {}, d.get("latency_random_arrival_us") or {}
    paired = d.get("paired") or {}
    keys = ["pingpong_floor", *(k for k in lat if k != "pingpong_floor")]

    def row(k: str) -> list[str]:
        floor = k == "pingpong_floor"
        ratio = 1.0 if floor else get(paired, k, "b2b", "p50_over_floor")
        r_ratio = 1.0 if floor else get(paired, k, "random", "p50_over_floor")
        cells = (get(lat, k, "p50"), get(lat, k, "p99"), ratio, get(lat_r, k, "p50"), r_ratio)
        return [label(k), *(fmt(v, 2 if i in (0, 1, 3) else 3) for i, v in enumerate(cells))]

    rows = [row(k) for k in keys if k in lat]
    cfg = d.get("config") or {}
    out = ["## Dispatch: round trip and throughput", "", *provenance("dispatch", path, d)]
    out += [
        f"A request of {cfg.get('arg_len')} bytes of arguments on a ring of "
        f"{cfg.get('num_slots')} slots of {cfg.get('slot_size')} bytes, answered by each "
        "dispatch shape with a launch-wide (`echo`) and a thread-shaped (`echo_thread`) "
        "handler. *× floor* is paired: each row was measured in rounds, each right after a "
        "round of the bare ping-pong kernel on the same ring, and is the median over rounds "
        "of its p50 over that round's floor. *Random arrival* waits a random "
        f"0-{cfg.get('random_arrival_gap_ns')} ns before each request, so that requests meet "
        "every phase of the kernel's poll loop.",
        "",
    ]
    out += table(
        ["Round trip (µs)", "p50", "p99", "× floor", "random arrival p50", "× floor"], rows
    )
    if lat:
        names, p50s = [label(k) for k in keys], [get(lat, k, "p50") for k in keys]
        p99s = [get(lat, k, "p99") for k in keys]
        axis = "round trip (µs): p50, whisker to p99"
        figs["dispatch_latency.png"] = lambda p: bars(p, names, p50s, axis, d, tops=p99s)
        out += ["![Round trip per dispatch shape](_static/perf/dispatch_latency.png)", ""]
    thr = d.get("throughput_mrps") or {}
    if thr:
        counts = list(next(iter(thr.values())))
        out += table(
            ["Throughput (M requests/s) by requests in flight", *counts],
            ([label(k), *(fmt(v.get(n), 3) for n in counts)] for k, v in thr.items()),
        )
        figs["dispatch_throughput.png"] = lambda p: lines_plot(p, thr, d)
        out += ["![Throughput by requests in flight](_static/perf/dispatch_throughput.png)", ""]
    py = d.get("python_client_us")
    if py:
        out += [
            f"`RingClient.call` from Python through the single-thread dispatcher: p50 "
            f"{fmt(py.get('p50'))} µs, p99 {fmt(py.get('p99'))} µs; over the native client on "
            f"the same dispatcher (alternating rounds) {py.get('over_native_p50_us', 0):+.3f} µs "
            f"back to back, {py.get('over_native_random_arrival_p50_us', 0):+.3f} µs with random "
            f"arrival. `call_batch` through the warp-parallel dispatcher: "
            f"{fmt(d.get('python_call_batch_mrps'))} M requests/s.",
            "",
        ]
    repeat = d.get("repeat")
    note = (
        f"each the median of {repeat} whole runs; the tables are the last run's"
        if repeat
        else "one run"
    )
    out += [f"Goals ({note}; *Floor's own*: the bare kernel's p99 / p50 over the same rounds):", ""]
    return out + goals_table(d.get("goals")) + errors(d)


def multigpu_section(name: str, path: Path, m: Json, figs: dict[str, Figure]) -> list[str]:
    out = ["## Several GPUs", "", *provenance("dispatch_multigpu", path, m)]
    out += [
        "One dispatcher, ring and native client thread per GPU; every GPU alone, then all at "
        "once, in alternating rounds (medians over rounds).",
        "",
    ]
    lat = get(m, "summary", "single_thread_latency_us") or {}
    qs = ("alone_p50", "together_p50", "alone_p99", "together_p99")
    header = ["Single-thread round trip (µs)", "p50 alone", "p50 all serving", "p99 alone"]
    rows = ([f"GPU {k}", *(fmt(r.get(q)) for q in qs)] for k, r in lat.items())
    out += table([*header, "p99 all serving"], rows)
    thr = get(m, "summary", "warp_parallel_mrps") or {}
    qs = ("one_gpu", "aggregate", "scaling")
    header = ["Warp-parallel, in flight per GPU", "one GPU (M/s)", "all GPUs (M/s)", "× one GPU"]
    out += table(header, ([n, *(fmt(p.get(q), 3) for q in qs)] for n, p in thr.items()))
    return out + goals_table(m.get("goals")) + errors(m)


def startup_section(name: str, path: Path, s: Json, figs: dict[str, Figure]) -> list[str]:
    title = "Start-up with the CUDA 12 stack" if name == "startup_cu12" else "Start-up"
    out = [f"## {title}", "", *provenance(name, path, s)]
    inputs = s.get("inputs") or {}
    out += [
        f"From a fresh process's first statement to a launchable kernel handle "
        f"(`{inputs.get('kernel')}`, {inputs.get('arch')}, binary "
        f"{fmt(inputs.get('binary_bytes'), 0)} bytes, linked cubin "
        f"{fmt(inputs.get('cubin_bytes'), 0)} bytes), and to the first answer; the median of "
        f"{inputs.get('runs')} processes per variant, run in shuffled rounds.",
        "",
    ]
    results = s.get("results") or {}
    out += start_table(results)
    steps = get(results, "answer_warm", "phases_ms") or {}
    if steps:
        out += [
            "Where the first answer's time goes (warm, medians, ms): "
            + ", ".join(f"`{k}` {fmt(v)}" for k, v in steps.items())
            + " (`get_device_kernel` includes creating the context).",
            "",
        ]
    if results:
        keys = [k for k in START if k in results]
        ms = [(get(results, k, "median_in_process_s") or math.nan) * 1e3 for k in keys]
        axis = "ms from the first statement (median of fresh processes)"
        figs[f"{name}.png"] = lambda p: bars(p, [START[k] for k in keys], ms, axis, s)
        out += [f"![Start-up per variant](_static/perf/{name}.png)", ""]
    return out + goals_table(s.get("goals")) + errors(s)


def start_table(results: Mapping[str, Any]) -> list[str]:
    rows = []
    for key, what in START.items():
        r = results.get(key) or {}
        ms = [(r.get(f"median_{k}_s") or math.nan) * 1e3 for k in ("in_process", "wall")]
        ratios = [fmt(r.get(k), 3) for k in ("ratio_to_floor", "paired_ratio_median")]
        if r:
            rows.append([what, fmt(ms[0], 1), fmt(ms[1], 1), *ratios, f"{r['ok']}/{r['runs']}"])
    header = ["Variant", "ms", "ms with the interpreter", "× floor", "paired × floor", "ok"]
    return table(header, rows)


def build_section(name: str, path: Path, b: Json, figs: dict[str, Figure]) -> list[str]:
    out = ["## Build overhead", "", *provenance("build_overhead", path, b)]
    out += [f"{b.get('project')}, the median of {b.get('runs')} builds of each:", ""]
    names = {
        "wheel": "wheel of example_app (nvcc)",
        "wheel_nvrtc": "wheel of example_app (NVRTC)",
        "baseline": "the same project without dispatch kernels (plain scikit-build-core)",
        "nvcc_kernels": "nvcc of the dispatch kernels alone",
        "noop_rebuild": "no-op rebuild",
        "backend_prepare": "the backend's own work per hook",
    }
    med = b.get("median_s") or {}
    out += table(["Step", "median (s)"], ([names.get(k, k), fmt(v, 3)] for k, v in med.items()))
    out += [
        f"What skbuild-cudaq adds (wheel − baseline − the kernels' nvcc): "
        f"{fmt(b.get('plugin_overhead_s'), 3)} s.",
        "",
    ]
    if med:
        keys = [k for k in names if k in med and k != "backend_prepare"]
        figs["build_overhead.png"] = lambda p: bars(
            p, [names[k] for k in keys], [med[k] for k in keys], "seconds (median)", b
        )
        out += ["![Build times](_static/perf/build_overhead.png)", ""]
    return out + goals_table(b.get("goals")) + errors(b)


def errors(data: Json) -> list[str]:
    errs = {**(data.get("errors") or {}), **(data.get("skipped") or {})}
    return [*(f"- Not measured, `{k}`: {v}" for k, v in errs.items()), ""] if errs else []


# -- figures --------------------------------------------------------------------------------
def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "font.size": 8})
    return plt


def _save(fig: Any, path: Path, data: Json) -> None:
    w = where(data)
    fig.text(0.01, 0.01, f"{w['gpu']} · driver {w['driver']} · {w['date']}", fontsize=6.5)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", metadata={"Software": None})
    _plt().close(fig)


def bars(
    path: Path, names: list[str], values: list[Any], axis: str, data: Json, *, tops: Any = None
) -> None:
    fig, ax = _plt().subplots(figsize=(7.5, 0.32 * len(names) + 1.0))
    ys = list(range(len(names)))[::-1]
    ax.barh(ys, [v or 0 for v in values], color="#4c72b0")
    if tops:
        err = [max(0.0, (t or 0) - (v or 0)) for v, t in zip(values, tops, strict=True)]
        xs = [v or 0 for v in values]
        ax.errorbar(xs, ys, xerr=[[0] * len(err), err], fmt="none", ecolor="0.3", capsize=2)
    ax.set_yticks(ys, [n.replace("`", "") for n in names])
    ax.set_xlabel(axis)
    _save(fig, path, data)


def lines_plot(path: Path, thr: Mapping[str, Any], data: Json) -> None:
    fig, ax = _plt().subplots(figsize=(7.5, 3.6))
    for key, points in thr.items():
        style = "--" if key.endswith("_floor") else "-"
        ax.plot(
            [int(n) for n in points],
            list(points.values()),
            style,
            marker="o",
            label=label(key).replace("`", ""),
        )
    ax.set_xscale("log", base=2)
    ax.set_xticks([int(n) for n in next(iter(thr.values()))], list(next(iter(thr.values()))))
    ax.set_xlabel("requests in flight")
    ax.set_ylabel("million requests / s")
    ax.legend(fontsize=6.5)
    _save(fig, path, data)


# -- the page -------------------------------------------------------------------------------
def load(directory: Path) -> tuple[dict[str, tuple[Path, Json]], list[str]]:
    """The newest file of each known benchmark, and a line for every other file."""
    found: dict[str, tuple[Path, Json]] = {}
    others: list[str] = []
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            others.append(f"- `{path.name}`: not read ({type(exc).__name__})")
            continue
        name = data.get("benchmark") if isinstance(data, dict) else None
        if name not in KNOWN:
            others.append(f"- `{path.name}`: not a results file of these benchmarks")
        elif name in found:  # the newer one is shown
            old, new = sorted([found[name], (path, data)], key=lambda f: str(f[1].get("date")))
            others.append(f"- `{old[0].name}`: an older `{name}` than `{new[0].name}`")
            found[name] = new
        else:
            found[name] = (path, data)
    return found, others


def render(directory: Path) -> tuple[str, dict[str, Figure]]:
    found, others = load(directory)
    figs: dict[str, Figure] = {}
    out = [
        "# Performance",
        "",
        "<!-- Generated by bench/report.py from bench/results/*.json; do not edit. -->",
        "",
        "What a round trip through each dispatch shape costs against a bare kernel that does "
        "nothing but answer (the *floor*, compiled and measured in the same run), what start-up "
        "costs against loading an already-linked cubin, and what the build adds. Every figure "
        "comes from a results file in `bench/results/` and says the GPU, driver and date it was "
        "measured on; the advice built on them is in {doc}`guides/dispatch-kernel`. For scale: "
        "CUDA-Q realtime's design targets are a p99 round trip below 10 µs and more than a "
        "million messages a second.",
        "",
        *headline(found),
    ]
    for name in KNOWN:
        if name not in found:
            out += [f"## `{name}`", "", f"Not measured yet: no `{name}` results file.", ""]
            continue
        section = {"dispatch": dispatch_section, "dispatch_multigpu": multigpu_section}.get(
            name, startup_section if name.startswith("startup") else build_section
        )
        out += section(name, *found[name], figs)
    out += [
        "## How to reproduce",
        "",
        "On a machine with a GPU, `bash tools/gpu-check.sh` installs the project and "
        "example_app, runs every GPU test and every benchmark, and leaves the results in "
        "`bench/results/gpu-run/`; copy the JSON files into `bench/results/` and run "
        "`python bench/report.py`. One at a time:",
        "",
        *(f"- `{n}`: `{how}` ({needs})" for n, (how, needs) in HOW_TO.items()),
        "",
        "Round trips move between hosts of one GPU model, and on one host over minutes, by more "
        "than some differences between kernels: compare kernels paired with a floor measured "
        "in the same run, never against a figure from another host.",
        "",
    ]
    if others:
        out += ["Files in the results directory not shown above:", "", *others, ""]
    return "\n".join(out).rstrip("\n") + "\n", figs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "performance.md")
    parser.add_argument("--figures", type=Path, default=ROOT / "docs" / "_static" / "perf")
    parser.add_argument("--no-figures", action="store_true", help="write the page only")
    args = parser.parse_args(argv)
    page, figs = render(args.results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(page, encoding="utf-8")
    if not args.no_figures:
        for name, draw in figs.items():
            draw(args.figures / name)
    print(f"wrote {args.out} ({page.count(chr(10))} lines, {len(figs)} figures)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
