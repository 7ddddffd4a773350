"""Where a dispatch kernel's microseconds go: the measurement build read back.

A module whose device code (the dispatch kernel, its handlers and the device run time)
was compiled with ``-DCUDAQ_REALTIME_PHASES`` (``cudaq/realtime/detail/phases.cuh``)
stamps each request's phases into a record of ``cudaq_phase_log``::

    seen -> staged -> looked_up -> handled -> header -> published

(``seen``: the poll's acquire saw the request; ``staged``: the host-ring hooks copied it;
``looked_up``: ``cudaq_validate_request`` found the entry; ``handled``: the handler
returned; ``header``: the response header is written; ``published``: after the publish's
release). These are stamped with the SM clock (``clock64``), which counts the cycles of
one SM: every stamp of a dispatch kernel's request is made by its polling block.

A graph handler (GRAPH_LAUNCH) is served by the graph dispatch kernel, which launches the
handler's graph; the graph's kernels run on other SMs and publish the response::

    seen -> staged -> looked_up -> filled -> launch -> started -> done -> published

(``looked_up``: its graph entry found; ``filled``: its I/O context filled, the request
copied into it; ``launch``: the ``cudaGraphLaunch`` call that succeeded began, after any
refused while the graph's previous execution was ending; ``started``: the graph's kernels
began, the first ``cudaq_graph_io`` of thread 0 of block 0; ``done``:
``cudaq_graph_publish`` entered; ``published``: after its release of the response flag).
The steps up to ``launch`` are the dispatch kernel's own, stamped with its SM clock; from
``launch`` on they end on other SMs and are stamped with ``%globaltimer``, the GPU's one
clock of nanoseconds (the SM clocks of two SMs are not comparable). Beside the chain:
the launch call itself (``launch -> launched``), the refused calls (``retries``) and the
relaunch of the dispatch graph every 100 launches (the tail launch and the baton's
hand-over, and the round trip of the request after it).

:func:`measure_phases` serves requests through such a module with the host-ring bridge,
reads the records back and :func:`breakdown` gives each step's median and mean.
``skbuild-cudaq phases`` (:mod:`skbuild_cudaq.cli._phases`) compiles the module and calls
it. A step whose stamp the kernel never makes (it does not call that helper) is folded
into the next one and named in ``missing``. The means of the steps add up to the mean
device time exactly; the medians need not. ``%globaltimer`` advances in steps of the GPU's
own (on some GPUs up to a microsecond, :attr:`GraphPhases.timer_step_ns` shows the
smallest seen): a median of a step timed with it is then a multiple of that step, while
its mean over many requests stays exact.

The stamps are device-memory stores on the measured path: they move a kernel's phases by
up to ~0.1 us. Compare stamped phases within one build; compare kernels by the round
trips of the production build.
"""

from __future__ import annotations

import ctypes
import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from skbuild_cudaq.realtime.launch import LaunchConfig
    from skbuild_cudaq.realtime.library import Library

__all__ = [
    "BUILTIN_KERNEL",
    "GRAPH_STEPS",
    "STEPS",
    "GraphFactory",
    "GraphPhases",
    "PhaseBreakdown",
    "after_relaunch_p50",
    "breakdown",
    "check_graph_arch",
    "measure_phases",
]

#: The run time's built-in dispatch kernel, in every linked module.
BUILTIN_KERNEL = "cudaq_realtime_unified_dispatch"

#: A dispatch kernel's steps: each ends at the stamp of its name (words 1..5 of a record).
STEPS = ("staged", "looked_up", "handled", "header", "published")
#: A graph handler's steps, served by the graph dispatch kernel.
GRAPH_STEPS = ("staged", "looked_up", "filled", "launch", "started", "done", "published")
#: Records in ``cudaq_phase_log`` (``CUDAQ_REALTIME_PHASE_RECORDS``).
RECORDS = 65536
#: Words (u64) of a record (``CUDAQ_REALTIME_PHASE_WORDS``).
WORDS = 16
_RECORD_BYTES = 8 * WORDS

