#!/usr/bin/env python3
"""Where start-up time goes: each phase of getting a kernel handle, in fresh processes.

This is the measurement behind the design of the run-time start-up path
(``skbuild_cudaq.realtime.library``): which phases are long, which ones release
the GIL, and whether linking can run while the driver creates its context.

Probes (each run in --runs fresh processes; medians reported, in ms):

  floor    import cuda.bindings.driver, cuInit, device + compute capability,
           cuDevicePrimaryCtxRetain, cuCtxSetCurrent, cuLibraryLoadData of a
           linked cubin, cuLibraryGetKernel
  link     import cuda.bindings.nvjitlink, first call (loads libnvJitLink),
           reading the inputs (our fatbin reader), the link itself (the run
           time's link calls libnvJitLink through ctypes since session 6 and
           imports no cuda.bindings.nvjitlink: the first step is what that saves)
  gil      a Python thread counts while the main thread sits in cuInit,
           cuDevicePrimaryCtxRetain, libnvJitLink's load and nvJitLinkComplete:
           counts per ms over the thread's rate alone (1.0 = GIL released
           for the whole call, ~0 = held)
  warm     our warm path step by step (link cache hit), then get_device_kernel
  overlap  linking in a worker thread (libnvJitLink load first, then the link
           once the arch is known) while the main thread runs cuInit and
           creates the context: total, and each side's time

Usage: python bench/startup_phases.py [--binary EXT.so --kernel NAME] [--runs 7]
       [--out bench/results/startup_phases.json]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

FLOOR = r"""
import time
T = [("start", time.perf_counter())]
def mark(name): T.append((name, time.perf_counter()))
import json, sys
from cuda.bindings import driver as d
mark("import_driver")
assert int(d.cuInit(0)[0]) == 0
mark("cuInit")
err, dev = d.cuDeviceGet(0)
a = d.CUdevice_attribute
major = d.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)[1]
minor = d.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)[1]
mark("device_arch")
err, ctx = d.cuDevicePrimaryCtxRetain(dev); assert int(err) == 0
mark("ctx_retain")
assert int(d.cuCtxSetCurrent(ctx)[0]) == 0
mark("ctx_set_current")
cubin = open(sys.argv[1], "rb").read()
err, lib = d.cuLibraryLoadData(cubin, None, None, 0, None, None, 0); assert int(err) == 0
mark("library_load")
err, k = d.cuLibraryGetKernel(lib, sys.argv[2].encode()); assert int(err) == 0
mark("get_kernel")
print(json.dumps({n: (t - T[i][1]) * 1e3 for i, (n, t) in enumerate(T[1:])}))
"""

LINK = r"""
import time
T = [("start", time.perf_counter())]
def mark(name): T.append((name, time.perf_counter()))
import json, sys
from cuda.bindings import nvjitlink
mark("import_nvjitlink")
nvjitlink.version()
mark("load_libnvjitlink")
from skbuild_cudaq.realtime.device_code import device_code_of, runtime_device_code
from skbuild_cudaq.realtime import _nvjitlink
mark("import_ours")
inputs = runtime_device_code().inputs + device_code_of(sys.argv[1]).inputs
mark("read_inputs")
cubin = _nvjitlink.link(inputs, [f"-arch={sys.argv[3]}", "-lto"])
mark("link")
print(json.dumps({n: (t - T[i][1]) * 1e3 for i, (n, t) in enumerate(T[1:])}))
"""

GIL = r"""
import json, sys, threading, time
from cuda.bindings import driver as d, nvjitlink
from skbuild_cudaq.realtime.device_code import device_code_of, runtime_device_code
inputs = runtime_device_code().inputs + device_code_of(sys.argv[1]).inputs
count = 0
stop = False
def spin():
    global count
    while not stop:
        count += 1
