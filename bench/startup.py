#!/usr/bin/env python3
"""Start-up cost of getting a launchable kernel handle, in fresh processes.

Figures (each the median of --runs fresh processes on the same inputs; the
variants are interleaved round by round, in a shuffled order, so that drift
hits all of them alike):

  floor    load an already-linked cubin: cuInit, primary context,
           cuLibraryLoadData, cuLibraryGetKernel (raw cuda.bindings)
  cold     our API, import -> kernel handle, linking (link cache disabled)
  warm     our API, link cache hit (must not load libnvJitLink)
  cuda.core  cuda.core's Linker path: ObjectCode.from_fatbin per container,
           Linker(... LinkerOptions(arch, link_time_optimization=True)).link("cubin"),
           get_kernel
  answer_cold / answer_warm
           time to first answer: import -> first RPC answered through the
           single-thread dispatcher (lookups with link or cache, context, ring
           allocation, launch, one call of the handler), against the same floor;
           "phases_ms" splits it (medians): import, get_device_kernel, dispatcher
           (Dispatcher()), get_device_handler, start, client, call

Each child reports the time from its first statement to the kernel handle
(or the first answer) ("in_process_s"); the parent also records each child's
wall time including interpreter start ("wall_s"). Goals: cold <= 1.3x floor,
warm <= 1.05x floor, first answer (warm and cold) <= 1.15x floor (ratio of
in-process medians).

With --many-kernels N (default 32; 0 skips it) the same figures are taken for
a module carrying N dispatch kernels (example_app's single-thread kernel
compiled N times under other names, plus its handlers and the handler switch
over them, as the build makes it: since session 11 every kernel inlines every
handler of both shapes), built here with nvcc + gcc, and its cold link is timed
in this process with and without nvJitLink's -split-compile=0 (cubins compared
byte for byte): "many_kernels" in the JSON.

Context creation alone varies by +-20 ms from process to process (on some
hosts it is bimodal), so each variant also reports the median of its per-round
ratio to the floor ("paired_ratio_median"), which drift cannot bias.

Inputs: --binary EXT.so --kernel NAME (e.g. example_app's extension and its
dispatcher), or by default a small test binary built here with nvcc + gcc from
tests/gpu_kernels (custom dispatcher + two handler objects).

Usage: python bench/startup.py [--runs 21] [--out bench/results/startup.json]

Over 400 lines: the child scripts of every variant live here, so each run measures them
side by side.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

PROBE = r"""
import json, sys
from cuda.bindings import driver as d
def ok(r):
    assert int(r[0]) == 0, r
    return r[1] if len(r) == 2 else r[1:]
assert int(d.cuInit(0)[0]) == 0
dev = ok(d.cuDeviceGet(0))
name = ok(d.cuDeviceGetName(128, dev))
a = d.CUdevice_attribute
major = ok(d.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev))
minor = ok(d.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
sms = ok(d.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev))
drv = ok(d.cuDriverGetVersion())
print(json.dumps({
    "name": name.split(b"\0")[0].decode() if isinstance(name, bytes) else str(name),
    "arch": f"sm_{major}{minor}", "sms": int(sms),
    "cuda_driver_api": f"{int(drv) // 1000}.{int(drv) % 1000 // 10}",
}))
"""

FLOOR = r"""
import time
t0 = time.perf_counter()
import json, sys
from cuda.bindings import driver as d
assert int(d.cuInit(0)[0]) == 0
err, dev = d.cuDeviceGet(0); assert int(err) == 0
err, ctx = d.cuDevicePrimaryCtxRetain(dev); assert int(err) == 0
assert int(d.cuCtxSetCurrent(ctx)[0]) == 0
with open(sys.argv[1], "rb") as f:
    cubin = f.read()