# The words of a record (phases.cuh's table). SM clock: _SEEN.._PUBLISHED, _FILLED, _LAUNCH,
# _LAUNCHED; %globaltimer: _SEEN_NS, _PUBLISHED_NS, _LAUNCH_NS, _STARTED_NS, _DONE_NS,
# _HANDED_OVER_NS.
_SEEN, _STAGED, _LOOKED_UP, _PUBLISHED = 0, 1, 2, 5
_SEEN_NS, _PUBLISHED_NS = 6, 7
_FILLED, _LAUNCH, _LAUNCH_NS, _LAUNCHED = 8, 9, 10, 11
_STARTED_NS, _DONE_NS, _RETRIES, _HANDED_OVER_NS = 12, 13, 14, 15

#: Builds a graph handler: ``factory(name, library, device)`` -> an object with ``.graph``,
#: ``.mailbox`` and ``.close()`` (``cudaq-realtime-test-server --graph-factory``'s
#: contract), its kernels looked up in ``library`` (``library.get_kernel(name)``).
GraphFactory = Callable[[str, "Library", int], Any]


def _nan_to_none(value: float) -> float | None:
    return None if math.isnan(value) else value


@dataclass(frozen=True)
class GraphPhases:
    """What a graph handler's requests show beside the chain of steps."""

    launch_call_us: float  #: median of the ``cudaGraphLaunch`` call that succeeded
    retries_mean: float  #: refused calls per request (the graph's previous run not ended)
    retried: int  #: requests whose launch was refused at least once
    retries_max: int  #: the most refused calls before one request's launch
    relaunches: int  #: dispatch-graph relaunches (tail launch and hand-over) in the records
    relaunch_us: float  #: their median, from the launch call's return to the hand-over
    timer_step_ns: float  #: the smallest step of ``%globaltimer`` seen within a record
    #: round trip p50 of the requests served right after a relaunch (from Python)
    after_relaunch_round_trip_p50_us: float = float("nan")

    def as_dict(self) -> dict[str, Any]:
        """The fields by name, a measurement that could not be made (NaN) as None."""
        return {
            name: _nan_to_none(value) if isinstance(value, float) else value
            for name, value in dataclasses.asdict(self).items()
        }

    def lines(self) -> list[str]:
        """The table's lines about the launch and the relaunches."""
        lines = [f"{'launch -> launched (the call)':<30}{self.launch_call_us:>12.3f}"]
        lines.append(
            f"launch retries: {self.retried} requests refused at least once "
            f"(mean {self.retries_mean:.3f} a request, most {self.retries_max})"
        )
        if self.relaunches:
            lines.append(
                f"dispatch graph relaunches: {self.relaunches} (tail launch + hand-over, "
                f"median {self.relaunch_us:.3f} us; round trip p50 of the next request "
                f"{self.after_relaunch_round_trip_p50_us:.3f} us)"
            )
        if not math.isnan(self.timer_step_ns):
            lines.append(f"%globaltimer: smallest step seen {self.timer_step_ns:.0f} ns")
        return lines


