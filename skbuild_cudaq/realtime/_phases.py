"""Where a dispatch kernel's microseconds go: the measurement build read back.

A module whose device code (the dispatch kernel, its handlers and the device run time)
was compiled with ``-DCUDAQ_REALTIME_PHASES`` (``cudaq/realtime/detail/phases.cuh``)
stamps each request's phases with the SM clock into ``cudaq_phase_log``::

    seen -> staged -> looked_up -> handled -> header -> published

(``seen``: the poll's acquire saw the request; ``staged``: the host-ring hooks copied it;
``looked_up``: ``cudaq_validate_request`` found the entry; ``handled``: the handler
returned; ``header``: the response header is written; ``published``: after the publish's
release). :func:`measure_phases` serves requests through such a module with the host-ring
bridge, reads the records back and :func:`breakdown` gives the median of each step.
``skbuild-cudaq phases`` (:mod:`skbuild_cudaq.cli._phases`) compiles the module and calls
it. A step whose stamp the kernel never makes (it does not call that helper) is folded
into the next one and named in ``missing``.

The stamps are device-memory stores on the measured path: they move a kernel's phases by
up to ~0.1 us. Compare stamped phases within one build; compare kernels by the round
trips of the production build.
"""

from __future__ import annotations

import ctypes
import dataclasses
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from skbuild_cudaq.realtime.launch import LaunchConfig

__all__ = ["BUILTIN_KERNEL", "STEPS", "PhaseBreakdown", "breakdown", "measure_phases"]

#: The run time's built-in dispatch kernel, in every linked module.
BUILTIN_KERNEL = "cudaq_realtime_unified_dispatch"

#: Each step ends at the stamp of its name (stamps 1..5 of a record).
STEPS = ("staged", "looked_up", "handled", "header", "published")
#: Records in ``cudaq_phase_log`` (``CUDAQ_REALTIME_PHASE_RECORDS``), 8 u64 each.
RECORDS = 65536
_RECORD_BYTES = 64


@dataclass(frozen=True)
class PhaseBreakdown:
    """The medians of a run's stamped steps (µs) and its round trips seen from the host."""

    requests: int  #: records the medians are taken over
    steps: tuple[tuple[str, float], ...]  #: (step, median µs) of each stamped step, in order
    device_us: float  #: median from ``seen`` to ``published``
    ns_per_cycle: float  #: the SM clock's period, from ``%globaltimer`` over the same requests
    missing: tuple[str, ...] = ()  #: steps folded into the next: their stamp was never made
    round_trip_p50_us: float = float("nan")  #: ``RingClient.call`` from Python
    round_trip_p99_us: float = float("nan")
    status: int = 0  #: the response status of the last request

    @property
    def outside_us(self) -> float:
        """Round trip p50 minus the device's share: the host, PCIe both ways and the poll."""
        return self.round_trip_p50_us - self.device_us

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "steps_us": dict(self.steps),
            "device_us": self.device_us,
            "outside_us": self.outside_us,
            "round_trip_p50_us": self.round_trip_p50_us,
            "round_trip_p99_us": self.round_trip_p99_us,
            "ns_per_cycle": self.ns_per_cycle,
            "missing": list(self.missing),
            "status": self.status,
        }

    def table(self) -> list[str]:
        """The breakdown as aligned text lines."""
        lines = [f"{'step':<28}{'median (us)':>12}"]
        previous = "seen"
        for name, value in self.steps:
            lines.append(f"{previous + ' -> ' + name:<28}{value:>12.3f}")
            previous = name
        lines.append(f"{'device (seen -> published)':<28}{self.device_us:>12.3f}")
        lines.append(f"{'round trip p50 (Python)':<28}{self.round_trip_p50_us:>12.3f}")
        lines.append(f"{'outside the device':<28}{self.outside_us:>12.3f}")
        if self.missing:
            lines.append(f"not stamped (folded into the next step): {', '.join(self.missing)}")
        return lines