err, lib = d.cuLibraryLoadData(cubin, None, None, 0, None, None, 0); assert int(err) == 0, err
err, kernel = d.cuLibraryGetKernel(lib, sys.argv[2].encode()); assert int(err) == 0, err
t1 = time.perf_counter()
print(json.dumps({"in_process_s": t1 - t0}))
"""

OURS = r"""
import time
t0 = time.perf_counter()
import json, sys
import skbuild_cudaq.realtime as rt
kernel = rt.get_device_kernel(sys.argv[1], sys.argv[2])
t1 = time.perf_counter()
maps = open("/proc/self/maps").read()
print(json.dumps({
    "in_process_s": t1 - t0,
    "nvjitlink_loaded": "libnvJitLink" in maps,
    "nvjitlink_module": "cuda.bindings.nvjitlink" in sys.modules,
}))
"""

ANSWER = r"""
import time
t0 = time.perf_counter()
stamps = []
def stamp(name):
    stamps.append((name, time.perf_counter()))
import json, sys
import skbuild_cudaq.realtime as rt
stamp("import")
binary, kernel_name, handler = sys.argv[1:4]
kernel = rt.get_device_kernel(binary, kernel_name)
stamp("get_device_kernel")
one = rt.LaunchConfig(grid=(1, 1, 1), block=(1, 1, 1))
def launch(args):
    rt.launch_kernel(kernel, one, args.stream, *args.kernel_args())
d = rt.Dispatcher(rt.DispatcherConfig(num_slots=32, slot_size=256), module=binary)
stamp("dispatcher")
d.function_table.add_device(handler, rt.get_device_handler(binary, handler))
d.set_unified_launch(launch)
stamp("get_device_handler")
d.start()
stamp("start")
client = d.bridge.client()
stamp("client")
status, result = client.call(handler, b"\x01\x02\x03")
stamp("call")
t1 = time.perf_counter()
d.close()
assert status == 0 and result == b"\x01\x02\x03", (status, result)  # echo
phases, prev = {}, t0
for name, t in stamps:
    phases[name] = t - prev
    prev = t
print(json.dumps({"in_process_s": t1 - t0, "phases_s": phases}))
"""

CUDA_CORE = r"""
import time
t0 = time.perf_counter()
import json, sys
from pathlib import Path
from cuda.core import Device, Linker, LinkerOptions, ObjectCode
from skbuild_cudaq import device_runtime_dir
from skbuild_cudaq.fatbin import read_fatbin_file, read_relfatbin_sections
dev = Device(0)
dev.set_current()
containers = []
for f in sorted(Path(device_runtime_dir()).glob("*.fatbin")):
    containers += read_fatbin_file(f)
for s in read_relfatbin_sections(sys.argv[1]):
    containers += s.containers
objs = [ObjectCode.from_fatbin(c.data) for c in containers]
opts = LinkerOptions(arch=f"sm_{dev.arch}", link_time_optimization=True)
try:
    linker = Linker(*objs, options=opts)
except TypeError:  # cuda.core versions whose signature is Linker(options, *object_codes)
    linker = Linker(opts, *objs)
code = linker.link("cubin")
kernel = code.get_kernel(sys.argv[2])
t1 = time.perf_counter()
print(json.dumps({"in_process_s": t1 - t0, "backend": str(getattr(linker, "backend", "?"))}))
"""


def _child(script: str, args: list[str], env: dict[str, str], cwd: Path) -> dict[str, Any]:
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,  # not the source tree: the installed package is measured
        check=False,
        timeout=300,
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"error": tail, "wall_s": wall}
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["wall_s"] = wall
    return result


def _versions() -> dict[str, str | None]:
    import importlib.metadata as md

    out: dict[str, str | None] = {"python": platform.python_version()}
    for dist in (
        "skbuild-cudaq",
        "cuda-bindings",
        "cuda-core",
        "cuda-pathfinder",
        "nvidia-nvjitlink",
        "nvidia-nvjitlink-cu12",
        "pyelftools",
        "numpy",
    ):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = None
    try:
        from cuda.bindings import nvjitlink

        major, minor = nvjitlink.version()
        out["nvJitLink"] = f"{major}.{minor}"
    except Exception as exc:  # reported, not fatal
        out["nvJitLink"] = f"unavailable: {exc}"
    return out


def _install() -> dict[str, Any]:
    """How skbuild-cudaq is installed (an editable install adds an import hook)."""
    import importlib.metadata as md

    import skbuild_cudaq

    editable = None
    try:
        direct = md.distribution("skbuild-cudaq").read_text("direct_url.json")
    except md.PackageNotFoundError:
        direct = None
    if direct:
        editable = bool(json.loads(direct).get("dir_info", {}).get("editable", False))
    return {"skbuild_cudaq": str(Path(skbuild_cudaq.__file__).parent), "editable": editable}


def _nvidia_driver() -> str | None:
    try:
        proc = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip().splitlines()[0] if proc.returncode == 0 and proc.stdout else None


def _default_binary(work: Path) -> tuple[Path, str]:
    """example_app's extension module if installed, else a test binary built here."""
    try:
        import example_app._core as core  # the real downstream binary
    except ImportError:
        pass
    else:
        return Path(str(core.__file__)).resolve(), "single_thread_dispatcher"
    sys.path.insert(0, str(ROOT / "tests"))
    from gpu_kernels.testbins import build

    from skbuild_cudaq.build._toolchain import find_nvcc

    bins = build(find_nvcc(), work / "testbins")
    return bins.app, "single_thread_dispatcher"


