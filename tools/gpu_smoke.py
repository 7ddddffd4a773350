"""Low-level GPU smoke test of the device run time (no skbuild_cudaq.realtime needed).

Compiles the single-thread example dispatcher and the package's device run time
with nvcc, links them with nvJitLink for the GPU present, loads the cubin with
cuLibraryLoadData, builds a host ring in mapped pinned memory and drives
requests through it (empty function table: every answer must be status -2;
bad magic must be -1). Prints round-trip percentiles. Usage:
    python tools/gpu_smoke.py [--n 20000]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cuda.bindings import driver as cu
from cuda.bindings import nvjitlink as nj

ROOT = Path(__file__).resolve().parent.parent


def check(res):  # type: ignore[no-untyped-def]
    err = res[0]
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA error {err!r}")
    return res[1:] if len(res) > 2 else (res[1] if len(res) == 2 else None)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--kernel", default="single_thread_dispatcher")
    ap.add_argument("--block", type=int, default=1)
    ns = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    inc = ROOT / "skbuild_cudaq" / "include"
    srcs = [
        ROOT / "skbuild_cudaq/device/host_ring_bridge.cu",
        ROOT / "skbuild_cudaq/device/unified_dispatch_kernel.cu",
        ROOT / "example_app/src/single_thread_dispatcher.cu",
    ]
    fatbins = []
    for s in srcs:
        out = tmp / (s.stem + ".fatbin")
        subprocess.run(["nvcc", "-fatbin", "-rdc=true", "-std=c++17",
                        "-gencode=arch=compute_80,code=lto_80", f"-I{inc}", "-o", str(out), str(s)],
                       check=True)
        fatbins.append(out.read_bytes())
    check(cu.cuInit(0))
    dev = check(cu.cuDeviceGet(0))
    attr = cu.CUdevice_attribute
    major = check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev))
    minor = check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
    ctx = check(cu.cuDevicePrimaryCtxRetain(dev))
    check(cu.cuCtxSetCurrent(ctx))
    opts = [f"-arch=sm_{major}{minor}", "-lto"]
    t0 = time.perf_counter()
    h = nj.create(len(opts), opts)
    for i, fb in enumerate(fatbins):
        nj.add_data(h, nj.InputType.FATBIN, fb, len(fb), f"in{i}")
    nj.complete(h)
    cubin = bytearray(nj.get_linked_cubin_size(h))
    nj.get_linked_cubin(h, cubin)
    t1 = time.perf_counter()
    lib = check(cu.cuLibraryLoadData(bytes(cubin), None, None, 0, None, None, 0))
    t2 = time.perf_counter()
    kern = check(cu.cuLibraryGetKernel(lib, ns.kernel.encode()))
    num_slots, slot = 8, 256
    ring_bytes = 2 * num_slots * slot + 8 * num_slots + 64
    flags = cu.CU_MEMHOSTALLOC_DEVICEMAP | cu.CU_MEMHOSTALLOC_PORTABLE
    hptr = check(cu.cuMemHostAlloc(ring_bytes, flags))
    ctypes.memset(hptr, 0, ring_bytes)
    dptr = int(check(cu.cuMemHostGetDevicePointer(hptr, 0)))
    rx, tx = 0, num_slots * slot
    rxf, txf = 2 * num_slots * slot, 2 * num_slots * slot + 4 * num_slots
    shut = rxf + 8 * num_slots + 8  # int32 shutdown flag after the flags
    ctx_buf = struct.pack("<IIII QQQQ", 0x474E4952, num_slots, slot, 0,
                          dptr + rx, dptr + tx, dptr + rxf, dptr + txf) + bytes(40 * 32)
    dctx = check(cu.cuMemAlloc(len(ctx_buf) + 32 * slot))  # + per-lane staging area
    check(cu.cuMemcpyHtoD(dctx, ctx_buf, len(ctx_buf)))
    stats = check(cu.cuMemAlloc(8))
    check(cu.cuMemsetD8(stats, 0, 8))
    stream = check(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING))
    args = ((int(dctx), slot, 0, 0, dptr + shut, int(stats)),
            (ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p,
             ctypes.c_void_p))
    cfg = cu.CUlaunchConfig()
    cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = ns.block, 1, 1
    cfg.hStream = stream
    cfg.numAttrs = 0
    cfg.attrs = []
    buf = (ctypes.c_char * ring_bytes).from_address(int(hptr))
    mv = memoryview(buf).cast("B")
    tl = time.perf_counter()
    check(cu.cuLaunchKernelEx(cfg, cu.CUfunction(int(kern)), args, 0))
    lat = []
    statuses = {}
    first = None
    for k in range(ns.n):
        s = k % num_slots
        seq = k // num_slots + 1
        magic = 0x43555152 if k % 1000 != 7 else 0xDEADBEEF
        struct.pack_into("<IIIIQ", mv, rx + s * slot, magic, 0x191B6322, 32, k, k * 3)
        ts = time.perf_counter_ns()
        struct.pack_into("<I", mv, rxf + 4 * s, seq)
        deadline = time.perf_counter() + 5
        while struct.unpack_from("<I", mv, txf + 4 * s)[0] != seq:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"timeout on request {k}")
        te = time.perf_counter_ns()
        if first is None:
            first = time.perf_counter() - tl
        lat.append(te - ts)
        m, st, _rl, rid, pts = struct.unpack_from("<IiIIQ", mv, tx + s * slot)
        assert m == 0x43555153 and rid == k and pts == k * 3, (m, rid, pts)
        statuses[st] = statuses.get(st, 0) + 1
    struct.pack_into("<i", mv, shut, 1)
    check(cu.cuStreamSynchronize(stream))
    processed = bytearray(8)
    check(cu.cuMemcpyDtoH(processed, stats, 8))
    lat.sort()
    res = {
        "kernel": ns.kernel, "n": ns.n, "link_ms": (t1 - t0) * 1e3, "load_ms": (t2 - t1) * 1e3,
        "first_answer_us": first * 1e6 if first else None,
        "p50_us": lat[len(lat) // 2] / 1e3, "p99_us": lat[int(len(lat) * 0.99)] / 1e3,
        "statuses": statuses, "processed": struct.unpack("<Q", processed)[0],
    }
    print(json.dumps(res))
    assert res["processed"] == ns.n
    return 0


if __name__ == "__main__":
    sys.exit(main())
