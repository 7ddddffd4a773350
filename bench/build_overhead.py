"""Build overhead of skbuild-cudaq on example_app (CPU only; no GPU needed).

Measures, median of ``--runs`` runs each:

* ``wheel``: ``pip wheel --no-build-isolation`` of example_app with a fresh build directory
  (backend ``skbuild_cudaq.build``, kernel declared in ``[tool.cudaq]``);
* ``baseline``: the same project built with plain ``scikit_build_core.build``, no
  ``[tool.cudaq]`` table and no ``cudaq_realtime_add_dispatch_kernel`` line (otherwise the
  same CMakeLists.txt: handlers, host code, CUDA language);
* ``nvcc_kernels``: the nvcc commands of the dispatch kernels, taken from the build log
  and run directly in the same directories;
* ``noop_rebuild``: a second ``pip wheel`` with the same build directory, nothing changed;
* ``backend_prepare``: the backend's own Python work per hook (20 in-process calls).

``plugin_overhead = wheel - baseline - nvcc_kernels``: the time skbuild-cudaq itself adds
(backend, settings, configure-time work, embedding), compared with ``nvcc_kernels``.

Usage: ``python bench/build_overhead.py [OUTPUT.json] [--runs N]``
(default ``bench/results/build_overhead.json``).

``--compilers OUT.json``: instead, NVRTC against nvcc on example_app's device sources (each
compiled alone to an LTO-IR fatbin: nvcc, ``python -m skbuild_cudaq nvrtc`` as CMake runs it,
and NVRTC in-process) and the whole wheel built with ``compiler`` nvcc and nvrtc.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_APP = ROOT / "example_app"


def pip_wheel(src: Path, out: Path, build_dir: Path, *extra: str) -> tuple[float, str]:
    # SKBUILD_CUDAQ_VERBOSE: the CMake package's steps runner prints each nvcc command it runs
    env = dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL="1", SKBUILD_CUDAQ_VERBOSE="1")
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
         "--disable-pip-version-check", "-v", "-w", str(out),
         "-C", f"build-dir={build_dir}", "-C", "build.verbose=true", *extra, str(src)],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"building {src} failed:\n{(proc.stdout + proc.stderr)[-4000:]}")
    return elapsed, proc.stdout + proc.stderr


def kernel_nvcc_commands(log: str) -> list[tuple[str, str]]:
    """(working directory, nvcc command) of every kernel fatbin in a verbose build log (the
    steps runner's ``skbuild-cudaq: cd DIR && nvcc ...`` lines)."""
    commands = []
    for line in log.splitlines():
        if " -fatbin " not in line or "nvcc" not in line:
            continue
        text = re.sub(r"^\s*(\[\d+/\d+\]\s*)?(skbuild-cudaq: )?", "", line)
        parts = [p.strip() for p in text.split(" && ")]
        cwd = next(shlex.split(p)[1] for p in parts if p.startswith("cd "))
        nvcc = next(p for p in parts if " -fatbin " in p)
        commands.append((cwd, nvcc))
    return commands


def time_commands(commands: list[tuple[str, str]]) -> float:
    start = time.perf_counter()
    for cwd, command in commands:
        subprocess.run(command, shell=True, cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - start


def baseline_copy(work: Path) -> Path:
    """example_app built with plain scikit-build-core and no dispatch kernel at all."""
    dst = work / "baseline"
    shutil.copytree(EXAMPLE_APP, dst, ignore=shutil.ignore_patterns("build", "dist"))
    text = (dst / "pyproject.toml").read_text()
    text = text.replace('"skbuild_cudaq.build"', '"scikit_build_core.build"')
    text = text.split("[tool.cudaq.dispatch-kernels]")[0]
    (dst / "pyproject.toml").write_text(text)
    # and no kernel added with the CMake one-liner either: only handlers and host code
    cmake = dst / "CMakeLists.txt"
    lines = cmake.read_text().splitlines(keepends=True)
    cmake.write_text(
        "".join(
            ln
            for ln in lines
            if "cudaq_realtime_add_dispatch_kernel(" not in ln or ln.lstrip().startswith("#")
        )
    )
    return dst


def version_of(command: list[str]) -> str:
    try:
        out = subprocess.run(command, capture_output=True, text=True, check=False).stdout
    except OSError:
        return "unavailable"
    lines = [line for line in out.splitlines() if line.strip()]
    return lines[-1] if "nvcc" in command[0] else (lines[0] if lines else "unavailable")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


#: example_app's device sources and their architectures (the cluster kernel is sm_90+).
DEVICE_SOURCES = {
    "single_thread_dispatcher.cu": "80",
    "cooperative_grid_dispatcher.cu": "80",
    "warp_parallel_dispatcher.cu": "80",
    "cluster_dispatcher.cu": "90",
    "handlers.cu": "80",
    "block_handlers.cu": "80",
}


def compare_compilers(runs: int, output: Path) -> int:
    """NVRTC vs nvcc per device source and per wheel (medians of ``runs``)."""
    from skbuild_cudaq import include_dir
    from skbuild_cudaq.build._nvrtc import compile_file, find_nvrtc
    from skbuild_cudaq.build._toolchain import find_nvcc

    nvcc, nvrtc = find_nvcc(), find_nvrtc()
    src = EXAMPLE_APP / "src"
    samples: dict[str, list[float]] = {
        "nvcc_files": [], "nvrtc_cli_files": [], "nvrtc_inprocess_files": [],
        "wheel_nvcc": [], "wheel_nvrtc": [],
    }  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="skbuild-cudaq-bench-") as tmp:
        work = Path(tmp)
        for run in range(runs):
            t_nvcc = t_cli = t_in = 0.0
            for name, arch in DEVICE_SOURCES.items():
                out = work / f"{name}.fatbin"
                cmd = [str(nvcc), "-fatbin", "-rdc=true", "-std=c++17",
                       f"-gencode=arch=compute_{arch},code=lto_{arch}", f"-I{include_dir()}",
                       "-o", str(out), str(src / name)]  # fmt: skip
                start = time.perf_counter()
                subprocess.run(cmd, check=True, capture_output=True)
                t_nvcc += time.perf_counter() - start
                cmd = [sys.executable, "-m", "skbuild_cudaq", "nvrtc", "--arch", arch,
                       f"-I{include_dir()}", "-o", str(out), str(src / name)]  # fmt: skip
                start = time.perf_counter()
                subprocess.run(cmd, check=True, capture_output=True)
                t_cli += time.perf_counter() - start
                start = time.perf_counter()
                compile_file(
                    src / name, out, architectures=[arch], include_dirs=[include_dir()],
                    nvrtc=nvrtc,
                )  # fmt: skip
                t_in += time.perf_counter() - start
            samples["nvcc_files"].append(t_nvcc)
            samples["nvrtc_cli_files"].append(t_cli)
            samples["nvrtc_inprocess_files"].append(t_in)
            t, _ = pip_wheel(EXAMPLE_APP, work / "dist", work / f"build-nvcc-{run}")
            samples["wheel_nvcc"].append(t)
            t, log = pip_wheel(
                EXAMPLE_APP, work / "dist", work / f"build-nvrtc-{run}",
                "-C", "cmake.define.SKBUILD_CUDAQ_COMPILER=nvrtc",
            )  # fmt: skip
            if "device compiler: NVRTC" not in log:
                raise SystemExit("the nvrtc wheel build did not use NVRTC")
            samples["wheel_nvrtc"].append(t)
    med = {k: round(statistics.median(v), 4) for k, v in samples.items()}
    result = {
        "benchmark": "build_compilers",
        "project": f"example_app ({len(DEVICE_SOURCES)} device sources, each alone)",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpu": cpu_model(), "cpu_count": os.cpu_count()},
        "versions": {
            "nvcc": version_of([str(nvcc), "--version"]),
            "nvrtc": f"{nvrtc.version[0]}.{nvrtc.version[1]}",
        },
        "runs": runs,
        "samples_s": {k: [round(x, 4) for x in v] for k, v in samples.items()},
        "median_s": med,
        "nvrtc_cli_vs_nvcc": round(med["nvrtc_cli_files"] / med["nvcc_files"], 3),
        "wheel_nvrtc_vs_nvcc": round(med["wheel_nvrtc"] / med["wheel_nvcc"], 3),
        "note": (
            "files: the six sources compiled one after another; nvrtc_cli is what CMake runs "
            "(a Python start-up per file), nvrtc_inprocess the compile alone. wheel_nvrtc: "
            "compiler nvrtc, handlers side-compiled; wheel_nvcc: handlers through CMake's CUDA "
            "language."
        ),
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "output", nargs="?", type=Path, default=ROOT / "bench" / "results" / "build_overhead.json"
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--compilers", type=Path, metavar="OUT.json", help="NVRTC vs nvcc")
    args = parser.parse_args()
    if args.compilers:
        return compare_compilers(args.runs, args.compilers)

    samples: dict[str, list[float]] = {
        "wheel": [], "baseline": [], "nvcc_kernels": [], "noop_rebuild": []
    }  # fmt: skip
    kernels: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="skbuild-cudaq-bench-") as tmp:
        work = Path(tmp)
        base = baseline_copy(work)
        for run in range(args.runs):
            build = work / f"build-{run}"
            t, log = pip_wheel(EXAMPLE_APP, work / "dist", build)
            samples["wheel"].append(t)
            kernels = kernel_nvcc_commands(log)
            if not kernels:
                raise SystemExit("no kernel nvcc command found in the build log")
            t, log = pip_wheel(EXAMPLE_APP, work / "dist", build)
            if kernel_nvcc_commands(log):
                raise SystemExit("the no-op rebuild ran nvcc")
            samples["noop_rebuild"].append(t)
            # Last: the direct nvcc runs rewrite the build tree's fatbins in place,
            # which would make the no-op rebuild above no longer a no-op.
            samples["nvcc_kernels"].append(time_commands(kernels))
            t, _ = pip_wheel(base, work / "dist-baseline", work / f"build-base-{run}")
            samples["baseline"].append(t)

    from skbuild_cudaq.build import prepare_config_settings

    backend = []
    for _ in range(20):
        start = time.perf_counter()
        prepare_config_settings({}, EXAMPLE_APP)
        backend.append(time.perf_counter() - start)
    samples["backend_prepare"] = backend
    med = {k: statistics.median(v) for k, v in samples.items()}
    overhead = med["wheel"] - med["baseline"] - med["nvcc_kernels"]
    result = {
        "benchmark": "build_overhead",
        "project": f"example_app ({len(kernels)} dispatch kernel fatbins, handlers via CMake CUDA)",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": "none (CPU-only build benchmark)",
        "machine": {
            "platform": platform.platform(),
            "cpu": cpu_model(),
            "cpu_count": os.cpu_count(),
        },
        "versions": {
            "python": platform.python_version(),
            "nvcc": version_of(["nvcc", "--version"]),
            "cmake": version_of(["cmake", "--version"]),
            "scikit-build-core": metadata.version("scikit-build-core"),
            "skbuild-cudaq": metadata.version("skbuild-cudaq"),
        },
        "runs": args.runs,
        "samples_s": {k: [round(x, 4) for x in v] for k, v in samples.items()},
        "median_s": {k: round(v, 4) for k, v in med.items()},
        "kernel_nvcc_commands": [c for _, c in kernels],
        "plugin_overhead_s": round(overhead, 4),
        "backend_prepare_s": round(med["backend_prepare"], 5),
        "plugin_overhead_vs_nvcc": round(overhead / med["nvcc_kernels"], 4),
        "goal": "plugin overhead <= 10% of the kernels' nvcc time",
        "goal_met": overhead <= 0.10 * med["nvcc_kernels"],
        "note": (
            "plugin_overhead = median(wheel) - median(baseline) - median(nvcc_kernels); "
            "differences of medians of separate builds on a shared 2-core machine carry noise "
            "of the order of the pip/CMake start-up (~0.1-0.3 s); scikit-build-core may also run "
            "the kernel's nvcc next to the host compile. backend_prepare_s is measured directly: "
            "reading [tool.cudaq] and computing the CMake defines (once per hook call)."
        ),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["median_s"], indent=2))
    share = 100 * overhead / med["nvcc_kernels"]
    print(f"plugin overhead: {overhead:.3f} s = {share:.1f}% of the kernels' nvcc time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
