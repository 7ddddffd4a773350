#!/usr/bin/env python3
"""Turn benchmark results (``bench/results/*.json``) into the docs' performance page.

    python bench/report.py [--results bench/results] [--out docs/performance.md]
                           [--figures docs/_static/perf]

Reads the JSON written by ``bench/dispatch.py``, ``bench/startup.py`` and
``bench/build_overhead.py`` (recognised by their ``"benchmark"`` key; with several
files of one benchmark, one in ``bench/results/`` itself beats those kept below it, such as
``history/``, then the newest ``"date"`` wins), writes the Markdown page with
its tables and draws the figures (PNG, matplotlib) next to it. Every section
states the device, driver, versions and date its file records. A benchmark with
no results file is reported as "not measured yet": nothing here makes a figure up.
Other JSON files are listed with their values, marked with what they do not state.

Over 400 lines: one renderer per benchmark's results (tables, figures, goals).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_RESULTS = ROOT / "bench" / "results"
DEFAULT_OUT = ROOT / "docs" / "performance.md"
DEFAULT_FIGURES = ROOT / "docs" / "_static" / "perf"
KNOWN = (
    "dispatch",
    "phases",
    "phases_nostamps",
    "python_client",
    "host_cpu",
    "python_host",
    "dispatch_multigpu",
    "startup",
    "startup_cu12",
    "startup_phases",
    "build_overhead",
    "build_compilers",
    "switch_link",
    "issue_rate",
    "shape_floors",
    "placement",
    "sass",
)
HOW_TO = {
    "dispatch": "`python bench/dispatch.py` on a GPU (needs example_app installed; "
    "`bash tools/gpu-check.sh` runs it)",
    "phases": "`python bench/phases.py` on a GPU (needs example_app installed and nvcc; "
    "`bash tools/gpu-check.sh` runs it)",
    "phases_nostamps": "`python bench/phases.py --no-stamps` on a GPU (`bash tools/gpu-check.sh` "
    "runs it)",
    "dispatch_multigpu": "`python bench/dispatch.py --devices all` on a machine with several GPUs "
    "(`bash tools/gpu-check.sh` runs it when it sees two or more)",
    "startup": "`python bench/startup.py` on a GPU (`bash tools/gpu-check.sh` runs it)",
    "startup_phases": "`python bench/startup_phases.py` on a GPU (`bash tools/gpu-check.sh` "
    "runs it)",
    "build_overhead": "`python bench/build_overhead.py` (no GPU needed)",
    "python_client": "`python bench/python_client.py` on a GPU (`bash tools/gpu-check.sh` runs it)",
    "host_cpu": "`python bench/host_cpu.py` on a GPU (`bash tools/gpu-check.sh` runs it)",
    "python_host": "`python bench/python_host.py` (gcc and two CPUs; no GPU needed)",
    "startup_cu12": "`bash tools/gpu-cu12.sh` on a GPU machine (after `--prepare` here)",
    "build_compilers": "`python bench/build_overhead.py --compilers OUT.json` (no GPU needed)",
    "switch_link": "`bash tools/gpu-check.sh` on a GPU (builds example_app without the handler "
    "switch and runs `bench/switch_link.py`)",
    "issue_rate": "`python bench/issue_rate.py` on a GPU (`bash tools/gpu-check.sh` runs it)",
    "shape_floors": "`python bench/shape_floors.py` on an sm_90+ GPU (`bash tools/gpu-check.sh` "
    "runs it)",
    "placement": "`python bench/placement.py` on a GPU (`bash tools/gpu-check.sh` runs it)",
    "sass": "`python bench/sass.py` (nvcc, nvJitLink and nvdisasm; no GPU needed)",
}


# ---------------------------------------------------------------------------------------------
# Reading results
# ---------------------------------------------------------------------------------------------


@dataclass
class Results:
    """The newest result of each known benchmark, the other JSON files, and unreadable ones."""

    by_benchmark: dict[str, tuple[Path, dict[str, Any]]] = field(default_factory=dict)
    others: list[tuple[Path, Any]] = field(default_factory=list)
    unreadable: list[tuple[Path, str]] = field(default_factory=list)
    superseded: list[Path] = field(default_factory=list)
    variants: list[tuple[Path, dict[str, Any]]] = field(default_factory=list)
    #: Every readable file of each known benchmark, the current one included (the runs kept in
    #: ``history/``): what the across-runs section follows.
    runs: dict[str, list[tuple[Path, dict[str, Any]]]] = field(default_factory=dict)


def _rank(directory: Path, path: Path, data: dict[str, Any]) -> tuple[bool, str]:
    """Which file of a benchmark is its current one: a file of ``directory`` itself beats any
    earlier run kept below it (``history/``), then the newest ``"date"``."""
    return path.parent == directory, str(data.get("date", ""))


def load_results(directory: Path) -> Results:
    found = Results()
    files = sorted(directory.rglob("*.json")) if directory.is_dir() else []
    for path in files:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            found.unreadable.append((path, str(exc).splitlines()[0]))
            continue
        name = data.get("benchmark") if isinstance(data, dict) else None
        if name == "phases" and _get(data, "config", "stamps") is False:
            name = "phases_nostamps"  # bench/phases.py --no-stamps: round trips only
        if name == "variant_ab" and isinstance(data, dict):
            found.variants.append((path, data))  # each experiment its own: none supersedes
            continue
        if name not in KNOWN:
            found.others.append((path, data))
            continue
        assert isinstance(data, dict)
        found.runs.setdefault(name, []).append((path, data))
        previous = found.by_benchmark.get(name)
        if previous is None or _rank(directory, path, data) > _rank(directory, *previous):
            if previous is not None:
                found.superseded.append(previous[0])
            found.by_benchmark[name] = (path, data)
        else:
            found.superseded.append(path)
    return found


def _difference(a: Any, b: Any) -> str:
    """``a - b`` formatted, or a dash when either is not a number."""
    x, y = _num(a), _num(b)
    return _fmt(x - y, 2) if x is not None and y is not None else "—"


def _get(data: Any, *keys: str | int) -> Any:
    for key in keys:
        in_list = isinstance(data, list) and isinstance(key, int) and -len(data) <= key < len(data)
        if (isinstance(data, Mapping) and key in data) or in_list:
            data = data[key]
        else:
            return None
    return data


def _mapping(data: Any, key: str) -> Mapping[str, Any]:
    """``data[key]`` if it is a mapping, else an empty one (results files may lack parts)."""
    value = data.get(key) if isinstance(data, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _fmt(value: Any, digits: int = 2, unit: str = "") -> str:
    number = _num(value)
    if number is None:
        return "—"
    text = f"{number:,.{digits}f}"
    return f"{text} {unit}".rstrip()


def _percent(fraction: Any) -> float | None:
    number = _num(fraction)
    return None if number is None else 100 * number


def _rel(path: Path, start: Path) -> str:
    """``path`` relative to ``start`` when it is inside it (or a sibling of it), else absolute."""
    relative = Path(os.path.relpath(path, start)).as_posix()
    return path.as_posix() if relative.startswith("../..") else relative


# ---------------------------------------------------------------------------------------------
# Provenance: device, driver, versions, date
# ---------------------------------------------------------------------------------------------


def provenance(name: str, data: dict[str, Any]) -> dict[str, str]:
    """What a results file says about where and when it was measured ("not recorded" if not)."""
    device = data.get("device")
    if isinstance(device, Mapping):
        parts = [str(device.get("name", "?"))]
        if device.get("arch"):
            parts.append(str(device["arch"]))
        if device.get("sms"):
            parts.append(f"{device['sms']} SMs")
        device_text = ", ".join(parts)
    elif device:
        device_text = str(device)
        if data.get("compute_capability"):
            device_text += f" (compute capability {data['compute_capability']})"
    elif isinstance(data.get("devices"), list) and data["devices"]:
        names = [
            f"{d.get('name', '?')} (compute capability {d.get('compute_capability', '?')})"
            for d in data["devices"]
            if isinstance(d, Mapping)
        ]
        device_text = f"{len(names)} GPUs: " + ", ".join(names)
    else:
        device_text = "not recorded"
    versions = _mapping(data, "versions")
    driver_parts = []
    nvidia = _get(data, "driver", "nvidia") or versions.get("nvidia_driver")
    api = _get(data, "driver", "cuda_driver_api") or versions.get("cuda_driver_api")
    if nvidia:
        driver_parts.append(f"NVIDIA driver {nvidia}")
    if api:
        driver_parts.append(f"CUDA driver API {api}")
    if not driver_parts:
        no_gpu = name in {"build_overhead", "python_host"}
        driver_parts.append("none (no GPU used)" if no_gpu else "not recorded")
    version_text = (
        ", ".join(
            f"{k} {v}"
            for k, v in versions.items()
            if v is not None and k not in {"nvidia_driver", "cuda_driver_api"}
        )
        or "not recorded"
    )
    host = data.get("host") if isinstance(data.get("host"), Mapping) else data.get("machine")
    host_text = (
        ", ".join(f"{k} {v}" for k, v in host.items() if v is not None)
        if isinstance(host, Mapping)
        else "not recorded"
    )
    return {
        "Date": str(data.get("date") or "not recorded"),
        "Device": device_text,
        "Driver": ", ".join(driver_parts),
        "Versions": version_text,
        "Host": host_text,
    }


def _provenance_md(name: str, path: Path, data: dict[str, Any], page_dir: Path) -> list[str]:
    prov = provenance(name, data)
    lines = [f"Measured from `{_rel(path, ROOT)}`:", ""]
    lines += [f"- **{key}:** {value}" for key, value in prov.items()]
    return [*lines, ""]


def _caption(name: str, data: dict[str, Any]) -> str:
    prov = provenance(name, data)
    return f"{prov['Device']} · {prov['Driver']} · {prov['Date']}"


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "font.size": 9})
    return plt


def _save(fig: Any, path: Path, caption: str, versions: str) -> None:
    fig.text(
        0.01, 0.01, f"{caption}\n{versions}", fontsize=6.5, color="0.35", va="bottom", wrap=True
    )
    fig.tight_layout(rect=(0, 0.09, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", metadata={"Software": None})
    _pyplot().close(fig)


def _short_versions(data: dict[str, Any]) -> str:
    versions = _mapping(data, "versions")
    return ", ".join(f"{k} {v}" for k, v in versions.items() if v is not None)[:220]


# ---------------------------------------------------------------------------------------------
# Sections
# ---------------------------------------------------------------------------------------------

Figure = Callable[[], None]


@dataclass
class Section:
    lines: list[str]
    figures: list[tuple[Path, Figure]] = field(default_factory=list)


def _table(header: list[str], rows: Iterable[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return [*out, ""]


def _goals(goals: Any, repeat: Any = None) -> list[str]:
    """The goals table; with ``repeat`` (``bench/dispatch.py --repeat``) each value is the median
    over the runs and the spread is shown next to it."""
    if not isinstance(goals, Mapping) or not goals:
        return []
    spread = isinstance(repeat, int) and repeat > 1
    # the ping-pong floor's own value over the same rounds (bench/dispatch.py's p99 goals)
    floors = any(isinstance(v, Mapping) and "floor_value" in v for v in goals.values())
    rows = []
    for key, value in goals.items():
        if isinstance(value, Mapping):
            met = value.get("met")
            row = [
                f"`{key}`",
                _fmt(value.get("value"), 3),
                str(value.get("goal", "—")),
                "yes" if met else ("no" if met is not None else "—"),
            ]
            if spread:
                row += [
                    _fmt(value.get("min"), 3),
                    _fmt(value.get("max"), 3),
                    f"{value.get('met_runs', '—')} of {repeat}",
                ]
            if floors:
                row.append(_fmt(value.get("floor_value"), 3) if "floor_value" in value else "—")
            rows.append(row)
        else:
            row = [f"`{key}`", "—", "—", "yes" if value is True else "no"]
            rows.append(row + ["—"] * ((3 if spread else 0) + (1 if floors else 0)))
    floor_head = ["Floor's own"] if floors else []
    floor_note = (
        " (*Floor's own*: the ping-pong floor's p99 / p50 over the rounds paired with the "
        "row's, the same number of samples over the same minutes: the bare kernel's tail on "
        "the same host, for comparison)"
        if floors
        else ""
    )
    if spread:
        return [
            f"Goals, as the benchmark checked them: each the median of {repeat} whole runs in one "
            f"process, met or not on that median, with the runs' spread{floor_note}:",
            "",
            *_table(
                ["Goal", "Median", "Target", "Met", "min", "max", "runs met", *floor_head], rows
            ),
        ]
    return [
        f"Goals, as the benchmark checked them{floor_note}:",
        "",
        *_table(["Goal", "Value", "Target", "Met", *floor_head], rows),
    ]


def _errors(errors: Any) -> list[str]:
    if not isinstance(errors, Mapping) or not errors:
        return []
    lines = ["Not measured in this run (the benchmark recorded an error):", ""]
    lines += [f"- `{k}`: {v}" for k, v in errors.items()]
    return [*lines, ""]


_LAT_ORDER = ("pingpong_floor", "builtin", "single_thread", "cooperative_grid", "cluster")
_LAT_NAMES = {
    "pingpong_floor": "floor (bare ping-pong kernel)",
    "builtin": "built-in unified kernel",
    "single_thread": "single-thread dispatcher",
    "cooperative_grid": "cooperative-grid dispatcher",
    "cluster": "cluster dispatcher",
    "warp_parallel": "warp-parallel dispatcher",
    "warp_floor": "floor (bare warp kernel)",
}


def _ordered(keys: Iterable[str], order: tuple[str, ...]) -> list[str]:
    keys = list(keys)
    return [k for k in order if k in keys] + sorted(k for k in keys if k not in order)


def dispatch_section(path: Path, data: dict[str, Any], page_dir: Path, fig_dir: Path) -> Section:
    lines = ["## Dispatch: round trip and throughput", ""]
    lines += _provenance_md("dispatch", path, data, page_dir)
    config = _mapping(data, "config")
    if config:
        lines += [
            "Setup: "
            + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in config.items() if v is not None)
            + ".",
            "",
        ]
    figures: list[tuple[Path, Figure]] = []
    latency = _mapping(data, "latency_us")
    random = _mapping(data, "latency_random_arrival_us")
    floor = _num(_get(latency, "pingpong_floor", "p50"))
    floor_random = _num(_get(random, "pingpong_floor", "p50"))
    if latency:
        lines += ["### Round trip (µs)", ""]
        if random:
            lines += [
                "Back to back (each request written as soon as the previous answer is seen), "
                "and with random arrival (a think time drawn from "
                f"[0, {config.get('random_arrival_gap_ns', '?')}] ns before each request, not "
                "timed). Back to back, a request meets the kernel's poll loop (one flag load "
                "per PCIe round trip) at the same phase every time, and that phase depends on "
                "how long everything else took: a kernel can gain or lose up to a round trip "
                "by where it lands. With random arrival every phase is met as often, so those "
                "ratios compare what the kernels do.",
                "",
            ]
        rows = []
        for key in _ordered(latency, _LAT_ORDER):
            stats = latency[key]
            p50 = _num(_get(stats, "p50"))
            ratio = f"{p50 / floor:.2f}×" if p50 is not None and floor else "—"
            row = [
                _LAT_NAMES.get(key, key),
                _fmt(_get(stats, "min")),
                _fmt(_get(stats, "p50")),
                _fmt(_get(stats, "p99")),
                _fmt(_get(stats, "p99.9")),
                _fmt(_get(stats, "mean")),
                _fmt(_get(stats, "n"), 0),
                ratio,
            ]
            if random:
                r50 = _num(_get(random, key, "p50"))
                row += [
                    _fmt(r50),
                    _fmt(_get(random, key, "p99")),
                    f"{r50 / floor_random:.2f}×" if r50 is not None and floor_random else "—",
                ]
            rows.append(row)
        header = ["Dispatcher", "min", "p50", "p99", "p99.9", "mean", "n", "p50 / floor p50"]
        if random:
            header += ["random: p50", "random: p99", "random: p50 / floor"]
        lines += _table(header, rows)
        latency_png = fig_dir / "dispatch_latency.png"
        lines += [f"![Round-trip latency per dispatcher]({_rel(latency_png, page_dir)})", ""]

        def draw_latency() -> None:
            plt = _pyplot()
            keys = _ordered(latency, _LAT_ORDER)
            fig, ax = plt.subplots(figsize=(7.5, 0.55 * len(keys) + 1.6))
            marks = (
                ("min", "|", "0.4"),
                ("p50", "o", "C0"),
                ("p99", "s", "C1"),
                ("p99.9", "^", "C3"),
            )
            for row, key in enumerate(reversed(keys)):
                stats = latency[key]
                lo, hi = _num(_get(stats, "min")), _num(_get(stats, "p99.9"))
                if lo is not None and hi is not None:
                    ax.hlines(row, lo, hi, color="0.75", lw=2, zorder=1)
                for stat, marker, color in marks:
                    value = _num(_get(stats, stat))
                    if value is not None:
                        ax.plot(
                            value,
                            row,
                            marker,
                            color=color,
                            zorder=2,
                            label=stat if row == 0 else None,
                        )
            if floor:
                ax.axvline(floor, color="0.3", ls="--", lw=1, label="floor p50")
            ax.set_yticks(range(len(keys)))
            ax.set_yticklabels([_LAT_NAMES.get(k, k) for k in reversed(keys)])
            ax.set_xlabel("round trip (µs)")
            ax.set_title("Round-trip latency distribution per dispatcher vs the floor")
            ax.set_ylim(-0.6, len(keys) - 0.4 + 0.8)  # headroom for the legend
            ax.legend(loc="upper center", fontsize=7, ncols=5, frameon=False)
            ax.grid(axis="x", alpha=0.3)
            _save(fig, latency_png, _caption("dispatch", data), _short_versions(data))

        figures.append((latency_png, draw_latency))
    else:
        lines += ["Round trip: not measured in this run.", ""]

    throughput = _mapping(data, "throughput_mrps")
    if throughput:
        in_flight = sorted(
            {
                int(n)
                for v in throughput.values()
                if isinstance(v, Mapping)
                for n in v
                if str(n).isdigit()
            }
        )
        lines += ["### Throughput (million requests/s) by requests in flight", ""]
        order = ("pingpong_floor", "single_thread", "warp_floor", "warp_parallel")
        rows = [
            [_LAT_NAMES.get(k, k)] + [_fmt(_get(throughput[k], str(n)), 3) for n in in_flight]
            for k in _ordered(throughput, order)
        ]
        lines += _table(["Dispatcher", *[str(n) for n in in_flight]], rows)
        throughput_png = fig_dir / "dispatch_throughput.png"
        lines += [f"![Throughput against requests in flight]({_rel(throughput_png, page_dir)})", ""]

        def draw_throughput() -> None:
            plt = _pyplot()
            fig, ax = plt.subplots(figsize=(7.5, 4.2))
            for key in _ordered(throughput, order):
                pts = [(n, _num(_get(throughput[key], str(n)))) for n in in_flight]
                xs = [n for n, v in pts if v is not None]
                ys = [v for _, v in pts if v is not None]
                style = "--" if "floor" in key else "-"
                ax.plot(xs, ys, style, marker="o", label=_LAT_NAMES.get(key, key))
            ax.set_xscale("log", base=2)
            ax.set_xticks(in_flight)
            ax.set_xticklabels([str(n) for n in in_flight])
            ax.set_xlabel("requests in flight")
            ax.set_ylabel("million requests / s")
            ax.set_title("Throughput vs requests in flight")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
            _save(fig, throughput_png, _caption("dispatch", data), _short_versions(data))

        figures.append((throughput_png, draw_throughput))
    else:
        lines += ["Throughput: not measured in this run.", ""]

    client = data.get("python_client_us")
    if isinstance(client, Mapping):
        lines += [
            "### Python client",
            "",
            "`RingClient.call()` round trip from Python through the single-thread dispatcher (µs):",
            "",
        ]
        rows = [
            [
                _fmt(client.get("p50")),
                _fmt(client.get("p99")),
                _fmt(client.get("p99.9")),
                _fmt(client.get("overhead_over_floor_p50_us")),
                _fmt(client.get("overhead_over_native_single_thread_p50_us")),
                _fmt(client.get("overhead_over_native_single_thread_random_arrival_p50_us")),
                _fmt(client.get("n"), 0),
            ]
        ]
        lines += _table(
            [
                "p50",
                "p99",
                "p99.9",
                "p50 over floor",
                "p50 over native client",
                "the same, random arrival",
                "n",
            ],
            rows,
        )
        if client.get("paired"):
            lines += [
                f"Over the native client: paired ({client['paired']}: native, then Python, back "
                "to back and with random arrival), the median over rounds of the Python p50 "
                "minus the native p50 of the same round.",
                "",
            ]
    if _mapping(data, "paired"):
        lines += [
            "The goals' ratios to the floor are *paired*: each label was measured in "
            f"{config.get('latency_rounds', '?')} rounds, each right after a round of the floor "
            "on the same ring, and a ratio is the median over rounds of the label's p50 over "
            "that round's floor p50 (`paired` in the JSON; round trips drift over a run by more "
            "than the goals' margins). The tables above pool every round's samples.",
            "",
        ]
    repeat = data.get("repeat")
    if isinstance(repeat, int) and repeat > 1:
        lines += [
            f"This file holds {repeat} whole runs of the benchmark in one process; the tables "
            "above are the last run's.",
            "",
        ]
    lines += _goals(data.get("goals"), repeat)
    lines += _errors(data.get("errors"))
    return Section(lines, figures)


_START_ORDER = ("floor", "cold", "warm", "answer_cold", "answer_warm", "cuda_core")
_START_NAMES = {
    "floor": "raw load of a linked cubin (floor)",
    "cold": "skbuild-cudaq, cold (links with nvJitLink)",
    "warm": "skbuild-cudaq, warm (link cache hit)",
    "answer_cold": "first RPC answered, cold (import → link → start → one call)",
    "answer_warm": "first RPC answered, warm (link cache hit)",
    "cuda_core": "cuda.core Linker",
}


def _start_rows(results: Mapping[str, Any]) -> list[list[str]]:
    rows = []
    for key in _ordered(results, _START_ORDER):
        r = results[key] if isinstance(results[key], Mapping) else {}
        median = _num(r.get("median_in_process_s"))
        wall = _num(r.get("median_wall_s"))
        rows.append(
            [
                _START_NAMES.get(key, key),
                _fmt(median * 1e3 if median is not None else None, 1),
                _fmt(wall * 1e3 if wall is not None else None, 1),
                _fmt(r.get("ratio_to_floor"), 2),
                _fmt(r.get("paired_ratio_median"), 2),
                f"{r.get('ok', '—')}/{r.get('runs', '—')}",
                "; ".join(map(str, r.get("errors", []))) or "",
            ]
        )
    return rows


_ANSWER_PHASES = (
    "import",
    "get_device_kernel",
    "dispatcher",
    "get_device_handler",
    "start",
    "client",
    "call",
)


def _answer_phases(results: Mapping[str, Any]) -> list[str]:
    """Where the first answer's time goes (medians of each step, ms)."""
    keys = [k for k in ("answer_cold", "answer_warm") if _mapping(results.get(k), "phases_ms")]
    if not keys:
        return []
    rows = []
    for step in _ANSWER_PHASES:
        values = [_get(results, k, "phases_ms", step) for k in keys]
        if any(_num(v) is not None for v in values):
            rows.append([f"`{step}`", *(_fmt(v, 2) for v in values)])
    return [
        "Where the first answer's time goes (median of each step, ms; `get_device_kernel` "
        "includes the context and the link or cache read):",
        "",
        *_table(["Step", *(_START_NAMES[k].split(" (")[0] for k in keys)], rows),
    ]


