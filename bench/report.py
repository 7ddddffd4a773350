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
from functools import partial
from itertools import pairwise
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LABELS = {
    "pingpong_floor": "floor: bare ping-pong kernel",
    "warp_floor": "floor: bare warp kernel",
    "builtin": "built-in",
    "single_thread": "single-thread",
    "cooperative_grid": "cooperative grid",
    "cluster": "cluster",
    "warp_parallel": "warp-parallel",
    # graph.json's cases
    "floor_one_kernel": "floor: bare device launch, one kernel",
    "floor_two_kernels": "floor: bare device launch, two kernels",
    "graph_one_kernel": "graph handler, one kernel",
    "graph_two_kernels": "graph handler, two kernels (`graph_increment`)",
    "host_floor_one_kernel": "floor: bare host launch, one kernel",
    "host_floor_two_kernels": "floor: bare host launch, two kernels",
    "host_graph_one_kernel": "host path graph handler, one kernel",
    "host_graph_two_kernels": "host path graph handler, two kernels",
    "device_function": "device function, graph dispatch kernel",
    "device_function_builtin": "device function, built-in kernel",
    # wire.json's rows
    "udp_echo_floor": "UDP floor: C++ echo thread",
    "udp_host_native": "UDP, host path, native handler",
    "udp_host_python": "UDP, host path, Python handler",
    "udp_gpu_floor": "UDP + GPU ring floor: C++ thread and kernel",
    "udp_device": "UDP, device path, single-thread dispatcher",
    "ring_floor": "ring floor: two C threads",
    "host_native": "in process, native handler, C client",
    "host_python": "in process, Python handler, `RingClient.call`",
    "host_python_c_client": "in process, Python handler, C client",
    "host_native_python_client": "in process, native handler, `RingClient.call`",
}
KINDS = ("single_thread", "builtin", "cluster", "cooperative_grid")  # headline order
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


class Page:
    """What the sections give the page besides their own lines: headline rows and figures."""

    def __init__(self) -> None:
        self.headline: list[list[str]] = []
        self.figures: dict[str, Figure] = {}

    def head(self, data: Json, what: str, measured: str, floor: str, against: str) -> None:
        """A row of the headline: a path against its floor, where and when it ran."""
        self.headline.append([what, measured, floor, against, *where(data).values()])

    def figure(self, name: str, alt: str, draw: Figure) -> list[str]:
        """A figure to draw as ``_static/perf/<name>``, and the page's line for it."""
        self.figures[name] = draw
        return [f"![{alt}](_static/perf/{name})", ""]


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


def over(value: Any, floor: Any) -> str:
    return f"{fmt(value / floor if value and floor else None, 3)}×"


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
    driver = " / ".join([str(nvidia)] * bool(nvidia) + [f"CUDA {cuda}"] * bool(cuda)) or "—"
    return {"gpu": gpu, "driver": driver, "date": str(data.get("date") or "?")[:10]}


