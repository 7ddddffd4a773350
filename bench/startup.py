"""Start-up: from a fresh process to a launchable kernel, and to the first answer.

    python bench/startup.py [--runs 21] [--out bench/results/startup.json]

Each figure is the median of ``--runs`` fresh processes (``in_process_s``: from the child's
first statement; ``wall_s``: with the interpreter's start), the variants interleaved round by
round in a seeded shuffled order, so that drift hits all alike:

  floor        load an already-linked cubin with raw cuda.bindings (cuInit, primary
               context, cuLibraryLoadData, cuLibraryGetKernel)
  cold, warm   our API, import -> kernel handle, linking (link cache off) or a cache hit
  answer_cold  import -> the first RPC answered through the single-thread dispatcher, cold
  answer_warm  and warm; ``phases_ms`` splits it (medians)
  cuda_core    cuda.core's Linker path (``--no-cuda-core`` leaves it out)

Context creation alone varies by +-20 ms between processes, so each variant also has the
median of its per-round ratio to the floor (``paired_ratio_median``). Goals, ratio of medians
to the floor: cold <= 1.3, warm <= 1.05, first answer <= 1.15. Inputs: example_app's
extension and its single-thread kernel, or ``--binary EXT.so --kernel NAME``. Under the CUDA 12
stack (nvJitLink 12) the benchmark is ``startup_cu12`` (``tools/gpu-cu12.sh``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as c  # bench/ is not a package

GOALS = {"cold": 1.3, "warm": 1.05, "answer_cold": 1.15, "answer_warm": 1.15}
PROBE = r"""
import json
from skbuild_cudaq.realtime._driver import current_arch
print(json.dumps({"arch": current_arch()}))
"""
# The children: each a fresh interpreter, timed from its first statement (t0, which _child
# puts before each).
TIMED = "\nimport time\nt0 = time.perf_counter()\nimport json, sys"
FLOOR = r"""
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
import skbuild_cudaq.realtime as rt
kernel = rt.get_device_kernel(sys.argv[1], sys.argv[2])
t1 = time.perf_counter()
maps = open("/proc/self/maps").read()
print(json.dumps({"in_process_s": t1 - t0, "nvjitlink_loaded": "libnvJitLink" in maps}))
"""

ANSWER = r"""
stamps = []
def stamp(name):
    stamps.append((name, time.perf_counter()))
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
from pathlib import Path
from cuda.core import Device, Linker, LinkerOptions, ObjectCode
from skbuild_cudaq.fatbin import read_fatbin_file, read_relfatbin_sections
from skbuild_cudaq.realtime.link.device_runtime import runtime_dir
dev = Device(0)
dev.set_current()
containers = []
for f in sorted(runtime_dir().glob("*.fatbin")):
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
        [sys.executable, "-c", TIMED + script, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,  # not the source tree: the installed package is measured
        check=False,
        timeout=300,
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["(no output)"])[-1], "wall_s": wall}
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["wall_s"] = wall
    return result


def _summary(samples: list[dict[str, Any]], floors: list[dict[str, Any]] | None) -> dict[str, Any]:
    good = [s for s in samples if "error" not in s]
    out: dict[str, Any] = {"runs": len(samples), "ok": len(good)}
    if len(good) < len(samples):
        out["errors"] = sorted({s["error"] for s in samples if "error" in s})
    if not good:
        return out
    out["median_in_process_s"] = statistics.median(s["in_process_s"] for s in good)
    out["median_wall_s"] = statistics.median(s["wall_s"] for s in good)
    out["in_process_s"] = [s["in_process_s"] for s in good]
    floor_ok = [f["in_process_s"] for f in floors or [] if "error" not in f]
    if floor_ok:
        out["ratio_to_floor"] = out["median_in_process_s"] / statistics.median(floor_ok)
        ratios = [  # each round over the floor of the same round
            s["in_process_s"] / f["in_process_s"]
            for s, f in zip(samples, floors or [], strict=True)
            if "error" not in s and "error" not in f
        ]
        out["paired_ratio_median"] = statistics.median(ratios) if ratios else None
    phases = [s["phases_s"] for s in good if "phases_s" in s]
    if phases:  # where the first answer's time goes (medians, ms)
        out["phases_ms"] = {k: statistics.median(p[k] for p in phases) * 1e3 for k in phases[0]}
    if "nvjitlink_loaded" in good[0]:
        out["nvjitlink_loaded"] = any(s["nvjitlink_loaded"] for s in good)
    return out