_START_HEADER = [
    "Variant",
    "in process (ms)",
    "with interpreter start (ms)",
    "× floor",
    "median of per-round × floor",
    "runs ok",
    "errors",
]


def _goal_line(goals: Any) -> list[str]:
    if not isinstance(goals, Mapping) or not goals:
        return []
    return [
        "Goals, as the benchmark checked them: "
        + ", ".join(f"`{k}`: {'met' if v else 'not met'}" for k, v in goals.items())
        + ".",
        "",
    ]


def startup_section(path: Path, data: dict[str, Any], page_dir: Path, fig_dir: Path) -> Section:
    name = str(data.get("benchmark", "startup"))
    lines = [f"## {SECTIONS.get(name, SECTIONS['startup'])[0]}", ""]
    lines += _provenance_md(name, path, data, page_dir)
    if data.get("stack"):
        lines += [f"Stack: {data['stack']}.", ""]
    inputs = _mapping(data, "inputs")
    if inputs:
        lines += [
            f"Time from a fresh process's first statement to a launchable kernel handle "
            f"(`{inputs.get('kernel', '?')}`, arch {inputs.get('arch', '?')}, binary "
            f"{_fmt(inputs.get('binary_bytes'), 0)} bytes, linked cubin "
            f"{_fmt(inputs.get('cubin_bytes'), 0)} bytes); median of "
            f"{inputs.get('runs', '?')} processes per variant.",
            "",
        ]
    results = _mapping(data, "results")
    figures: list[tuple[Path, Figure]] = []
    if results:
        lines += _table(_START_HEADER, _start_rows(results))
        warm = _mapping(results, "warm")
        if "nvjitlink_loaded" in warm:
            lines += [
                f"Warm start loaded libnvJitLink: `{', '.join(warm['nvjitlink_loaded'])}` "
                "(expected `false`).",
                "",
            ]
        lines += _answer_phases(results)
        png = fig_dir / f"{name}.png"
        lines += [f"![Start-up time per variant]({_rel(png, page_dir)})", ""]

        def draw_startup() -> None:
            plt = _pyplot()
            keys = [
                k
                for k in _ordered(results, _START_ORDER)
                if _num(_get(results, k, "median_in_process_s")) is not None
            ]
            fig, ax = plt.subplots(figsize=(7.5, 0.6 * max(len(keys), 1) + 1.6))
            for row, key in enumerate(reversed(keys)):
                r = results[key]
                ax.barh(row, r["median_in_process_s"] * 1e3, color="C0", alpha=0.6)
                runs = [x * 1e3 for x in r.get("in_process_s", []) if _num(x) is not None]
                ax.plot(runs, [row] * len(runs), "k.", ms=4)
            ax.set_yticks(range(len(keys)))
            ax.set_yticklabels([_START_NAMES.get(k, k) for k in reversed(keys)])
            ax.set_xlabel("first statement → kernel handle (ms); bar: median, dots: runs")
            ax.set_title("Cold vs warm start vs raw load")
            ax.grid(axis="x", alpha=0.3)
            _save(fig, png, _caption(name, data), _short_versions(data))

        figures.append((png, draw_startup))
    else:
        lines += ["No start-up figures in this file.", ""]
    lines += _goal_line(data.get("goals"))
    many = data.get("many_kernels")
    if isinstance(many, Mapping):
        many_inputs = _mapping(many, "inputs")
        lines += [
            f"**A module with {many_inputs.get('kernels', '?')} dispatch kernels** (binary "
            f"{_fmt(many_inputs.get('binary_bytes'), 0)} bytes, linked cubin "
            f"{_fmt(many_inputs.get('cubin_bytes'), 0)} bytes; median of "
            f"{many_inputs.get('runs', '?')} processes per variant):",
            "",
        ]
        lines += _table(_START_HEADER, _start_rows(_mapping(many, "results")))
        lines += _goal_line(many.get("goals"))
        split = _mapping(many, "link_split_compile")
        if split:
            lines += [
                "Cold link of that module in one process: "
                f"{_fmt(_get(split, 'default', 'median_s'), 3)} s by default, "
                f"{_fmt(_get(split, 'split_compile_0', 'median_s'), 3)} s with nvJitLink's "
                f"`-split-compile=0` ({_fmt(split.get('speedup'), 2)}× faster; cubins "
                f"{'identical' if split.get('identical_cubin') else 'different'}).",
                "",
            ]
    return Section(lines, figures)