def _many_kernel_binary(work: Path, count: int) -> tuple[Path, str]:
    """A module with ``count`` dispatch kernels (example_app's single-thread one, renamed),
    example_app's handlers and the handler switch over them, as the build makes it (every
    kernel then inlines every handler of both shapes: what the switch costs the link)."""
    import shutil

    from skbuild_cudaq import include_dir
    from skbuild_cudaq.build._handler_switch import write_switch
    from skbuild_cudaq.build._toolchain import find_nvcc

    nvcc, gcc = str(find_nvcc()), shutil.which("gcc") or "cc"
    src = ROOT / "example_app" / "src"
    root = work / "many"
    root.mkdir()
    inc = f"-I{include_dir()}"
    lto = "-gencode=arch=compute_80,code=lto_80"
    switch = root / "handler_switch.cu"
    write_switch(switch, "many", [src / "handlers.cu"])
    objects = []
    for i in range(count + 1):  # the kernels, then the switch
        fatbin = root / f"k{i:02d}.fatbin"
        name = f"-Dsingle_thread_dispatcher=many_dispatcher_{i:02d}"
        source = src / "single_thread_dispatcher.cu" if i < count else switch
        subprocess.run(
            [
                nvcc,
                "-fatbin",
                "-rdc=true",
                "-std=c++17",
                lto,
                inc,
                name,
                "-o",
                str(fatbin),
                str(source),
            ],
            check=True,
        )
        embed = root / f"k{i:02d}_embed.c"
        embed.write_text(
            f'__asm__(".section __nv_relfatbin,\\"aR\\"\\n.balign 8\\n'
            f'.incbin \\"{fatbin}\\"\\n.previous");\n'
        )
        obj = root / f"k{i:02d}_embed.o"
        subprocess.run([gcc, "-c", "-fPIC", "-o", str(obj), str(embed)], check=True)
        objects.append(obj)
    handlers = root / "handlers.o"
    subprocess.run(
        [
            nvcc,
            "-c",
            "-rdc=true",
            "-std=c++17",
            lto,
            "-Xcompiler",
            "-fPIC",
            inc,
            "-o",
            str(handlers),
            str(src / "handlers.cu"),
        ],
        check=True,
    )
    out = root / "libmany.so"
    subprocess.run([gcc, "-shared", "-o", str(out), *map(str, objects), str(handlers)], check=True)
    return out, "many_dispatcher_00"


def _split_compile(binary: Path, arch: str, repeats: int = 3) -> dict[str, Any]:
    """Cold link time of ``binary`` with and without -split-compile=0 (in this process)."""
    from skbuild_cudaq.realtime.cache import LinkCache
    from skbuild_cudaq.realtime.link import LinkOptions, prepare_link

    out: dict[str, Any] = {}
    cubins: dict[str, bytes] = {}
    for label, extra in (("default", ()), ("split_compile_0", ("-split-compile=0",))):
        times = []
        for _ in range(repeats):
            prepared = prepare_link(binary, LinkOptions(arch=arch, extra=extra), LinkCache(None))
            start = time.perf_counter()
            cubins[label] = prepared.finish(arch).cubin
            times.append(time.perf_counter() - start)
        out[label] = {"median_s": statistics.median(times), "times_s": times}
    out["identical_cubin"] = cubins["default"] == cubins["split_compile_0"]
    out["speedup"] = out["default"]["median_s"] / out["split_compile_0"]["median_s"]
    return out