def measure(args: argparse.Namespace, binary: Path, kernel: str, work: Path) -> dict[str, Any]:
    """Every variant on ``binary``, ``args.runs`` rounds: inputs, results and goals."""
    from skbuild_cudaq.realtime.link.cache import LinkCache
    from skbuild_cudaq.realtime.link.linker import LinkOptions, link_device_code

    env = dict(os.environ)
    env.pop("SKBUILD_CUDAQ_VERBOSE", None)
    probe = _child(PROBE, [], env, work)
    if "error" in probe:
        raise SystemExit(f"startup bench: no usable GPU: {probe['error']}")
    arch, runs = probe["arch"], max(args.runs, 7)
    linked = link_device_code(binary, LinkOptions(arch=arch), cache=LinkCache(None)).cubin
    cubin = work / "linked.cubin"
    cubin.write_bytes(linked)
    cold_env = dict(env, SKBUILD_CUDAQ_LINK_CACHE="off")
    warm_env = dict(env, SKBUILD_CUDAQ_LINK_CACHE=str(work / "link-cache"))
    primed = _child(OURS, [str(binary), kernel], warm_env, work)  # fills the cache; not counted
    ours, answer = [str(binary), kernel], [str(binary), kernel, args.handler]
    variants: dict[str, tuple[str, list[str], dict[str, str]]] = {
        "floor": (FLOOR, [str(cubin), kernel], env),
        "cold": (OURS, ours, cold_env),
        "warm": (OURS, ours, warm_env),
        "answer_cold": (ANSWER, answer, cold_env),
        "answer_warm": (ANSWER, answer, warm_env),
    }
    if not args.no_cuda_core:
        variants["cuda_core"] = (CUDA_CORE, ours, env)
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    order = list(variants)
    shuffle = random.Random(20261130).shuffle  # seeded: the same orders every run
    for round_ in range(runs):
        shuffle(order)  # no variant always runs first (or right after another)
        for name in order:
            script, argv, venv = variants[name]
            samples[name].append(_child(script, argv, venv, work))
        print(f"startup: round {round_ + 1}/{runs} done", file=sys.stderr)
    results = {name: _summary(samples[name], samples["floor"]) for name in variants}
    results["floor"] = _summary(samples["floor"], None)
    inputs = {
        "binary": str(binary),
        "kernel": kernel,
        "handler": args.handler,
        "binary_bytes": binary.stat().st_size,
        "cubin_bytes": len(linked),
        "arch": arch,
        "runs": runs,
        "cache_primed": "error" not in primed,
    }
    goals = {
        f"{name}_over_floor": c.goal(results[name].get("ratio_to_floor", float("inf")), f"<= {b}")
        for name, b in GOALS.items()
    }
    return {"inputs": inputs, "results": results, "goals": goals}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=21, help="fresh processes per figure (>= 7)")
    parser.add_argument("--binary", type=Path, help="extension module with device code")
    parser.add_argument("--kernel", default="single_thread_dispatcher", help="kernel to look up")
    parser.add_argument("--handler", default="echo", help="handler of the first-answer call")
    parser.add_argument("--no-cuda-core", action="store_true", help="leave cuda.core out")
    parser.add_argument("--out", type=Path, help="default: bench/results/<benchmark>.json")
    args = parser.parse_args(argv)
    if args.binary is None:
        import example_app._core as core  # the real downstream binary

        args.binary = Path(str(core.__file__))
    with tempfile.TemporaryDirectory(prefix="skbuild-cudaq-bench-") as tmp:
        measured = measure(args, args.binary.resolve(), args.kernel, Path(tmp))
    versions = c.versions()
    major = str(versions.get("nvjitlink_library")).split(".")[0]
    name = "startup_cu12" if major == "12" else "startup"
    stack = f"CUDA {major} (nvJitLink, cuda-bindings)"
    # the header after the children: this process stays out of their way
    doc = {**c.header(name, [0]), "stack": stack, **measured}
    c.write_json(args.out or c.RESULTS / f"{name}.json", doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
