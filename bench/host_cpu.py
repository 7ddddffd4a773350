"""Where the client runs: the Python client's gap over the native client, CPU by CPU.

    python bench/host_cpu.py [--out bench/results/host_cpu.json] [--rounds 3]

Issue #12 asks ``RingClient.call`` to stay within 0.4 us of the native client. On the H200
hosts of session 13 the compiled call's round trip itself (its C part, stamped in C) cost what
the native client's does, but the Python work around it swung by about 0.3 us from one
process to the next: ``call`` over native with random arrival measured +0.05 to +0.44 us,
and the one ``python_client.py`` run pinned to CPU 1 (the CPU ``bench/dispatch.py`` pins its
client to) was among the slow ones. This asks whether the CPU is the cause, in one process:

- the client thread unpinned (``any``), then pinned to each CPU it may use, and once with
  every thread of the process pinned to ``bench/dispatch.py``'s CPU (``all@N``: threads the
  CUDA driver starts after ``dispatch.py`` pins inherit its CPU);
- for each, in rounds (the order rotated a round, so drift shows in every CPU): the native
  client (``bench/loadgen.c``) and ``RingClient.call``, back to back and with random arrival
  (``bench/dispatch.py``'s ``GAP_NS``), and the compiled call's C part and the Python work
  around it (``bench/python_client.py``'s ``c_part``), with random arrival;
- what the CPU did meanwhile: its interrupts (``/proc/interrupts``), the thread's context
  switches, the CPU's clock (``cpu MHz`` in ``/proc/cpuinfo``, where the host shows it) and
  where an unpinned thread ran;
- the host's topology: each CPU's SMT siblings, core, package and NUMA node, and the GPU's
  local CPUs.

The single-thread dispatcher serves ``echo`` (launch-wide), 32-byte arguments, as in
``bench/python_client.py``. Needs one GPU, gcc, and example_app installed.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib
import json
import os
import platform
import resource
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dispatch as _bench
import python_client as _client

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "host_cpu.json"
SYS_CPU = Path("/sys/devices/system/cpu")


def interrupts(text: str) -> dict[int, int]:
    """Interrupts per CPU so far, from the text of ``/proc/interrupts`` (every source summed;
    rows with fewer columns than CPUs, such as ``ERR``, count for none)."""
    lines = text.splitlines()
    if not lines:
        return {}
    cpus = [int(c[3:]) for c in lines[0].split() if c.startswith("CPU")]
    total = dict.fromkeys(cpus, 0)
    for line in lines[1:]:
        _, _, rest = line.partition(":")
        fields = rest.split()
        if len(fields) < len(cpus) or not all(f.isdigit() for f in fields[: len(cpus)]):
            continue
        for cpu, count in zip(cpus, fields, strict=False):
            total[cpu] += int(count)
    return total


def cpu_mhz(text: str) -> dict[int, float]:
    """``cpu MHz`` of each ``processor`` in the text of ``/proc/cpuinfo`` (empty if absent)."""
    out: dict[int, float] = {}
    cpu: int | None = None
    for line in text.splitlines():
        key, _, value = (part.strip() for part in line.partition(":"))
        if key == "processor" and value.isdigit():
            cpu = int(value)
        elif key == "cpu MHz" and cpu is not None:
            with contextlib.suppress(ValueError):
                out[cpu] = float(value)
    return out


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def topology(cpus: list[int]) -> dict[int, dict[str, Any]]:
    """Each CPU's SMT siblings, core, package and NUMA node, as sysfs shows them."""
    out: dict[int, dict[str, Any]] = {}
    for cpu in cpus:
        top = SYS_CPU / f"cpu{cpu}" / "topology"
        node = next((p.name[4:] for p in (SYS_CPU / f"cpu{cpu}").glob("node*")), None)
        siblings = _read(top / "thread_siblings_list").strip()
        out[cpu] = {
            "siblings": _bench._cpu_list(siblings) if siblings else None,
            "core_id": _read(top / "core_id").strip() or None,
            "package": _read(top / "physical_package_id").strip() or None,
            "node": node,
        }
    return out


def configurations(allowed: list[int], dispatch_cpu: int | None) -> list[str]:
    """What to measure: ``any`` (unpinned), each CPU, and ``all@N`` for dispatch.py's CPU."""
    names = ["any", *(str(c) for c in allowed)]
    if dispatch_cpu is not None:
        names.append(f"all@{dispatch_cpu}")
    return names