_PHASE_PROBES = {
    "floor": "Raw load of a linked cubin, phase by phase",
    "link": "Linking (cache miss), phase by phase",
    "warm": "Our warm path, step by step (each step's own time)",
    "overlap": "Link on a worker thread while the main thread creates the context",
}


def phases_section(path: Path, data: dict[str, Any], page_dir: Path, fig_dir: Path) -> Section:
    lines = ["## Start-up phases: where the time goes", ""]
    lines += _provenance_md("startup_phases", path, data, page_dir)
    inputs = _mapping(data, "inputs")
    if inputs:
        lines += [
            f"Medians of {inputs.get('runs', '?')} fresh processes, in ms "
            f"(binary `{Path(str(inputs.get('binary', '?'))).name}`, kernel "
            f"`{inputs.get('kernel', '?')}`). This is what the start-up path is designed on: "
            "context creation dominates and releases the GIL, so the link runs meanwhile.",
            "",
        ]
    results = _mapping(data, "results")
    for key, title in _PHASE_PROBES.items():
        probe = results.get(key)
        if not isinstance(probe, Mapping):
            continue
        rows = [
            [f"`{name}`", _fmt(value, 2)]
            for name, value in probe.items()
            if name not in ("runs", "ok", "errors") and _num(value) is not None
        ]
        if rows:
            lines += [f"**{title}** ({probe.get('ok', '?')}/{probe.get('runs', '?')} runs ok)", ""]
            lines += _table(["phase", "ms"], rows)
    gil = results.get("gil")
    if isinstance(gil, Mapping):
        rows = [
            [f"`{name}`", _fmt(_get(gil, name, "ms"), 2), _fmt(_get(gil, name, "released"), 2)]
            for name, value in gil.items()
            if isinstance(value, Mapping)
        ]
        if rows:
            lines += [
                "**GIL released during a call**: a Python thread's counting rate while the "
                "main thread is in the call, over its rate alone (1.00: released throughout).",
                "",
            ]
            lines += _table(["call", "ms", "released"], rows)
    if not results:
        lines += ["No phase figures in this file.", ""]
    return Section(lines, [])