@dataclass(frozen=True)
class PhaseBreakdown:
    """The medians and means of a run's stamped steps (µs) and its round trips seen from
    the host."""

    requests: int  #: records the medians are taken over
    steps: tuple[tuple[str, float], ...]  #: (step, median µs) of each stamped step, in order
    device_us: float  #: median from ``seen`` to ``published``
    ns_per_cycle: float  #: the SM clock's period, from ``%globaltimer`` over the same requests
    missing: tuple[str, ...] = ()  #: steps folded into the next: their stamp was never made
    round_trip_p50_us: float = float("nan")  #: ``RingClient.call`` from Python
    round_trip_p99_us: float = float("nan")
    status: int = 0  #: the response status of the last request
    path: str = "dispatch"  #: ``"dispatch"`` (a dispatch kernel) or ``"graph"`` (a graph handler)
    means: tuple[tuple[str, float], ...] = ()  #: (step, mean µs): they add up to the device mean
    device_mean_us: float = float("nan")  #: mean from ``seen`` to ``published``
    graph: GraphPhases | None = None  #: a graph handler's launch and relaunches

    @property
    def outside_us(self) -> float:
        """Round trip p50 minus the device's share: the host, PCIe both ways and the poll."""
        return self.round_trip_p50_us - self.device_us

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "requests": self.requests,
            "steps_us": dict(self.steps),
            "steps_mean_us": dict(self.means),
            "device_us": self.device_us,
            "device_mean_us": self.device_mean_us,
            "outside_us": self.outside_us,
            "round_trip_p50_us": self.round_trip_p50_us,
            "round_trip_p99_us": self.round_trip_p99_us,
            "ns_per_cycle": self.ns_per_cycle,
            "missing": list(self.missing),
            "status": self.status,
            "graph": None if self.graph is None else self.graph.as_dict(),
        }

    def table(self) -> list[str]:
        """The breakdown as aligned text lines."""
        lines = [f"{'step':<30}{'median (us)':>12}{'mean (us)':>12}"]
        previous = "seen"
        means = dict(self.means)
        for name, value in self.steps:
            mean = means.get(name, float("nan"))
            lines.append(f"{previous + ' -> ' + name:<30}{value:>12.3f}{mean:>12.3f}")
            previous = name
        device = f"{self.device_us:>12.3f}{self.device_mean_us:>12.3f}"
        lines.append(f"{'device (seen -> published)':<30}{device}")
        lines.append(f"{'round trip p50 (Python)':<30}{self.round_trip_p50_us:>12.3f}")
        lines.append(f"{'outside the device':<30}{self.outside_us:>12.3f}")
        if self.graph is not None:
            lines += self.graph.lines()
        if self.missing:
            lines.append(f"not stamped (folded into the next step): {', '.join(self.missing)}")
        return lines


def breakdown(records: np.ndarray) -> PhaseBreakdown:
    """The median and mean of each step of ``records`` (``(n, 16)`` u64 rows of
    ``cudaq_phase_log``): a dispatch kernel's, or a graph handler's (records whose launch
    was stamped by the graph dispatch kernel).

    Clock deltas are scaled by the ``%globaltimer`` nanoseconds over the same requests:
    for a dispatch kernel from ``seen`` to ``published``, for a graph handler from
    ``seen`` to ``launch``. Raises ``ValueError`` without records, for records that lack
    the stamps of the measurement build, that mix both kinds, or (a graph handler's) whose
    stamps are out of order.
    """
    import numpy as np

    r = np.asarray(records, dtype=np.uint64).astype(np.int64)
    if r.ndim != 2 or r.shape[1] != WORDS or r.shape[0] == 0:
        msg = f"expected phase records of shape (n, {WORDS}) with n > 0, got {tuple(r.shape)}"
        raise ValueError(msg)
    graph = r[:, _LAUNCH_NS] > 0
    if graph.any() and not graph.all():
        msg = (
            f"{int(graph.sum())} of {r.shape[0]} phase records are a graph handler's: give "
            "the records of one handler"
        )
        raise ValueError(msg)
    return _graph_breakdown(r) if graph.all() else _dispatch_breakdown(r)


def _us(values: np.ndarray, scale: float = 1.0) -> tuple[float, float]:
    """Median and mean of ``values`` times ``scale`` (ns), in µs."""
    import numpy as np

    return float(np.median(values)) * scale / 1000.0, float(np.mean(values)) * scale / 1000.0


def _dispatch_breakdown(r: np.ndarray) -> PhaseBreakdown:
    cycles = r[:, _PUBLISHED] - r[:, _SEEN]
    if not (r[:, _SEEN] > 0).all() or not (cycles > 0).all():
        msg = "phase records without the bridge's stamps: not a -DCUDAQ_REALTIME_PHASES build"
        raise ValueError(msg)
    ns = r[:, _PUBLISHED_NS] - r[:, _SEEN_NS]
    ns_per_cycle = float(ns.sum()) / float(cycles.sum())
    steps: list[tuple[str, float]] = []
    means: list[tuple[str, float]] = []
    missing: list[str] = []
    previous = r[:, _SEEN]
    for i, name in enumerate(STEPS, start=1):
        if i < _PUBLISHED and not (r[:, i] > 0).all():  # never (or not always) stamped: fold it
            missing.append(name)
            continue
        median, mean = _us(r[:, i] - previous, ns_per_cycle)
        steps.append((name, median))
        means.append((name, mean))
        previous = r[:, i]
    device, device_mean = _us(cycles, ns_per_cycle)
    return PhaseBreakdown(
        requests=int(r.shape[0]),
        steps=tuple(steps),
        device_us=device,
        ns_per_cycle=ns_per_cycle,
        missing=tuple(missing),
        means=tuple(means),
        device_mean_us=device_mean,
    )