def breakdown(records: np.ndarray) -> PhaseBreakdown:
    """The median of each step of ``records`` (``(n, 8)`` u64 rows of ``cudaq_phase_log``).

    Clock deltas are scaled by the ``%globaltimer`` nanoseconds over the same requests
    (``t[7] - t[6]`` against ``t[5] - t[0]``). Raises ``ValueError`` without records or
    when the records lack the hooks' own stamps (not a measurement build's).
    """
    import numpy as np

    r = np.asarray(records, dtype=np.uint64).astype(np.int64)
    if r.ndim != 2 or r.shape[1] != 8 or r.shape[0] == 0:
        msg = f"expected phase records of shape (n, 8) with n > 0, got {tuple(r.shape)}"
        raise ValueError(msg)
    cycles = r[:, 5] - r[:, 0]
    if not (r[:, 0] > 0).all() or not (cycles > 0).all():
        msg = "phase records without the bridge's stamps: not a -DCUDAQ_REALTIME_PHASES build"
        raise ValueError(msg)
    ns = r[:, 7] - r[:, 6]
    ns_per_cycle = float(ns.sum()) / float(cycles.sum())
    steps: list[tuple[str, float]] = []
    missing: list[str] = []
    previous = r[:, 0]
    for i, name in enumerate(STEPS, start=1):
        if i < 5 and not (r[:, i] > 0).all():  # never (or not always) stamped: fold it
            missing.append(name)
            continue
        steps.append((name, float(np.median(r[:, i] - previous)) * ns_per_cycle / 1000.0))
        previous = r[:, i]
    return PhaseBreakdown(
        requests=int(r.shape[0]),
        steps=tuple(steps),
        device_us=float(np.median(cycles)) * ns_per_cycle / 1000.0,
        ns_per_cycle=ns_per_cycle,
        missing=tuple(missing),
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
        from skbuild_cudaq.realtime import _driver

        _driver.check(_driver.driver().cuMemsetD32(self.next, 0, 1), "cuMemsetD32")

    def read(self) -> np.ndarray:
        import numpy as np

        from skbuild_cudaq.realtime import _driver

        drv = _driver.driver()
        count = ctypes.c_uint32(0)
        _driver.check(drv.cuMemcpyDtoH(ctypes.addressof(count), self.next, 4), "cuMemcpyDtoH")
        n = min(int(count.value), RECORDS)
        out = np.zeros((n, 8), dtype=np.uint64)
        if n:
            _driver.check(drv.cuMemcpyDtoH(out.ctypes.data, self.log, n * 64), "cuMemcpyDtoH")
        return out


def measure_phases(
    cubin: bytes,
    handler: str,
    *,
    kernel: str = BUILTIN_KERNEL,
    launch: LaunchConfig | None = None,
    payload: bytes = bytes(range(32)),
    requests: int = 10_000,
    warmup: int = 1_000,
    num_slots: int = 64,
    slot_size: int = 256,
    device: int = 0,
) -> PhaseBreakdown:
    """Serve ``requests`` calls of ``handler`` through the measurement build ``cubin``.

    ``kernel`` (by default the built-in one) is launched with ``launch`` (by default one
    block of 128 threads for the built-in kernel, one thread for any other). The first
    ``warmup`` requests are served and left out. Round trips are ``RingClient.call`` from
    this thread (the Python client's own cost included).
    """
    import numpy as np

    from skbuild_cudaq.realtime import _driver
    from skbuild_cudaq.realtime.dispatcher import Dispatcher, DispatcherConfig
    from skbuild_cudaq.realtime.errors import RealtimeError
    from skbuild_cudaq.realtime.launch import LaunchConfig, launch_kernel
    from skbuild_cudaq.realtime.library import Library

    total = warmup + requests
    if total > RECORDS:
        msg = f"warmup + requests = {total}: the phase log holds {RECORDS} requests"
        raise RealtimeError(msg)
    if launch is None:
        block = 128 if kernel == BUILTIN_KERNEL else 1
        launch = LaunchConfig(grid=(1, 1, 1), block=(block, 1, 1))
    shape = launch
    library = Library.from_cubin(cubin)
    try:
        handle = library.load(device)
        ctx = _driver.primary_context(device)  # what the log's globals and copies run in
        with _driver.pushed(ctx):
            log = _PhaseLog(handle)
            log.reset()
        found = library.get_kernel(kernel)

        def launcher(args: Any) -> None:
            launch_kernel(found, shape, args.stream, *args.kernel_args())

        launcher.kernel = found  # type: ignore[attr-defined]  # the dispatcher finds its library
        config = DispatcherConfig(device=device, num_slots=num_slots, slot_size=slot_size)
        with Dispatcher(config) as dispatcher:
            dispatcher.function_table.add_device(handler, library.get_handler(handler, device))
            dispatcher.set_unified_launch(launcher)
            dispatcher.start()
            client = dispatcher.bridge.client()
            try:
                times, status = _round_trips(client, handler, payload, total)
            finally:
                client.close()
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
    return dataclasses.replace(
        breakdown(records[warmup:total]),
        round_trip_p50_us=float(np.percentile(measured, 50)),
        round_trip_p99_us=float(np.percentile(measured, 99)),
        status=status,
    )


def _round_trips(client: Any, handler: str, payload: bytes, count: int) -> tuple[Any, int]:
    """``count`` timed calls (µs) and the last status; an error status stops the run."""
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
        if status < 0:
            msg = f"request {i} for {handler!r} was answered with status {status}"
            raise RealtimeError(msg)
    return out * 1e-3, int(status)