_DISPATCH_PHASES = ("staged", "looked_up", "handler_done", "header_written", "published")


def dispatch_phases_section(
    path: Path, data: dict[str, Any], page_dir: Path, fig_dir: Path
) -> Section:
    lines = ["## Dispatch phases: where a round trip's microseconds go", ""]
    lines += _provenance_md("phases", path, data, page_dir)
    lines += [
        "The measurement build of the device run time (`-DCUDAQ_REALTIME_PHASES`) stamps each "
        "serial request on the device with the SM clock: *seen* (the poll's acquire saw it) → "
        "*staged* (the hook copied it) → *looked up* → *handler done* → *header written* → "
        "*published* (after the release store). Each column is the median time of that step in "
        "µs; *device* is seen → published, *outside* the rest of the host's round trip (the "
        "host's write reaching the device and the response reaching the host). The floor has "
        "no lookup or handler. `:thread` rows use the thread-shaped handler `echo_thread`, the "
        "others the launch-wide `echo`; `probe_*`, `ablation_*`, `variant_*` and `ladder_*` rows "
        "and `stage_floor` are measurement probes (the next section says what each is; see "
        "`bench/phases.py`). Every row but `@pointer` calls handlers through the module's "
        "handler switch (the build's direct, inlined calls); `@pointer` rows are the same "
        "module linked without it (the call through the function table's pointer). "
        "`naive_floor` is the ping-pong floor running issue #12's naive handler (a byte loop, "
        "the result written into the response slot) inlined; "
        "`single_thread:naive_echo_thread` serves that handler through the dispatcher.",
        "",
    ]
    configurations = _mapping(data, "configurations")
    rows = []
    for key in _ordered(configurations, ("pingpong_floor",)):
        entry = configurations[key]
        if not isinstance(entry, Mapping):
            continue
        rows.append(
            [f"`{key}`", _fmt(entry.get("round_trip_p50")), _fmt(entry.get("round_trip_gap_p50"))]
            + [_fmt(entry.get(name)) for name in _DISPATCH_PHASES]
            + [_fmt(entry.get("device_total")), _fmt(entry.get("outside_device"))]
        )
    if rows:
        header = ["configuration", "round trip p50", "random arrival p50", "staged", "looked up"]
        header += ["handler done", "header written", "published", "device", "outside"]
        lines += _table(header, rows)
    else:
        lines += ["No phase figures in this file.", ""]
    lines += _paired_rows(data)
    lines += _phases_extras(data)
    return Section(lines, [])


def _phases_extras(data: dict[str, Any]) -> list[str]:
    """The switch comparison, the naive-handler goal and the errors of a phases file."""
    lines: list[str] = []
    switch = _mapping(data, "switch_vs_pointer_us")
    if switch:
        if "launch" in data.get("switch_shapes", ["thread"]):
            shapes = (
                ". The switch calls the handlers of both shapes directly (the launch-wide "
                "`echo` of the `single_thread` row through `cudaq_dev_call_launch_handler`)."
            )
        else:
            shapes = (
                ". The switch calls thread-shaped handlers directly; the launch-wide `echo` of "
                "the `single_thread` row goes through the pointer in both modules, so that row "
                "shows what two links of the same code differ by."
            )
        lines += [
            "**The handler switch**: round trip p50 through the pointer minus through the "
            "switch, same module otherwise (µs): "
            + ", ".join(f"`{k}` {_fmt(v)}" for k, v in switch.items())
            + shapes,
            "",
        ]
    goals = _mapping(data, "goals")
    for key, how, where in (
        ("naive_handler_over_inlined_us", "back to back", ""),
        ("naive_handler_over_inlined_random_arrival_us", "random arrival", ""),
        (
            "naive_handler_over_inlined_own_module_us",
            "back to back",
            " in a module of example_app's sources and the naive handler alone",
        ),
        (
            "naive_handler_over_inlined_own_module_random_arrival_us",
            "random arrival",
            " in a module of example_app's sources and the naive handler alone",
        ),
    ):
        naive = _mapping(goals, key)
        if naive:
            met = "met" if naive.get("met") else "missed"
            lines += [
                f"**Naive handler** ({how}): through the single-thread dispatcher{where} "
                f"{_fmt(naive.get('value'))} µs over the same loop inlined in a bare kernel "
                f"(goal {naive.get('goal')} µs: {met}).",
                "",
            ]
    lines += _errors(data.get("errors"))
    return lines


def dispatch_phases_nostamps_section(
    path: Path, data: dict[str, Any], page_dir: Path, fig_dir: Path
) -> Section:
    lines = ["## Dispatch variants without stamps: production code", ""]
    lines += _provenance_md("phases_nostamps", path, data, page_dir)
    lines += [
        "The kernels and probes of the section above built without the stamps (the stamps' "
        "stores and memory clobbers change the code around them): round trip p50 in µs, back "
        "to back and with random arrival, and over the ping-pong floor of the same pass. "
        "`stage_floor` is the floor staging the request in shared memory and echoing it from "
        "there; the `ladder_*` kernels add, one at a time, the host-ring hooks, validation and "
        "the stats counter to it, with the echo inline; `ablation_direct` calls `echo_thread` "
        "by name; `variant_*` are candidate forms of the call. Paired rows ending in "
        "`@own_module` come from a second module, like a user's: example_app's sources and the "
        "naive handler alone, its handler switch over just those (`bench/phases.py`, "
        "`own_module_sources`), each paired with the same floors.",
        "",
    ]
    configurations = _mapping(data, "configurations")
    floor = _num(_get(configurations, "pingpong_floor", "round_trip_p50"))
    floor_gap = _num(_get(configurations, "pingpong_floor", "round_trip_gap_p50"))
    rows = []
    for key in _ordered(configurations, ("pingpong_floor", "stage_floor", "naive_floor")):
        entry = configurations[key]
        if not isinstance(entry, Mapping):
            continue
        rt, gap = _num(entry.get("round_trip_p50")), _num(entry.get("round_trip_gap_p50"))
        rows.append(
            [
                f"`{key}`",
                _fmt(rt),
                f"{rt / floor:.3f}×" if rt is not None and floor else "—",
                _fmt(gap),
                f"{gap / floor_gap:.3f}×" if gap is not None and floor_gap else "—",
            ]
        )
    if rows:
        header = ["configuration", "back to back p50", "/ floor", "random arrival p50", "/ floor"]
        lines += _table(header, rows)
    else:
        lines += ["No figures in this file.", ""]
    lines += _paired_rows(data)
    lines += _phases_extras(data)
    return Section(lines, [])


def _paired_rows(data: Mapping[str, Any]) -> list[str]:
    """The paired rows of a phases file: each kernel measured in rounds, each round right
    after a round of a floor; the median over rounds of the difference."""
    paired = _mapping(data, "paired")
    rows = []
    for label, entry in paired.items():
        if not isinstance(entry, Mapping):
            continue
        rounds = entry.get("rounds")
        rows.append(
            [
                f"`{label}`",
                f"`{entry.get('floor', '?')}`",
                _fmt(_num(entry.get("over_floor_us")), 3),
                _fmt(_num(entry.get("over_floor_random_arrival_us")), 3),
                str(len(rounds)) if isinstance(rounds, list) else "—",
            ]
        )
    if not rows:
        return []
    return [
        "Paired (the figures to compare: rows of the table above measured minutes apart "
        "differ by the run's drift, up to 0.25 µs between two builds of the same code): "
        "each kernel measured in rounds, each right after a round of a bare floor on the "
        "same ring; the median over rounds of its p50 minus the floor's, in µs.",
        "",
        *_table(["kernel:handler", "floor", "back to back", "random arrival", "rounds"], rows),
    ]


#: Paired rows of ``bench/phases.py --no-stamps`` followed over every run kept, each with what
#: it adds to the ping-pong floor: the one-thread ladder from the bare hooks up to the example.
ACROSS_RUNS_RATIO: tuple[tuple[str, str], ...] = (
    (
        "ladder_bridge:echo_thread",
        "the floor with the request staged through the host-ring hooks, the echo inline: no "
        "validation, no handler call",
    ),
    ("ladder_stats:echo_thread", "+ the request validated and counted, the echo still inline"),
    (
        "ladder_switch_id_three:echo_thread",
        "+ a switch by function id over three thread-shaped handlers, each called by name (a "
        "request longer than the 256-byte stage answered as too long): the leanest one-thread "
        "dispatcher measured",
    ),
    (
        "single_thread_staged_thread_only:echo_thread@own_module",
        "a one-thread example for thread-shaped handlers alone (by name, staged, the header "
        "written in the same call), in a module like a user's",
    ),
    ("single_thread:echo_thread", "the single-thread example, thread-shaped `echo_thread`"),
    ("single_thread:echo", "the single-thread example, launch-wide `echo`"),
)
#: Paired rows of the naive handler (µs over ``naive_floor``, the same loop inlined).
ACROSS_RUNS_NAIVE: tuple[tuple[str, str], ...] = (
    (
        "ladder_switch_id_three:naive_echo_thread",
        "the leanest one-thread dispatcher above",
    ),
    (
        "single_thread_staged_thread_only:naive_echo_thread@own_module",
        "the one-thread example for thread-shaped handlers alone, a module like a user's",
    ),
    ("single_thread:naive_echo_thread", "the single-thread example"),
    ("single_thread:naive_echo_thread@own_module", "the same, in a module like a user's"),
)
#: The targets the across-runs section counts against (issue #12's).
ACROSS_RUNS_RATIO_TARGET = 1.05
ACROSS_RUNS_NAIVE_TARGET_US = 0.1