def _measure(
    binary: Path,
    kernel: str,
    handler: str,
    *,
    runs: int,
    env: dict[str, str],
    work: Path,
    arch: str,
    with_cuda_core: bool,
) -> tuple[dict[str, Any], dict[str, Any], int, bool]:
    """Every variant on ``binary``: (results, goals, cubin bytes, link cache primed)."""
    from skbuild_cudaq.realtime import link_device_code
    from skbuild_cudaq.realtime.cache import LinkCache

    cubin = work / f"{binary.stem}-linked.cubin"
    cubin.write_bytes(link_device_code(binary, arch, cache=LinkCache(None)))
    cold_env = dict(env, SKBUILD_CUDAQ_LINK_CACHE="off")
    warm_dir = work / f"{binary.stem}-link-cache"
    warm_env = dict(env, SKBUILD_CUDAQ_LINK_CACHE=str(warm_dir))
    primed = _child(OURS, [str(binary), kernel], warm_env, work)  # fills the cache; not counted
    variants: dict[str, tuple[str, list[str], dict[str, str]]] = {
        "floor": (FLOOR, [str(cubin), kernel], env),
        "cold": (OURS, [str(binary), kernel], cold_env),
        "warm": (OURS, [str(binary), kernel], warm_env),
        "answer_cold": (ANSWER, [str(binary), kernel, handler], cold_env),
        "answer_warm": (ANSWER, [str(binary), kernel, handler], warm_env),
    }
    if with_cuda_core:
        variants["cuda_core"] = (CUDA_CORE, [str(binary), kernel], env)
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    order = list(variants)
    shuffle = random.Random(20261130).shuffle  # seeded: the same orders every run
    for round_ in range(runs):
        shuffle(order)  # no variant always runs first (or right after another)
        for name in order:
            script, argv, venv = variants[name]
            samples[name].append(_child(script, argv, venv, work))
        print(f"{binary.name}: round {round_ + 1}/{runs} done", file=sys.stderr)
    floor_sum = _summary(samples["floor"], None)
    floor = floor_sum.get("median_in_process_s")
    results = {"floor": floor_sum}
    for name in variants:
        if name == "floor":
            continue
        results[name] = _summary(samples[name], floor)
        results[name]["paired_ratio_median"] = _paired_ratio(samples[name], samples["floor"])
        phases = [s["phases_s"] for s in samples[name] if "phases_s" in s]
        if phases:  # where the first answer's time goes (medians, ms)
            results[name]["phases_ms"] = {
                k: statistics.median(p[k] for p in phases) * 1e3 for k in phases[0]
            }

    def ratio(name: str) -> float:
        value: float = results[name].get("ratio_to_floor", float("inf"))
        return value

    goals = {
        "cold_le_1.3x_floor": ratio("cold") <= 1.3,
        "warm_le_1.05x_floor": ratio("warm") <= 1.05,
        "answer_cold_le_1.15x_floor": ratio("answer_cold") <= 1.15,
        "answer_warm_le_1.15x_floor": ratio("answer_warm") <= 1.15,
    }
    return results, goals, cubin.stat().st_size, "error" not in primed


def _paired_ratio(samples: list[dict[str, Any]], floors: list[dict[str, Any]]) -> float | None:
    """Median over rounds of (this variant / the floor of the same round)."""
    ratios = [
        s["in_process_s"] / f["in_process_s"]
        for s, f in zip(samples, floors, strict=True)
        if "error" not in s and "error" not in f
    ]
    return statistics.median(ratios) if ratios else None


