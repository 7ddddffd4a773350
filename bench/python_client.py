"""Where the Python client's round trip goes: ``RingClient.call`` against the native client.

One run on one GPU, the single-thread dispatcher serving ``echo`` (32-byte arguments), side by
side in one process::

    python bench/python_client.py [--out bench/results/python_client.json]

Measured (p50/p99 of ``--samples`` round trips after a warm-up, microseconds):

- ``native``: the C load generator of ``bench/dispatch.py`` (``bench/loadgen.c``) on the same
  ring: the round trip with no Python at all;
- ``call``: ``RingClient.call`` as users call it: the compiled round trip
  (``skbuild_cudaq/realtime/ring/_fastcall.c``) where the package was built with it
  (``config.compiled`` says whether it was);
- ``call_pure``: ``RingClient.call`` on its pure-Python path (``compiled=False``);
- ``call_segments``: the same fast path as ``call_pure``, stamped with ``perf_counter_ns``: *post*
  (id, header, payload, flag), *wait* (spinning on the response flag; the spin count is
  reported too) and *read* (header checks, result copy);
- ``call_private_ids``: ``call_pure`` with the request-id source moved out of the ring into
  process memory (tests whether the id source's cache line costs the round trip);
- ``python_floor``: the least Python that can do a round trip on this ring (``pack_into``,
  flag store, spin, ``unpack_from``, one ``bytes`` copy): what any Python client pays;
- ``call_python_prelude``: the compiled round trip as ``call()`` drove it until session 11,
  its bookkeeping (next request, collected, the slot's ticket, the last function's id) in
  Python attributes around ``Ring.call``, against ``call``, where ``Ring.call_next`` keeps it;
- ``call_python_frame``: ``call`` as it was until session 13, a Python method around
  ``Ring.call_next`` (``RingClient._call_python`` over the compiled ring), against ``call``,
  now compiled code itself (``_fastcall.call``: no Python frame on the answered path);
- ``c_part``: the compiled round trip's C part, stamped in C (``Ring.call_next_stamped``: from
  before the request is written to its response flag seen, as ``native`` is timed), and the
  Python-timed rest of the call around it (``python_around``): whether a gap over ``native`` is
  in the round trip itself or in Python around it;
- ``trace``, ``trace_random``: the compiled round trip with the clock read at each of its steps
  (``Ring.call_next_traced``, ``TRACE_STEPS``): which step of the call holds the Python work;
  ``trace_noprefetch*`` and ``call_noprefetch*`` the same without the spin fetching the
  response's first line (``Ring.prefetch_response = 0``), against which ``prefetch_saves_*``
  is measured;
- ``native_random``, ``call_random``, ``call_python_prelude_random``, ``c_part_random``,
  ``call_python_frame_random``: the same with random
  arrival (a think time uniform in [0, ``GAP_NS``] before each request, not timed), as
  ``bench/dispatch.py``'s second figures: back to back, each client's own period meets the
  kernel's poll loop at a phase of its own, which can cost or save up to a poll;
- ``native_read``, ``native_read_random``: the native client with the response's header
  checked and its result copied out inside the timed part (``lg_latency_read``), as every
  client that returns the answer must: the response's cache line, written by the device,
  misses the host's caches (``native`` stops the clock when the flag is seen).

The goal of issue #12 is ``call`` p50 within 0.4 us of ``native``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import platform
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dispatch as _bench

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "python_client.json"


def _segments(client: Any, payload: bytes, count: int) -> dict[str, Any]:
    """``RingClient.call``'s fast path with time stamps between its phases."""
    from skbuild_cudaq.realtime.wire import (
        HEADER_SIZE,
        REQUEST_MAGIC,
        RESPONSE_MAGIC,
        function_id,
    )

    lay = client.layout
    mem = client._mem
    rx_flags, tx_flags, ids, mv = mem.rx_flags, mem.tx_flags, mem.ids, mem.mv
    fid = function_id("echo")
    size = len(payload)
    packer = struct.Struct(f"<IIIIQ{size}s")  # as call() packs header and payload
    response = struct.Struct("<IiIIQ")
    ns = time.perf_counter_ns
    post = np.empty(count)
    wait = np.empty(count)
    read = np.empty(count)
    spins = np.empty(count)
    n_slots, slot_size = lay.num_slots, lay.slot_size
    for i in range(count):
        t0 = ns()
        k = client._next
        slot = k % n_slots
        seq = (k // n_slots + 1) & 0xFFFFFFFF
        prev = (seq - 1) & 0xFFFFFFFF
        if rx_flags[slot] != prev or tx_flags[slot] != prev:
            raise RuntimeError("ring out of step")
        rid = ids[0]
        ids[0] = rid + 1
        rid &= 0xFFFFFFFF
        packer.pack_into(mv, slot * slot_size, REQUEST_MAGIC, fid, size, rid, 0, payload)
        rx_flags[slot] = seq
        client._next = k + 1
        t1 = ns()
        n = 0
        while tx_flags[slot] != seq:
            n += 1
        t2 = ns()
        off = lay.tx_slot_offset(slot)
        magic, status, rlen, echoed, ts = response.unpack_from(mv, off)
        result = bytes(mv[off + HEADER_SIZE : off + HEADER_SIZE + rlen])
        t3 = ns()
        if magic != RESPONSE_MAGIC or status != 0 or result != payload or (echoed, ts) != (rid, 0):
            raise RuntimeError(f"wrong answer: status {status}, id {echoed} for {rid}")
        post[i], wait[i], read[i], spins[i] = t1 - t0, t2 - t1, t3 - t2, n
    us = 1e-3
    return {
        "post_us": _bench.percentiles(post * us),
        "wait_us": _bench.percentiles(wait * us),
        "read_us": _bench.percentiles(read * us),
        "spins": _bench.percentiles(spins),
    }


class _PythonPrelude:
    """``RingClient.call``'s fast path as it was until session 11: the bookkeeping in Python
    attributes around the compiled ``Ring.call`` (general path left out: a benchmark)."""

    def __init__(self, client: Any) -> None:
        self._next = client.submitted
        self._num_slots = client.layout.num_slots
        self._compiled = client._compiled
        self._pending = client._pending
        self._last_function: object = None
        self._last_fid = 0
        self._spin_ns = client._spin_ns
        self._mem = client._mem
        self._tx_base = client.layout.tx_slots_offset
        self._slot_size = client.layout.slot_size
        self.collected = 0

    def call(self, function: Any, payload: bytes = b"", *, timeout: float = 5.0) -> Any:
        k = self._next
        n = self._num_slots
        slot = k % n
        ring = self._compiled
        out = None
        if ring is not None and self._pending[slot] is None:
            if function is self._last_function:
                fid = self._last_fid
            else:
                from skbuild_cudaq.realtime.wire import function_id

                fid = function_id(function)
                self._last_function, self._last_fid = function, fid
            out = ring.call(k, fid, payload, self._spin_ns)
            if out.__class__ is tuple:
                self._next = k + 1
                self.collected += 1
                return out
            if isinstance(out, int):  # published, not answered within the spin: wait
                self._next = k + 1
                seq = (k // n + 1) & 0xFFFFFFFF
                mem = self._mem
                while mem.tx_flags[slot] != seq:
                    pass
                off = self._tx_base + slot * self._slot_size
                status, rlen = struct.unpack_from("<iI", mem.mv, off + 4)
                self.collected += 1
                return status, bytes(mem.mv[off + 24 : off + 24 + rlen])
        msg = f"the benchmark's old fast path did not publish request {k}: {out!r}"
        raise RuntimeError(msg)


def _floor(client: Any, payload: bytes, count: int) -> np.ndarray:
    """The least Python a round trip on this ring takes (no checks beyond the flag)."""
    from skbuild_cudaq.realtime.wire import HEADER_SIZE, REQUEST_MAGIC, function_id

    lay = client.layout
    mem = client._mem
    mv, rx_flags, tx_flags = mem.mv, mem.rx_flags, mem.tx_flags
    request = struct.Struct("<IIIIQ")
    response = struct.Struct("<IiIIQ")
    fid = function_id("echo")
    size = len(payload)
    ns = time.perf_counter_ns
    out = np.empty(count)
    k = client._next
    n_slots = lay.num_slots
    for i in range(count):
        t0 = ns()
        slot = k % n_slots
        seq = k // n_slots + 1
        off = lay.rx_slot_offset(slot)
        request.pack_into(mv, off, REQUEST_MAGIC, fid, size, k & 0xFFFFFFFF, 0)
        mv[off + HEADER_SIZE : off + HEADER_SIZE + size] = payload
        rx_flags[slot] = seq
        while tx_flags[slot] != seq:
            pass
        toff = lay.tx_slot_offset(slot)
        rlen = response.unpack_from(mv, toff)[2]
        bytes(mv[toff + HEADER_SIZE : toff + HEADER_SIZE + rlen])
        out[i] = ns() - t0
        k += 1
    client._next = k  # this ring's position moved on
    return out * 1e-3


def _ring_calls(
    client: Any,
    function_id: int,
    payload: bytes,
    warmup: int,
    gaps: np.ndarray,
    *,
    random: bool,
    method: str,
    width: int,
    record: Callable[[np.ndarray, int, Any, int], None],
) -> np.ndarray:
    """``warmup`` calls of the compiled ring's ``method`` (``call_next_stamped`` or
    ``call_next_traced``), then one a think time of ``gaps`` (ns, spun, not timed; only if
    ``random``), each between two Python clock reads; ``record(column, t0, got, t1)`` fills
    a call's ``width`` figures (ns) from what it returned. A call whose spin ran out is
    finished by the Python path and left NaN. Every answer checked. The figures after the
    warm-up, in us."""
    ring = client._compiled
    if ring is None:
        raise RuntimeError(f"{method} needs the compiled ring")
    ring.remember("echo", function_id)
    go = getattr(ring, method)
    ns = time.perf_counter_ns  # CLOCK_MONOTONIC, the clock the C part reads
    figures = np.full((width, warmup + gaps.size), np.nan)
    for i in range(figures.shape[1]):
        if random and i >= warmup:
            end = ns() + int(gaps[i - warmup])
            while ns() < end:
                pass
        t0 = ns()
        got = go("echo", payload)
        t1 = ns()
        out = got[0]
        if out.__class__ is not tuple:  # a spin ran out: not timed to the end
            out = client._call_continue("echo", payload, out)
        else:
            record(figures[:, i], t0, got, t1)
        if out != (0, payload):
            raise RuntimeError("wrong answer")
    return figures[:, warmup:] * 1e-3


def stamped_calls(
    client: Any, function_id: int, payload: bytes, warmup: int, gaps: np.ndarray, *, random: bool
) -> dict[str, float]:
    """The compiled round trip's C part stamped in C (``Ring.call_next_stamped``: from before
    the request is written to its response flag seen, as the native client is timed) and the
    Python-timed call around it, per call (calls as in :func:`_ring_calls`). Medians in us;
    ``unstamped``: calls whose spin ran out (not counted)."""

    def record(column: np.ndarray, t0: int, got: Any, t1: int) -> None:
        _, written, seen = got
        if seen:
            column[:] = (seen - written, (written - t0) + (t1 - seen))

    c_part, around = _ring_calls(
        client,
        function_id,
        payload,
        warmup,
        gaps,
        random=random,
        method="call_next_stamped",
        width=2,
        record=record,
    )
    return {
        "p50": float(np.nanmedian(c_part)),
        "around_p50": float(np.nanmedian(around)),
        "whole_p50": float(np.nanmedian(c_part + around)),
        "unstamped": int(np.isnan(c_part).sum()),
    }


#: The steps of a traced call (``Ring.call_next_traced``), each the time from the point before:
#: the call into C from Python's clock read (``enter``), the claim of the slot and its request id
#: (``claim``), one clock read and nothing else (``clock``: what each step below includes of its
#: own), the request written and its flag stored (``write``), the spin on the response flag
#: (``wait``), the response header read and checked (``check``), the result objects built
#: (``build``), and back to Python's clock read (``leave``, with the trace's own tuples).
TRACE_STEPS = ("enter", "claim", "clock", "write", "wait", "check", "build", "leave")


def traced_calls(
    client: Any,
    function_id: int,
    payload: bytes,
    warmup: int,
    gaps: np.ndarray,
    *,
    random: bool,
    prefetch: bool = True,
) -> dict[str, Any]:
    """The compiled round trip with the clock read at each of its steps
    (``Ring.call_next_traced``; calls as in :func:`_ring_calls`): the median of each step of
    ``TRACE_STEPS`` (us) over the calls answered within the spin. ``prefetch``: whether the
    spin fetches the response's first line (``Ring.prefetch_response``)."""
    if client._compiled is not None:
        client._compiled.prefetch_response = int(prefetch)

    def record(column: np.ndarray, t0: int, got: Any, t1: int) -> None:
        column[:] = np.diff((t0, *got[1], t1))

    steps = _ring_calls(
        client,
        function_id,
        payload,
        warmup,
        gaps,
        random=random,
        method="call_next_traced",
        width=len(TRACE_STEPS),
        record=record,
    )
    row: dict[str, Any] = {
        step: float(np.nanmedian(steps[j])) for j, step in enumerate(TRACE_STEPS)
    }
    row["untraced"] = int(np.isnan(steps[0]).sum())
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--module", default="example_app._core")
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--warmup", type=int, default=2_000)
    opts = parser.parse_args(argv)

    from skbuild_cudaq.realtime import HostRingBridge, RingClient

    drv = _bench._drv()
    dev = _bench.primary_context_current(drv, opts.device)  # the ring's pinned memory needs it
    device_name = _bench.device_identity(drv, dev)[0]
    core = importlib.import_module(opts.module)
    payload = bytes(range(_bench.ARG_LEN))
    res: dict[str, Any] = {
        "benchmark": "python_client",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": device_name,
        "host": {
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
        "versions": _bench.versions(),
        "config": {
            "kernel": "single_thread_dispatcher",
            "handler": "echo (launch-wide)",
            "num_slots": _bench.NUM_SLOTS,
            "slot_size": _bench.SLOT_SIZE,
            "arg_len": _bench.ARG_LEN,
            "samples": opts.samples,
            "warmup": opts.warmup,
        },
    }
    with tempfile.TemporaryDirectory(prefix="cudaq-bench-") as tmp:
        so = _bench.build_loadgen(Path(tmp))
        gen = _bench.LoadGen(so)
        bridge = HostRingBridge(_bench.NUM_SLOTS, _bench.SLOT_SIZE).open()
        with _bench.single_thread_echo(core, bridge, opts.device) as d:
            echo = _bench.fnv1a("echo")

            def fresh(compiled: bool | None = None) -> Any:
                """A new client: it continues at the ring's own position."""
                return RingClient(bridge.buffer, bridge.layout, compiled=compiled)

            res["config"]["compiled"] = fresh().compiled

            def native(gap_ns: int = 0, read: bool = False) -> dict[str, float]:
                gen.next.value = fresh().submitted  # continue at the ring's position
                gen.latency(bridge.host_address, echo, opts.warmup)
                samples = gen.latency(
                    bridge.host_address, echo, opts.samples, gap_ns=gap_ns, read=read
                )
                return _bench.percentiles(samples)

            gaps = np.random.default_rng(7).integers(0, _bench.GAP_NS + 1, size=opts.samples)

            def compiled_call(
                old: bool, random: bool, frame: bool = False, prefetch: bool = True
            ) -> dict[str, float]:
                """``old``: the Python prelude of session 9; ``frame``: the Python method
                over the compiled ring (``call`` before it was compiled code itself);
                ``prefetch``: whether the spin fetches the response's first line."""
                client = fresh(True)
                client._compiled.prefetch_response = int(prefetch)
                call = client.call
                if old:
                    call = _PythonPrelude(client).call
                elif frame:
                    call = client._call_python
                _bench.timed_calls(call, payload, opts.warmup, None)
                samples = _bench.timed_calls(call, payload, opts.samples, gaps if random else None)
                return _bench.percentiles(samples)

            def stamped(random: bool) -> dict[str, float]:
                return stamped_calls(fresh(True), echo, payload, opts.warmup, gaps, random=random)

            def call(private_ids: bool = False, compiled: bool | None = None) -> dict[str, float]:
                client = fresh(False if private_ids else compiled)
                if private_ids:
                    client._mem.ids = memoryview(bytearray(8)).cast("Q")
                for _ in range(opts.warmup):
                    client.call("echo", payload)
                samples = np.empty(opts.samples)
                ns = time.perf_counter_ns
                for i in range(samples.size):
                    t0 = ns()
                    status, result = client.call("echo", payload)
                    samples[i] = ns() - t0
                    if status != 0 or result != payload:
                        raise RuntimeError("wrong answer")
                return _bench.percentiles(samples * 1e-3)

            # alternate, so that drift (clocks, other load) shows in both
            rounds: dict[str, list[dict[str, Any]]] = {}
            for _ in range(3):
                rounds.setdefault("native", []).append(native())
                rounds.setdefault("call", []).append(call())
                if res["config"]["compiled"]:
                    rounds.setdefault("native_random", []).append(native(_bench.GAP_NS))
                    for old, random in ((False, True), (True, True), (True, False)):
                        key = "call" + ("_python_prelude" if old else "")
                        key += "_random" if random else ""
                        rounds.setdefault(key, []).append(compiled_call(old, random))
                    for random in (False, True):
                        key = "c_part" + ("_random" if random else "")
                        rounds.setdefault(key, []).append(stamped(random))
                    for random in (False, True):
                        for prefetch in (True, False):
                            key = "trace" + ("" if prefetch else "_noprefetch")
                            key += "_random" if random else ""
                            rounds.setdefault(key, []).append(
                                traced_calls(
                                    fresh(True),
                                    echo,
                                    payload,
                                    opts.warmup,
                                    gaps,
                                    random=random,
                                    prefetch=prefetch,
                                )
                            )
                        key = "call_noprefetch" + ("_random" if random else "")
                        rounds.setdefault(key, []).append(
                            compiled_call(False, random, prefetch=False)
                        )
                    for random in (False, True):
                        key = "call_python_frame" + ("_random" if random else "")
                        rounds.setdefault(key, []).append(compiled_call(False, random, True))
                    for random in (False, True):
                        key = "native_read" + ("_random" if random else "")
                        gap = _bench.GAP_NS if random else 0
                        rounds.setdefault(key, []).append(native(gap, read=True))
                rounds.setdefault("call_pure", []).append(call(compiled=False))
                rounds.setdefault("call_private_ids", []).append(call(private_ids=True))
                client = fresh(False)
                _segments(client, payload, opts.warmup)
                rounds.setdefault("call_segments", []).append(
                    _segments(client, payload, opts.samples)
                )
                client = fresh()
                _floor(client, payload, opts.warmup)
                rounds.setdefault("python_floor", []).append(
                    _bench.percentiles(_floor(client, payload, opts.samples))
                )
            d.stop()
    res["rounds"] = rounds

    def med(key: str, sub: str | None = None) -> float:
        vals = [(r[sub] if sub else r)["p50"] for r in rounds[key]]
        return float(np.median(vals))

    summary = {
        "native_p50_us": med("native"),
        "call_p50_us": med("call"),
        "call_pure_p50_us": med("call_pure"),
        "call_private_ids_p50_us": med("call_private_ids"),
        "python_floor_p50_us": med("python_floor"),
        "segments_p50_us": {s: med("call_segments", f"{s}_us") for s in ("post", "wait", "read")},
        "segment_spins_p50": med("call_segments", "spins"),
    }
    summary["call_over_native_us"] = summary["call_p50_us"] - summary["native_p50_us"]
    summary["pure_over_native_us"] = summary["call_pure_p50_us"] - summary["native_p50_us"]
    summary["floor_over_native_us"] = summary["python_floor_p50_us"] - summary["native_p50_us"]
    if "native_random" in rounds:
        for key in (
            "native_random",
            "call_random",
            "call_python_prelude",
            "call_python_prelude_random",
        ):
            summary[f"{key}_p50_us"] = med(key)
        summary["call_over_native_random_arrival_us"] = med("call_random") - med("native_random")
        summary["python_prelude_over_call_us"] = med("call_python_prelude") - med("call")
        summary["python_prelude_over_call_random_arrival_us"] = med(
            "call_python_prelude_random"
        ) - med("call_random")
        for key in ("call_python_frame", "call_python_frame_random"):
            summary[f"{key}_p50_us"] = med(key)
        summary["python_frame_over_call_us"] = med("call_python_frame") - med("call")
        summary["python_frame_over_call_random_arrival_us"] = med("call_python_frame_random") - med(
            "call_random"
        )
        for key in ("c_part", "c_part_random"):
            summary[f"{key}_p50_us"] = med(key)
            summary[f"{key}_python_around_p50_us"] = float(
                np.median([r["around_p50"] for r in rounds[key]])
            )
        for key in ("call_noprefetch", "call_noprefetch_random"):
            summary[f"{key}_p50_us"] = med(key)
        summary["prefetch_saves_us"] = med("call_noprefetch") - med("call")
        summary["prefetch_saves_random_arrival_us"] = med("call_noprefetch_random") - med(
            "call_random"
        )
        for key in ("trace", "trace_random", "trace_noprefetch", "trace_noprefetch_random"):
            summary[f"{key}_us"] = {
                step: float(np.median([r[step] for r in rounds[key]])) for step in TRACE_STEPS
            }
        summary["c_part_over_native_us"] = med("c_part") - med("native")
        summary["c_part_over_native_random_arrival_us"] = med("c_part_random") - med(
            "native_random"
        )
        for key in ("native_read", "native_read_random"):
            summary[f"{key}_p50_us"] = med(key)
        summary["native_read_over_native_us"] = med("native_read") - med("native")
        summary["native_read_over_native_random_arrival_us"] = med("native_read_random") - med(
            "native_random"
        )
        summary["call_over_native_read_random_arrival_us"] = med("call_random") - med(
            "native_read_random"
        )
    res["summary"] = summary
    res["goal"] = {
        "python_call_over_native_client_us": summary["call_over_native_us"],
        "compiled": res["config"]["compiled"],
        "target": "<= 0.4",
        "met": summary["call_over_native_us"] <= 0.4,
    }
    print(json.dumps(summary, indent=2))
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