#: Takes one run's paired entry of a row to the figure the across-runs section follows.
_Pick = Callable[[Mapping[str, Any]], "float | None"]


def paired_run_ratio(entry: Mapping[str, Any], *, random_arrival: bool = False) -> float | None:
    """One paired row's ratio to its floor in one run: the median over its rounds of the
    row's p50 over the p50 of the floor round measured right before it (the rule of
    ``bench/dispatch.py``'s ``paired_ratio``, here without numpy)."""
    key, floor_key = ("gap_p50", "floor_gap_p50") if random_arrival else ("p50", "floor_p50")
    ratios = []
    for r in _as_list(entry.get("rounds")):
        value, floor = _num(_get(r, key)), _num(_get(r, floor_key))
        if value is not None and floor:
            ratios.append(value / floor)
    return statistics.median(ratios) if ratios else None


def _spread(values: list[float], digits: int) -> list[str]:
    return [
        str(len(values)),
        _fmt(statistics.median(values), digits),
        f"{_fmt(min(values), digits)}-{_fmt(max(values), digits)}",
    ]


def across_runs_lines(files: list[tuple[Path, dict[str, Any]]]) -> list[str]:
    """The one-thread ladder and the naive handler over every ``phases_nostamps`` file kept:
    how often each row met issue #12's line, run by run. One run moves by more than the goals'
    margins; this is the figure to judge a row by."""

    # A run kept twice (the current file and its copy in history/) is one run: by its date.
    once = list({str(data.get("date", path)): (path, data) for path, data in files}.values())

    def values(label: str, pick: _Pick) -> list[float]:
        out = []
        for _, data in once:
            entry = _get(data, "paired", label)
            got = pick(entry) if isinstance(entry, Mapping) else None
            if got is not None:
                out.append(got)
        return out

    def rows(
        labels: tuple[tuple[str, str], ...], b2b_of: _Pick, random_of: _Pick, target: float
    ) -> list[list[str]]:
        out = []
        for label, what in labels:
            b2b = values(label, b2b_of)
            if not b2b:
                continue
            rnd = values(label, random_of)
            met = sum(v <= target for v in b2b)
            median_rnd = _fmt(statistics.median(rnd), 3) if rnd else "—"
            out.append([f"`{label}`", what, *_spread(b2b, 3), f"{met} of {len(b2b)}", median_rnd])
        return out

    ratio_rows = rows(
        ACROSS_RUNS_RATIO,
        paired_run_ratio,
        lambda e: paired_run_ratio(e, random_arrival=True),
        ACROSS_RUNS_RATIO_TARGET,
    )
    naive_rows = rows(
        ACROSS_RUNS_NAIVE,
        lambda e: _num(e.get("over_floor_us")),
        lambda e: _num(e.get("over_floor_random_arrival_us")),
        ACROSS_RUNS_NAIVE_TARGET_US,
    )
    if not ratio_rows and not naive_rows:
        return []
    lines = [
        "### Across runs: the one-thread ladder against issue #12's lines",
        "",
        f"Every `phases_nostamps` file kept ({len(once)} runs of `bench/phases.py --no-stamps`, "
        "`bench/results/` and `history/`, each on a lent H200; a row counts the runs that "
        "measured it). Each run's figure is the row's paired ratio to the ping-pong floor (the "
        "median over its rounds of its p50 over the floor round's right before it). The rows "
        "add one thing at a time to the floor, up to the single-thread example; each run "
        "measured the code of its own session (the history README says which).",
        "",
    ]

    def header(what: str, met: str) -> list[str]:
        return [
            "kernel:handler",
            what,
            "runs",
            "median",
            "range",
            f"runs <= {met}",
            "random arrival median",
        ]

    if ratio_rows:
        lines += _table(header("adds", f"{ACROSS_RUNS_RATIO_TARGET:g}"), ratio_rows)
    if naive_rows:
        lines += [
            "The naive handler (a byte loop, the result written where the kernel points) "
            "through each, in µs over the same loop inlined in a bare kernel (`naive_floor`), "
            "back to back:",
            "",
        ]
        lines += _table(header("what", f"{ACROSS_RUNS_NAIVE_TARGET_US:g} µs"), naive_rows)
    return lines


def multigpu_section(path: Path, data: dict[str, Any], page_dir: Path, fig_dir: Path) -> Section:
    lines = ["## Several GPUs: one dispatcher per GPU", ""]
    lines += _provenance_md("dispatch_multigpu", path, data, page_dir)
    config = _mapping(data, "config")
    if config.get("method"):
        lines += [f"Method: {config['method']}.", ""]
    summary = _mapping(data, "summary")
    latency = _mapping(summary, "single_thread_latency_us")
    if latency:
        rows = [
            [
                f"GPU {gpu}",
                _fmt(_get(v, "alone_p50")),
                _fmt(_get(v, "together_p50")),
                _fmt(_get(v, "alone_p99")),
                _fmt(_get(v, "together_p99")),
            ]
            for gpu, v in latency.items()
        ]
        lines += [
            "**Single-thread dispatcher, round trip (µs)**, each GPU alone and all at once:",
            "",
        ]
        lines += _table(["GPU", "p50 alone", "p50 together", "p99 alone", "p99 together"], rows)
    throughput = _mapping(summary, "warp_parallel_mrps")
    if throughput:
        rows = [
            [
                str(n),
                _fmt(_get(v, "one_gpu")),
                _fmt(_get(v, "aggregate")),
                _fmt(_get(v, "scaling"), 3),
            ]
            for n, v in throughput.items()
        ]
        lines += [
            "**Warp-parallel dispatcher (thread-shaped handler), M req/s**, one GPU vs all:",
            "",
        ]
        lines += _table(["in flight per GPU", "one GPU", "all GPUs", "× one GPU"], rows)
    lines += _goals(data.get("goals"))
    lines += _errors(data.get("errors"))
    return Section(lines, [])


_BUILD_NAMES = {
    "baseline": "wheel of the project without dispatch kernels",
    "wheel": "wheel of example_app (with its dispatch kernel)",
    "nvcc_kernels": "nvcc of the kernels alone",
    "noop_rebuild": "no-op rebuild",
    "backend_prepare": "backend: read [tool.cudaq], compute CMake defines",
}


def build_section(path: Path, data: dict[str, Any], page_dir: Path, fig_dir: Path) -> Section:
    lines = ["## Build overhead", ""]
    lines += _provenance_md("build_overhead", path, data, page_dir)
    if data.get("project"):
        lines += [f"Project: {data['project']}; {data.get('runs', '?')} runs.", ""]
    median = _mapping(data, "median_s")
    samples = _mapping(data, "samples_s")
    figures: list[tuple[Path, Figure]] = []
    order = ("baseline", "wheel", "nvcc_kernels", "noop_rebuild", "backend_prepare")
    if median:
        rows = [
            [
                _BUILD_NAMES.get(k, k),
                _fmt(median[k], 4),
                ", ".join(_fmt(x, 3) for x in samples.get(k, [])[:8])
                + (" …" if len(samples.get(k, [])) > 8 else ""),
            ]
            for k in _ordered(median, order)
        ]
        lines += _table(["Step", "median (s)", "runs (s)"], rows)
        lines += [
            f"Plug-in overhead (wheel − baseline − kernels' nvcc): "
            f"{_fmt(data.get('plugin_overhead_s'), 3, 's')} "
            f"({_fmt(_percent(data.get('plugin_overhead_vs_nvcc')), 1)} % "
            f"of the kernels' nvcc time); goal: {data.get('goal', '—')}; met: "
            f"{'yes' if data.get('goal_met') else 'no'}.",
            "",
        ]
        if data.get("note"):
            lines += [f"Note from the benchmark: {data['note']}", ""]
        png = fig_dir / "build_overhead.png"
        lines += [f"![Build times]({_rel(png, page_dir)})", ""]

        def draw_build() -> None:
            plt = _pyplot()
            keys = [
                k
                for k in _ordered(median, order)
                if k != "backend_prepare" and _num(median[k]) is not None
            ]
            fig, ax = plt.subplots(figsize=(7.5, 0.6 * max(len(keys), 1) + 1.6))
            for row, key in enumerate(reversed(keys)):
                ax.barh(row, median[key], color="C2", alpha=0.6)
                runs = [x for x in samples.get(key, []) if _num(x) is not None]
                ax.plot(runs, [row] * len(runs), "k.", ms=4)
            ax.set_yticks(range(len(keys)))
            ax.set_yticklabels([_BUILD_NAMES.get(k, k) for k in reversed(keys)])
            ax.set_xlabel("seconds; bar: median, dots: runs")
            ax.set_title("Build overhead of a dispatch kernel")
            ax.grid(axis="x", alpha=0.3)
            _save(fig, png, _caption("build_overhead", data), _short_versions(data))

        figures.append((png, draw_build))
    else:
        lines += ["No build timings in this file.", ""]
    return Section(lines, figures)


