"""The documentation: it builds with warnings as errors, documents every public name, and explains
every error message the project can print.

The messages come from the extractor ``tools/doc_messages.py`` (tested here too); run
``python tools/doc_messages.py`` to list every error message the code can print, with the fragment
``docs/reference/troubleshooting.md`` must contain and whether it does.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import re
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PACKAGE = ROOT / "skbuild_cudaq"
CMAKE_DIR = PACKAGE / "cmake"
REPORT = ROOT / "bench" / "report.py"

sys.path.insert(0, str(ROOT / "tools"))
from doc_messages import (  # noqa: E402 - tools/ is not a package
    PLACEHOLDER,
    TROUBLESHOOTING,
    cmake_messages,
    describe,
    error_messages,
    fragment_of,
    missing_messages,
    python_messages,
)

# ---------------------------------------------------------------------------------------------
# Tests of the extractor itself
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "fragment"),
    [
        ("nvcc not found: it compiles the kernels. Set X", "nvcc not found"),
        (f"cannot read {PLACEHOLDER}: {PLACEHOLDER}", "cannot read"),
        (
            f"{PLACEHOLDER} is an absolute path; expected a .cu path {PLACEHOLDER}",
            "is an absolute path",
        ),
        (
            f'{PLACEHOLDER}: target "{PLACEHOLDER}" is IMPORTED; use a target',
            "is IMPORTED; use a target",
        ),
        (f"{PLACEHOLDER}: {PLACEHOLDER}", ""),
        (f"{PLACEHOLDER} is {PLACEHOLDER}; expected {PLACEHOLDER}", ""),
        (f"block={PLACEHOLDER}: 1..1024 threads", ""),
        (
            f'{PLACEHOLDER}: source file "{PLACEHOLDER}" does not exist (looked for {PLACEHOLDER})',
            "does not exist (looked for",
        ),
    ],
)
def test_fragment_of(template: str, fragment: str) -> None:
    assert fragment_of(template) == fragment


def test_extractor_finds_every_kind_of_site(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "errors.py").write_text(
        "class CudaqError(Exception): ...\n"
        "class LinkError(CudaqError): ...\n"
        "class DeepError(LinkError): ...\n"
        "class Unrelated: ...\n"
        "class _UsageError(ValueError): ...\n",
        encoding="utf-8",
    )
    (pkg / "code.py").write_text(
        "from . import _log\n"
        "from .errors import DeepError, LinkError, Unrelated\n"
        "TOP = 'module level constant message'\n"
        "def f(x):\n"
        "    msg = f'{x} direct f-string message'\n"
        "    raise LinkError(msg) from None\n"
        "def g(x):\n"
        "    raise DeepError('plain ' + 'concatenated message %s' % x)\n"
        "def h(x):\n"
        "    raise Unrelated('never a documented message')\n"
        "def wrap(what, code):\n"
        "    return LinkError(f'{what}: {code}')\n"
        "def i():\n"
        "    raise wrap('wrapped call message', 3)\n"
        "def j(ok):\n"
        "    _log.error('first branch message' if ok else TOP)\n"
        "def k(report):\n"
        "    report(('a',), 'reported settings problem', 'fix it')\n"
        "def m(keys):\n"
        "    problems = ['listed problem message']\n"
        "    for key in keys:\n"
        "        problems.append(f'unknown setting name {key!r}; x'.rstrip())\n"
        "    raise _UsageError('\\n'.join(problems))\n",
        encoding="utf-8",
    )
    found = {fragment_of(t) for t, _, _ in python_messages(pkg)}
    assert {
        "direct f-string message",
        "plain concatenated message",
        "wrapped call message",
        "first branch message",
        "module level constant message",
        "reported settings problem",
        "listed problem message",
        "unknown setting name",
    } <= found
    assert "never a documented message" not in found

    cmake = tmp_path / "cmake"
    cmake.mkdir()
    (cmake / "x.cmake").write_text(
        'if(NOT X)\n  message(FATAL_ERROR "${where}: no source files given; pass one."\n'
        '    " more (${n})")\nendif()\n# message(FATAL_ERROR "commented out message")\n'
        'message(STATUS "not an error message")\n',
        encoding="utf-8",
    )
    cm = [(fragment_of(t), w) for t, w, _ in cmake_messages(cmake)]
    assert [f for f, _ in cm] == ["no source files given"]
    assert cm[0][1].endswith("x.cmake:2")


# ---------------------------------------------------------------------------------------------
# The docs
# ---------------------------------------------------------------------------------------------


def test_every_error_message_is_in_troubleshooting() -> None:
    found, _ = error_messages()
    assert found, "the extractor found no error messages at all: it is broken"
    missing = missing_messages()
    assert not missing, (
        f"{len(missing)} error message(s) the code can print are not explained in "
        f"{TROUBLESHOOTING.relative_to(ROOT)}. Add each fragment below (verbatim) with its cause "
        "and fix:\n" + describe(missing)
    )


#: Runs Sphinx as ``python -m sphinx`` does, in an environment cut down to what
#: ``pip install ".[docs]"`` installs: the distributions the project's dependencies and its
#: ``docs`` extra require (transitively, from the installed metadata) and the standard
#: library. Any other installed distribution cannot be imported (optional imports fall back
#: as they would where it is missing), so the build fails where autodoc needs a package the
#: extra does not bring (setuptools, which venvs no longer carry from Python 3.12 on).
_DOCS_EXTRA_ONLY = r"""
import importlib.abc, importlib.metadata as md, sys
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from skbuild_cudaq._compat import tomllib