def summarize(rounds: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per configuration, the medians over rounds: each client's p50, ``call`` over native
    (each round's difference, then the median), the Python work around the C part, and the
    CPU's interrupts and the thread's involuntary switches a round."""
    out: dict[str, dict[str, Any]] = {}
    for name, passes in rounds.items():

        def med(key: str, passes: list[dict[str, Any]] = passes) -> float:
            return float(np.median([p[key] for p in passes]))

        row = {key: med(key) for key in passes[0] if isinstance(passes[0][key], (int, float))}
        for key in ("", "_random"):
            diffs = [p["call" + key] - p["native" + key] for p in passes]
            row["call_over_native" + key] = float(np.median(diffs))
        row["over_native_random_each_round"] = [
            round(p["call_random"] - p["native_random"], 3) for p in passes
        ]
        out[name] = row
    return out


def _threads() -> list[int]:
    return [int(t.name) for t in Path("/proc/self/task").iterdir()]


def _pin(name: str, allowed: set[int]) -> None:
    """Pins the calling thread (``N``), every thread of the process (``all@N``), or none."""
    if name == "any":
        os.sched_setaffinity(0, allowed)
        return
    all_threads = name.startswith("all@")
    cpu = {int(name[4:] if all_threads else name)}
    for tid in _threads() if all_threads else [0]:
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(tid, cpu)


def _unpin_all(allowed: set[int]) -> None:
    for tid in _threads():
        with contextlib.suppress(OSError):
            os.sched_setaffinity(tid, allowed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--module", default="example_app._core")
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--warmup", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--cpus", default=None, help="CPUs to pin to, e.g. 1-3,8 (default: every allowed CPU)"
    )
    opts = parser.parse_args(argv)

    from skbuild_cudaq.realtime import HostRingBridge, RingClient

    allowed = os.sched_getaffinity(0)
    cpus = sorted(allowed if opts.cpus is None else set(_bench._cpu_list(opts.cpus)) & allowed)
    drv = _bench._drv()
    dev = _bench.primary_context_current(drv, opts.device)
    info = _bench.device_info(opts.device)
    dispatch_cpu = _bench.pick_cpus([info]).get(opts.device)
    local = _read(Path("/sys/bus/pci/devices") / info["pci_bus_id"].lower() / "local_cpulist")
    libc = ctypes.CDLL(None)
    core = importlib.import_module(opts.module)
    payload = bytes(range(_bench.ARG_LEN))
    res: dict[str, Any] = {
        **_bench.result_header("host_cpu", opts.device, drv, dev),
        "host": {
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "gpu_local_cpus": local.strip() or None,
            "dispatch_py_cpu": dispatch_cpu,
        },
        "topology": topology(sorted(allowed)),
        "config": {
            "kernel": "single_thread_dispatcher",
            "handler": "echo (launch-wide)",
            "arg_len": _bench.ARG_LEN,
            "samples": opts.samples,
            "warmup": opts.warmup,
            "rounds": opts.rounds,
            "gap_ns": _bench.GAP_NS,
        },
    }
    names = configurations(cpus, dispatch_cpu)
    rounds: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="cudaq-bench-") as tmp:
        gen = _bench.LoadGen(_bench.build_loadgen(Path(tmp)))
        bridge = HostRingBridge(_bench.NUM_SLOTS, _bench.SLOT_SIZE).open()
        with _bench.single_thread_echo(core, bridge, opts.device) as d:
            echo = _bench.fnv1a("echo")
            gaps = np.random.default_rng(7).integers(0, _bench.GAP_NS + 1, size=opts.samples)
            ring = bridge.host_address

            def native(gap: int) -> float:
                gen.next.value = RingClient(bridge.buffer, bridge.layout).submitted
                gen.latency(ring, echo, opts.warmup)
                return float(np.median(gen.latency(ring, echo, opts.samples, gap_ns=gap)))

            def call(random: bool) -> float:
                with RingClient(bridge.buffer, bridge.layout) as client:
                    _bench.timed_calls(client.call, payload, opts.warmup)
                    got = _bench.timed_calls(
                        client.call, payload, opts.samples, gaps if random else None
                    )
                return float(np.median(got))

            res["config"]["compiled"] = RingClient(bridge.buffer, bridge.layout).compiled
            for r in range(opts.rounds):
                order = names[r % len(names) :] + names[: r % len(names)]
                for name in order:
                    _pin(name, allowed)
                    irq0 = interrupts(_read(Path("/proc/interrupts")))
                    use0 = resource.getrusage(resource.RUSAGE_THREAD)
                    ran_on = {libc.sched_getcpu()}
                    p: dict[str, Any] = {}
                    p["native"] = native(0)
                    p["call"] = call(False)
                    ran_on.add(libc.sched_getcpu())
                    p["native_random"] = native(_bench.GAP_NS)
                    p["call_random"] = call(True)
                    ran_on.add(libc.sched_getcpu())
                    if res["config"]["compiled"]:
                        with RingClient(bridge.buffer, bridge.layout) as client:
                            part = _client.stamped_calls(
                                client, echo, payload, opts.warmup, gaps, random=True
                            )
                        p["c_part_random"] = part["p50"]
                        p["python_around_random"] = part["around_p50"]
                    ran_on.add(libc.sched_getcpu())
                    use1 = resource.getrusage(resource.RUSAGE_THREAD)
                    irq1 = interrupts(_read(Path("/proc/interrupts")))
                    mhz = cpu_mhz(_read(Path("/proc/cpuinfo")))
                    p["involuntary_switches"] = use1.ru_nivcsw - use0.ru_nivcsw
                    p["voluntary_switches"] = use1.ru_nvcsw - use0.ru_nvcsw
                    p["ran_on"] = sorted(ran_on)
                    p["interrupts"] = {
                        str(c): irq1.get(c, 0) - irq0.get(c, 0) for c in sorted(ran_on)
                    }
                    p["cpu_mhz"] = {str(c): mhz[c] for c in sorted(ran_on) if c in mhz}
                    p["interrupts_on_cpu"] = sum(p["interrupts"].values())
                    rounds.setdefault(name, []).append(p)
                    print(
                        f"round {r} {name:>6}: call over native {p['call'] - p['native']:+.3f} us,"
                        f" random {p['call_random'] - p['native_random']:+.3f} us"
                        + (
                            f", around {p['python_around_random']:.3f} us"
                            if "python_around_random" in p
                            else ""
                        )
                        + f", irqs {p['interrupts_on_cpu']}, ran on {p['ran_on']}",
                        file=sys.stderr,
                    )
                _unpin_all(allowed)
            d.stop()
    res["rounds"] = rounds
    res["summary"] = summarize(rounds)
    print(json.dumps(res["summary"], indent=1))
    _bench.write_results(opts.out, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
