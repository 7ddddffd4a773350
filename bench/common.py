"""What the benchmarks share (nothing here touches CUDA at import).

Statistics (:func:`percentiles`, :func:`paired_ratio`, :func:`goal`); the results file's
:func:`header` (benchmark, date, devices, driver, host, versions) and :func:`write_json`; the
floors (:func:`build_floors` compiles ``bench/floors.cu`` in the same run as what they are
compared with, :class:`Floors` runs them on a ring); the clients: the native one
(:func:`build_loadgen` compiles ``bench/loadgen.c``, :class:`LoadGen` drives it,
:func:`pick_cpus` places it) and the Python one (:func:`timed_calls`).
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
NUM_SLOTS = 256
SLOT_SIZE = 128
ARG_LEN = 32
#: Random arrival: a think time drawn from [0, GAP_NS] ns before each request (not timed).
#: Back to back, a request is written as soon as the previous answer is seen, so it meets the
#: kernel's poll loop (one flag load per PCIe round trip, ~1.2 us) at one phase, and which
#: phase depends on everything else the kernel does: a kernel can gain or lose up to a round
#: trip by where it lands. With a random gap every phase is met as often.
GAP_NS = 3000
VERSIONED = ("skbuild-cudaq", "example-app", "cuda-bindings", "cuda-core", "numpy")


# -- statistics -----------------------------------------------------------------------------
def percentiles(samples: np.ndarray) -> dict[str, float]:
    """p50, p99, p99.9, mean, min and n of ``samples``."""
    return {
        "p50": float(np.percentile(samples, 50)),
        "p99": float(np.percentile(samples, 99)),
        "p99.9": float(np.percentile(samples, 99.9)),
        "mean": float(samples.mean()),
        "min": float(samples.min()),
        "n": int(samples.size),
    }


def paired_ratio(values: Sequence[float], floors: Sequence[float]) -> dict[str, Any]:
    """Rounds of a measurement each paired with its floor's round measured right before it:
    the per-round ratios and their median. A drift over the run moves a value and its floor
    together and cancels in each ratio, where one floor measured first would not."""
    if not values or len(values) != len(floors):
        msg = f"paired_ratio: {len(values)} values for {len(floors)} floors"
        raise ValueError(msg)
    ratios = [v / f for v, f in zip(values, floors, strict=True)]
    return {"ratio": float(np.median(ratios)), "ratios": ratios}


def meets(value: float, bound: str) -> bool:
    """Whether ``value`` meets a goal written as ``"<= 1.05"`` or ``">= 0.8"``."""
    op, _, limit = bound.partition(" ")
    if op not in ("<=", ">="):
        raise ValueError(f"a goal is '<= x' or '>= x', not {bound!r}")
    return value <= float(limit) if op == "<=" else value >= float(limit)


def goal(value: float, bound: str, **extra: Any) -> dict[str, Any]:
    """A goal as the results files hold it: value, bound, met, and anything ``extra``."""
    return {"value": value, "goal": bound, "met": meets(value, bound), **extra}


# -- the results file -----------------------------------------------------------------------
def driver() -> Any:
    from cuda.bindings import driver as drv

    return drv


def ok(result: Any, call: str) -> Any:
    """A driver call's value, or the run time's ``CUDAError`` naming ``call``."""
    from skbuild_cudaq.realtime.launch import check_driver_result

    return check_driver_result(result, call)


def device_info(ordinal: int) -> dict[str, Any]:
    """Name, compute capability and PCI bus id of CUDA device ``ordinal``."""
    drv = driver()
    ok(drv.cuInit(0), "cuInit")
    dev = ok(drv.cuDeviceGet(ordinal), "cuDeviceGet")
    attr = drv.CUdevice_attribute
    cc = [
        int(ok(drv.cuDeviceGetAttribute(getattr(attr, f"CU_DEVICE_ATTRIBUTE_{a}"), dev), a))
        for a in ("COMPUTE_CAPABILITY_MAJOR", "COMPUTE_CAPABILITY_MINOR")
    ]
    name = bytes(ok(drv.cuDeviceGetName(256, dev), "cuDeviceGetName")).split(b"\0", 1)[0]
    bus = bytes(ok(drv.cuDeviceGetPCIBusId(64, dev), "cuDeviceGetPCIBusId")).split(b"\0", 1)[0]
    return {
        "ordinal": ordinal,
        "name": name.decode(),
        "compute_capability": f"{cc[0]}.{cc[1]}",
        "pci_bus_id": bus.decode(),
    }


def first_line(command: list[str], last: bool = False) -> str | None:
    try:
        out = subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    return (lines[-1] if last else lines[0]) if lines and out.returncode == 0 else None


def versions(extra: Sequence[str] = ()) -> dict[str, Any]:
    """The versions a figure depends on: Python, the packages (and ``extra`` ones), nvJitLink,
    nvcc."""
    out: dict[str, Any] = {"python": platform.python_version()}
    for dist in (*VERSIONED, "nvidia-nvjitlink", "nvidia-nvjitlink-cu12", *extra):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    try:
        from skbuild_cudaq.realtime.link._nvjitlink import nvjitlink_version

        out["nvjitlink_library"] = "{}.{}".format(*nvjitlink_version())
    except Exception as exc:  # recorded, not fatal
        out["nvjitlink_library"] = f"unavailable: {exc}"
    nvcc = shutil.which("nvcc")
    out["nvcc"] = first_line([nvcc, "--version"], last=True) if nvcc else None
    return out


def header(
    benchmark: str, devices: Sequence[int] = (), extra: Sequence[str] = ()
) -> dict[str, Any]:
    """What every results file starts with: the benchmark, the date, the GPUs it ran on (none
    for a build benchmark), the driver, the host and the versions."""
    drv_api = None
    if devices:
        version = int(ok(driver().cuDriverGetVersion(), "cuDriverGetVersion"))
        drv_api = f"{version // 1000}.{version % 1000 // 10}"
    smi = shutil.which("nvidia-smi")
    query = [smi or "", "--query-gpu=driver_version", "--format=csv,noheader"]
    return {
        "benchmark": benchmark,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "devices": [device_info(d) for d in devices],
        "driver": {"nvidia": first_line(query) if smi and devices else None, "cuda": drv_api},
        "host": {
            "machine": platform.machine(),
            "cpu": _cpu_model(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
        "versions": versions(extra),
    }


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def write_json(path: Path, doc: dict[str, Any]) -> None:
    """Write a results file, then print each of its goals and what it left out."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {path}", file=sys.stderr)
    for name, g in (doc.get("goals") or {}).items():
        print(f"{name}: {g['value']:.3f} ({g['goal']}: {'met' if g['met'] else 'not met'})")
    for name, why in (doc.get("left_out") or {}).items():
        print(f"{name}: left out: {why}")


