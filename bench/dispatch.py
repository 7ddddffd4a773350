"""Dispatcher benchmark: round trip and throughput of every dispatch shape vs bare floors.

One run on one GPU (an H200 in the committed results)::

    python bench/dispatch.py [--out bench/results/dispatch.json]

Needs example_app installed (its extension holds the ``echo`` handler and the
custom kernels), nvcc and gcc. At bench time it compiles, in this script:

- the *floors*, bare kernels loaded directly (no dispatcher, no function
  table, no hooks): ``pingpong_floor`` (one persistent thread polls the ring
  and echoes each request) and ``warp_floor`` (32 lanes, each polling and
  answering its own slots lane, lane + 32, ...);
- the native load generator ``bench/loadgen.c`` (gcc, called via ctypes),
  which writes the ring directly and times with ``clock_gettime``, so that the
  host is not the bottleneck.

Measured: round trip p50/p99/p99.9 with 32-byte arguments for the built-in,
single-thread, cooperative-grid and cluster dispatchers, each with the
launch-wide handler ``echo`` (label ``<kind>``) and the thread-shaped handler
``echo_thread`` (label ``<kind>:thread``), and the ping-pong floor; throughput
with 1, 8, 64 and 256 requests in flight for the serial single-thread
dispatcher, the warp-parallel dispatcher (both handler shapes) and the floors;
the Python RingClient's per-call overhead above the floor. The goals of issue
#12 are checked and written to the JSON (``goals``), each naming the handler
shape it used.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import importlib
import importlib.metadata
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent
DEFAULT_OUT = ROOT / "results" / "dispatch.json"
NUM_SLOTS = 256
SLOT_SIZE = 128
ARG_LEN = 32
IN_FLIGHT = (1, 8, 64, 256)

FLOOR_CU = r"""
#include <stdint.h>
namespace {
__device__ __forceinline__ uint32_t ld_acquire_sys(const volatile uint32_t *p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_sys(volatile uint32_t *p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" : : "l"(p), "r"(v) : "memory");
}
// Echo one request. Every load of the request is issued before the first use
// (one PCIe round trip for up to 256 bytes, as the bridge's staging copy does),
// then the response header and the result are written and published.
__device__ __forceinline__ void serve(const uint8_t *rx, uint8_t *tx, volatile uint32_t *tx_flag,
                                      uint32_t slot_size, uint32_t seq) {
  constexpr uint32_t kWords = 32;
  const uint64_t *src = reinterpret_cast<const uint64_t *>(rx);
  uint64_t *dst = reinterpret_cast<uint64_t *>(tx);
  const uint32_t words = slot_size / 8 < kWords ? slot_size / 8 : kWords;
  uint64_t v[kWords];
#pragma unroll
  for (uint32_t i = 0; i < kWords; ++i)
    if (i < words)
      v[i] = src[i];
  uint32_t arg_len = static_cast<uint32_t>(v[1]);
  if (arg_len > words * 8 - 24)
    arg_len = 0;
  dst[0] = 0x43555153ull;                              // magic, status 0
  dst[1] = (v[1] & 0xffffffff00000000ull) | arg_len;   // result_len, request_id
  dst[2] = v[2];                                       // ptp timestamp
  const uint32_t arg_words = (arg_len + 7) / 8;
#pragma unroll
  for (uint32_t i = 0; i < kWords - 3; ++i)
    if (i < arg_words)
      dst[3 + i] = v[3 + i];
  st_release_sys(tx_flag, seq);
}
} // namespace

extern "C" __global__ void pingpong_floor(const uint8_t *rx, uint8_t *tx,
                                          volatile uint32_t *rx_flags, volatile uint32_t *tx_flags,
                                          uint32_t num_slots, uint32_t slot_size,
                                          volatile int *shutdown) {
  uint32_t slot = 0, seq = 1, polls = 0;
  for (;;) {
    if (ld_acquire_sys(&rx_flags[slot]) == seq) {
      const size_t off = static_cast<size_t>(slot) * slot_size;
      serve(rx + off, tx + off, &tx_flags[slot], slot_size, seq);
      if (++slot == num_slots) {
        slot = 0;
        ++seq;
      }
    } else if ((++polls & 15u) == 0 && *shutdown != 0) {
      return;
    }
  }
}

extern "C" __global__ void warp_floor(const uint8_t *rx, uint8_t *tx, volatile uint32_t *rx_flags,
                                      volatile uint32_t *tx_flags, uint32_t num_slots,
                                      uint32_t slot_size, volatile int *shutdown) {
  const uint32_t lanes = blockDim.x;
  uint32_t slot = threadIdx.x, seq = 1, polls = 0;
  for (;;) {
    if (ld_acquire_sys(&rx_flags[slot]) == seq) {
      const size_t off = static_cast<size_t>(slot) * slot_size;
      serve(rx + off, tx + off, &tx_flags[slot], slot_size, seq);
      slot += lanes;
      if (slot >= num_slots) {
        slot -= num_slots;
        ++seq;
      }
    } else if ((++polls & 63u) == 0 && *shutdown != 0) {
      return;
    }
  }
}
"""


# -- driver helpers ----------------------------------------------------------------
def _drv() -> Any:
    from cuda.bindings import driver

    return driver


def ok(result: Any, what: str) -> Any:
    code = result[0]
    if int(code) != 0:
        msg = f"{what}: {getattr(code, 'name', code)}"
        raise RuntimeError(msg)
    return result[1] if len(result) == 2 else (result[1:] or None)


def wait_idle(stream: Any, timeout: float = 10.0) -> None:
    drv = _drv()
    end = time.monotonic() + timeout
    while True:
        code = drv.cuStreamQuery(stream)[0]
        if int(code) == 0:
            return
        if int(code) != 600:
            ok((code,), "kernel")
        if time.monotonic() > end:
            msg = "a floor kernel did not exit after its shutdown flag"
            raise RuntimeError(msg)
        time.sleep(1e-4)


# -- tools built at bench time -----------------------------------------------------
class LoadGen:
    """ctypes front of bench/loadgen.c."""

    def __init__(self, so: Path) -> None:
        lib = ctypes.CDLL(str(so))
        u8p, u32, u64 = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64
        lib.lg_latency.argtypes = [
            u8p,
            u32,
            u32,
            u32,
            u8p,
            u32,
            u64,
            ctypes.POINTER(u64),
            ctypes.POINTER(ctypes.c_double),
        ]
        lib.lg_throughput.argtypes = [
            u8p,
            u32,
            u32,
            u32,
            u8p,
            u32,
            u64,
            u32,
            ctypes.POINTER(u64),
            ctypes.POINTER(ctypes.c_double),
        ]
        lib.lg_latency.restype = lib.lg_throughput.restype = ctypes.c_int
        self.lib = lib
        self.args = (ctypes.c_uint8 * ARG_LEN)(*range(ARG_LEN))
        self.next = ctypes.c_uint64(0)

    def rewind(self) -> None:
        self.next.value = 0

    def latency(self, ring: int, function_id: int, count: int) -> np.ndarray:
        out = np.zeros(count, dtype=np.float64)
        rc = self.lib.lg_latency(
            ring,
            NUM_SLOTS,
            SLOT_SIZE,
            function_id,
            ctypes.addressof(self.args),
            ARG_LEN,
            count,
            ctypes.byref(self.next),
            out.ctypes.data_as(ctypes.POINTER(ctypes.c_double)),
        )
        if rc != 0:
            msg = f"lg_latency failed ({rc}) at request {self.next.value}"
            raise RuntimeError(msg)
        return out / 1000.0  # microseconds

    def throughput(self, ring: int, function_id: int, count: int, in_flight: int) -> float:
        seconds = ctypes.c_double(0)
        rc = self.lib.lg_throughput(
            ring,
            NUM_SLOTS,
            SLOT_SIZE,
            function_id,
            ctypes.addressof(self.args),
            ARG_LEN,
            count,
            in_flight,
            ctypes.byref(self.next),
            ctypes.byref(seconds),
        )
        if rc != 0:
            msg = f"lg_throughput failed ({rc}) at request {self.next.value}"
            raise RuntimeError(msg)
        return count / seconds.value / 1e6  # million requests per second


def build_tools(workdir: Path, arch: str) -> tuple[Path, Path]:
    gcc = shutil.which("gcc") or shutil.which("cc")
    nvcc = shutil.which("nvcc")
    if gcc is None or nvcc is None:
        msg = "the benchmark needs gcc and nvcc on PATH"
        raise SystemExit(msg)
    so = workdir / "loadgen.so"
    subprocess.run(
        [gcc, "-O2", "-shared", "-fPIC", "-o", str(so), str(ROOT / "loadgen.c")], check=True
    )
    src = workdir / "floor.cu"
    src.write_text(FLOOR_CU)
    cubin = workdir / "floor.cubin"
    subprocess.run(
        [nvcc, "-cubin", f"-arch=sm_{arch}", "-O3", "-o", str(cubin), str(src)], check=True
    )
    return so, cubin


# -- measurements ------------------------------------------------------------------
def percentiles(samples: np.ndarray) -> dict[str, float]:
    return {
        "p50": float(np.percentile(samples, 50)),
        "p99": float(np.percentile(samples, 99)),
        "p99.9": float(np.percentile(samples, 99.9)),
        "mean": float(samples.mean()),
        "min": float(samples.min()),
        "n": int(samples.size),
    }


class Floors:
    def __init__(self, cubin: Path, bridge: Any) -> None:
        drv = _drv()
        data = cubin.read_bytes()
        self.lib = ok(
            drv.cuLibraryLoadData(data, None, None, 0, None, None, 0), "cuLibraryLoadData"
        )
        self.bridge = bridge
        flags = drv.CU_MEMHOSTALLOC_DEVICEMAP | drv.CU_MEMHOSTALLOC_PORTABLE
        self.flag = int(ok(drv.cuMemHostAlloc(4, flags), "cuMemHostAlloc"))
        self.flag_dev = int(ok(drv.cuMemHostGetDevicePointer(self.flag, 0), "device pointer"))
        nonblocking = int(drv.CUstream_flags.CU_STREAM_NON_BLOCKING)
        self.stream = ok(drv.cuStreamCreate(nonblocking), "cuStreamCreate")

    @contextmanager
    def running(self, name: str, threads: int) -> Iterator[None]:
        drv = _drv()
        kernel = ok(drv.cuLibraryGetKernel(self.lib, name.encode()), "cuLibraryGetKernel")
        function = ok(drv.cuKernelGetFunction(kernel), "cuKernelGetFunction")
        self.bridge.reset()
        ctypes.c_int32.from_address(self.flag).value = 0
        base = self.bridge.device_ring
        slots = NUM_SLOTS * SLOT_SIZE
        values = (
            base,
            base + slots,
            base + 2 * slots,
            base + 2 * slots + 4 * NUM_SLOTS,
            NUM_SLOTS,
            SLOT_SIZE,
            self.flag_dev,
        )
        types = (ctypes.c_void_p,) * 4 + (ctypes.c_uint32,) * 2 + (ctypes.c_void_p,)
        ok(
            drv.cuLaunchKernel(
                function, 1, 1, 1, threads, 1, 1, 0, self.stream, (values, types), 0
            ),
            f"cuLaunchKernel({name})",
        )
        try:
            yield
        finally:
            ctypes.c_int32.from_address(self.flag).value = 1
            wait_idle(self.stream)

    def close(self) -> None:
        drv = _drv()
        drv.cuStreamDestroy(self.stream)
        drv.cuMemFreeHost(self.flag)
        drv.cuLibraryUnload(self.lib)


def fnv1a(name: str) -> int:
    h = 2166136261
    for b in name.encode():
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


def versions() -> dict[str, Any]:
    drv = _drv()
    out: dict[str, Any] = {"python": platform.python_version()}
    for dist in ("cuda-bindings", "nvidia-nvjitlink", "numpy", "skbuild-cudaq", "example-app"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    try:
        from cuda.bindings import nvjitlink

        major, minor = nvjitlink.version()
        out["nvjitlink_library"] = f"{major}.{minor}"
    except Exception as exc:
        out["nvjitlink_library"] = f"unavailable: {exc}"
    nvcc = subprocess.run(["nvcc", "--version"], capture_output=True, text=True, check=False)
    out["nvcc"] = (nvcc.stdout.strip().splitlines() or ["?"])[-1]
    version = ok(drv.cuDriverGetVersion(), "cuDriverGetVersion")
    out["cuda_driver_api"] = f"{version // 1000}.{version % 1000 // 10}"
    smi = shutil.which("nvidia-smi")
    if smi:
        q = subprocess.run(
            [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=False,
        )
        out["nvidia_driver"] = q.stdout.strip().splitlines()[0] if q.stdout.strip() else None
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--module", default="example_app._core")
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--warmup", type=int, default=2_000)
    parser.add_argument("--requests", type=int, default=200_000, help="per throughput point")
    opts = parser.parse_args(argv)

    from example_app import launchers
    from skbuild_cudaq.realtime import (
        Dispatcher,
        DispatcherConfig,
        HostRingBridge,
        get_device_handler,
    )

    drv = _drv()
    ok(drv.cuInit(0), "cuInit")
    dev = ok(drv.cuDeviceGet(opts.device), "cuDeviceGet")
    ctx = ok(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    ok(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    attr = drv.CUdevice_attribute
    major = ok(
        drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "cc"
    )
    minor = ok(
        drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "cc"
    )
    name = ok(drv.cuDeviceGetName(256, dev), "cuDeviceGetName")
    device_name = bytes(name).split(b"\0", 1)[0].decode()
    core = importlib.import_module(opts.module)
    echo = fnv1a("echo")
    echo_thread = fnv1a("echo_thread")
    results: dict[str, Any] = {
        "benchmark": "dispatch",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": device_name,
        "compute_capability": f"{major}.{minor}",
        "host": {"machine": platform.machine(), "cpu": platform.processor() or None},
        "versions": versions(),
        "config": {
            "num_slots": NUM_SLOTS,
            "slot_size": SLOT_SIZE,
            "arg_len": ARG_LEN,
            "handler": "echo (launch-wide); echo_thread (thread-shaped) for ':thread' labels",
            "samples": opts.samples,
            "warmup": opts.warmup,
            "requests_per_throughput_point": opts.requests,
            "in_flight": list(IN_FLIGHT),
            "load_generator": "bench/loadgen.c (gcc -O2, ctypes, clock_gettime)",
        },
        "latency_us": {},
        "throughput_mrps": {},
        "errors": {},
    }
    lat: dict[str, Any] = results["latency_us"]
    thr: dict[str, Any] = results["throughput_mrps"]

    with tempfile.TemporaryDirectory(prefix="cudaq-bench-") as tmp:
        so, cubin = build_tools(Path(tmp), f"{major}{minor}")
        gen = LoadGen(so)
        bridge = HostRingBridge(NUM_SLOTS, SLOT_SIZE).open()
        ring = bridge.host_address
        floors = Floors(cubin, bridge)

        def measure_latency(label: str, fid: int = echo) -> None:
            gen.rewind()
            gen.latency(ring, fid, opts.warmup)
            lat[label] = percentiles(gen.latency(ring, fid, opts.samples))
            print(
                f"{label:>28}: p50 {lat[label]['p50']:.2f} us  p99 {lat[label]['p99']:.2f} us",
                file=sys.stderr,
            )

        def measure_throughput(label: str, fid: int = echo) -> None:
            gen.rewind()
            gen.throughput(ring, fid, 10_000, 64)  # warm-up
            thr[label] = {str(n): gen.throughput(ring, fid, opts.requests, n) for n in IN_FLIGHT}
            print(f"{label:>28}: {thr[label]} M req/s", file=sys.stderr)

        with floors.running("pingpong_floor", 1):
            measure_latency("pingpong_floor")
        with floors.running("pingpong_floor", 1):
            measure_throughput("pingpong_floor")
        with floors.running("warp_floor", 32):
            measure_throughput("warp_floor")

        kinds: dict[str, Callable[[], Any] | None] = {
            "builtin": None,
            "single_thread": lambda: launchers.single_thread(core),
            "cooperative_grid": lambda: launchers.cooperative_grid(core),
            "cluster": lambda: launchers.cluster(core),
            "warp_parallel": lambda: launchers.warp_parallel(core),
        }
        config = DispatcherConfig(device=opts.device, num_slots=NUM_SLOTS, slot_size=SLOT_SIZE)
        for kind, make in kinds.items():
            try:
                with Dispatcher(config, bridge=bridge, module=core) as d:
                    d.function_table.add_device("echo", get_device_handler(core, "echo"))
                    d.function_table.add_device(
                        "echo_thread", get_device_handler(core, "echo_thread")
                    )
                    d.set_unified_launch(None if make is None else make())
                    for label, fid in ((kind, echo), (f"{kind}:thread", echo_thread)):
                        d.start()  # a fresh ring for each measurement
                        if kind != "warp_parallel":
                            measure_latency(label, fid)
                        if kind in ("single_thread", "warp_parallel"):
                            d.stop()
                            d.start()
                            measure_throughput(label, fid)
                        d.stop()
            except Exception as exc:  # keep measuring the other shapes; report it
                results["errors"][kind] = f"{type(exc).__name__}: {exc}"
                print(f"{kind}: {exc}", file=sys.stderr)

        # The Python client's per-call overhead above the floor (same single-thread kernel).
        try:
            with Dispatcher(config, bridge=bridge, module=core) as d:
                d.function_table.add_device("echo", get_device_handler(core, "echo"))
                d.set_unified_launch(launchers.single_thread(core))
                d.start()
                client = bridge.client()
                payload = bytes(range(ARG_LEN))
                for _ in range(opts.warmup // 4):
                    client.call("echo", payload)
                samples = np.empty(opts.samples // 4)
                for i in range(samples.size):
                    t0 = time.perf_counter_ns()
                    client.call("echo", payload)
                    samples[i] = (time.perf_counter_ns() - t0) / 1000.0
            py = percentiles(samples)
            py["overhead_over_floor_p50_us"] = py["p50"] - lat["pingpong_floor"]["p50"]
            if "single_thread" in lat:
                py["overhead_over_native_single_thread_p50_us"] = (
                    py["p50"] - lat["single_thread"]["p50"]
                )
            results["python_client_us"] = py
        except Exception as exc:
            results["errors"]["python_client"] = f"{type(exc).__name__}: {exc}"
        # The batched Python path against the warp-parallel kernel (thread-shaped handler).
        try:
            with Dispatcher(config, bridge=bridge, module=core) as d:
                d.function_table.add_device("echo_thread", get_device_handler(core, "echo_thread"))
                d.set_unified_launch(launchers.warp_parallel(core))
                d.start()
                client = bridge.client()
                rng = np.random.default_rng(12)
                batch = rng.integers(0, 256, size=(opts.requests, ARG_LEN), dtype=np.uint8)
                client.call_batch("echo_thread", batch[:10_000])  # warm-up
                t0 = time.perf_counter()
                out = client.call_batch("echo_thread", batch)
                seconds = time.perf_counter() - t0
                if not (out.statuses == 0).all() or not np.array_equal(out.data, batch):
                    msg = "call_batch returned wrong answers"
                    raise RuntimeError(msg)
            results["python_call_batch_mrps"] = opts.requests / seconds / 1e6
            print(
                f"{'python call_batch':>28}: {results['python_call_batch_mrps']:.2f} M req/s",
                file=sys.stderr,
            )
        except Exception as exc:
            results["errors"]["python_call_batch"] = f"{type(exc).__name__}: {exc}"
        floors.close()
        bridge.close()

    goals: dict[str, Any] = {}

    def goal(name: str, value: float, bound: str, met: bool, shape: str) -> None:
        goals[name] = {"value": value, "goal": bound, "met": met, "handler_shape": shape}

    floor = lat["pingpong_floor"]["p50"]
    # p50 over the ping-pong floor, per shape and handler shape (issue #12's acceptance)
    bounds = {
        "single_thread": 1.05,
        "single_thread:thread": 1.05,
        "builtin:thread": 1.10,
        "builtin": 1.25,
        "cluster:thread": 1.15,
        "cluster": 1.15,
        "cooperative_grid:thread": 1.30,
        "cooperative_grid": 1.30,
    }
    for label, bound in bounds.items():
        if label in lat:
            shape = "thread" if label.endswith(":thread") else "launch"
            ratio = lat[label]["p50"] / floor
            goal(f"{label}_p50_over_floor", ratio, f"<= {bound}", ratio <= bound, shape)
            tail = lat[label]["p99"] / lat[label]["p50"]
            goal(f"{label}_p99_over_p50", tail, "<= 1.25", tail <= 1.25, shape)
    for label in ("warp_parallel", "warp_parallel:thread"):
        if label in thr:
            ratio = thr[label]["64"] / thr["warp_floor"]["64"]
            shape = "thread" if label.endswith(":thread") else "launch"
            goal(f"{label}_over_warp_floor_at_64", ratio, ">= 0.8", ratio >= 0.8, shape)
    for label in ("single_thread", "single_thread:thread"):
        if label in thr:
            ratio = thr[label]["1"] / thr["pingpong_floor"]["1"]
            shape = "thread" if label.endswith(":thread") else "launch"
            goal(f"{label}_serial_over_pingpong_serial", ratio, ">= 0.95", ratio >= 0.95, shape)
    if "python_client_us" in results and "single_thread" in lat:
        over = results["python_client_us"]["p50"] - lat["single_thread"]["p50"]
        goal("python_call_over_native_client_us", over, "<= 0.4", over <= 0.4, "launch")
    if "python_call_batch_mrps" in results:
        mrps = results["python_call_batch_mrps"]
        goal("python_call_batch_mrps_warp_parallel", mrps, ">= 1.0", mrps >= 1.0, "thread")
    results["goals"] = goals
    ok(drv.cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease")

    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(goals, indent=2), file=sys.stderr)
    print(f"wrote {opts.out}", file=sys.stderr)
    return 0 if not results["errors"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