def _summary(samples: list[dict[str, Any]], floor: float | None) -> dict[str, Any]:
    good = [s for s in samples if "error" not in s]
    out: dict[str, Any] = {"runs": len(samples), "ok": len(good)}
    if len(good) < len(samples):
        out["errors"] = sorted({s["error"] for s in samples if "error" in s})
    if good:
        med = statistics.median(s["in_process_s"] for s in good)
        out["median_in_process_s"] = med
        out["median_wall_s"] = statistics.median(s["wall_s"] for s in good)
        out["in_process_s"] = [s["in_process_s"] for s in good]
        if floor:
            out["ratio_to_floor"] = med / floor
        extra = {k for s in good for k in s} - {"in_process_s", "wall_s"}
        for key in sorted(extra):
            out[key] = sorted({json.dumps(s.get(key)) for s in good})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21, help="fresh processes per figure (>= 7)")
    parser.add_argument("--binary", type=Path, help="extension module with device code")
    parser.add_argument("--kernel", help="kernel to look up (with --binary)")
    parser.add_argument("--handler", default="echo", help="handler of the first-answer call")
    parser.add_argument("--many-kernels", type=int, default=32, help="0: skip the N-kernel module")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "startup.json")
    parser.add_argument(
        "--no-cuda-core",
        action="store_true",
        help="leave out the cuda.core variant (e.g. a CUDA 12 stack next to a cuda.core of 13)",
    )
    args = parser.parse_args()
    runs = max(args.runs, 7)

    with tempfile.TemporaryDirectory(prefix="skbuild-cudaq-bench-") as tmp:
        work = Path(tmp)
        if args.binary:
            if not args.kernel:
                parser.error("--kernel is required with --binary")
            binary, kernel = args.binary.resolve(), args.kernel
        else:
            binary, kernel = _default_binary(work)
        binary_bytes = binary.stat().st_size
        env = dict(os.environ)
        env.pop("SKBUILD_CUDAQ_VERBOSE", None)
        probe = _child(PROBE, [], env, work)
        if "error" in probe:
            print(f"startup bench: no usable GPU: {probe['error']}", file=sys.stderr)
            return 1
        arch = probe["arch"]

        results, goals, cubin_bytes, cache_primed = _measure(
            binary,
            kernel,
            args.handler,
            runs=runs,
            env=env,
            work=work,
            arch=arch,
            with_cuda_core=not args.no_cuda_core,
        )
        many: dict[str, Any] | None = None
        if args.many_kernels > 0:
            many_binary, many_kernel = _many_kernel_binary(work, args.many_kernels)
            many_results, many_goals, many_cubin, _ = _measure(
                many_binary,
                many_kernel,
                args.handler,
                runs=max(runs // 2, 7),
                env=env,
                work=work,
                arch=arch,
                with_cuda_core=False,
            )
            many = {
                "inputs": {
                    "kernels": args.many_kernels,
                    "handler_switch": True,
                    "binary_bytes": many_binary.stat().st_size,
                    "cubin_bytes": many_cubin,
                    "runs": max(runs // 2, 7),
                },
                "results": many_results,
                "goals": many_goals,
                "link_split_compile": _split_compile(many_binary, arch),
            }

    versions = _versions()
    major = str(versions.get("nvJitLink")).split(".")[0]
    doc = {
        # one result per CUDA major: startup (13, the default stack) and startup_cu12
        "benchmark": "startup_cu12" if major == "12" else "startup",
        "stack": f"CUDA {major} (nvJitLink, cuda-bindings)",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": {
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
        "device": probe,
        "driver": {"nvidia": _nvidia_driver(), "cuda_driver_api": probe.get("cuda_driver_api")},
        "versions": versions,
        "inputs": {
            "binary": str(binary),
            "kernel": kernel,
            "binary_bytes": binary_bytes,
            "cubin_bytes": cubin_bytes,
            "arch": arch,
            "runs": runs,
            "cache_primed": cache_primed,
            "handler": args.handler,
            "install": _install(),
        },
        "results": results,
        "goals": goals,
        "many_kernels": many,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps({k: results[k].get("median_in_process_s") for k in results} | goals, indent=2))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