def measure(fn):
    global count, stop
    count, stop = 0, False
    th = threading.Thread(target=spin); th.start()
    t0 = time.perf_counter(); fn(); t1 = time.perf_counter()
    stop = True; th.join()
    return count / ((t1 - t0) * 1e3), (t1 - t0) * 1e3
def idle():
    t_end = time.perf_counter() + 0.02
    while time.perf_counter() < t_end:
        time.sleep(0.001)
base, _ = measure(idle)
out = {"alone_counts_per_ms": base}
def init(): assert int(d.cuInit(0)[0]) == 0
def retain():
    global ctx
    err, dev = d.cuDeviceGet(0)
    err, ctx = d.cuDevicePrimaryCtxRetain(dev); assert int(err) == 0
def load(): nvjitlink.version()
def link():
    h = nvjitlink.create(2, [f"-arch={sys.argv[3]}", "-lto"])
    for i in inputs:
        data = i.container.data
        nvjitlink.add_data(h, nvjitlink.InputType.FATBIN, data, len(data), i.name)
    nvjitlink.complete(h)
    nvjitlink.destroy(h)
calls = (("cuInit", init), ("ctx_retain", retain), ("load_libnvjitlink", load), ("link", link))
for name, fn in calls:
    rate, ms = measure(fn)
    out[name] = {"ms": ms, "released": rate / base}
print(json.dumps(out))
"""

WARM = r"""
import time
T = [("start", time.perf_counter())]
def mark(name): T.append((name, time.perf_counter()))
import json, sys
from cuda.bindings import driver as d
mark("import_driver")
from skbuild_cudaq.realtime import library
mark("import_library")
from skbuild_cudaq.realtime import link, cache, _nvjitlink
from skbuild_cudaq.realtime.device_code import device_code_of, runtime_device_code
mark("import_link")
code = device_code_of(sys.argv[1])
mark("read_binary")
rt = runtime_device_code()
mark("read_runtime")
ident = _nvjitlink.nvjitlink_identity()
mark("nvjitlink_identity")
inputs = rt.inputs + code.inputs
opts = link.LinkOptions(arch=sys.argv[3]).common_options()
key = cache.cache_key((i.container.data for i in inputs), opts, sys.argv[3], ident)
mark("hash")
cubin = cache.LinkCache.from_env().load(key)
assert cubin is not None, "cache not primed"
mark("cache_read")
kernel = library.get_device_kernel(sys.argv[1], sys.argv[2])
mark("get_device_kernel")
print(json.dumps({n: (t - T[i][1]) * 1e3 for i, (n, t) in enumerate(T[1:])}))
"""

OVERLAP = r"""
import time
t0 = time.perf_counter()
import json, sys, threading
from cuda.bindings import driver as d
arch_ready = threading.Event()
box = {}
def worker():
    w0 = time.perf_counter()
    from cuda.bindings import nvjitlink
    nvjitlink.version()
    from skbuild_cudaq.realtime.device_code import device_code_of, runtime_device_code
    from skbuild_cudaq.realtime import _nvjitlink
    inputs = runtime_device_code().inputs + device_code_of(sys.argv[1]).inputs
    box["prepared_ms"] = (time.perf_counter() - w0) * 1e3
    arch_ready.wait()
    box["cubin"] = _nvjitlink.link(inputs, [f"-arch={box['arch']}", "-lto"])
    box["worker_ms"] = (time.perf_counter() - w0) * 1e3
