"""What a device dispatcher holds on its GPU: the context, its streams and three allocations.

The context is the device's primary context through the run time's one helper
(:func:`skbuild_cudaq.realtime._driver.primary_context`, retained once per
process, as the lookups and the launch helper use it). The kernel's stream, the
counter reader and, for graph handlers, the standby kernel's stream are non-blocking
(the legacy default stream would serialise with a persistent kernel). Allocations: the
packed function table and the processed counter (device memory), the shutdown flag and the
counter read-back (16 bytes of mapped pinned host memory: ``[0:4]`` flag, ``[8:16]`` read-back).
"""

from __future__ import annotations

import contextlib
import ctypes
import time
from types import ModuleType
from typing import Any

from skbuild_cudaq.realtime import _driver
from skbuild_cudaq.realtime._timeouts import deadline

__all__ = ["NOT_READY", "DeviceResources"]

NOT_READY = 600  # CUDA_ERROR_NOT_READY (cuStreamQuery while work is pending)


class DeviceResources:
    """The context, streams and memory of one dispatcher on GPU ``device``."""

    def __init__(self, device: int) -> None:
        self.device = device
        self.drv: ModuleType | None = None
        self.cu_device: Any = None
        self.context: Any = None
        self.stream: Any = None  # the kernel's stream (non-blocking)
        self.reader: Any = None  # reads the counter while the kernel runs (non-blocking)
        self.standby: Any = None  # the graph dispatch kernel's second stream (graph handlers)
        self.table_ptr = 0
        self.stats_ptr = 0
        self.pinned_ptr = 0  # [0:4] shutdown flag (mapped), [8:16] counter read-back
        self.pinned_dev = 0

    def ensure_context(self) -> ModuleType:
        """Make the device's primary context current; create the streams once."""
        drv = self.drv
        if drv is None:
            _driver.init()  # no bindings or no driver: RealtimeError, not the loader's error
            drv = _driver.driver()
            self.cu_device = _driver.check(drv.cuDeviceGet(self.device), "cuDeviceGet")
            self.context = _driver.primary_context(self.device)
            self.drv = drv
        _driver.check(drv.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
        if self.stream is None:
            flags = int(drv.CUstream_flags.CU_STREAM_NON_BLOCKING)
            self.stream = _driver.check(drv.cuStreamCreate(flags), "cuStreamCreate")
            self.reader = _driver.check(drv.cuStreamCreate(flags), "cuStreamCreate")
        return drv

    def in_context(self) -> contextlib.AbstractContextManager[Any]:
        """The context made current for a block (the caller's is restored)."""
        if self.context is None:
            return contextlib.nullcontext()
        return _driver.pushed(self.context)

    def allocate(self, drv: ModuleType, table: bytes) -> None:
        """The function table (copied), the zeroed counter, the cleared shutdown flag."""
        size = max(len(table), 16)
        self.table_ptr = _driver.ptr(
            _driver.check(drv.cuMemAlloc(size), "cuMemAlloc(function table)")
        )
        if table:
            _driver.check(
                drv.cuMemcpyHtoD(self.table_ptr, table, len(table)), "cuMemcpyHtoD(table)"
            )
        self.stats_ptr = _driver.ptr(_driver.check(drv.cuMemAlloc(8), "cuMemAlloc(stats)"))
        _driver.check(drv.cuMemsetD8(self.stats_ptr, 0, 8), "cuMemsetD8(stats)")
        flags = drv.CU_MEMHOSTALLOC_DEVICEMAP | drv.CU_MEMHOSTALLOC_PORTABLE
        self.pinned_ptr = _driver.ptr(
            _driver.check(drv.cuMemHostAlloc(16, flags), "cuMemHostAlloc(flag)")
        )
        ctypes.memset(self.pinned_ptr, 0, 16)
        self.pinned_dev = _driver.ptr(
            _driver.check(
                drv.cuMemHostGetDevicePointer(self.pinned_ptr, 0), "cuMemHostGetDevicePointer"
            )
        )

    def signal_shutdown(self) -> None:
        if self.pinned_ptr:
            ctypes.c_int32.from_address(self.pinned_ptr).value = 1

    def standby_stream(self) -> Any:
        """The second stream of a graph dispatch (made once; non-blocking): its standby
        kernel runs there (:mod:`.plan`), and :meth:`wait_stream` waits for it too."""
        if self.standby is None:
            assert self.drv is not None
            flags = int(self.drv.CUstream_flags.CU_STREAM_NON_BLOCKING)
            self.standby = _driver.check(self.drv.cuStreamCreate(flags), "cuStreamCreate")
        return self.standby

    def stream_state(self, stream: Any = None) -> tuple[int, Any]:
        """``(code, result)`` of ``cuStreamQuery`` on ``stream`` (the kernel's by default;
        0: idle)."""
        assert self.drv is not None
        result = self.drv.cuStreamQuery(self.stream if stream is None else stream)
        return int(result[0] if isinstance(result, tuple) else result), result

    def wait_stream(self, timeout: float | None) -> bool:
        """Wait for the kernel's stream and the standby one (None: no limit), polling them
        rather than blocking in the driver. True once both are idle."""
        if self.drv is None or self.stream is None:
            return True
        end = deadline(timeout, time.monotonic())
        delay = 1e-5
        pending = [s for s in (self.stream, self.standby) if s is not None]
        while True:
            for stream in list(pending):
                code, result = self.stream_state(stream)
                if code == 0:
                    pending.remove(stream)
                elif code != NOT_READY:
                    _driver.check(result, "dispatch kernel")  # a fault of the kernel: raise it
            if not pending:
                return True
            if time.monotonic() >= end:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 1e-3)

    def read_counter(self, last: int) -> int:
        """The processed counter (``last`` when nothing is allocated)."""
        drv = self.drv
        if drv is None or not self.stats_ptr:
            return last
        dst = self.pinned_ptr + 8
        _driver.check(
            drv.cuMemcpyDtoHAsync(dst, self.stats_ptr, 8, self.reader), "cuMemcpyDtoHAsync(stats)"
        )
        _driver.check(drv.cuStreamSynchronize(self.reader), "cuStreamSynchronize(reader)")
        return int(ctypes.c_uint64.from_address(dst).value)

    def free(self) -> None:
        """Free the three allocations (only once no kernel can use them)."""
        drv = self.drv
        table, stats, pinned = self.table_ptr, self.stats_ptr, self.pinned_ptr
        self.table_ptr = self.stats_ptr = self.pinned_ptr = self.pinned_dev = 0
        if drv is None:
            return
        _driver.release_each(
            (
                (table, drv.cuMemFree, "cuMemFree(function table)"),
                (stats, drv.cuMemFree, "cuMemFree(stats)"),
                (pinned, drv.cuMemFreeHost, "cuMemFreeHost(flag)"),
            )
        )

    def destroy_streams(self) -> None:
        """Destroy the streams (the context is current); the primary context stays retained."""
        drv = self.drv
        if drv is not None:
            for stream in (self.stream, self.reader, self.standby):
                if stream is not None:
                    _driver.check(drv.cuStreamDestroy(stream), "cuStreamDestroy")
            self.stream = self.reader = self.standby = None

    def forget_context(self) -> None:
        self.drv = None
        self.context = None