def provenance(name: str, path: Path, data: Json) -> list[str]:
    w, v = where(data), data.get("versions") or {}
    versions = ", ".join(f"{k} {x}" for k, x in v.items() if x is not None)
    host = data.get("host") or {}
    cpus = host.get("cpus") and f"{host['cpus']} CPUs"
    cpu = ", ".join(str(x) for x in (host.get("cpu"), cpus) if x)
    return [
        f"`bench/results/{path.name}`, written by `{BENCHMARKS[name][2]}`: {w['gpu']}, driver "
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


# -- sections -------------------------------------------------------------------------------
def dispatch_section(name: str, path: Path, d: Json, page: Page) -> list[str]:
    lat, lat_r = d.get("latency_us") or {}, d.get("latency_random_arrival_us") or {}
    paired, thr = d.get("paired") or {}, d.get("throughput_mrps") or {}
    keys = ["pingpong_floor", *(k for k in lat if k != "pingpong_floor")]
    floor = f"{fmt(get(lat, 'pingpong_floor', 'p50'))} µs"
    for key in (k for kind in KINDS for k in (kind, f"{kind}:thread") if k in paired):
        ratio = f"{fmt(get(paired, key, 'b2b', 'p50_over_floor'), 3)}×"
        value = f"{fmt(get(lat, key, 'p50'))} µs"
        page.head(d, f"{label(key)}: round trip p50", value, floor, ratio)
    if "warp_parallel:thread" in thr:
        value, under = get(thr, "warp_parallel:thread", "64"), get(thr, "warp_floor", "64")
        what = "warp-parallel, thread-shaped `echo_thread`: 64 in flight"
        page.head(d, what, f"{fmt(value)} M/s", f"{fmt(under)} M/s", over(value, under))
    py = d.get("python_client_us")
    if py:
        diff, native = f"{py.get('over_native_p50_us', 0):+.2f} µs", get(py, "native", "p50")
        value, under = f"{fmt(py.get('p50'))} µs", f"{fmt(native)} µs (native client)"
        page.head(d, "Python `RingClient.call`: round trip p50", value, under, diff)

    def row(k: str) -> list[str]:
        floor = k == "pingpong_floor"
        ratio = 1.0 if floor else get(paired, k, "b2b", "p50_over_floor")
        r_ratio = 1.0 if floor else get(paired, k, "random", "p50_over_floor")
        cells = (get(lat, k, "p50"), get(lat, k, "p99"), ratio, get(lat_r, k, "p50"), r_ratio)
        return [label(k), *(fmt(v, 2 if i in (0, 1, 3) else 3) for i, v in enumerate(cells))]

    rows = [row(k) for k in keys if k in lat]
    cfg = d.get("config") or {}
    out = [
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
        stats = {label(k): lat.get(k) for k in keys}
        out += latency_bars(page, "dispatch_latency.png", "Round trip per dispatch shape", stats, d)
    if thr:
        counts = list(next(iter(thr.values())))
        out += table(
            ["Throughput (M requests/s) by requests in flight", *counts],
            ([label(k), *(fmt(v.get(n), 3) for n in counts)] for k, v in thr.items()),
        )
        alt = "Throughput by requests in flight"
        out += page.figure("dispatch_throughput.png", alt, lambda p: lines_plot(p, thr, d))
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
    note = f"each the median of {repeat} whole runs; the tables are the last run's"
    note = note if repeat else "one run"
    out += [f"Goals ({note}; *Floor's own*: the bare kernel's p99 / p50 over the same rounds):", ""]
    return out + goals_table(d.get("goals"))


def graph_floor(row: str) -> str | None:
    """The floor of a graph.json row (the same graph launched bare), or None."""
    for prefix in ("host_", ""):
        for shape in ("one_kernel", "two_kernels"):
            if row == f"{prefix}graph_{shape}":
                return f"{prefix}floor_{shape}"
    return None


def graph_section(name: str, path: Path, g: Json, page: Page) -> list[str]:
    cases, cfg = g.get("cases") or {}, g.get("settings") or {}
    for key in ("graph_two_kernels", "graph_one_kernel", "host_graph_two_kernels"):
        floor = graph_floor(key)
        if key in cases and floor in cases:
            value, under = get(cases, key, "p50"), get(cases, floor, "p50")
            at = f"{fmt(under)} µs ({LABELS[floor or '']})"
            page.head(g, f"{LABELS[key]}: p50", f"{fmt(value)} µs", at, over(value, under))
    out = [
        f"One request at a time through `RingClient.call` ({cfg.get('payload_bytes')}-byte "
        f"arguments, each byte plus one), {fmt(cfg.get('rounds'), 0)} rounds of "
        f"{fmt(cfg.get('repeats'), 0)} timed calls per row after {fmt(cfg.get('warmup'), 0)} "
        "of warm-up, every row once a round. Each graph handler has a floor that launches the "
        "same graph bare (`bench/graph.cu`): from a persistent kernel in a device graph that "
        "fills the I/O context and launches it (device path), or from a host thread that copies "
        "the context and launches it on a stream (host path); no dispatcher. A device function "
        "through the graph dispatch kernel and through the built-in one, for comparison.",
        "",
    ]
    rows = []
    for key, c in cases.items():
        floor = graph_floor(key)
        ratio = over(get(c, "p50"), get(cases, floor, "p50")) if floor else ""
        p50, p99 = get(c, "p50"), get(c, "p99")
        tail = fmt(p99 / p50, 2) if p50 and p99 else ""
        rows.append([LABELS.get(key, key), fmt(get(c, "p50")), fmt(get(c, "p99")), tail, ratio])
    out += table(["Round trip (µs)", "p50", "p99", "p99 / p50", "p50 × floor"], rows)
    out += [*goals_table(g.get("goals")), *(graph_phases(g["phases"]) if "phases" in g else [])]
    stats = {LABELS.get(k, k): c for k, c in cases.items()}
    return out + (
        latency_bars(page, "graph.png", "Round trip of graph handlers", stats, g) if cases else []
    )


def graph_phases(ph: Json) -> list[str]:
    """graph.json's ``phases`` (``skbuild-cudaq phases --graph``): each step's median."""
    step, graph = ph.get("steps_us") or {}, ph.get("graph") or {}
    steps = ", ".join(f"{a} → {b} {fmt(step[b])}" for a, b in pairwise(["seen", *step]))
    return [f"Where `{ph.get('handler')}`'s time goes on the device path (`skbuild-cudaq phases "
            f"--graph`, {fmt(ph.get('requests'), 0)} requests, medians, µs): {steps}; "
            f"{fmt(ph.get('device_us'))} on the device in all, the launch call "
            f"{fmt(graph.get('launch_call_us'))}, {fmt(graph.get('retries_mean'), 3)} launch "
            f"retries a request (`%globaltimer` times the steps from the launch on, in steps of "
            f"{fmt(graph.get('timer_step_ns'), 0)} ns here).", ""]  # fmt: skip


def wire_section(name: str, path: Path, w: Json, page: Page) -> list[str]:
    cfg, lat, thr = w.get("settings") or {}, w.get("latency") or {}, w.get("throughput") or {}
    for key in ("udp_device", "udp_host_native", "udp_host_python", "host_native", "host_python"):
        floor = get(lat, key, "floor")
        if floor in lat:
            value, under = f"{fmt(lat[key]['p50_us'])} µs", fmt(lat[floor]["p50_us"])
            ratio = f"{fmt(lat[key].get('p50_over_floor'), 3)}×"
            page.head(w, f"{LABELS[key]}: p50", value, f"{under} µs ({LABELS[floor]})", ratio)
    ring = cfg.get("ring") or [None, None]
    out = [
        f"The host path in process (`HostDispatcher`: a ring of {ring[0]} slots of {ring[1]} "
        f"bytes, {cfg.get('arg_bytes')}-byte arguments) and over UDP (the test server, "
        f"{cfg.get('datagram_bytes')}-byte datagrams on loopback from a C++ client), each "
        f"against a floor in plain C++ built in the same run. {cfg.get('rounds')} rounds of "
        f"{fmt(cfg.get('samples'), 0)} round trips per row, floors and paths interleaved: each "
        "figure is the median over rounds, *× floor* the median of a row's p50 over its "
        "floor's in the same round. Throughput: requests a second with "
        f"{cfg.get('in_flight')} in flight. Goals:",
        "",
    ]
    out += goals_table(w.get("goals")) + errors(w)
    header = ["Round trip", "p50 (µs)", "p99 (µs)", "p99 / p50 (<= 2)", "p50 × floor"]
    rows = (  # UDP rows, then the ring's (LABELS' order); a p99 over 2x its p50 in bold
        [LABELS.get(k, k), fmt(r.get("p50_us")), fmt(r.get("p99_us")),
         fmt(r.get("p99_over_p50")) if r.get("p99_met") else f"**{fmt(r.get('p99_over_p50'))}**",
         fmt(r.get("p50_over_floor"), 3), fmt(get(thr, k, "requests_per_s"), 0),
         fmt(get(thr, k, "over_floor"), 3)]
        for k, r in sorted(lat.items(), key=lambda kr: [*LABELS, kr[0]].index(kr[0]))
    )  # fmt: skip
    out += table([*header, f"requests/s, {cfg.get('in_flight')} in flight", "× floor"], rows)
    breakdown = w.get("breakdown_us") or {}
    if breakdown:
        out += ["Where the time goes (differences of p50s, µs):", ""]
        out += [*(f"- {k}: {fmt(v, 3)}" for k, v in breakdown.items()), ""]
    return out


def flood_section(name: str, path: Path, f: Json, page: Page) -> list[str]:
    setup, server = f.get("setup") or {}, f.get("server") or {}
    flood, client = setup.get("flood") or {}, setup.get("client") or {}
    fraction = f"{100 * float(f.get('answered_fraction') or 0):.1f} %"
    return [
        f"A correct UDP client under a flood (CPU only, loopback): one process sends valid "
        f"requests from {flood.get('sockets')} sockets as fast as it can "
        f"({fmt(flood.get('sent'), 0)} datagrams) to the test server ({setup.get('ring')}), "
        f"never reading an answer; meanwhile a correct client makes {client.get('calls')} "
        f"calls, one at a time, {client.get('timeout_s')} s each at most.",
        "",
        *table(["Correct client answered", "Server received", "forwarded", "shed", "held"],
               [[fraction, *(fmt(server.get(k), 0) for k in
                             ("received", "forwarded", "shed", "held"))]]),
    ]  # fmt: skip


def python_device_section(name: str, path: Path, d: Json, page: Page) -> list[str]:
    build, first = d.get("build_seconds") or {}, d.get("time_to_first_answer_s") or {}
    answer = (
        f" Time to the first answer from a fresh process: the notebook path (define, compile, "
        f"link, serve) {fmt(first.get('notebook'))} s, a built extension "
        f"{fmt(first.get('built'))} s."
        if first
        else ""
    )
    return [
        "Python device code (numba-cuda) against its C++ twin, in the same run and dispatch "
        "kernel: `twin_*` is the Python handler's p50 (or throughput) over the C++ one's, "
        "`dispatcher_p50` the Python dispatch kernel's over the C++ one's. Building one handler "
        f"module: numba {fmt(build.get('numba'))} s, nvcc {fmt(build.get('nvcc'))} s.{answer}",
        "",
        *goals_table(d.get("goals")),
    ]


def multigpu_section(name: str, path: Path, m: Json, page: Page) -> list[str]:
    point = get(m, "summary", "warp_parallel_mrps", "64") or {}
    what = f"{len(m.get('devices') or [])} GPUs: warp-parallel aggregate, 64 in flight each"
    value, one = f"{fmt(point.get('aggregate'))} M/s", f"{fmt(point.get('one_gpu'))} M/s"
    page.head(m, what, value, f"{one} (one GPU)", f"{fmt(point.get('scaling'), 3)}×")
    out = [
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
    return out + goals_table(m.get("goals"))


def startup_section(name: str, path: Path, s: Json, page: Page) -> list[str]:
    results, inputs = s.get("results") or {}, s.get("inputs") or {}
    ms = {k: (get(r, "median_in_process_s") or math.nan) * 1e3 for k, r in results.items()}
    for key in ("cold", "warm", "answer_warm") if results else ():
        what = f"start-up{' (CUDA 12)' * (name == 'startup_cu12')}, {START[key]}"
        ratio = f"{fmt(get(results, key, 'ratio_to_floor'), 3)}×"
        page.head(s, what, f"{fmt(ms.get(key), 0)} ms", f"{fmt(ms.get('floor'), 0)} ms", ratio)
    out = [
        f"From a fresh process's first statement to a launchable kernel handle "
        f"(`{inputs.get('kernel')}`, {inputs.get('arch')}, binary "
        f"{fmt(inputs.get('binary_bytes'), 0)} bytes, linked cubin "
        f"{fmt(inputs.get('cubin_bytes'), 0)} bytes), and to the first answer; the median of "
        f"{inputs.get('runs')} processes per variant, run in shuffled rounds.",
        "",
    ]
    rows = []
    for key, r in ((k, results[k]) for k in START if results.get(k)):
        wall = (r.get("median_wall_s") or math.nan) * 1e3
        ratios = [fmt(r.get(k), 3) for k in ("ratio_to_floor", "paired_ratio_median")]
        rows.append([START[key], fmt(ms[key], 1), fmt(wall, 1), *ratios, f"{r['ok']}/{r['runs']}"])
    header = ["Variant", "ms", "ms with the interpreter", "× floor", "paired × floor", "ok"]
    out += table(header, rows)
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
        axis = "ms from the first statement (median of fresh processes)"
        draw = partial(bars, names=[START[k] for k in keys], values=[ms[k] for k in keys])
        out += page.figure(f"{name}.png", "Start-up per variant", partial(draw, axis=axis, data=s))
    return out + goals_table(s.get("goals"))


def build_section(name: str, path: Path, b: Json, page: Page) -> list[str]:
    value, nvcc = f"{fmt(b.get('plugin_overhead_s'))} s", get(b, "median_s", "nvcc_kernels")
    share = get(b, "goals", "plugin_overhead_over_nvcc_kernels", "value")
    share = f"{fmt(share * 100 if share is not None else None, 1)} % of nvcc"
    page.head(b, "what the build adds to a wheel", value, f"{fmt(nvcc)} s (nvcc)", share)
    out = [f"{b.get('project')}, the median of {b.get('runs')} builds of each:", ""]
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
        draw = partial(bars, names=[names[k] for k in keys], values=[med[k] for k in keys])
        out += page.figure(
            "build_overhead.png", "Build times", partial(draw, axis="seconds (median)", data=b)
        )
    return out + goals_table(b.get("goals"))


def errors(data: Json) -> list[str]:
    kinds = ("errors", "skipped", "left_out")  # each: name -> why it is not measured
    errs = {k: v for kind in kinds for k, v in (data.get(kind) or {}).items()}

    def short(why: Any) -> str:  # the reason's first line, cut (a failed command's text is long)
        text = str(why).splitlines()[0] if str(why) else ""
        return text if len(text) <= 160 else text[:157] + "..."

    return [*(f"- Not measured, `{k}`: {short(v)}" for k, v in errs.items()), ""] if errs else []


def latency_bars(
    page: Page, name: str, alt: str, stats: Mapping[str, Any], data: Json
) -> list[str]:
    """A bar per row of ``stats`` (label -> percentiles): p50, whisker to p99."""
    p50s, p99s = [get(r, "p50") for r in stats.values()], [get(r, "p99") for r in stats.values()]
    axis = "round trip (µs): p50, whisker to p99"
    return page.figure(name, alt, lambda p: bars(p, list(stats), p50s, axis, data, tops=p99s))


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
        style, name = "--" if key.endswith("_floor") else "-", label(key).replace("`", "")
        ax.plot([int(n) for n in points], list(points.values()), style, marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xticks([int(n) for n in next(iter(thr.values()))], list(next(iter(thr.values()))))
    ax.set_xlabel("requests in flight")
    ax.set_ylabel("million requests / s")
    ax.legend(fontsize=6.5)
    _save(fig, path, data)


#: Each benchmark: its title, its section, how to reproduce it and what that needs.
BENCHMARKS: dict[str, tuple[str, Callable[..., list[str]], str, str]] = {
    "dispatch": ("Dispatch: round trip and throughput", dispatch_section,
                 "python bench/dispatch.py --repeat 3", "a GPU, example_app, nvcc and gcc"),
    "graph": ("Graph handlers", graph_section, "python bench/graph.py",
              "an sm_90+ GPU, example_app and nvcc"),
    "wire": ("The host path and the wire", wire_section, "python bench/wire.py",
             "a C++ compiler; a GPU for the device row"),
    "udp_flood": ("A UDP client under a flood", flood_section, "python bench/udp_flood.py",
                  "no GPU"),
    "python_device": ("Python device code against C++", python_device_section,
                      "python bench/python_device.py", "a GPU, example_app, numba-cuda and NVVM"),
    "dispatch_multigpu": ("Several GPUs", multigpu_section, "python bench/multigpu.py",
                          "two or more GPUs"),
    "startup": ("Start-up", startup_section, "python bench/startup.py", "a GPU"),
    "startup_cu12": ("Start-up with the CUDA 12 stack", startup_section,
                     "bash tools/gpu-cu12.sh", "a GPU; the CUDA 12 stack"),
    "build_overhead": ("Build overhead", build_section, "python bench/build_overhead.py",
                       "no GPU"),
}  # fmt: skip


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
        if name not in BENCHMARKS:
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
    page, sections = Page(), []
    for name, (title, section, _, _) in BENCHMARKS.items():
        if name in found:
            path, data = found[name]
            sections += [f"## {title}", "", *provenance(name, path, data)]
            sections += section(name, path, data, page) + errors(data) * (name != "wire")
        else:
            sections += [f"## `{name}`", "", f"Not measured yet: no `{name}` results file.", ""]
    header = ["Path", "Measured", "Floor", "Against the floor", "GPU", "Driver", "Date"]
    out = [
        "# Performance",
        "",
        "<!-- Generated by bench/report.py from bench/results/*.json; do not edit. -->",
        "",
        "What a round trip through each dispatch shape, a graph handler, the host path and the "
        "UDP front end costs against a bare implementation that does nothing but answer (the "
        "*floor*, compiled and measured in the same run), what start-up costs against loading "
        "an already-linked cubin, and what the build adds. Every figure comes from a results "
        "file in `bench/results/` and says the GPU, driver and date it was measured on; the "
        "advice built on them is in {doc}`guides/dispatch-kernel`. For scale: CUDA-Q "
        "realtime's design targets are a p99 round trip below 10 µs and more than a million "
        "messages a second.",
        "",
        *(["## Headline", "", *table(header, page.headline)] if page.headline else []),
        *sections,
        "## How to reproduce",
        "",
        "On a machine with a GPU, `bash tools/gpu-check.sh` installs the project and "
        "example_app, runs every GPU test and every benchmark, and leaves the "
        "results in `bench/results/gpu-run/`; copy the JSON files into `bench/results/` and run "
        "`python bench/report.py`. One at a time:",
        "",
        *(f"- `{n}`: `{how}` ({needs})" for n, (_, _, how, needs) in BENCHMARKS.items()),
        "",
        "Round trips move between hosts of one GPU model, and on one host over minutes, by more "
        "than some differences between kernels: compare kernels paired with a floor measured "
        "in the same run, never against a figure from another host.",
        "",
    ]
    if others:
        out += ["Files in the results directory not shown above:", "", *others, ""]
    return "\n".join(out).rstrip("\n") + "\n", page.figures


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