# -- floors and the native client, built in the same run ------------------------------------
def build_floors(workdir: Path, arch: str) -> Path:
    """``bench/floors.cu`` as a cubin for ``sm_<arch>`` (nvcc as the package finds it)."""
    from skbuild_cudaq.build._toolchain import find_nvcc

    cubin = workdir / "floors.cubin"
    command = [str(find_nvcc()), "-cubin", f"-arch=sm_{arch}", "-O3", "-o", str(cubin)]
    subprocess.run([*command, str(BENCH / "floors.cu")], check=True)
    return cubin


def build_loadgen(workdir: Path) -> Path:
    """``bench/loadgen.c`` as a shared library (gcc -O2)."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        raise SystemExit("the benchmark needs gcc (or cc) on PATH for bench/loadgen.c")
    so = workdir / "loadgen.so"
    source = str(BENCH / "loadgen.c")
    subprocess.run([gcc, "-O2", "-shared", "-fPIC", "-o", str(so), source], check=True)
    return so


def timed_calls(
    call: Callable[..., Any],
    payload: bytes,
    count: int,
    gaps: np.ndarray | None = None,
    *,
    name: str = "echo",
    expected: bytes | None = None,
) -> np.ndarray:
    """``count`` timed ``call(name, payload)`` (us; e.g. ``RingClient.call``), each after its
    think time in ``gaps`` (ns, spun, not timed); every answer checked against ``expected``
    (default: the payload, an echo). The clock is a local: a module attribute looked up in
    the timed part would be counted as the call's."""
    want = payload if expected is None else expected
    samples = np.empty(count)
    ns = time.perf_counter_ns
    for i in range(count):
        if gaps is not None:
            end = ns() + int(gaps[i])
            while ns() < end:
                pass
        t0 = ns()
        status, result = call(name, payload)
        samples[i] = ns() - t0
        if status != 0 or result != want:
            raise RuntimeError(f"{name}: wrong answer: status {status}, {len(result)} bytes")
    return samples * 1e-3