#: The steps of a traced call (``TRACE_STEPS`` of bench/python_client.py), as the page names them.
_TRACE_STEPS = {
    "enter": "into C from Python's clock read",
    "claim": "slot claimed, request id taken",
    "clock": "one clock read, nothing else",
    "write": "request written, flag stored",
    "wait": "spin on the response flag",
    "check": "response header read and checked",
    "build": "result objects built",
    "leave": "back to Python's clock read (with the trace's own tuples)",
}


def _trace_table(s: Mapping[str, Any], columns: Mapping[str, str]) -> list[str]:
    """The traced call's steps (medians, µs), one column per summary key present."""
    present = {key: label for key, label in columns.items() if isinstance(s.get(key), Mapping)}
    if not present:
        return []
    rows = [
        [f"`{step}`", what, *(_fmt(_get(s, key, step), 3) for key in present)]
        for step, what in _TRACE_STEPS.items()
    ]
    return [
        "The compiled round trip traced (`Ring.call_next_traced`: the clock read at each step; "
        "each step includes one clock read, the `clock` row): medians, µs.",
        "",
        *_table(["step", "what", *present.values()], rows),
    ]


def python_client_section(
    path: Path, data: dict[str, Any], page_dir: Path, fig_dir: Path
) -> Section:
    lines = ["## The Python client: where a call's microseconds go", ""]
    lines += _provenance_md("python_client", path, data, page_dir)
    s = _mapping(data, "summary")
    if not s:
        return Section([*lines, "No figures in this file.", ""], [])
    config = _mapping(data, "config")
    lines += [
        f"`RingClient.call` against the native C client on the same ring "
        f"(`{config.get('kernel', '?')}`, `{config.get('handler', '?')}`, "
        f"{config.get('arg_len', '?')}-byte arguments); medians over "
        f"{len(_mapping(data, 'rounds').get('call', []))} alternating rounds of "
        f"{config.get('samples', '?')} calls (µs).",
        "",
    ]

    def row(label: str, key: str, native: str = "native_p50_us") -> list[str]:
        """A client's p50 (``key``) and its difference from the native client's."""
        return [label, _fmt(s.get(key), 2), _difference(s.get(key), s.get(native))]

    flag = config.get("compiled")
    compiled = (
        " (compiled round trip)" if flag is True else " (pure Python)" if flag is False else ""
    )
    rows = [
        ["native client (C, `bench/loadgen.c`)", _fmt(s.get("native_p50_us"), 2), "—"],
        row("`RingClient.call`" + compiled, "call_p50_us"),
    ]
    if "call_pure_p50_us" in s:
        rows.append(row("`RingClient(..., compiled=False).call` (pure Python)", "call_pure_p50_us"))
    rows += [
        row("pure `call` with the id source in process memory", "call_private_ids_p50_us"),
        row("least Python that does a round trip (floor)", "python_floor_p50_us"),
    ]
    c_part = "the compiled round trip's C part, stamped in C (write to flag seen)"
    if "c_part_p50_us" in s:
        rows.append(row(c_part, "c_part_p50_us"))
    lines += _table(["Client", "p50", "over native"], rows)
    if "call_random_p50_us" in s:
        # random arrival: no client's period locks onto a phase of the kernel's poll loop
        native = "native_random_p50_us"
        random_rows = [
            ["native client", _fmt(s.get(native), 2), "—"],
            row("`RingClient.call`", "call_random_p50_us", native),
        ]
        if "call_python_frame_random_p50_us" in s:
            label = "`call` as a Python method over the compiled ring (`_call_python`)"
            random_rows.append(row(label, "call_python_frame_random_p50_us", native))
        if "c_part_random_p50_us" in s:
            random_rows.append(row(c_part, "c_part_random_p50_us", native))
        lines += [
            "With random arrival (a think time uniform in [0, 3] µs before each request, not "
            "timed):",
            "",
            *_table(["Client", "p50", "over native"], random_rows),
        ]
        if "c_part_random_p50_us" in s:
            lines += [
                "The C part's row splits a call into the round trip itself (timed as the native "
                "client is) and the host-side Python work around it (entry, result objects, "
                "the clock reads). That Python work has differed by 0.3 µs from one process to "
                "the next on one lent host (`bench/results/history/README.md`, session 13) and "
                "by 2x from one lent host to another (0.26-0.31 µs, 0.48-0.64 µs): it follows "
                "the host CPU's speed, not the CPU the client runs on (the next section). Judge "
                "the random-arrival goal over several runs and hosts, not this file alone.",
                "",
            ]
    lines += _trace_table(
        s,
        {
            "trace_us": "back to back",
            "trace_random_us": "random arrival",
            "trace_noprefetch_random_us": "random arrival, no prefetch",
        },
    )
    if "prefetch_saves_random_arrival_us" in s:
        lines += [
            "The spin fetching the response's first line (`Ring.prefetch_response`, on by "
            "default) against not: `call` "
            f"{_fmt(s.get('prefetch_saves_us'), 3)} µs faster back to back, "
            f"{_fmt(s.get('prefetch_saves_random_arrival_us'), 3)} µs with random arrival.",
            "",
        ]
    seg = _mapping(s, "segments_p50_us")
    if seg:
        lines += [
            f"The pure-Python `call`'s fast path, stamped: post {_fmt(seg.get('post'), 2)} µs "
            f"(id, header, payload, flag), wait {_fmt(seg.get('wait'), 2)} µs "
            f"({_fmt(s.get('segment_spins_p50'), 0)} spins), read "
            f"{_fmt(seg.get('read'), 2)} µs (checks, result copy).",
            "",
        ]
    goal = _mapping(data, "goal")
    if goal:
        lines += [
            f"Goal: call within {goal.get('target', '?')} µs of native: "
            f"{_fmt(goal.get('python_call_over_native_client_us'), 2)} µs, "
            f"{'met' if goal.get('met') else 'not met'} back to back"
            + (
                f"; with random arrival {_fmt(s['call_over_native_random_arrival_us'], 2)} µs, "
                f"{'met' if s['call_over_native_random_arrival_us'] <= 0.4 else 'not met'}."
                if "call_over_native_random_arrival_us" in s
                else "."
            ),
            "",
        ]
    return Section(lines, [])


def host_cpu_section(path: Path, data: dict[str, Any], page_dir: Path, fig_dir: Path) -> Section:
    lines = ["## The Python client CPU by CPU", ""]
    lines += _provenance_md("host_cpu", path, data, page_dir)
    summary = _mapping(data, "summary")
    if not summary:
        return Section([*lines, "No figures in this file.", ""], [])
    config = _mapping(data, "config")
    topology = _mapping(data, "topology")
    alone = [c for c, t in topology.items() if _get(t, "siblings") == [int(c)]]
    host = _mapping(data, "host")
    lines += [
        "`RingClient.call` against the native client on the single-thread dispatcher "
        f"(`echo`, {config.get('arg_len', '?')}-byte arguments), the client thread unpinned "
        "(`any`), pinned to each CPU, and with every thread of the process on "
        f"`bench/dispatch.py`'s CPU (`all@N`, CPU {host.get('dispatch_py_cpu', '?')}); "
        f"{config.get('rounds', '?')} rounds of {config.get('samples', '?')} calls a client, the "
        "order rotated a round; the medians over rounds, µs. *Python around* is the Python "
        "work around the compiled call's C part (stamped in C). "
        + (
            f"Every one of the {len(topology)} CPUs is a core of its own as the host shows it "
            "(no SMT siblings)."
            if topology and len(alone) == len(topology)
            else ""
        ),
        "",
    ]
    rows = []
    for name, row in summary.items():
        rounds = _get(row, "over_native_random_each_round")
        rows.append(
            [
                f"`{name}`",
                _fmt(_get(row, "native_random"), 2),
                _fmt(_get(row, "call_random"), 2),
                _fmt(_get(row, "call_over_native_random"), 3),
                ", ".join(_fmt(v, 2) for v in rounds) if isinstance(rounds, list) else "—",
                _fmt(_get(row, "python_around_random"), 3),
                _fmt(_get(row, "call_over_native"), 3),
                _fmt(_get(row, "interrupts_on_cpu"), 0),
            ]
        )
    header = [
        "CPU",
        "native, random: p50",
        "call, random: p50",
        "call over native, random",
        "each round",
        "Python around",
        "call over native, back to back",
        "interrupts a pass",
    ]
    lines += _table(header, rows)
    medians = [
        v for r in summary.values() if (v := _num(_get(r, "call_over_native_random"))) is not None
    ]
    spreads = [
        max(rs) - min(rs)
        for r in summary.values()
        if isinstance(rs := _get(r, "over_native_random_each_round"), list) and rs
    ]
    if medians and spreads:
        lines += [
            f"Across CPUs the medians span {_fmt(min(medians), 2)}-{_fmt(max(medians), 2)} µs; "
            f"one CPU's rounds span {_fmt(statistics.median(spreads), 2)} µs (the median over "
            "CPUs of each CPU's max - min). Where the second is as wide as the first, where the "
            "client runs does not explain how far `call` is over the native client.",
            "",
        ]
    return Section(lines, [])