with open(sys.argv[1], "rb") as f:
    project = tomllib.load(f)["project"]
todo = [*project["dependencies"], *project["optional-dependencies"]["docs"]]
allowed = set()
while todo:
    req = Requirement(todo.pop())
    if req.marker is not None and not req.marker.evaluate({**default_environment(), "extra": ""}):
        continue
    name = canonicalize_name(req.name)
    if name in allowed:
        continue
    allowed.add(name)
    try:
        todo.extend(md.requires(req.name) or [])
    except md.PackageNotFoundError:
        pass
owners = md.packages_distributions()

class DocsExtraOnly(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        top = name.partition(".")[0]
        dists = owners.get(top)
        if top in sys.stdlib_module_names or not dists:
            return None
        if not any(canonicalize_name(d) in allowed for d in dists):
            msg = f"No module named {name!r} (installed, but not by the docs extra)"
            raise ModuleNotFoundError(msg, name=name)
        return None

sys.meta_path.insert(0, DocsExtraOnly())
from sphinx.cmd.build import main
raise SystemExit(main(sys.argv[2:]))
"""


@pytest.fixture(scope="session")
def built_docs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("html")
    env = dict(os.environ, PYTHONWARNINGS="ignore")  # Sphinx's own deprecations are not ours
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            _DOCS_EXTRA_ONLY,
            str(ROOT / "pyproject.toml"),
            "-n",  # nitpicky: every cross-reference must resolve
            "-W",
            "--keep-going",
            "-q",
            "-b",
            "html",
            "-d",
            str(out / ".doctrees"),
            str(DOCS),
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, f"sphinx -n -W failed:\n{proc.stdout}\n{proc.stderr}"
    return out


def test_docs_build_nitpicky_with_warnings_as_errors(built_docs: Path) -> None:
    for page in (
        "index",
        "getting-started",
        "reference/troubleshooting",
        "reference/trusted",
        "performance",
        "reference/python",
        "reference/cmake",
        "reference/tool-cudaq",
        "reference/device-header",
        "guides/index",
    ):
        assert (built_docs / f"{page}.html").is_file(), page


def _inventory(built: Path) -> set[str]:
    """Names of every Python object the built docs describe (from objects.inv)."""
    data = (built / "objects.inv").read_bytes()
    header_end = 0
    for _ in range(4):
        header_end = data.index(b"\n", header_end) + 1
    names = set()
    for line in zlib.decompress(data[header_end:]).decode().splitlines():
        m = re.match(r"(\S+)\s+(py:\w+)\s", line)
        if m:
            names.add(m.group(1))
    return names


def public_modules() -> list[str]:
    """``skbuild_cudaq`` and every module of it with no ``_``-prefixed part."""
    names = ["skbuild_cudaq"]
    for info in pkgutil.walk_packages([str(PACKAGE)], prefix="skbuild_cudaq."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            names.append(info.name)
    return sorted(n for n in names if n != "skbuild_cudaq.cmake")


def test_every_public_name_is_in_the_reference(built_docs: Path) -> None:
    documented = _inventory(built_docs)
    missing = []
    for module_name in public_modules():
        module = importlib.import_module(module_name)
        if f"{module_name}" not in documented:
            missing.append(f"module {module_name}")
        for name in getattr(module, "__all__", []):
            candidates = {f"{module_name}.{name}"}
            try:
                value = getattr(module, name)
            except (AttributeError, ImportError) as exc:
                missing.append(f"{module_name}.{name} (cannot be imported: {exc})")
                continue
            home, qual = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
            if isinstance(home, str) and isinstance(qual, str):
                candidates.add(f"{home}.{qual}")
            # a package that re-exports the name documents it under its own name
            parts = module_name.split(".")
            for depth in range(1, len(parts)):
                parent = importlib.import_module(".".join(parts[:depth]))
                if name in getattr(parent, "__all__", []) and getattr(parent, name) is value:
                    candidates.add(f"{parent.__name__}.{name}")
            if not candidates & documented:
                missing.append(f"{module_name}.{name}")
    assert not missing, "not in the built API reference:\n  " + "\n  ".join(missing)


def test_cmake_reference_is_extracted(built_docs: Path) -> None:
    html = (built_docs / "reference" / "cmake.html").read_text(encoding="utf-8")
    cmake_files = sorted(CMAKE_DIR.glob("*.cmake")) if CMAKE_DIR.is_dir() else []
    if not cmake_files:  # before the CMake package exists the page says so
        assert "not part of this checkout yet" in html
        return
    assert "not part of this checkout yet" not in html
    rst = re.compile(r"^#\[(=*)\[\.rst:[ \t]*\n(.*?)^#\]\1\]", re.M | re.S)
    blocks = [m.group(2) for p in cmake_files for m in rst.finditer(p.read_text("utf-8"))]
    assert blocks, "skbuild_cudaq/cmake/*.cmake exist but carry no reST documentation blocks"
    commands = {c for b in blocks for c in re.findall(r"^\.\. command:: (\w+)", b, re.M)}
    assert "cudaq_realtime_add_dispatch_kernel" in commands
    for command in sorted(commands):
        assert f'id="command-{command}"' in html, f"{command} is not described on the page"
    for block in blocks:  # every block's first paragraph line made it onto the page
        first = next(line for line in block.splitlines() if line.strip() and line[0].isalpha())
        assert first.split()[0] in html


def test_device_header_is_included(built_docs: Path) -> None:
    html = (built_docs / "reference" / "device-header.html").read_text(encoding="utf-8")
    assert "cudaq_dev_enter_kernel" in html and "CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION" in html
    assert "cudaq_graph_io_t" in html  # detail/graph.cuh, the header's graph handlers' part


# ---------------------------------------------------------------------------------------------
# example_app on the pages: shown from its files, never as copies that drift
# ---------------------------------------------------------------------------------------------

EXAMPLE = ROOT / "example_app"
_KERNEL = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(')


def _user_pages() -> list[Path]:
    return [ROOT / "README.md", EXAMPLE / "README.md", *sorted(DOCS.rglob("*.md"))]


def test_no_page_inlines_a_copy_of_an_example_app_kernel() -> None:
    """A page that shows one of example_app's kernels includes its file (``{example-file}``):
    a copy pasted into the page goes stale when the example improves, and readers copy it."""
    from _doc_pages import blocks

    defined = {
        name: cu.relative_to(ROOT).as_posix()
        for cu in sorted((EXAMPLE / "src").glob("*.cu"))
        for name in _KERNEL.findall(cu.read_text(encoding="utf-8"))
    }
    assert "single_thread_dispatcher" in defined, defined  # the scan finds the kernels
    copies = [
        f"{page.relative_to(ROOT)}: {name} (use {{example-file}} of {defined[name]})"
        for page in _user_pages()
        for _info, body in blocks(page.read_text(encoding="utf-8"))
        for name in _KERNEL.findall(body)
        if name in defined
    ]
    assert not copies, "pages with pasted copies of example_app's kernels:\n  " + "\n  ".join(
        copies
    )


def test_example_app_readme_describes_its_files() -> None:
    """example_app/README.md (the docs' "Example application" page) names every device source
    of the project, and its ``[tool.cudaq.dispatch-kernels]`` is the project's own."""
    from _doc_pages import blocks

    from skbuild_cudaq._compat import tomllib

    readme = (EXAMPLE / "README.md").read_text(encoding="utf-8")
    sources = sorted(p.relative_to(EXAMPLE).as_posix() for p in (EXAMPLE / "src").glob("*.cu"))
    assert sources
    unnamed = [s for s in sources if s not in readme]
    assert not unnamed, f"example_app/README.md does not mention {unnamed}"
    declared = tomllib.loads((EXAMPLE / "pyproject.toml").read_text(encoding="utf-8"))
    shown = [
        tomllib.loads(body)
        for info, body in blocks(readme.replace("\n  ", "\n"))
        if info == "toml" and "[tool.cudaq" in body
    ]
    assert shown, "example_app/README.md shows no [tool.cudaq] table"
    for table in shown:
        assert table["tool"]["cudaq"] == declared["tool"]["cudaq"], table


# ---------------------------------------------------------------------------------------------
# bench/report.py: the performance page
# ---------------------------------------------------------------------------------------------


def _report(results: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    figures = out.parent / "_static" / "perf"
    return subprocess.run(
        [
            sys.executable,
            str(REPORT),
            "--results",
            str(results),
            "--out",
            str(out),
            "--figures",
            str(figures),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )


def test_report_says_not_measured_without_results(tmp_path: Path) -> None:
    out = tmp_path / "docs" / "performance.md"
    _report(tmp_path / "no-results", out)
    page = out.read_text(encoding="utf-8")
    for name in ("dispatch", "dispatch_multigpu", "startup", "build_overhead"):
        assert f"Not measured yet: no `{name}` results file" in page
    assert "![" not in page and "## Headline" not in page
    assert not (tmp_path / "docs" / "_static").exists()


def _header(benchmark: str, date: str, gpus: int = 1) -> dict[str, object]:
    """The header every results file starts with (bench/common.py header())."""
    return {
        "benchmark": benchmark,
        "date": date,
        "devices": [{"ordinal": i, "name": "GPU-X17", "compute_capability": "9.0"} for i in
                    range(gpus)],
        "driver": {"nvidia": "580.99", "cuda": "13.0"} if gpus else {},
        "host": {"cpu": "CPU-Q", "cpus": 3},
        "versions": {"cuda-bindings": "13.3.7", "skbuild-cudaq": "0.1.0"},
    }  # fmt: skip


def _percentiles(p50: float, n: int = 777) -> dict[str, float]:
    return {"p50": p50, "p99": p50 + 0.5, "p99.9": p50 + 3, "min": p50 - 1, "mean": p50, "n": n}


def test_report_tables_and_figures_come_from_the_json(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    # distinctive inputs; the page must carry exactly these, with where they were measured
    pair = {"p50_over_floor": 2.0, "p99_over_p50": 1.1, "floor_p99_over_p50": 1.3}
    dispatch = {
        **_header("dispatch", "2031-02-03T04:05:06+00:00"),
        "config": {"arg_len": 32, "num_slots": 256, "slot_size": 128},
        "latency_us": {"pingpong_floor": _percentiles(3.217), "single_thread": _percentiles(6.434)},
        "paired": {"single_thread": {"b2b": pair, "random": {**pair, "p50_over_floor": 1.9}}},
        "throughput_mrps": {"warp_parallel:thread": {"1": 0.123, "64": 4.567},
                            "warp_floor": {"1": 0.2, "64": 9.134}},
        "python_client_us": {**_percentiles(6.5), "native": _percentiles(6.4),
                             "over_native_p50_us": 0.1, "over_native_random_arrival_p50_us": 0.2},
        "goals": {"single_thread_p50_over_floor": {"value": 2.0, "goal": "<= 1.05", "met": False}},
        "errors": {"cluster": "InvalidArgumentError: needs sm_90"},
    }  # fmt: skip
    (results / "dispatch.json").write_text(json.dumps(dispatch), encoding="utf-8")
    old = {**_header("dispatch", "2020-01-01T00:00:00+00:00"), "devices": [{"name": "OLD-GPU"}]}
    (results / "old-dispatch.json").write_text(json.dumps(old), encoding="utf-8")
    startup = {
        **_header("startup", "2031-02-04T00:00:00+00:00"),
        "inputs": {"kernel": "k", "arch": "sm_90", "runs": 7},
        "results": {
            "floor": {"runs": 7, "ok": 7, "median_in_process_s": 0.0812, "median_wall_s": 0.2},
            "warm": {"runs": 7, "ok": 7, "median_in_process_s": 0.0833, "ratio_to_floor": 1.026},
        },
    }
    (results / "startup.json").write_text(json.dumps(startup), encoding="utf-8")
    (results / "smoke.json").write_text('{"p50_us": 5.15}', encoding="utf-8")
    (results / "broken.json").write_text("{", encoding="utf-8")
    out = tmp_path / "docs" / "performance.md"
    _report(results, out)
    page = out.read_text(encoding="utf-8")

    assert "GPU-X17" in page and "580.99 / CUDA 13.0" in page and "2031-02-03" in page
    assert "cuda-bindings 13.3.7" in page and "CPU-Q, 3 CPUs" in page
    # the headline: each path against its floor, with where and when it ran
    assert (
        "| single-thread, launch-wide `echo`: round trip p50 | 6.43 µs | 3.22 µs | 2.000× "
        "| GPU-X17 | 580.99 / CUDA 13.0 | 2031-02-03 |" in page
    )
    assert "| 4.57 M/s | 9.13 M/s | 0.500× |" in page  # warp-parallel at 64 against its floor
    assert "| 83 ms | 81 ms | 1.026× |" in page  # a warm start against the raw load
    assert "| 6.43 | 6.93 | 2.000 | — | 1.900 |" in page  # the round-trip table
    assert "| `single_thread_p50_over_floor` | 2.000 | <= 1.05 | **no** |" in page
    assert "InvalidArgumentError: needs sm_90" in page
    assert "OLD-GPU" not in page and "`old-dispatch.json`: an older `dispatch`" in page
    assert "Not measured yet: no `build_overhead` results file" in page
    assert "`smoke.json`: not a results file" in page and "`broken.json`: not read" in page
    figures = sorted(p.name for p in (tmp_path / "docs" / "_static" / "perf").iterdir())
    assert figures == ["dispatch_latency.png", "dispatch_throughput.png", "startup.png"]
    for name in figures:
        assert f"](_static/perf/{name})" in page
        assert (tmp_path / "docs" / "_static" / "perf" / name).read_bytes()[:8] == (
            b"\x89PNG\r\n\x1a\n"
        )


def test_report_shows_the_spread_of_repeated_dispatch_runs(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    goal = {
        "value": 1.063,
        "goal": "<= 1.05",
        "met": False,
        "handler_shape": "thread",
        "min": 1.0471,
        "max": 1.0822,
        "values": [1.0471, 1.0822, 1.063],
        "met_runs": 1,
        "floor_value": 1.31,
    }
    doc = {
        **_header("dispatch", "2031-02-03T04:05:06+00:00"),
        "repeat": 3,
        "goals": {"single_thread:thread_p50_over_floor": goal},
    }
    (results / "dispatch.json").write_text(json.dumps(doc), encoding="utf-8")
    out = tmp_path / "docs" / "performance.md"
    _report(results, out, "--no-figures")
    page = out.read_text(encoding="utf-8")
    assert "each the median of 3 whole runs" in page
    assert (
        "| `single_thread:thread_p50_over_floor` | 1.063 | <= 1.05 | **no** | 1.047 to 1.082 "
        "| 1 of 3 | 1.310 |" in page
    )


def _graph_json() -> dict[str, object]:
    """graph.json as bench/graph.py writes it (its summarise() on synthetic rounds)."""
    np = pytest.importorskip("numpy")
    from _bench import load_bench

    graph = load_bench("graph")
    low = {"floor_one_kernel": 8.0, "floor_two_kernels": 10.0, "graph_one_kernel": 9.0,
           "graph_two_kernels": 12.0, "host_floor_one_kernel": 11.0,
           "host_floor_two_kernels": 12.5, "host_graph_one_kernel": 12.0,
           "host_graph_two_kernels": 15.0, "device_function": 3.0,
           "device_function_builtin": 3.2}  # fmt: skip
    rounds = [{k: np.linspace(v, 2 * v, 101) for k, v in low.items()} for _ in range(3)]
    cases, goals = graph.summarise(rounds)
    settings = {"arch": "sm_90", "ring": [8, 64], "payload_bytes": 8, "rounds": 3, "warmup": 20,
                "repeats": 101}  # fmt: skip
    head = _header("graph", "2031-03-01T00:00:00+00:00")
    steps = {"staged": 1.5, "looked_up": 0.25, "filled": 0.75, "launch": 0.125, "started": 3.0,
             "done": 2.0, "published": 2.5}  # fmt: skip
    phases = {"kernel": "cudaq_realtime_graph_dispatch", "handler": "graph_increment",
              "path": "graph", "requests": 10_000, "steps_us": steps, "device_us": 10.25,
              "round_trip_p50_us": 12.5, "graph": {"launch_call_us": 2.0, "retries_mean": 0.0,
              "relaunches": 100, "relaunch_us": 2.5, "timer_step_ns": 1440.0}}  # fmt: skip
    return {**head, "settings": settings, "cases": cases, "goals": goals, "phases": phases}


def _wire_json(gpu: bool = True) -> dict[str, object]:
    """wire.json as bench/wire.py writes it (its summarize() on synthetic rounds); without a GPU,
    the device rows and their goal left out."""
    from _bench import load_bench

    wire = load_bench("wire")
    p50s = {"udp_echo_floor": (10.0, 90e3), "udp_host_native": (11.0, 80e3),
            "udp_host_python": (16.0, 30e3), "ring_floor": (0.2, 9e6), "host_native": (0.25, 8e6),
            "host_python": (2.5, 3e5), "host_python_c_client": (0.45, 1e6),
            "host_native_python_client": (0.65, 2e6)}  # fmt: skip
    if gpu:
        p50s |= {"udp_gpu_floor": (14.0, 60e3), "udp_device": (17.5, 50e3)}
    tail = {"udp_host_python": 2.5}  # p99 / p50; 1.5 for the other rows
    per_round = {
        row: [{"p50_us": p50 * f, "p90_us": p50 * f * 1.1, "p99_us": p50 * f * tail.get(row, 1.5),
               "rps": rps * f} for f in (1.0, 1.02, 0.98)]
        for row, (p50, rps) in p50s.items()
    }  # fmt: skip
    left_out = {} if gpu else {"udp_device_p50_over_floor": "no CUDA GPU here"}
    options = argparse.Namespace(rounds=3, samples=20_000, warmup=2_000, pipelined=50_000)
    summary = wire.summarize(per_round, left_out, options)
    return {**_header("wire", "2031-03-02T00:00:00+00:00", gpus=int(gpu)), **summary}


def test_report_shows_graph_handlers_and_the_wire_against_their_floors(tmp_path: Path) -> None:
    """graph.json: the three-way comparison (median and p99) and the graph handlers in the
    headline against the bare graph launch; wire.json: its five goals, p99 / p50 and throughput
    with 64 in flight against each row's floor, the breakdown, the goals' rows in the headline."""
    results = tmp_path / "results"
    results.mkdir()
    (results / "graph.json").write_text(json.dumps(_graph_json()), encoding="utf-8")
    (results / "wire.json").write_text(json.dumps(_wire_json()), encoding="utf-8")
    out = tmp_path / "docs" / "performance.md"
    _report(results, out)
    page = out.read_text(encoding="utf-8")
    where = "| GPU-X17 | 580.99 / CUDA 13.0 |"
    assert (
        "| graph handler, two kernels (`graph_increment`): p50 | 18.00 µs | 15.00 µs (floor: "
        f"bare device launch, two kernels) | 1.200× {where} 2031-03-01 |" in page
    )
    assert "| graph handler, one kernel: p50 | 13.50 µs | 12.00 µs (floor: bare device" in page
    assert "| host path graph handler, two kernels: p50 | 22.50 µs | 18.75 µs (floor: bare" in page
    assert "| graph handler, one kernel | 13.50 | 17.91 | 1.33 | 1.125× |" in page
    assert "| floor: bare device launch, one kernel | 12.00 | 15.92 | 1.33 |  |" in page
    assert "| device function, built-in kernel | 4.80 | 6.37 | 1.33 |  |" in page
    assert "| `graph_two_kernels_p50_over_floor` | 1.200 | <= 1.15 | **no** |" in page
    assert "| `graph_one_kernel_p50_over_floor` | 1.125 | <= 1.15 | yes |" in page
    assert "| `graph_p99_over_p50` | 1.327 | <= 2.0 | yes | 1.327 |" in page  # the floor's own
    assert (
        "Where `graph_increment`'s time goes on the device path (`skbuild-cudaq phases --graph`, "
        "10,000 requests, medians, µs): seen → staged 1.50, staged → looked_up 0.25, looked_up → "
        "filled 0.75, filled → launch 0.12, launch → started 3.00, started → done 2.00, done → "
        "published 2.50; 10.25 on the device in all, the launch call 2.00, 0.000 launch retries "
        "a request (`%globaltimer` times the steps from the launch on, in steps of 1,440 ns "
        "here)." in page
    )
    assert (
        "| UDP, device path, single-thread dispatcher: p50 | 17.50 µs | 14.00 µs (UDP + GPU ring "
        f"floor: C++ thread and kernel) | 1.250× {where} 2031-03-02 |" in page
    )
    for row, floor, ratio in (
        ("UDP, host path, native handler", "10.00 µs (UDP floor: C++ echo thread)", "1.100"),
        ("UDP, host path, Python handler", "10.00 µs (UDP floor: C++ echo thread)", "1.600"),
        ("in process, native handler, C client", "0.20 µs (ring floor: two C threads)", "1.250"),
        ("in process, Python handler, `RingClient.call`", "0.20 µs (ring floor: two C threads)",
         "12.500"),
    ):  # fmt: skip
        assert f"| {row}: p50 |" in page and f"| {floor} | {ratio}× {where}" in page
    assert "| `udp_device_p50_over_floor` | 1.250 | <= 1.2 | **no** |" in page
    assert "| `udp_host_native_p50_over_floor` | 1.100 | <= 1.2 | yes |" in page
    assert "| `udp_host_python_p50_over_floor` | 1.600 | <= 1.5 | **no** |" in page
    assert "| `host_native_p50_over_floor` | 1.250 | <= 1.5 | yes |" in page
    assert "| `host_python_p50_us` | 2.500 | <= 3.0 | yes |" in page
    # p50, p99, p99 / p50, p50 over the floor, requests a second with 64 in flight, over the floor
    assert (
        "| UDP, host path, native handler | 11.00 | 16.50 | 1.50 | 1.100 | 80,000 | 0.889 |" in page
    )
    assert "| UDP floor: C++ echo thread | 10.00 | 15.00 | 1.50 | — | 90,000 | — |" in page
    assert "| UDP, host path, Python handler | 16.00 | 40.00 | **2.50** | 1.600 | 30,000 |" in page
    rows = page[page.index("| Round trip | p50 (µs) |") :]  # the UDP rows, then the ring's
    assert rows.index("| UDP floor") < rows.index("| UDP, device path") < rows.index("| ring floor")
    assert "- ring: both (host_python - host_native): 2.250" in page
    assert "- udp: the socket floor (udp_echo_floor): 10.000" in page
    assert "Not measured yet: no `wire`" not in page and "not a results file" not in page
    figures = sorted(p.name for p in (tmp_path / "docs" / "_static" / "perf").iterdir())
    assert figures == ["graph.png"] and "](_static/perf/graph.png)" in page


def test_the_page_renders_with_and_without_wire_results_within_320_lines(tmp_path: Path) -> None:
    """The committed results without wire.json (as committed now), then with one from a machine
    without a GPU (its device goal left out, with why), and with the GPU rows: at most 320
    lines each (issue 41's 300, and issue 55's graph floors and goals)."""
    results = tmp_path / "results"
    results.mkdir()
    for path in (ROOT / "bench" / "results").glob("*.json"):
        if path.name != "wire.json":
            (results / path.name).write_bytes(path.read_bytes())
    out = tmp_path / "docs" / "performance.md"
    _report(results, out, "--no-figures")
    page = out.read_text(encoding="utf-8")
    assert "Not measured yet: no `wire` results file." in page and "UDP floor" not in page
    assert len(page.splitlines()) <= 320
    for gpu in (False, True):
        (results / "wire.json").write_text(json.dumps(_wire_json(gpu)), encoding="utf-8")
        _report(results, out, "--no-figures")
        page = out.read_text(encoding="utf-8")
        assert len(page.splitlines()) <= 320, len(page.splitlines())
        assert ("UDP, device path" in page) is gpu
        left_out = "- Not measured, `udp_device_p50_over_floor`: no CUDA GPU here"
        assert (left_out in page) is not gpu
        assert ("| none (CPU only) | — | 2031-03-02 |" in page) is not gpu


def test_committed_results_are_the_current_run_only() -> None:
    """bench/results/ holds one file per benchmark the page shows, nothing else, and the docs
    cite no benchmark run or session (the page says the GPU, driver and date instead)."""
    names = sorted(p.name for p in (ROOT / "bench" / "results").glob("*") if p.is_file())
    benchmarks = ("dispatch", "dispatch_multigpu", "startup", "startup_cu12", "build_overhead")
    assert set(names) <= {
        *(f"{n}.json" for n in (*benchmarks, "graph", "wire", "udp_flood", "python_device")),
        "gpu-tests.xml",  # the last run of every one-GPU test (JUnit XML)
    }, names
    cited = re.compile(r"\bsession \d|\bruns? [A-K]\b|\bseries \d|history/|\bs\d+-run")
    for page in [ROOT / "README.md", ROOT / "DEVELOPING.md", *DOCS.rglob("*.md")]:
        found = cited.findall(page.read_text(encoding="utf-8"))
        assert not found, f"{page.relative_to(ROOT)} cites benchmark runs: {found}"


def _quoted_figures() -> dict[str, list[str]]:
    """What each guide quotes from ``bench/results/``, formatted from the results files:
    a guide's advice carries the current figures."""
    res = ROOT / "bench" / "results"

    def load(name: str) -> Any:
        return json.loads((res / f"{name}.json").read_text(encoding="utf-8"))

    dispatch, startup, graph, wire, py = (
        load(n) for n in ("dispatch", "startup", "graph", "wire", "python_device")
    )
    lat, paired, goals = dispatch["latency_us"], dispatch["paired"], dispatch["goals"]
    floor = lat["pingpong_floor"]["p50"]

    def p50(shape: str) -> str:
        return f"{lat[shape]['p50']:.2f}"

    def ratio(shape: str) -> str:
        return f"{paired[shape]['b2b']['p50_over_floor']:.3f}×"

    def row(label: str, shape: str) -> str:
        cells = [f"{p50(s)} µs, {ratio(s)}" for s in (shape, f"{shape}:thread")]
        return f"| {label} | {cells[0]} | {cells[1]} |"

    def signed(value: float) -> str:
        return f"{'−' if value < 0 else '+'}{abs(value):.2f}"

    over = [lat[s]["p50"] - floor for s in ("single_thread", "single_thread:thread")]
    native = "python_call_over_native_client"
    call = [goals[f"{native}{k}_us"]["value"] for k in ("", "_random_arrival")]
    ring = {row: f"{v['p50_us']:.2f}" for row, v in wire["latency"].items()}
    python_p99 = wire["latency"]["host_python"]["p99_us"]
    r, cu12 = startup["results"], load("startup_cu12")["results"]
    ms = {k: f"{v['median_in_process_s'] * 1e3:.1f}" for k, v in r.items()}
    g = {k: v["p50"] for k, v in graph["cases"].items()}
    step = graph["phases"]["steps_us"]
    return {
        "dispatch-kernel.md": [
            f"answers a 32-byte request in {floor:.2f} µs (p50,",
            row("single-thread", "single_thread"),
            row("built-in (one block of 128)", "builtin"),
            row("cluster (4 blocks)", "cluster"),
            row("cooperative grid (a block per SM)", "cooperative_grid"),
            f"is {min(over):.2f}-{max(over):.2f} µs here.",
            f"({p50('cluster')} against {p50('cluster:thread')} µs in the cluster kernel, "
            f"{p50('cooperative_grid')} against {p50('cooperative_grid:thread')} µs in",
            f"({ratio('builtin:thread')} against {ratio('single_thread:thread')} of the floor)",
        ],
        "dispatcher.md": [
            f"built-in {p50('builtin')} → {p50('builtin:thread')} µs, cluster {p50('cluster')} → "
            f"{p50('cluster:thread')} µs, cooperative grid {p50('cooperative_grid')} → "
            f"{p50('cooperative_grid:thread')} µs;",
            f"{p50('cooperative_grid')} µs with a block per SM against the floor's {floor:.2f} µs",
        ],
        "host-path.md": [
            f"({signed(call[0])} µs back to back, {signed(call[1])} µs with random arrival;",
            f"takes {ring['host_python']} µs (p50, p99 {python_p99:.2f}"
            f" µs), through a native `echo` {ring['host_native_python_client']} µs",
            f"`echo` {ring['host_native']} µs against {ring['ring_floor']} µs for a bare",
            f"a native handler answers in {ring['udp_host_native']} µs and a Python one in "
            f"{ring['udp_host_python']} µs (p50) against the floor's {ring['udp_echo_floor']} µs.",
        ],
        "runtime.md": [
            f"`cuda.bindings` takes {float(ms['floor']):.0f} ms from a fresh process's",
            f"(the floor) {ms['floor']} ms; a cold start, link included, {ms['cold']} ms "
            f"({r['cold']['ratio_to_floor']:.2f}×); a warm start (cache hit) {ms['warm']} ms "
            f"({r['warm']['ratio_to_floor']:.2f}×); cuda.core's `Linker` path {ms['cuda_core']} ms "
            f"({r['cuda_core']['ratio_to_floor']:.1f}×).",
            f"was {r['cold']['paired_ratio_median']:.2f}× cold and "
            f"{r['warm']['paired_ratio_median']:.2f}× warm.",
        ],
        "cuda-versions.md": [
            f"costs {cu12['warm']['ratio_to_floor']:.2f}× the raw load of a linked cubin, cold "
            f"{cu12['cold']['ratio_to_floor']:.2f}×",
        ],
        "python-device-code.md": [
            f"On an {py['devices'][0]['name']} the round trip through the thread-shaped Python "
            f"twin is {py['goals']['twin_thread_p50_max']['value']:.3f}× the C++ twin's (p50), "
            f"through the launch-wide one {py['goals']['twin_launch_p50_max']['value']:.3f}×, "
            f"warp-parallel throughput {py['goals']['twin_warp_throughput_max']['value']:.3f}×, "
            f"and `py_single_thread_dispatcher` answers in "
            f"{py['goals']['dispatcher_p50']['value']:.3f}× the time",
        ],
        "graph-handlers.md": [
            *(
                f"{label} | {graph['cases'][case]['p50']:.2f} | {graph['cases'][case]['p99']:.2f} |"
                for label, case in (
                    ("default built-in kernel", "device_function_builtin"),
                    ("the graph dispatch kernel", "device_function"),
                    ("bare device launch: the floor", "floor_one_kernel"),
                    ("one-kernel graph handler, device path", "graph_one_kernel"),
                    ("1 x 128 threads), bare device launch: the floor", "floor_two_kernels"),
                    ("`graph_increment`, device path", "graph_two_kernels"),
                    ("on a stream): the floor", "host_floor_two_kernels"),
                    ("host path (`HostDispatcher`)", "host_graph_two_kernels"),
                )
            ),
            f"costs about {g['floor_one_kernel'] - g['device_function']:.1f} µs more than a "
            f"device function, and a second kernel about "
            f"{g['floor_two_kernels'] - g['floor_one_kernel']:.1f}",
            f"the host path takes about "
            f"{g['host_graph_two_kernels'] - g['graph_two_kernels']:.1f} µs more",
            f"copying the request into device memory takes {step['staged']:.1f} µs, the lookup "
            f"and the I/O context {step['looked_up'] + step['filled']:.1f} µs;",
            f"the graph's kernels start {step['started']:.1f} µs after the launch began (the "
            f"launch call itself takes {graph['phases']['graph']['launch_call_us']:.1f} µs of "
            "that;",
            f"run {step['done']:.1f} µs and publish {step['published']:.1f} µs later "
            f"({graph['phases']['device_us']:.1f} µs on the device in all;",
        ],
    }


@pytest.mark.parametrize("guide", sorted(_quoted_figures()))
def test_guides_quote_the_current_results(guide: str) -> None:
    """Each figure a guide quotes from a benchmark is the one in ``bench/results/`` now:
    committing new results without updating the advice built on them fails here."""
    text = " ".join((DOCS / "guides" / guide).read_text(encoding="utf-8").split())
    stale = [quote for quote in _quoted_figures()[guide] if quote not in text]
    assert not stale, f"docs/guides/{guide} quotes other figures than bench/results/: {stale}"


def test_committed_performance_page_is_fresh(tmp_path: Path) -> None:
    out = tmp_path / "docs" / "performance.md"
    _report(ROOT / "bench" / "results", out, "--no-figures")
    committed = (DOCS / "performance.md").read_text(encoding="utf-8")
    assert committed == out.read_text(encoding="utf-8"), (
        "docs/performance.md is stale: run python bench/report.py"
    )
    for png in re.findall(r"\]\((_static/perf/[^)]+\.png)\)", committed):
        assert (DOCS / png).is_file(), f"{png} is referenced but not committed"