def _check_graph_records(r: np.ndarray) -> None:
    """The stamps a graph handler's records must have, in order (``ValueError``)."""
    import numpy as np

    own = [_SEEN, _STAGED, _LOOKED_UP, _FILLED, _LAUNCH, _LAUNCHED, _SEEN_NS, _LAUNCH_NS]
    if not (r[:, own] > 0).all():
        msg = (
            "graph phase records without the graph dispatch kernel's stamps: not a "
            "-DCUDAQ_REALTIME_PHASES build of it"
        )
        raise ValueError(msg)
    if not (r[:, [_DONE_NS, _PUBLISHED_NS]] > 0).all():
        msg = (
            "graph phase records without the graph's publish stamps: compile the graph's "
            "kernels (the source that calls cudaq_graph_publish) with -DCUDAQ_REALTIME_PHASES"
        )
        raise ValueError(msg)
    clock = r[:, [_SEEN, _STAGED, _LOOKED_UP, _FILLED, _LAUNCH, _LAUNCHED]]
    timer = r[:, [_SEEN_NS, _LAUNCH_NS, _DONE_NS, _PUBLISHED_NS]]
    started = r[:, _STARTED_NS]
    backwards = (np.diff(clock, axis=1) < 0).any(axis=1) | (np.diff(timer, axis=1) < 0).any(axis=1)
    backwards |= (started > 0) & ((started < r[:, _LAUNCH_NS]) | (started > r[:, _DONE_NS]))
    if backwards.any():
        msg = (
            f"{int(backwards.sum())} graph phase records whose stamps go backwards: not "
            "one request's stamps (two runs writing one log?)"
        )
        raise ValueError(msg)


def _graph_breakdown(r: np.ndarray) -> PhaseBreakdown:

    _check_graph_records(r)
    cycles = r[:, _LAUNCH] - r[:, _SEEN]
    if int(cycles.sum()) <= 0:
        msg = "graph phase records whose launch is stamped when the request was seen"
        raise ValueError(msg)
    ns_per_cycle = float((r[:, _LAUNCH_NS] - r[:, _SEEN_NS]).sum()) / float(cycles.sum())
    chain: list[tuple[str, int, int, float]] = [  # (step, from word, to word, ns per unit)
        ("staged", _SEEN, _STAGED, ns_per_cycle),
        ("looked_up", _STAGED, _LOOKED_UP, ns_per_cycle),
        ("filled", _LOOKED_UP, _FILLED, ns_per_cycle),
        ("launch", _FILLED, _LAUNCH, ns_per_cycle),
    ]
    missing: tuple[str, ...] = ()
    if (r[:, _STARTED_NS] > 0).all():
        chain += [("started", _LAUNCH_NS, _STARTED_NS, 1.0), ("done", _STARTED_NS, _DONE_NS, 1.0)]
    else:  # no kernel of the graph read its context from thread 0 of block 0: fold it
        missing = ("started",)
        chain.append(("done", _LAUNCH_NS, _DONE_NS, 1.0))
    chain.append(("published", _DONE_NS, _PUBLISHED_NS, 1.0))
    steps: list[tuple[str, float]] = []
    means: list[tuple[str, float]] = []
    for name, first, last, scale in chain:
        median, mean = _us(r[:, last] - r[:, first], scale)
        steps.append((name, median))
        means.append((name, mean))
    device, device_mean = _us(r[:, _PUBLISHED_NS] - r[:, _SEEN_NS])
    return PhaseBreakdown(
        requests=int(r.shape[0]),
        steps=tuple(steps),
        device_us=device,
        ns_per_cycle=ns_per_cycle,
        missing=missing,
        path="graph",
        means=tuple(means),
        device_mean_us=device_mean,
        graph=_graph_phases(r, ns_per_cycle),
    )