def python_host_section(path: Path, data: dict[str, Any], page_dir: Path, fig_dir: Path) -> Section:
    lines = ["## The Python client's host-side work, without a GPU", ""]
    lines += _provenance_md("python_host", path, data, page_dir)
    s = _mapping(data, "summary")
    if not s:
        return Section([*lines, "No figures in this file.", ""], [])
    config = _mapping(data, "config")
    lines += [
        "A C thread of the benchmark's process plays the dispatch kernel on a ring in process "
        "memory (`lg_serve_start` in `bench/loadgen.c`), on a CPU of its own: a round trip is "
        "then two cache-line hand-offs between CPUs, and what each client adds on the host is "
        f"most of what is timed. Medians over {config.get('rounds', '?')} alternating rounds "
        f"of {config.get('samples', '?')} calls, back to back (µs):",
        "",
    ]
    rows = [
        [
            "native client (clock stopped when the flag is seen)",
            _fmt(s.get("native_p50_us"), 3),
            "—",
        ]
    ]
    labels = (
        ("native_read_over_native_us", "native client, response checked and copied out"),
        ("call_over_native_us", "`RingClient.call` (compiled entry)"),
        ("call_python_over_native_us", "`_call_python` over the compiled ring (a Python frame)"),
        ("call_pure_over_native_us", "pure-Python `call`"),
    )
    for key, label in labels:
        if key in s:
            base = _num(s.get("native_p50_us"))
            over = _num(s.get(key))
            total = base + over if base is not None and over is not None else None
            rows.append([label, _fmt(total, 3), _fmt(over, 3)])
    lines += _table(["Client", "p50", "over native"], rows)
    if "python_call_floor_p50_us" in s:
        lines += [
            "The least a call from Python costs, timed the same way with no round trip (a C "
            "method returning a ready answer, its two clock reads, the unpacking): "
            f"{_fmt(s.get('python_call_floor_p50_us'), 3)} µs; `call` over the native client "
            f"less that: {_fmt(s.get('call_over_native_and_call_floor_us'), 3)} µs.",
            "",
        ]
    lines += _trace_table(
        s, {"trace_us": "back to back", "trace_noprefetch_us": "back to back, no prefetch"}
    )
    if "c_part_p50_us" in s:
        lines += [
            f"The compiled call's C part, stamped in C: {_fmt(s.get('c_part_p50_us'), 3)} µs; "
            f"the Python work around it {_fmt(s.get('c_part_around_p50_us'), 3)} µs (its stamps' "
            "own tuple included).",
            "",
        ]
    return Section(lines, [])


_COMPILER_NAMES = {
    "nvcc_files": "nvcc, each device source alone",
    "nvrtc_cli_files": "NVRTC through `python -m skbuild_cudaq nvrtc` (what CMake runs)",
    "nvrtc_inprocess_files": "NVRTC in process (the compile alone)",
    "wheel_nvcc": "example_app wheel, compiler nvcc",
    "wheel_nvrtc": "example_app wheel, compiler nvrtc",
}


def compilers_section(path: Path, data: dict[str, Any], page_dir: Path, fig_dir: Path) -> Section:
    lines = ["## Build time: NVRTC against nvcc", ""]
    lines += _provenance_md("build_compilers", path, data, page_dir)
    median = _mapping(data, "median_s")
    if not median:
        return Section([*lines, "No build timings in this file.", ""], [])
    versions = _mapping(data, "versions")
    lines += [
        f"Project: {data.get('project', '?')}; {data.get('runs', '?')} runs; nvcc "
        f"{versions.get('nvcc', '?')}, NVRTC {versions.get('nvrtc', '?')}.",
        "",
    ]
    rows = [[_COMPILER_NAMES.get(k, k), _fmt(v, 3)] for k, v in median.items()]
    lines += _table(["Step", "median (s)"], rows)
    lines += [
        f"NVRTC (as CMake runs it) / nvcc: {_fmt(data.get('nvrtc_cli_vs_nvcc'), 2)}; whole "
        f"wheel, nvrtc / nvcc: {_fmt(data.get('wheel_nvrtc_vs_nvcc'), 2)}.",
        "",
    ]
    if data.get("note"):
        lines += [f"Note from the benchmark: {data['note']}", ""]
    return Section(lines, [])


def switch_link_section(path: Path, data: dict[str, Any], page_dir: Path, fig_dir: Path) -> Section:
    lines = ["## The handler switch at link time", ""]
    lines += _provenance_md("switch_link", path, data, page_dir)
    results = _mapping(data, "results")
    if not results:
        return Section([*lines, "No link timings in this file.", ""], [])
    names = {"with_switch": "with the switch", "without_switch": "without (the pointer)"}
    rows = [
        [
            names.get(k, k),
            _fmt(_get(v, "median_ms"), 1),
            _fmt(_get(v, "min_ms"), 1),
            str(_get(v, "cubin_bytes")),
            ", ".join(_get(v, "handlers") or []),
        ]
        for k, v in results.items()
    ]
    shapes = (
        "thread-shaped and launch-wide"
        if "launch" in data.get("switch_shapes", ["thread"])
        else "thread-shaped"
    )
    lines += [
        "example_app linked by nvJitLink with the link cache off (a cold start), built with "
        f"and without its handler switch (the direct, inlined calls to its {shapes} "
        "handlers): what the switch costs once per machine and version; the cache serves "
        "every later start.",
        "",
    ]
    lines += _table(["example_app", "median (ms)", "min (ms)", "cubin bytes", "handlers"], rows)
    lines += [f"Link time with / without: {_fmt(data.get('link_time_ratio'), 2)}x.", ""]
    return Section(lines, [])


def issue_rate_section(path: Path, data: dict[str, Any], page_dir: Path, fig_dir: Path) -> Section:
    lines = ["## What an instruction costs a one-thread round trip", ""]
    lines += _provenance_md("issue_rate", path, data, page_dir)
    kernels = _mapping(data, "kernels")
    if not kernels:
        return Section([*lines, "No figures in this file.", ""], [])
    lines += [
        "The ping-pong floor with W multiply-adds (8 independent chains) between seeing a "
        "request's flag and loading it, straight-line (unrolled) or in a loop, each paired "
        "round by round with the bare floor: the round trip's p50 over the floor's (µs, the "
        "median over rounds). A one-thread kernel issues every instruction of its round trip "
        "in turn: this is what each costs it (straight-line code shows no instruction-fetch "
        "penalty). Memory operations weigh more than their count (see the guide for kernel "
        "authors).",
        "",
    ]
    rows = [
        [
            f"`{name}`",
            str(_get(entry, "work")),
            "yes" if _get(entry, "unrolled") else "no",
            _fmt(_num(_get(entry, "over_floor_us")), 3),
            _fmt(_num(_get(entry, "over_floor_random_arrival_us")), 3),
            _fmt(_num(_get(entry, "ns_per_multiply_add")), 2),
        ]
        for name, entry in kernels.items()
    ]
    lines += _table(
        ["kernel", "multiply-adds", "unrolled", "back to back", "random arrival", "ns each"], rows
    )
    return Section(lines, [])


def shape_floors_section(
    path: Path, data: dict[str, Any], page_dir: Path, fig_dir: Path
) -> Section:
    lines = ["## Bare floors of the launch-wide shapes", ""]
    lines += _provenance_md("shape_floors", path, data, page_dir)
    kernels = _mapping(data, "kernels")
    if not kernels:
        return Section([*lines, "No figures in this file.", ""], [])
    config = _mapping(data, "config")
    lines += [
        "Bare kernels (no run time) that serve the ring the way the cluster and cooperative "
        "examples do, the request's words echoed by the whole launch "
        f"({config.get('cluster_blocks', '?')} blocks a cluster, "
        f"{config.get('coop_blocks', '?')} cooperative blocks, {config.get('block', '?')} "
        "threads a block): `*_handoff_floor` hands the request from one polling thread to the "
        "launch as the examples do; `cluster_mbarrier_floor` does it with one-way mbarrier "
        "signals instead of cluster barriers, `coop_lines_floor` with a go flag a block on a "
        "line of its own, `cluster_push_floor` with the box pushed into every block before the "
        "barrier, `*_stageout_floor` with the result staged on chip (the leader block's shared "
        "memory, device memory) and copied out by the leader after the collection, and "
        "`coop_allpoll_floor` has every block poll and load the request itself; "
        "`multipoll_floor@k` is the one-thread floor with its flag polled by k poller warps "
        "instead of the serving thread (`bench/shape_floors.py`'s module doc has each design). "
        "Each paired round by round "
        "with the one-thread ping-pong floor: the median over rounds of the p50 ratio. The "
        "lowest row of a shape is what a dispatcher with that hand-off cannot go below.",
        "",
    ]
    rows = [
        [
            f"`{name}`",
            str(_get(entry, "shape")),
            _fmt(_num(_get(entry, "p50_over_floor")), 3),
            _fmt(_num(_get(entry, "p50_over_floor_random_arrival")), 3),
        ]
        for name, entry in kernels.items()
    ]
    lines += _table(["kernel", "shape", "p50 / floor", "random arrival"], rows)
    lines += _errors(data.get("errors"))
    return Section(lines, [])


def placement_section(path: Path, data: dict[str, Any], page_dir: Path, fig_dir: Path) -> Section:
    lines = ["## Where the driver puts the code", ""]
    lines += _provenance_md("placement", path, data, page_dir)
    summary = _mapping(data, "summary")
    if not summary:
        return Section([*lines, "No figures in this file.", ""], [])
    config = _mapping(data, "config")
    lines += [
        f"{config.get('trials', '?')} trials, each with the measured module loaded afresh "
        "behind a spacer library of another size (so that each lazily loaded kernel lands at "
        "another address), each kernel served in "
        f"{config.get('rounds', '?')} rounds, each round right after a round of a reference "
        "ping-pong floor loaded once: the p50 over that floor (µs), the median over trials and "
        "their range, the standard deviation of a round within a trial, and a one-way analysis "
        "of variance over trials: F near 1 (and a placement sd near 0) says the trials differ "
        "no more than the rounds of one trial do, so where the code lands does not change the "
        "round trip (`bench/placement.py`'s module doc).",
        "",
    ]
    rows = []
    for label, entry in summary.items():
        for name in ("back_to_back", "random_arrival"):
            e = _mapping(entry, name)
            if not e:
                continue
            rows.append(
                [
                    f"`{label}`",
                    name.replace("_", " "),
                    f"{_fmt(_num(e.get('median')), 3)} ({_fmt(_num(e.get('min')), 3)} .. "
                    f"{_fmt(_num(e.get('max')), 3)})",
                    _fmt(_num(e.get("round_sd_us")), 3),
                    _fmt(_num(e.get("f_ratio")), 2),
                    _fmt(_num(e.get("placement_sd_us")), 3),
                ]
            )
    lines += _table(
        ["kernel", "arrival", "over the floor (range)", "round sd", "F", "placement sd"], rows
    )
    return Section(lines, [])


