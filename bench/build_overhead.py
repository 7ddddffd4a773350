"""Build overhead: what skbuild-cudaq adds to building a wheel (no GPU needed).

    python bench/build_overhead.py [--runs 3] [--out bench/results/build_overhead.json]

On example_app, the median of ``--runs`` runs of each (``pip wheel --no-build-isolation``,
a fresh build directory, one CMake job):

* ``wheel``: example_app as shipped (backend ``skbuild_cudaq.build``, kernels in
  ``[tool.cudaq]``; device code compiled by nvcc);
* ``wheel_nvrtc``: the same with ``SKBUILD_CUDAQ_COMPILER=nvrtc`` (NVRTC from pip, the
  handlers side-compiled: no CUDA language to enable); left out where NVRTC is not installed;
* ``baseline``: the same project built with plain ``scikit_build_core.build``, no
  ``[tool.cudaq]`` table and no ``cudaq_realtime_add_dispatch_kernel`` line;
* ``nvcc_kernels``: the dispatch kernels' nvcc commands, from the build log, run directly;
* ``noop_rebuild``: ``pip wheel`` again in the same build directory, nothing changed;
* ``backend_prepare``: the backend's own Python work per hook (20 calls in this process).

``plugin_overhead = wheel - baseline - nvcc_kernels`` is what skbuild-cudaq itself adds
(backend, settings, configure-time work, embedding); goal: at most 10 % of the kernels' nvcc
time. Differences of medians of separate builds carry noise of the order of pip's and CMake's
start-up (0.1-0.3 s on a loaded 2-core machine).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as c  # bench/ is not a package

EXAMPLE_APP = c.BENCH.parent / "example_app"


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
        raise RuntimeError(f"building {src} failed:\n{(proc.stdout + proc.stderr)[-4000:]}")
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
        commands.append((cwd, next(p for p in parts if " -fatbin " in p)))
    return commands


def baseline_copy(work: Path) -> Path:
    """example_app built with plain scikit-build-core and no dispatch kernel at all."""
    dst = work / "baseline"
    shutil.copytree(EXAMPLE_APP, dst, ignore=shutil.ignore_patterns("build", "dist"))
    text = (dst / "pyproject.toml").read_text()
    text = text.replace('"skbuild_cudaq.build"', '"scikit_build_core.build"')
    (dst / "pyproject.toml").write_text(text.split("[tool.cudaq.dispatch-kernels]")[0])
    cmake = dst / "CMakeLists.txt"  # and no kernel added with the CMake one-liner either
    lines, call = cmake.read_text().splitlines(keepends=True), "cudaq_realtime_add_dispatch_kernel("
    cmake.write_text("".join(ln for ln in lines if call not in ln or ln.lstrip().startswith("#")))
    return dst


def measure(runs: int) -> dict[str, object]:
    samples: dict[str, list[float]] = {
        "wheel": [], "wheel_nvrtc": [], "baseline": [], "nvcc_kernels": [], "noop_rebuild": []
    }  # fmt: skip
    errors: dict[str, str] = {}
    skipped: dict[str, str] = {}
    try:  # NVRTC is an optional compiler: without it, that row is left out (not an error)
        from skbuild_cudaq.build._nvrtc import find_nvrtc

        find_nvrtc()
    except Exception as exc:
        skipped["wheel_nvrtc"] = f"no NVRTC: {str(exc).splitlines()[0]}"
    kernels: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="skbuild-cudaq-bench-") as tmp:
        work = Path(tmp)
        base = baseline_copy(work)
        for run in range(runs):
            build = work / f"build-{run}"
            t, log = pip_wheel(EXAMPLE_APP, work / "dist", build)
            samples["wheel"].append(t)
            kernels = kernel_nvcc_commands(log)
            if not kernels:
                raise RuntimeError("no kernel nvcc command found in the build log")
            t, log = pip_wheel(EXAMPLE_APP, work / "dist", build)
            if kernel_nvcc_commands(log):
                raise RuntimeError("the no-op rebuild ran nvcc")
            samples["noop_rebuild"].append(t)
            # After the no-op rebuild: running nvcc again rewrites the build tree's fatbins.
            start = time.perf_counter()
            for cwd, command in kernels:
                subprocess.run(command, shell=True, cwd=cwd, check=True, capture_output=True)
            samples["nvcc_kernels"].append(time.perf_counter() - start)
            t, _ = pip_wheel(base, work / "dist-baseline", work / f"build-base-{run}")
            samples["baseline"].append(t)
            if "wheel_nvrtc" in errors or skipped:
                continue
            try:
                nvrtc = ("-C", "cmake.define.SKBUILD_CUDAQ_COMPILER=nvrtc")
                t, log = pip_wheel(EXAMPLE_APP, work / "dist", work / f"build-nvrtc-{run}", *nvrtc)
                if "device compiler: NVRTC" not in log:
                    raise RuntimeError("the nvrtc build did not use NVRTC")
                samples["wheel_nvrtc"].append(t)
            except RuntimeError as exc:
                errors["wheel_nvrtc"] = str(exc).splitlines()[0]
            print(f"build_overhead: run {run + 1}/{runs} done", file=sys.stderr)
    from skbuild_cudaq.build import prepare_config_settings

    prepare = []
    for _ in range(20):
        start = time.perf_counter()
        prepare_config_settings({}, EXAMPLE_APP)
        prepare.append(time.perf_counter() - start)
    samples["backend_prepare"] = prepare
    med = {k: round(statistics.median(v), 4) for k, v in samples.items() if v}
    overhead = med["wheel"] - med["baseline"] - med["nvcc_kernels"]
    share = c.goal(round(overhead / med["nvcc_kernels"], 4), "<= 0.1")
    return {
        "project": f"example_app ({len(kernels)} dispatch kernel fatbins)",
        "runs": runs,
        "samples_s": {k: [round(x, 4) for x in v] for k, v in samples.items()},
        "median_s": med,
        "kernel_nvcc_commands": [cmd for _, cmd in kernels],
        "plugin_overhead_s": round(overhead, 4),
        "goals": {"plugin_overhead_over_nvcc_kernels": share},
        "errors": errors,
        "skipped": skipped,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=c.RESULTS / "build_overhead.json")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    doc = {**c.header("build_overhead", extra=("scikit-build-core",)), **measure(args.runs)}
    doc["versions"]["cmake"] = c.first_line(["cmake", "--version"])
    c.write_json(args.out, doc)
    print(f"medians (s): {doc['median_s']}; plugin overhead {doc['plugin_overhead_s']:.3f} s")
    return 0 if not doc["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
