"""The host path and the UDP front end against their C++ floors (issue #42): bench/wire.json.

    python bench/wire.py [--out bench/results/wire.json] [--rounds 5] [--samples 20000]

Builds, in a temporary directory, ``bench/wire_floor.cu`` twice -- the floors binary (nvcc
where there is a GPU, else the C++ compiler: no GPU floor) and the extension module
``wire_handlers`` (native host handlers ``rpc_increment`` and ``echo``) -- and
``bench/loadgen.c`` (the native ring client and a C echo consumer). Then, in each round, every
row below in an order rotated round by round (floors and paths interleaved): ``--samples``
serial round trips after a warm-up (p50, p90, p99), then ``--pipelined`` requests with 64 in
flight (requests a second). 64-byte datagrams, 40-byte arguments.

UDP rows (the floors binary's client, blocking recv; answers checked byte by byte):
  udp_echo_floor     a C++ server thread: recvfrom (spinning), +1 per byte, sendto
  udp_gpu_floor      the same thread through a mapped pinned slot and a one-thread kernel
  udp_host_native    the test server, --path=host --module=wire_handlers (a native handler)
  udp_host_python    the test server, --path=host (the Python rpc_increment)
  udp_device         the test server, --path=device, example_app's single_thread_dispatcher
In-process rows (a 64-slot ring in this process):
  ring_floor         two threads: bench/loadgen.c's client and its C echo consumer
  host_native        HostDispatcher, native echo, the C client (bench/loadgen.c)
  host_python        HostDispatcher, Python echo, RingClient.call
  host_python_c_client, host_native_python_client   the two mixed pairs (for the breakdown)

wire.json: ``date``; ``device`` (host, CPU, cores, load average, kernel, Python, compilers,
GPU, driver, CUDA); ``settings``; ``goals``, each ``{value, goal, met}`` with value the median
over rounds of the row's p50 over its floor's p50 in the same round (``host_python_p50_us``:
the median p50); ``left_out`` (a goal not measured here, and why); ``latency`` (per row:
median p50/p90/p99 over rounds, ``p99_over_p50`` and ``p99_met`` for p99 <= 2x p50, the
floor it is judged against, every round); ``throughput`` (per row: median requests a second,
``over_floor``); ``breakdown`` (p50 differences between rows: where the time goes).
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "wire.json"
ARG = bytes(range(40))
IN_FLIGHT = 64
SLOTS, SLOT_SIZE = 64, 256
NATIVE = "--module=wire_handlers"
# goal key -> (row, floor or None for an absolute p50 in us, limit)
GOALS = {
    "udp_device_p50_over_floor": ("udp_device", "udp_gpu_floor", 1.2),
    "udp_host_native_p50_over_floor": ("udp_host_native", "udp_echo_floor", 1.2),
    "udp_host_python_p50_over_floor": ("udp_host_python", "udp_echo_floor", 1.5),
    "host_native_p50_over_floor": ("host_native", "ring_floor", 1.5),
    "host_python_p50_us": ("host_python", None, 3.0),
}
FLOOR_OF = {row: floor for row, floor, _ in GOALS.values() if floor}
FLOOR_OF |= {"host_python": "ring_floor", "host_python_c_client": "ring_floor",
             "host_native_python_client": "ring_floor"}  # fmt: skip


def run(cmd: list[str], **kw: Any) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def first_line(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (out.stdout.strip().splitlines() or [None])[0] if out.returncode == 0 else None


def device_info() -> dict[str, Any]:
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())  # fmt: skip
    gpu = first_line(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
    smi = first_line(["sh", "-c", "nvidia-smi | grep -o 'CUDA Version: *[0-9.]*'"]) if gpu else None
    cuda = re.search(r"([\d.]+)$", smi) if smi else None
    nvcc = first_line(["sh", "-c", "nvcc --version | tail -1"]) if shutil.which("nvcc") else None
    return {
        "host": platform.node(), "cpu": cpu, "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)), "load_average": list(os.getloadavg()),
        "kernel": platform.release(), "python": platform.python_version(),
        "cxx": first_line(["c++", "--version"]), "nvcc": nvcc,
        "gpu": gpu.split(",")[0].strip() if gpu else None,
        "driver": gpu.split(",")[1].strip() if gpu else None,
        "cuda": cuda.group(1) if cuda else None,
    }  # fmt: skip


def build(work: Path, gpu: bool) -> tuple[Path, Path, ctypes.CDLL]:
    """The floors binary, the directory of ``wire_handlers``, loadgen (ctypes)."""
    import skbuild_cudaq

    floors = work / "wire_floor"
    src = str(HERE / "wire_floor.cu")
    if gpu:
        run(["nvcc", "-O3", "-std=c++17", "-arch=native", src, "-o", str(floors)])
    else:
        run(["c++", "-O3", "-std=c++17", "-x", "c++", src, "-o", str(floors), "-pthread"])
    module = work / ("wire_handlers" + sysconfig.get_config_var("EXT_SUFFIX"))
    run(["c++", "-O2", "-std=c++17", "-shared", "-fPIC", "-fvisibility=hidden", "-x", "c++",
         "-DWIRE_HANDLER_MODULE", f"-I{sysconfig.get_paths()['include']}",
         f"-I{skbuild_cudaq.include_dir()}", src, "-o", str(module)])  # fmt: skip
    loadgen = work / "loadgen.so"
    run(["cc", "-O2", "-shared", "-fPIC", str(HERE / "loadgen.c"), "-o", str(loadgen), "-pthread"])
    lg = ctypes.CDLL(str(loadgen))
    p, u32, u64 = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64
    pu64, pd = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_double)
    lg.lg_latency.argtypes = [p, u32, u32, u32, p, u32, u64, pu64, pd]
    lg.lg_throughput.argtypes = [p, u32, u32, u32, p, u32, u64, u32, pu64, pd]
    lg.lg_serve_start.argtypes = [p, u32, u32, u64, ctypes.c_int]
    return floors, work, lg


def stats(samples_us: list[float], rps: float) -> dict[str, float]:
    s = sorted(samples_us)
    n = len(s)
    return {"p50_us": s[n // 2], "p90_us": s[n * 9 // 10], "p99_us": s[n * 99 // 100], "rps": rps}


# -- UDP rows -----------------------------------------------------------------------------------
def udp_floor(floors: Path, kind: str, a: argparse.Namespace) -> dict[str, float]:
    return json.loads(run([str(floors), kind, str(a.samples), str(a.pipelined), str(IN_FLIGHT),
                           str(a.warmup)]))  # fmt: skip


def udp_server(floors: Path, modpath: Path, args: list[str], a: argparse.Namespace) -> dict:
    """Start the test server, run the C++ client against it, stop it; checks its count."""
    from skbuild_cudaq.realtime.wire import function_id

    path = os.pathsep.join(filter(None, [str(modpath), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path)
    cmd = [sys.executable, "-m", "skbuild_cudaq.realtime.test_server", f"--num-slots={SLOTS}",
           f"--slot-size={SLOT_SIZE}", "--handlers=rpc_increment", *args]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"host=(\S+) port=(\d+)", line)
        if not m:
            raise SystemExit(f"{' '.join(cmd)}: no READY line:\n{line}{proc.communicate()[1]}")
        fid = function_id("rpc_increment")
        out = json.loads(run([str(floors), "client", m[1], m[2], str(fid), str(a.samples),
                              str(a.pipelined), str(IN_FLIGHT), str(a.warmup)]))  # fmt: skip
        proc.send_signal(signal.SIGTERM)
        rest, err = proc.communicate(timeout=60)
        count = int(rest.strip().splitlines()[-1].split("count=")[1])
        answered = a.samples + a.warmup + a.pipelined - int(out["lost"])
        if proc.returncode != 0 or count < answered:
            raise SystemExit(f"{' '.join(cmd)}: exit {proc.returncode}, {count} processed:\n{err}")
        return out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


# -- in-process rows ----------------------------------------------------------------------------
def c_client(lg: ctypes.CDLL, buf: bytearray, fid: int, a: argparse.Namespace) -> dict[str, float]:
    """bench/loadgen.c against the ring in ``buf`` (a fresh ring: request 0 next)."""
    base = ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))
    n = a.samples + a.warmup
    out, nxt, secs = (ctypes.c_double * n)(), ctypes.c_uint64(0), ctypes.c_double()
    arg = ctypes.create_string_buffer(ARG, len(ARG))
    rc = lg.lg_latency(base, SLOTS, SLOT_SIZE, fid, arg, len(ARG), n, ctypes.byref(nxt), out)
    rc = rc or lg.lg_throughput(base, SLOTS, SLOT_SIZE, fid, arg, len(ARG), a.pipelined, IN_FLIGHT,
                                ctypes.byref(nxt), ctypes.byref(secs))  # fmt: skip
    if rc != 0:
        raise SystemExit(f"the native ring client failed ({rc})")
    return stats([t / 1e3 for t in out[a.warmup :]], a.pipelined / secs.value)


def py_client(client: Any, a: argparse.Namespace) -> dict[str, float]:
    """RingClient.call timed one call at a time, then 64 in flight (submit/wait)."""
    clock, call, times = time.perf_counter_ns, client.call, []
    for i in range(a.samples + a.warmup):
        t0 = clock()
        status, result = call("echo", ARG)
        t1 = clock()
        if status != 0 or result != ARG:
            raise SystemExit(f"wrong answer {status} {result!r}")
        if i >= a.warmup:
            times.append((t1 - t0) / 1e3)
    window, t0 = [client.submit("echo", ARG) for _ in range(IN_FLIGHT)], time.perf_counter()
    for i in range(a.pipelined):
        if client.wait(window[i % IN_FLIGHT]).result != ARG:
            raise SystemExit("wrong pipelined answer")
        if i + IN_FLIGHT < a.pipelined:
            window[i % IN_FLIGHT] = client.submit("echo", ARG)
    return stats(times, a.pipelined / (time.perf_counter() - t0))


def in_process(row: str, lg: ctypes.CDLL, modpath: Path, a: argparse.Namespace) -> dict:
    from skbuild_cudaq.realtime import HostDispatcher, RingLayout, get_host_handler
    from skbuild_cudaq.realtime.host_path import echo
    from skbuild_cudaq.realtime.wire import function_id

    layout, fid = RingLayout(SLOTS, SLOT_SIZE), function_id("echo")
    if row == "ring_floor":
        buf = bytearray(layout.total_bytes)
        lg.lg_serve_start(ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf)), SLOTS,
                          SLOT_SIZE, 0, -1)  # fmt: skip
        try:
            return c_client(lg, buf, fid, a)
        finally:
            lg.lg_serve_stop()
    native = get_host_handler(next(modpath.glob("wire_handlers*")), "echo")
    handler = native if row in ("host_native", "host_native_python_client") else echo
    with HostDispatcher(layout, {"echo": handler}) as dispatcher:
        if row in ("host_native", "host_python_c_client"):
            return c_client(lg, dispatcher.buffer, fid, a)
        return py_client(dispatcher.client(), a)


# -- the run ------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--samples", type=int, default=20000, help="serial round trips a row a round")
    p.add_argument("--warmup", type=int, default=2000)
    p.add_argument("--pipelined", type=int, default=50000, help="requests with 64 in flight")
    a = p.parse_args(argv)
    info = device_info()
    import importlib.util

    why = (
        "no CUDA GPU here (nvidia-smi found none), or no nvcc"
        if info["gpu"] is None or info["nvcc"] is None
        else "example_app is not installed (pip install ./example_app)"
        if importlib.util.find_spec("example_app") is None
        else None
    )
    left_out = {} if why is None else {"udp_device_p50_over_floor": why}
    gpu = why is None
    with tempfile.TemporaryDirectory(prefix="wire-") as tmp:
        floors, modpath, lg = build(Path(tmp), gpu)
        host = ["--path=host"]
        rows: dict[str, Any] = {
            "udp_echo_floor": lambda: udp_floor(floors, "echo", a),
            "udp_host_native": lambda: udp_server(floors, modpath, [*host, NATIVE], a),
            "udp_host_python": lambda: udp_server(floors, modpath, host, a),
            **{r: (lambda r=r: in_process(r, lg, modpath, a)) for r in (
                "ring_floor", "host_native", "host_python", "host_python_c_client",
                "host_native_python_client")},
        }  # fmt: skip
        if gpu:
            rows["udp_gpu_floor"] = lambda: udp_floor(floors, "gpu", a)
            rows["udp_device"] = lambda: udp_server(floors, modpath, [
                "--path=device", "--module=example_app._core",
                "--dispatcher=single_thread_dispatcher"], a)  # fmt: skip
        names = list(rows)
        per_round: dict[str, list[dict[str, float]]] = {r: [] for r in names}
        for i in range(a.rounds):
            order = names[i % len(names) :] + names[: i % len(names)]
            for row in order:
                per_round[row].append(rows[row]())
                p50 = per_round[row][-1]["p50_us"]
                print(f"round {i + 1}/{a.rounds} {row:26s} p50 {p50:9.3f} us", flush=True)
    result = summarize(per_round, left_out, info, a)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1) + "\n")
    for key, goal in result["goals"].items():
        met = "met" if goal["met"] else "MISSED"
        print(f"{key:34s} {goal['value']:8.3f}  goal <= {goal['goal']}  {met}")
    for key, why in left_out.items():
        print(f"{key:34s} left out: {why}")
    print(f"wrote {a.out}")
    return 0


def summarize(per_round: dict[str, list[dict[str, float]]], left_out: dict[str, str],
              info: dict[str, Any], a: argparse.Namespace) -> dict[str, Any]:  # fmt: skip
    med = statistics.median
    latency: dict[str, Any] = {}
    throughput: dict[str, Any] = {}
    for row, runs in per_round.items():
        p50, p99 = med(r["p50_us"] for r in runs), med(r["p99_us"] for r in runs)
        latency[row] = {"p50_us": p50, "p90_us": med(r["p90_us"] for r in runs), "p99_us": p99,
                        "p99_over_p50": p99 / p50, "p99_met": p99 <= 2 * p50,
                        "floor": FLOOR_OF.get(row), "rounds": runs}  # fmt: skip
        throughput[row] = {"requests_per_s": med(r["rps"] for r in runs), "in_flight": IN_FLIGHT,
                           "floor": FLOOR_OF.get(row)}  # fmt: skip
    for row, entry in latency.items():
        floor = entry["floor"]
        if floor in per_round:
            pairs = zip(per_round[row], per_round[floor], strict=True)
            entry["p50_over_floor"] = med(r["p50_us"] / f["p50_us"] for r, f in pairs)
            rps = throughput[row]["requests_per_s"]
            throughput[row]["over_floor"] = rps / throughput[floor]["requests_per_s"]
    goals = {}
    for key, (row, floor, limit) in GOALS.items():
        if row not in latency:
            continue
        value = latency[row]["p50_us"] if floor is None else latency[row]["p50_over_floor"]
        goals[key] = {"value": round(value, 4), "goal": limit, "met": value <= limit}
    p50 = {row: e["p50_us"] for row, e in latency.items()}
    diff = lambda x, y: round(p50[x] - p50[y], 3) if x in p50 and y in p50 else None  # noqa: E731
    breakdown = {
        "udp: socket floor (udp_echo_floor)": p50["udp_echo_floor"],
        "udp: + feeder, ring hand-off, native loop and handler (udp_host_native - udp_echo_floor)":
            diff("udp_host_native", "udp_echo_floor"),
        "udp: + a Python handler instead (udp_host_python - udp_host_native)":
            diff("udp_host_python", "udp_host_native"),
        "udp: + the GPU ring and kernel (udp_gpu_floor - udp_echo_floor)":
            diff("udp_gpu_floor", "udp_echo_floor"),
        "udp: + the dispatcher and feeder over the GPU floor (udp_device - udp_gpu_floor)":
            diff("udp_device", "udp_gpu_floor"),
        "ring: two-thread floor (ring_floor)": p50["ring_floor"],
        "ring: + the native loop and handler (host_native - ring_floor)":
            diff("host_native", "ring_floor"),
        "ring: + a Python handler, C client (host_python_c_client - host_native)":
            diff("host_python_c_client", "host_native"),
        "ring: + the Python client, native handler (host_native_python_client - host_native)":
            diff("host_native_python_client", "host_native"),
        "ring: both (host_python - host_native)": diff("host_python", "host_native"),
    }  # fmt: skip
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": info,
        "settings": {"rounds": a.rounds, "samples": a.samples, "warmup": a.warmup,
                     "pipelined": a.pipelined, "in_flight": IN_FLIGHT, "slots": SLOTS,
                     "slot_size": SLOT_SIZE, "datagram_bytes": 64, "arg_bytes": len(ARG)},
        "goals": goals,
        "left_out": left_out,
        "latency": latency,
        "throughput": throughput,
        "breakdown_us": {k: v for k, v in breakdown.items() if v is not None},
    }  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