def _graph_phases(r: np.ndarray, ns_per_cycle: float) -> GraphPhases:
    """The launch call, its retries, the relaunches and the timer's step of graph records."""
    import numpy as np

    call = r[:, _LAUNCHED] - r[:, _LAUNCH]
    retries = r[:, _RETRIES]
    handed = r[:, _HANDED_OVER_NS] > 0
    relaunch = float("nan")
    if handed.any():
        launched_ns = r[handed, _LAUNCH_NS] + call[handed] * ns_per_cycle
        relaunch = float(np.median(r[handed, _HANDED_OVER_NS] - launched_ns)) / 1000.0
    stamps = np.sort(r[:, [_SEEN_NS, _LAUNCH_NS, _STARTED_NS, _DONE_NS, _PUBLISHED_NS]], axis=1)
    steps = np.diff(stamps, axis=1)
    seen = steps[(steps > 0) & (stamps[:, :-1] > 0)]
    return GraphPhases(
        launch_call_us=_us(call, ns_per_cycle)[0],
        retries_mean=float(retries.mean()),
        retried=int((retries > 0).sum()),
        retries_max=int(retries.max()),
        relaunches=int(handed.sum()),
        relaunch_us=relaunch,
        timer_step_ns=float(seen.min()) if seen.size else float("nan"),
    )


class _PhaseLog:
    """``cudaq_phase_log`` and ``cudaq_phase_next`` of a loaded module."""

    def __init__(self, handle: Any) -> None:
        from skbuild_cudaq.realtime import _driver
        from skbuild_cudaq.realtime.errors import CUDAError, RealtimeError

        drv = _driver.driver()
        try:
            self.log, size = _driver.check(
                drv.cuLibraryGetGlobal(handle, b"cudaq_phase_log"), "cuLibraryGetGlobal"
            )
            self.next, _ = _driver.check(
                drv.cuLibraryGetGlobal(handle, b"cudaq_phase_next"), "cuLibraryGetGlobal"
            )
        except CUDAError as exc:
            if not _driver.is_not_found(exc):
                raise
            msg = (
                "the module has no cudaq_phase_log: its device code was not compiled with "
                "-DCUDAQ_REALTIME_PHASES (skbuild-cudaq phases compiles it so)"
            )
            raise RealtimeError(msg) from None
        if int(size) != RECORDS * _RECORD_BYTES:
            msg = f"cudaq_phase_log holds {int(size)} bytes, expected {RECORDS * _RECORD_BYTES}"
            raise RealtimeError(msg)

    def reset(self) -> None:
        """No request seen, every record zero (a graph's ``started`` stamp is taken by the
        first kernel that finds it zero)."""
        from skbuild_cudaq.realtime import _driver

        drv = _driver.driver()
        _driver.check(drv.cuMemsetD8(self.log, 0, RECORDS * _RECORD_BYTES), "cuMemsetD8")
        _driver.check(drv.cuMemsetD32(self.next, 0, 1), "cuMemsetD32")

    def read(self) -> np.ndarray:
        import numpy as np

        from skbuild_cudaq.realtime import _driver

        drv = _driver.driver()
        count = ctypes.c_uint32(0)
        _driver.check(drv.cuMemcpyDtoH(ctypes.addressof(count), self.next, 4), "cuMemcpyDtoH")
        n = min(int(count.value), RECORDS)
        out = np.zeros((n, WORDS), dtype=np.uint64)
        if n:
            _driver.check(
                drv.cuMemcpyDtoH(out.ctypes.data, self.log, n * _RECORD_BYTES), "cuMemcpyDtoH"
            )
        return out