th = threading.Thread(target=worker); th.start()
m0 = time.perf_counter()
assert int(d.cuInit(0)[0]) == 0
err, dev = d.cuDeviceGet(0)
a = d.CUdevice_attribute
major = d.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)[1]
minor = d.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)[1]
box["arch"] = f"sm_{major}{minor}"
arch_ready.set()
m1 = time.perf_counter()
err, ctx = d.cuDevicePrimaryCtxRetain(dev); assert int(err) == 0
assert int(d.cuCtxSetCurrent(ctx)[0]) == 0
m2 = time.perf_counter()
th.join()
m3 = time.perf_counter()
err, lib = d.cuLibraryLoadData(box["cubin"], None, None, 0, None, None, 0); assert int(err) == 0
err, k = d.cuLibraryGetKernel(lib, sys.argv[2].encode()); assert int(err) == 0
t1 = time.perf_counter()
print(json.dumps({
    "total": (t1 - t0) * 1e3, "main_init_arch": (m1 - m0) * 1e3, "main_ctx": (m2 - m1) * 1e3,
    "wait_for_worker": (m3 - m2) * 1e3, "load_kernel": (t1 - m3) * 1e3,
    "worker_prepared": box["prepared_ms"], "worker_total": box["worker_ms"],
}))
"""


def _child(script: str, args: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=tempfile.gettempdir(),  # not the source tree: the installed package is measured
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env=env,
    )
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"error": tail}
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _medians(samples: list[dict[str, Any]]) -> dict[str, Any]:
    good = [s for s in samples if "error" not in s]
    out: dict[str, Any] = {"runs": len(samples), "ok": len(good)}
    if len(good) < len(samples):
        out["errors"] = sorted({s["error"] for s in samples if "error" in s})
    if not good:
        return out
    for key, value in good[0].items():
        if isinstance(value, dict):
            out[key] = {k: statistics.median(s[key][k] for s in good) for k in value}
        else:
            out[key] = statistics.median(s[key] for s in good)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--binary", type=Path)
    parser.add_argument("--kernel", default="single_thread_dispatcher")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/startup_phases.json")
    args = parser.parse_args()
    if args.binary is None:
        import example_app._core as core

        args.binary = Path(str(core.__file__))
    binary = str(args.binary.resolve())

    from cuda.bindings import driver as d

    assert int(d.cuInit(0)[0]) == 0
    dev = d.cuDeviceGet(0)[1]
    a = d.CUdevice_attribute
    major = d.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)[1]
    minor = d.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)[1]
    name = d.cuDeviceGetName(128, dev)[1].split(b"\0")[0].decode()
    arch = f"sm_{major}{minor}"

    from skbuild_cudaq.realtime import link_device_code
    from skbuild_cudaq.realtime.cache import LinkCache

    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "linked.cubin"
        cubin.write_bytes(link_device_code(binary, arch, cache=LinkCache(None)))
        probes = {
            "floor": (FLOOR, [str(cubin), args.kernel]),
            "link": (LINK, [binary, args.kernel, arch]),
            "gil": (GIL, [binary, args.kernel, arch]),
            "overlap": (OVERLAP, [binary, args.kernel, arch]),
            "warm": (WARM, [binary, args.kernel, arch]),
        }
        warm_env = dict(os.environ, SKBUILD_CUDAQ_LINK_CACHE=str(Path(tmp) / "cache"))
        primed = _child(WARM.replace("assert cubin", "#"), [binary, args.kernel, arch], warm_env)
        print(f"cache primed: {primed}", file=sys.stderr)
        samples: dict[str, list[dict[str, Any]]] = {k: [] for k in probes}
        for round_ in range(max(args.runs, 3)):
            for key, (script, argv) in probes.items():
                env = warm_env if key == "warm" else None
                samples[key].append(_child(script, argv, env))
            print(f"round {round_ + 1} done", file=sys.stderr)

    import importlib.metadata as md

    versions = {"python": platform.python_version()}
    for dist in ("cuda-bindings", "nvidia-nvjitlink", "skbuild-cudaq"):
        with contextlib.suppress(md.PackageNotFoundError):
            versions[dist] = md.version(dist)
    drv = subprocess.run(
        ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    doc = {
        "benchmark": "startup_phases",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": {"name": name, "arch": arch},
        "driver": {"nvidia": drv},
        "host": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "versions": versions,
        "inputs": {"binary": binary, "kernel": args.kernel, "runs": max(args.runs, 3)},
        "unit": "ms (medians)",
        "results": {k: _medians(v) for k, v in samples.items()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc["results"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