def sass_section(path: Path, data: dict[str, Any], page_dir: Path, fig_dir: Path) -> Section:
    lines = ["## The measured kernels' SASS side by side", ""]
    lines += [f"From `{_rel(path, ROOT)}` (built and disassembled, no GPU):", ""]
    versions = _mapping(data, "versions")
    lines += [
        f"- **Date:** {data.get('date', 'not recorded')}",
        f"- **Target:** {data.get('arch', 'not recorded')}",
        f"- **nvcc:** {versions.get('nvcc', 'not recorded')}",
        f"- **nvdisasm:** {versions.get('nvdisasm', 'not recorded')}",
        "",
    ]
    pairs = data.get("pairs")
    if not isinstance(pairs, list) or not pairs:
        return Section([*lines, "No figures in this file.", ""], [])
    lines += [
        "The module `bench/phases.py` measures, linked without the stamps: for each pair, how "
        "many instructions differ once register numbers, labels and the kernel's name are set "
        "aside, and whether the poll issues the loads of a request in the same order (the "
        "offsets are in the JSON).",
        "",
    ]
    rows = [
        [
            f"`{_get(pair, 'kernel')}`",
            f"`{_get(pair, 'reference')}`",
            str(_get(pair, "differing_lines")),
            "same" if _get(pair, "same_request_load_order") else "other",
            str(_get(pair, "what")),
        ]
        for pair in pairs
        if isinstance(pair, Mapping)
    ]
    lines += _table(["kernel", "against", "lines differing", "request loads", "what"], rows)
    hot = data.get("hot_path")
    if isinstance(hot, Mapping) and hot:
        lines += [
            "The one-thread hot path, read along the control flow: the instructions from the "
            "publish (the release store after the system fence) to the next poll's acquire, "
            "which a back-to-back round trip pays in full; and the fewest instructions from "
            "the acquire to the first and to the last load of the request, on the path a hit "
            "takes.",
            "",
        ]
        hot_rows = []
        for name, row in hot.items():
            if not isinstance(row, Mapping):
                continue
            ops = row.get("publish_to_poll")
            hot_rows.append(
                [
                    f"`{name}`",
                    "none" if not isinstance(ops, list) else str(len(ops)),
                    "" if not isinstance(ops, list) else " ".join(f"`{op}`" for op in ops),
                    str(row.get("acquire_to_first_request_load", "none")),
                    str(row.get("acquire_to_last_request_load", "none")),
                ]
            )
        lines += _table(
            ["kernel", "publish to poll", "its opcodes", "acquire to 1st load", "to last load"],
            hot_rows,
        )
    return Section(lines, [])


SECTIONS: dict[str, tuple[str, Callable[[Path, dict[str, Any], Path, Path], Section]]] = {
    "dispatch": ("Dispatch: round trip and throughput", dispatch_section),
    "phases": ("Dispatch phases: where a round trip's microseconds go", dispatch_phases_section),
    "phases_nostamps": (
        "Dispatch variants without stamps: production code",
        dispatch_phases_nostamps_section,
    ),
    "dispatch_multigpu": ("Several GPUs: one dispatcher per GPU", multigpu_section),
    "startup": ("Start-up: cold vs warm vs raw load", startup_section),
    "startup_cu12": ("Start-up with the CUDA 12 stack", startup_section),
    "python_client": ("The Python client: where a call's microseconds go", python_client_section),
    "host_cpu": ("The Python client CPU by CPU", host_cpu_section),
    "python_host": ("The Python client's host-side work, without a GPU", python_host_section),
    "build_compilers": ("Build time: NVRTC against nvcc", compilers_section),
    "startup_phases": ("Start-up phases: where the time goes", phases_section),
    "switch_link": ("The handler switch at link time", switch_link_section),
    "build_overhead": ("Build overhead", build_section),
    "issue_rate": ("What an instruction costs a one-thread round trip", issue_rate_section),
    "shape_floors": ("Bare floors of the launch-wide shapes", shape_floors_section),
    "placement": ("Where the driver puts the code", placement_section),
    "sass": ("The measured kernels' SASS side by side", sass_section),
}


def _not_measured(name: str) -> list[str]:
    title = SECTIONS[name][0]
    return [
        f"## {title}",
        "",
        f"Not measured yet: no `{name}` results file in `bench/results/`. "
        f"Run {HOW_TO[name]}, then `python bench/report.py`.",
        "",
    ]


def _as_mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _variants(variants: list[tuple[Path, dict[str, Any]]]) -> list[str]:
    """The A/B experiments of ``tools/variant-ab.sh`` (``bench/ab_summary.py`` files), oldest
    first: each goal's values pass by pass and its verdict."""
    lines = [
        "## Experiments measured against the shipped code (`tools/variant-ab.sh`)",
        "",
        "Each experiment is a patch of `bench/variants/`, measured by `bench/dispatch.py` in "
        "passes alternated with the shipped code on one lease. A whole pass moves every row "
        "together, so each patched pass is compared with the base passes next to it: *better* "
        "where the patch won every comparison, *worse* where it lost every one, *mixed* "
        "otherwise. What was decided is in `bench/results/history/README.md`.",
        "",
    ]
    for path, data in sorted(variants, key=lambda item: str(item[1].get("date", ""))):
        versions = _as_mapping(data.get("versions"))
        lines += [
            f"### `{data.get('variant', '?')}` (`{_rel(path, ROOT)}`)",
            "",
            f"- **Patch:** `{data.get('patch', '?')}`",
            f"- **Date:** {data.get('first_pass_date', '?')} to {data.get('date', '?')}",
            f"- **Device:** {data.get('device', '?')}, driver {versions.get('nvidia_driver', '?')}",
        ]
        tests = data.get("gpu_tests_with_patch")
        if isinstance(tests, Mapping):
            lines.append(
                f"- **GPU tests with the patch:** {tests.get('tests', '?')} run, "
                f"{tests.get('failures', '?')} failed, {tests.get('errors', '?')} errors"
            )
        lines.append("")
        passes = [_as_mapping(p) for p in _as_list(data.get("passes"))]
        labels = ["base" if p.get("label") == "base" else "patch" for p in passes]
        header = ["Goal", "Target", *labels, "Verdict"]
        rows = []
        for key, goal in _as_mapping(data.get("goals")).items():
            if not isinstance(goal, Mapping):
                continue
            values = _as_list(goal.get("values"))
            rows.append(
                [
                    f"`{key}`",
                    str(goal.get("target", "")),
                    *[_fmt(v, 3) for v in values],
                    f"{goal.get('verdict', '?')} ({goal.get('patched_wins', '?')} of "
                    f"{goal.get('comparisons', '?')})",
                ]
            )
        lines += _table(header, rows)
    return lines


def render(
    results: Results, out: Path, fig_dir: Path, *, draw: bool = True
) -> tuple[str, list[Path]]:
    """The page's Markdown and the figures it references (drawn when ``draw``)."""
    page_dir = out.parent
    lines = [
        "# Performance",
        "",
        "<!-- Generated by bench/report.py from bench/results/*.json; do not edit. -->",
        "",
        "Every figure on this page comes from a results file in `bench/results/`, written by the "
        "benchmark named in its section; each section states the device, driver, versions and "
        "date its file records. A benchmark without a results file is marked *not measured "
        "yet*. To refresh: run the benchmarks (`bash tools/gpu-check.sh` on a GPU machine runs "
        "the GPU ones), copy their JSON into `bench/results/`, and run `python bench/report.py`.",
        "",
        "For scale: CUDA-Q realtime's design targets are a p99 round trip below 10 µs and more "
        "than a million messages per second.",
        "",
    ]
    figures: list[Path] = []
    for name in KNOWN:
        if name not in results.by_benchmark:
            lines += _not_measured(name)
            continue
        path, data = results.by_benchmark[name]
        section = SECTIONS[name][1](path, data, page_dir, fig_dir)
        lines += section.lines
        if name == "phases_nostamps":
            lines += across_runs_lines(results.runs.get(name, []))
        for png, draw_figure in section.figures:
            if draw:
                draw_figure()
            figures.append(png)
    if results.variants:
        lines += _variants(results.variants)
    if results.others:
        lines += ["## Other results files", ""]
        for path, data in results.others:
            lines += [f"### `{_rel(path, ROOT)}`", ""]
            if not isinstance(data, Mapping):
                lines += ["Not a JSON object; not shown.", ""]
                continue
            lacking = [k for k in ("device", "date", "versions") if k not in data]
            if lacking:
                lines += [f"This file does not state its {', '.join(lacking)}.", ""]
            rows = [[f"`{k}`", f"`{json.dumps(v)[:120]}`"] for k, v in data.items()]
            lines += _table(["Key", "Value"], rows)
    if results.superseded:
        lines += [
            "Earlier results files not shown (each benchmark shows its current file): "
            + ", ".join(f"`{_rel(p, ROOT)}`" for p in results.superseded)
            + ".",
            "",
        ]
    if results.unreadable:
        lines += [
            "Unreadable results files: "
            + "; ".join(f"`{_rel(p, ROOT)}` ({why})" for p, why in results.unreadable)
            + ".",
            "",
        ]
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n", figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--figures", type=Path, default=DEFAULT_FIGURES)
    parser.add_argument("--no-figures", action="store_true", help="write only the page")
    args = parser.parse_args(argv)
    results = load_results(args.results)
    text, figures = render(
        results, args.out.resolve(), args.figures.resolve(), draw=not args.no_figures
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    measured = ", ".join(sorted(results.by_benchmark)) or "none"
    print(f"wrote {args.out} (measured: {measured}; {len(figures)} figures)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