def measure_phases(
    cubin: bytes,
    handler: str,
    *,
    kernel: str = BUILTIN_KERNEL,
    launch: LaunchConfig | None = None,
    graph: GraphFactory | None = None,
    payload: bytes = bytes(range(32)),
    requests: int = 10_000,
    warmup: int = 1_000,
    num_slots: int = 64,
    slot_size: int = 256,
    device: int = 0,
) -> PhaseBreakdown:
    """Serve ``requests`` calls of ``handler`` through the measurement build ``cubin``.

    ``kernel`` (by default the built-in one) is launched with ``launch`` (by default one
    block of 128 threads for the built-in kernel, one thread for any other). With
    ``graph``, ``handler`` is a graph handler (GRAPH_LAUNCH) that ``graph(handler, library,
    device)`` builds from the kernels of ``cubin``'s library; the graph dispatch kernel of
    ``cubin`` (linked with the device runtime) serves it, in one block of ``launch``'s
    threads (default 128). The first ``warmup`` requests are served and left out. Round
    trips are ``RingClient.call`` from this thread (the Python client's own cost included).
    """
    import numpy as np

    from skbuild_cudaq.realtime import _driver
    from skbuild_cudaq.realtime.errors import RealtimeError
    from skbuild_cudaq.realtime.library import Library

    total = warmup + requests
    if total > RECORDS:
        msg = f"warmup + requests = {total}: the phase log holds {RECORDS} requests"
        raise RealtimeError(msg)
    serve = _serve_graph if graph is not None else _serve_device
    library = Library.from_cubin(cubin)
    try:
        handle = library.load(device)
        ctx = _driver.primary_context(device)  # what the log's globals and copies run in
        with _driver.pushed(ctx):
            log = _PhaseLog(handle)
            log.reset()
        shape = _Serve(library, handler, kernel, launch, graph, num_slots, slot_size, device)
        times, status = serve(shape, payload, total)
        with _driver.pushed(ctx):
            records = log.read()
    finally:
        library.close()
    if records.shape[0] < total:
        msg = (
            f"{records.shape[0]} of {total} requests stamped: the kernel served them without "
            "the host-ring hooks' poll (a transport of its own?)"
        )
        raise RealtimeError(msg)
    measured = times[warmup:]
    try:
        stamped = breakdown(records[warmup:total])
    except ValueError as exc:  # records that are not a measurement build's, or not in order
        raise RealtimeError(str(exc)) from None
    result = dataclasses.replace(
        stamped,
        round_trip_p50_us=float(np.percentile(measured, 50)),
        round_trip_p99_us=float(np.percentile(measured, 99)),
        status=status,
    )
    if result.graph is None:
        return result
    relaunched = after_relaunch_p50(records[:total], measured)
    return dataclasses.replace(
        result,
        graph=dataclasses.replace(result.graph, after_relaunch_round_trip_p50_us=relaunched),
    )


def after_relaunch_p50(records: np.ndarray, measured: np.ndarray) -> float:
    """The median of the round trips ``measured`` (the last of ``records``' requests, in
    order) of the requests served right after a relaunch of the dispatch graph: those whose
    record follows one that handed the baton over. NaN when there is none."""
    import numpy as np

    after = np.zeros(records.shape[0], dtype=bool)
    after[1:] = records[:-1, _HANDED_OVER_NS] > 0
    after = after[records.shape[0] - len(measured) :]
    return float(np.percentile(measured[after], 50)) if after.any() else float("nan")


@dataclass(frozen=True)
class _Serve:
    """What one measurement serves, and how."""

    library: Library
    handler: str
    kernel: str
    launch: LaunchConfig | None
    graph: GraphFactory | None
    num_slots: int
    slot_size: int
    device: int


def _serve_device(run: _Serve, payload: bytes, total: int) -> tuple[Any, int]:
    """A DEVICE_CALL handler through ``run.kernel`` (a launcher of ``run.library``'s)."""
    from skbuild_cudaq.realtime.dispatcher import Dispatcher, DispatcherConfig
    from skbuild_cudaq.realtime.launch import LaunchConfig, launch_kernel

    shape = run.launch
    if shape is None:
        block = 128 if run.kernel == BUILTIN_KERNEL else 1
        shape = LaunchConfig(grid=(1, 1, 1), block=(block, 1, 1))
    found = run.library.get_kernel(run.kernel)

    def launcher(args: Any) -> None:
        launch_kernel(found, shape, args.stream, *args.kernel_args())

    launcher.kernel = found  # type: ignore[attr-defined]  # the dispatcher finds its library
    config = DispatcherConfig(device=run.device, num_slots=run.num_slots, slot_size=run.slot_size)
    with Dispatcher(config) as dispatcher:
        handler = run.library.get_handler(run.handler, run.device)
        dispatcher.function_table.add_device(run.handler, handler)
        dispatcher.set_unified_launch(launcher)
        dispatcher.start()
        client = dispatcher.bridge.client()
        try:
            return _round_trips(client, run.handler, payload, total)
        finally:
            client.close()


