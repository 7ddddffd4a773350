"""The host path and the UDP front end against their C++ floors: bench/results/wire.json.

    python bench/wire.py [--out bench/results/wire.json] [--rounds 5] [--samples 20000]

Builds ``bench/wire_floor.cu`` twice -- the floors binary (nvcc where there is a GPU, else the
C++ compiler, without the GPU floor) and the extension module ``wire_handlers`` (native host
handlers ``rpc_increment`` and ``echo``, and the two-thread ring floor) -- and
``bench/loadgen.c``. Then, each round, every row below in an order rotated round by round:
``--samples`` serial round trips after ``--warmup`` (p50, p90, p99), then ``--pipelined``
requests with 64 in flight (requests a second). No GPU: the device rows are left out (and why).

UDP rows (64-byte datagrams, the floors binary's C++ client, blocking recv, every answer
checked; a test server started for the row, its count checked when it stops):
  udp_echo_floor     a C++ server thread: recvfrom (spinning), +1 per byte, sendto
  udp_gpu_floor      the same thread through a mapped pinned slot and a one-thread kernel
  udp_host_native    the test server, --path=host --module=wire_handlers (a native handler)
  udp_host_python    the test server, --path=host (the Python rpc_increment)
  udp_device         the test server, --path=device, example_app's single_thread_dispatcher
In-process rows (a ring of bench/common.py's shape in this process, 32-byte arguments):
  ring_floor         two threads: bench/loadgen.c's client and wire_floor.cu's C echo thread
  host_native        HostDispatcher, the native echo, the C client (bench/loadgen.c)
  host_python        HostDispatcher, a Python echo, RingClient.call
  host_python_c_client, host_native_python_client   the mixed pairs (for the breakdown)

wire.json: bench/common.py's header, ``device`` (the GPU, or the CPU where there is none),
``settings``; ``goals``, each ``{value, goal, met}``: the median over rounds of a row's p50
over its floor's in the same round (``host_python_p50_us``: the median p50); ``left_out`` (a
goal not measured, and why); ``latency`` (per row, us: medians over rounds of p50, p90 and
p99, ``p99_over_p50``, ``p99_met`` (p99 <= 2x p50), its floor, ``p50_over_floor``, every
round); ``throughput`` (per row: the median requests a second with 64 in flight,
``over_floor``); ``breakdown_us`` (p50 differences between rows: where the time goes).
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as c  # bench/ is not a package

DEFAULT_OUT = c.RESULTS / "wire.json"
IN_FLIGHT = 64
UDP_SLOTS, UDP_SLOT_SIZE = 64, 256
NATIVE = "--module=wire_handlers"
# goal key -> (row, its floor or None for an absolute p50 in us, bound)
GOALS = {
    "udp_device_p50_over_floor": ("udp_device", "udp_gpu_floor", "<= 1.2"),
    "udp_host_native_p50_over_floor": ("udp_host_native", "udp_echo_floor", "<= 1.2"),
    "udp_host_python_p50_over_floor": ("udp_host_python", "udp_echo_floor", "<= 1.5"),
    "host_native_p50_over_floor": ("host_native", "ring_floor", "<= 1.5"),
    "host_python_p50_us": ("host_python", None, "<= 3.0"),
}
FLOOR_OF = {row: floor for row, floor, _ in GOALS.values() if floor} | {
    r: "ring_floor" for r in ("host_python", "host_python_c_client", "host_native_python_client")
}
#: Where the time goes: a row's p50, or the difference of two rows' p50s.
BREAKDOWN = (
    ("udp: the socket floor", "udp_echo_floor"),
    ("udp: + feeder, ring hand-offs, native loop and handler", "udp_host_native - udp_echo_floor"),
    ("udp: + a Python handler instead", "udp_host_python - udp_host_native"),
    ("udp: + the GPU ring and kernel", "udp_gpu_floor - udp_echo_floor"),
    ("udp: + the dispatcher and feeder over the GPU floor", "udp_device - udp_gpu_floor"),
    ("ring: the two-thread floor", "ring_floor"),
    ("ring: + the native loop and handler", "host_native - ring_floor"),
    ("ring: + a Python handler, C client", "host_python_c_client - host_native"),
    ("ring: + the Python client, native handler", "host_native_python_client - host_native"),
    ("ring: both", "host_python - host_native"),
)


def run(cmd: list[str], **kw: Any) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def build(work: Path, gpu: bool) -> tuple[Path, Path, c.LoadGen]:
    """The floors binary, ``wire_handlers`` (its path) and the native client."""
    import skbuild_cudaq

    floors, src = work / "wire_floor", str(c.BENCH / "wire_floor.cu")
    if gpu:
        run(["nvcc", "-O3", "-std=c++17", "-arch=native", src, "-o", str(floors)])
    else:
        run(["c++", "-O3", "-std=c++17", "-x", "c++", src, "-o", str(floors), "-pthread"])
    module = work / ("wire_handlers" + sysconfig.get_config_var("EXT_SUFFIX"))
    run(["c++", "-O2", "-std=c++17", "-shared", "-fPIC", "-fvisibility=hidden", "-x", "c++",
         "-DWIRE_HANDLER_MODULE", f"-I{sysconfig.get_paths()['include']}",
         f"-I{skbuild_cudaq.include_dir()}", src, "-o", str(module), "-pthread"])  # fmt: skip
    return floors, module, c.LoadGen(c.build_loadgen(work))


def samples(us: np.ndarray | list[float], rps: float) -> dict[str, float]:
    p50, p90, p99 = np.percentile(np.asarray(us), [50, 90, 99])
    return {"p50_us": float(p50), "p90_us": float(p90), "p99_us": float(p99), "rps": rps}


# -- UDP rows -----------------------------------------------------------------------------------
def udp_floor(floors: Path, kind: str, a: argparse.Namespace) -> dict[str, float]:
    args = [kind, a.samples, a.pipelined, IN_FLIGHT, a.warmup]
    return dict(json.loads(run([str(floors), *map(str, args)])))


def udp_server(floors: Path, module: Path, args: list[str], a: argparse.Namespace) -> dict:
    """Start the test server, run the C++ client against it, stop it; its count is checked."""
    from skbuild_cudaq.realtime.wire import function_id

    path = os.pathsep.join(filter(None, [str(module.parent), os.environ.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "skbuild_cudaq.cli.server", "--handlers=rpc_increment",
           f"--num-slots={UDP_SLOTS}", f"--slot-size={UDP_SLOT_SIZE}", *args]  # fmt: skip
    # Started in the work folder: ``-m`` puts the working directory first on sys.path, and
    # from a checkout's root that is the source tree (no compiled ``_native``), not the
    # package as installed.
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, PYTHONPATH=path), cwd=module.parent,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"host=(\S+) port=(\d+)", line)
        if not m:
            raise SystemExit(f"{' '.join(cmd)}: no READY line:\n{line}{proc.communicate()[1]}")
        client = [m[1], m[2], function_id("rpc_increment"), a.samples, a.pipelined, IN_FLIGHT]
        out = dict(json.loads(run([str(floors), "client", *map(str, [*client, a.warmup])])))
        proc.send_signal(signal.SIGTERM)
        rest, err = proc.communicate(timeout=60)
        count = int(rest.strip().splitlines()[-1].split("count=")[1])
        if proc.returncode != 0 or count < a.samples + a.warmup + a.pipelined - out["lost"]:
            raise SystemExit(f"{' '.join(cmd)}: exit {proc.returncode}, {count} processed:\n{err}")
        return out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


# -- in-process rows ----------------------------------------------------------------------------
def c_client(gen: c.LoadGen, address: int, fid: int, a: argparse.Namespace) -> dict[str, float]:
    """bench/loadgen.c on the (fresh) ring at ``address``."""
    gen.rewind()
    us = gen.latency(address, fid, a.samples + a.warmup)[a.warmup :]
    return samples(us, gen.throughput(address, fid, a.pipelined, IN_FLIGHT) * 1e6)


def py_client(client: Any, a: argparse.Namespace) -> dict[str, float]:
    """RingClient.call timed one call at a time (``timed_calls``), then 64 in flight."""
    arg = bytes(range(c.ARG_LEN))
    c.timed_calls(client.call, arg, a.warmup)
    times = c.timed_calls(client.call, arg, a.samples)
    window, t0 = [client.submit("echo", arg) for _ in range(IN_FLIGHT)], time.perf_counter()
    for i in range(a.pipelined):
        if client.wait(window[i % IN_FLIGHT]).result != arg:
            raise SystemExit("wrong pipelined answer")
        if i + IN_FLIGHT < a.pipelined:
            window[i % IN_FLIGHT] = client.submit("echo", arg)
    return samples(times, a.pipelined / (time.perf_counter() - t0))


def in_process(row: str, gen: c.LoadGen, module: Path, a: argparse.Namespace) -> dict:
    from skbuild_cudaq.realtime.host.dispatcher import HostDispatcher, echo
    from skbuild_cudaq.realtime.host.handlers import get_host_handler
    from skbuild_cudaq.realtime.ring import RingLayout
    from skbuild_cudaq.realtime.wire import function_id

    layout, fid = RingLayout(c.NUM_SLOTS, c.SLOT_SIZE), function_id("echo")
    if row == "ring_floor":
        buf = bytearray(layout.total_bytes)
        address = ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))
        floor = ctypes.CDLL(str(module))
        if floor.wire_ring_floor_start(ctypes.c_void_p(address), c.NUM_SLOTS, c.SLOT_SIZE) != 0:
            raise SystemExit("cannot start the ring floor's thread")
        try:
            return c_client(gen, address, fid, a)
        finally:
            floor.wire_ring_floor_stop()
    native = row in ("host_native", "host_native_python_client")
    handler = get_host_handler(module, "echo") if native else echo
    with HostDispatcher(layout, {"echo": handler}) as dispatcher:
        if row in ("host_native", "host_python_c_client"):
            buf = dispatcher.buffer
            address = ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))
            return c_client(gen, address, fid, a)
        return py_client(dispatcher.client(), a)


# -- the run ------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--samples", type=int, default=20000, help="serial round trips a row a round")
    p.add_argument("--warmup", type=int, default=2000)
    p.add_argument("--pipelined", type=int, default=50000, help="requests with 64 in flight")
    a = p.parse_args(argv)
    gpu = c.first_line(["nvidia-smi", "-L"]) is not None and c.first_line(["nvcc", "--version"])
    why = None if gpu else "no CUDA GPU here (nvidia-smi lists none), or no nvcc"
    if gpu and importlib.util.find_spec("example_app") is None:
        why = "example_app is not installed (pip install ./example_app)"
    left_out = {} if why is None else {"udp_device_p50_over_floor": why}
    header = c.header("wire", [0] if gpu else [])
    with tempfile.TemporaryDirectory(prefix="wire-") as tmp:
        floors, module, gen = build(Path(tmp), bool(gpu))
        host = ["--path=host"]
        rows: dict[str, Any] = {
            "udp_echo_floor": lambda: udp_floor(floors, "echo", a),
            "udp_host_native": lambda: udp_server(floors, module, [*host, NATIVE], a),
            "udp_host_python": lambda: udp_server(floors, module, host, a),
            **{r: (lambda r=r: in_process(r, gen, module, a)) for r in (
                "ring_floor", "host_native", "host_python", "host_python_c_client",
                "host_native_python_client")},
        }  # fmt: skip
        if why is None:
            rows["udp_gpu_floor"] = lambda: udp_floor(floors, "gpu", a)
            rows["udp_device"] = lambda: udp_server(floors, module, [
                "--path=device", "--module=example_app._core",
                "--dispatcher=single_thread_dispatcher"], a)  # fmt: skip
        names = list(rows)
        per_round: dict[str, list[dict[str, float]]] = {r: [] for r in names}
        for i in range(a.rounds):
            for row in names[i % len(names) :] + names[: i % len(names)]:
                per_round[row].append(rows[row]())
                p50 = per_round[row][-1]["p50_us"]
                print(f"round {i + 1}/{a.rounds} {row:26s} p50 {p50:9.3f} us", flush=True)
    result = {**header, **summarize(per_round, left_out, a)}
    cpu = f"no GPU (CPU only: {header['host']['cpu']}, {header['host']['cpus']} CPUs)"
    result["device"] = header["devices"][0]["name"] if header["devices"] else cpu
    c.write_json(a.out, result)
    return 0


def summarize(per_round: dict[str, list[dict[str, float]]], left_out: dict[str, str],
              a: argparse.Namespace) -> dict[str, Any]:  # fmt: skip
    med = statistics.median
    latency: dict[str, Any] = {}
    throughput: dict[str, Any] = {}
    for row, runs in per_round.items():
        p50, p99 = med(r["p50_us"] for r in runs), med(r["p99_us"] for r in runs)
        floor = FLOOR_OF.get(row) if FLOOR_OF.get(row) in per_round else None
        latency[row] = {"p50_us": p50, "p90_us": med(r["p90_us"] for r in runs), "p99_us": p99,
                        "p99_over_p50": p99 / p50, "p99_met": p99 <= 2 * p50, "floor": floor,
                        "rounds": runs}  # fmt: skip
        throughput[row] = {"requests_per_s": med(r["rps"] for r in runs), "in_flight": IN_FLIGHT,
                           "floor": floor}  # fmt: skip
        if floor is not None:
            paired = c.paired_ratio([r["p50_us"] for r in runs],
                                    [f["p50_us"] for f in per_round[floor]])  # fmt: skip
            latency[row]["p50_over_floor"] = paired["ratio"]
            rps = [r["rps"] / f["rps"] for r, f in zip(runs, per_round[floor], strict=True)]
            throughput[row]["over_floor"] = med(rps)
    goals = {
        key: c.goal(round(latency[row]["p50_us" if floor is None else "p50_over_floor"], 4), bound)
        for key, (row, floor, bound) in GOALS.items()
        if row in latency
    }
    p50s, breakdown = {row: e["p50_us"] for row, e in latency.items()}, {}
    for what, rows in BREAKDOWN:
        x, _, y = rows.partition(" - ")
        if x in p50s and (not y or y in p50s):
            breakdown[f"{what} ({rows})"] = round(p50s[x] - (p50s[y] if y else 0.0), 3)
    return {
        "settings": {"rounds": a.rounds, "samples": a.samples, "warmup": a.warmup,
                     "pipelined": a.pipelined, "in_flight": IN_FLIGHT,
                     "udp_ring": [UDP_SLOTS, UDP_SLOT_SIZE], "datagram_bytes": 64,
                     "ring": [c.NUM_SLOTS, c.SLOT_SIZE], "arg_bytes": c.ARG_LEN},
        "goals": goals,
        "left_out": left_out,
        "latency": latency,
        "throughput": throughput,
        "breakdown_us": breakdown,
    }  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