class LoadGen:
    """ctypes front of ``bench/loadgen.c`` for one ring (one instance per thread)."""

    def __init__(self, so: Path) -> None:
        lib = ctypes.CDLL(str(so))
        p, u32, u64 = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64
        head = [p, u32, u32, u32, p, u32, u64]
        out = [ctypes.POINTER(u64), ctypes.POINTER(ctypes.c_double)]
        lib.lg_latency.argtypes = [*head, u64, *out]
        lib.lg_throughput.argtypes = [*head, u32, *out]
        lib.lg_latency.restype = lib.lg_throughput.restype = ctypes.c_int
        self.lib = lib
        self.args = (ctypes.c_uint8 * ARG_LEN)(*range(ARG_LEN))
        self.next = ctypes.c_uint64(0)  # the ring's request counter, kept between calls

    def rewind(self) -> None:
        self.next.value = 0

    def latency(self, ring: int, function_id: int, count: int, gap_ns: int = 0) -> np.ndarray:
        """``count`` serial round trips (us); ``gap_ns``: random arrival (see GAP_NS)."""
        out = np.zeros(count, dtype=np.float64)
        head = (ring, NUM_SLOTS, SLOT_SIZE, function_id, ctypes.addressof(self.args), ARG_LEN)
        tail = (ctypes.byref(self.next), out.ctypes.data_as(ctypes.POINTER(ctypes.c_double)))
        rc = self.lib.lg_latency(*head, count, gap_ns, *tail)
        if rc != 0:
            msg = f"lg_latency failed ({rc}) at request {self.next.value}"
            raise RuntimeError(msg)
        return out / 1000.0

    def throughput(self, ring: int, function_id: int, count: int, in_flight: int) -> float:
        """Million requests a second, ``count`` requests with ``in_flight`` outstanding."""
        seconds = ctypes.c_double(0)
        head = (ring, NUM_SLOTS, SLOT_SIZE, function_id, ctypes.addressof(self.args), ARG_LEN)
        rc = self.lib.lg_throughput(
            *head, count, in_flight, ctypes.byref(self.next), ctypes.byref(seconds)
        )
        if rc != 0:
            msg = f"lg_throughput failed ({rc}) at request {self.next.value}"
            raise RuntimeError(msg)
        return count / seconds.value / 1e6


def ring_pointers(bridge: Any) -> tuple[int, ...]:
    """A bridge's ring as a floor kernel takes it: the device addresses of the rx slots, tx
    slots, rx flags and tx flags, then num_slots and slot_size."""
    base, lay = bridge.device_ring, bridge.layout
    offsets = (lay.rx_slots_offset, lay.tx_slots_offset, lay.rx_flags_offset, lay.tx_flags_offset)
    return (*(base + o for o in offsets), lay.num_slots, lay.slot_size)


class Floors:
    """The floor kernels of a cubin (:func:`build_floors`), run on a bridge's ring."""

    def __init__(self, cubin: Path, bridge: Any) -> None:
        drv = driver()
        self.lib = ok(
            drv.cuLibraryLoadData(cubin.read_bytes(), None, None, 0, None, None, 0),
            "cuLibraryLoadData",
        )
        self.bridge = bridge
        flags = drv.CU_MEMHOSTALLOC_DEVICEMAP | drv.CU_MEMHOSTALLOC_PORTABLE
        self.flag = int(ok(drv.cuMemHostAlloc(4, flags), "cuMemHostAlloc"))
        self.flag_dev = int(ok(drv.cuMemHostGetDevicePointer(self.flag, 0), "device pointer"))
        nonblocking = int(drv.CUstream_flags.CU_STREAM_NON_BLOCKING)
        self.stream = ok(drv.cuStreamCreate(nonblocking), "cuStreamCreate")

    @contextmanager
    def running(self, name: str, threads: int) -> Iterator[None]:
        """Floor kernel ``name`` on ``threads`` threads serving a fresh ring, then stopped."""
        drv = driver()
        kernel = ok(drv.cuLibraryGetKernel(self.lib, name.encode()), "cuLibraryGetKernel")
        function = ok(drv.cuKernelGetFunction(kernel), "cuKernelGetFunction")
        self.bridge.reset()
        ctypes.c_int32.from_address(self.flag).value = 0
        values = (*ring_pointers(self.bridge), self.flag_dev)
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
            end = time.monotonic() + 10.0
            while int(drv.cuStreamQuery(self.stream)[0]) == 600:  # CUDA_ERROR_NOT_READY
                if time.monotonic() > end:
                    raise RuntimeError(f"{name} did not exit after its shutdown flag")
                time.sleep(1e-4)
            ok(drv.cuStreamSynchronize(self.stream), name)

    def close(self) -> None:
        drv = driver()
        drv.cuStreamDestroy(self.stream)
        drv.cuMemFreeHost(self.flag)
        drv.cuLibraryUnload(self.lib)


def _cpu_list(text: str) -> list[int]:
    cpus: list[int] = []
    for part in filter(None, text.strip().split(",")):  # "0-3,8" -> 0, 1, 2, 3, 8
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def pick_cpus(buses: dict[int, str]) -> dict[int, int | None]:
    """One CPU per GPU (ordinal -> PCI bus id) for its load generator, none shared: a CPU local
    to the GPU (``/sys/bus/pci/devices/<bus>/local_cpulist``) this process may use, not CPU 0
    (interrupts); None where none is left. A migration mid round trip would land in the tail."""
    allowed = os.sched_getaffinity(0)
    taken: set[int] = set()
    chosen: dict[int, int | None] = {}
    for ordinal, bus in buses.items():
        path = Path("/sys/bus/pci/devices") / bus.lower() / "local_cpulist"
        try:
            local = [c for c in _cpu_list(path.read_text()) if c in allowed]
        except (OSError, ValueError):
            local = []
        free = [c for c in local if c not in taken and c != 0] or [
            c for c in sorted(allowed) if c not in taken and c != 0
        ]
        chosen[ordinal] = free[0] if free else None
        if free:
            taken.add(free[0])
    return chosen