def _serve_graph(run: _Serve, payload: bytes, total: int) -> tuple[Any, int]:
    """A GRAPH_LAUNCH handler, built by ``run.graph``, through the graph dispatch kernel of
    ``run.library``."""
    from skbuild_cudaq.realtime import _driver
    from skbuild_cudaq.realtime.dispatcher import DispatcherConfig
    from skbuild_cudaq.realtime.errors import RealtimeError
    from skbuild_cudaq.realtime.graph import STATUS_GRAPH_LAUNCH_FAILED

    assert run.graph is not None
    check_graph_arch(_driver.ordinal_arch(run.device), run.device)
    block = 128
    if run.launch is not None:
        shape = run.launch
        block = shape.block_dim[0]
        if (shape.grid_dim, shape.block_dim[1:], shape.cluster, shape.cooperative) != (
            (1, 1, 1),
            (1, 1),
            None,
            False,
        ) or shape.shared_mem:
            msg = (
                "the graph dispatch kernel runs one block of X threads: measure a graph "
                "handler with launch=LaunchConfig(grid=1, block=X) or None"
            )
            raise RealtimeError(msg)
    config = DispatcherConfig(
        device=run.device, num_slots=run.num_slots, slot_size=run.slot_size, block_size=block
    )
    built = run.graph(run.handler, run.library, run.device)
    try:
        with _measured_graph_dispatcher(config, run.library) as dispatcher:
            dispatcher.function_table.add_graph(run.handler, built.graph, built.mailbox)
            dispatcher.start()
            client = dispatcher.bridge.client()
            try:
                return _round_trips(
                    client, run.handler, payload, total, refused=STATUS_GRAPH_LAUNCH_FAILED
                )
            finally:
                client.close()
    finally:
        built.close()


def check_graph_arch(arch: str, device: int) -> None:
    """Refuse (:class:`RealtimeError`) a GPU that cannot launch graphs from the device."""
    from skbuild_cudaq.realtime.errors import RealtimeError
    from skbuild_cudaq.realtime.graph import GRAPH_MIN_ARCH

    number = int(arch[3:].rstrip("af")) if arch.startswith("sm_") else 0
    if number < GRAPH_MIN_ARCH:
        msg = (
            f"a graph handler is served by device graph launch, which needs sm_{GRAPH_MIN_ARCH} "
            f"or newer: device {device} is {arch}"
        )
        raise RealtimeError(msg)


def _measured_graph_dispatcher(config: Any, library: Library) -> Any:
    """A :class:`Dispatcher` whose graph entries the graph dispatch kernel of ``library``
    serves (the measurement build, linked here), not that of a module's own link."""
    from skbuild_cudaq.realtime.bridge import HostRingBridge
    from skbuild_cudaq.realtime.dispatcher import Dispatcher
    from skbuild_cudaq.realtime.dispatcher.plan import StartPlan

    class _Measured(Dispatcher[HostRingBridge]):
        def _graph_library(self, plan: StartPlan) -> Any:
            return library if plan.graphs else None

    return _Measured(config)


def _round_trips(
    client: Any, handler: str, payload: bytes, count: int, *, refused: int | None = None
) -> tuple[Any, int]:
    """``count`` timed calls (µs) and the last status; an error status (or ``refused``: a
    graph that could not be launched) stops the run."""
    import numpy as np

    from skbuild_cudaq.realtime.errors import RealtimeError

    out = np.empty(count)
    ns = time.perf_counter_ns
    call = client.call
    status = 0
    for i in range(count):
        t0 = ns()
        status, _ = call(handler, payload)
        out[i] = ns() - t0
        if status < 0 or status == refused:
            msg = f"request {i} for {handler!r} was answered with status {status}"
            raise RealtimeError(msg)
    return out * 1e-3, int(status)
