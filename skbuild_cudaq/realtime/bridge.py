"""The host-ring bridge: request/response slots in pinned host memory mapped to the GPU.

One ``cuMemHostAlloc(DEVICEMAP | PORTABLE)`` allocation holds the whole ring in
the layout of :class:`skbuild_cudaq.realtime.RingLayout` (``rx_slots`` at 0,
``tx_slots``, ``rx_flags`` ``u32[num_slots]``, ``tx_flags`` ``u32[num_slots]``).
The host sees it as a writable buffer (:attr:`HostRingBridge.buffer`, what
:class:`~skbuild_cudaq.realtime.RingClient` drives); the GPU sees it through
``cuMemHostGetDevicePointer``. The transport context ``cudaq_host_ring_ctx_t``
(``cudaq/realtime/host_ring.cuh``, packed by :func:`host_ring_ctx_bytes`) lives in
device memory; its device address is :attr:`HostRingBridge.transport_ctx`.

Lifetimes are explicit: nothing is allocated until :meth:`HostRingBridge.open` (called by the
dispatcher, or by the first property that needs memory); :meth:`HostRingBridge.close` frees
everything and is idempotent; the bridge is a context manager. A bridge must
outlive the kernel that serves it: the dispatcher stops its kernel before it
lets the bridge go.
"""

from __future__ import annotations

import contextlib
import ctypes
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from skbuild_cudaq.realtime import _driver
from skbuild_cudaq.realtime._closing import Closing
from skbuild_cudaq.realtime.ring.device_ctx import (
    HOST_RING_CTX_SIZE,
    HOST_RING_MAX_LANES,
    host_ring_ctx_bytes,
)
from skbuild_cudaq.realtime.ring.layout import RingLayout

if TYPE_CHECKING:
    from skbuild_cudaq.realtime.ring.client import RingClient

__all__ = ["Bridge", "HostRingBridge"]


class Bridge(Protocol):
    """The host half of a bridge: what a :class:`Dispatcher` uses of it.

    :class:`HostRingBridge` is one; a bridge of your own implements the same
    (see :doc:`/guides/bridges`). The dispatcher calls :meth:`open` and
    :meth:`reset` with its device's context current at every ``start()``, hands
    :attr:`transport_ctx` to the dispatch kernel as its first parameter, stops
    its kernel before the bridge may go, and closes a bridge it created itself.
    A static protocol: check a bridge of your own with a type checker.
    """

    @property
    def num_slots(self) -> int:
        """Requests the transport holds at once (checked against the config)."""
        ...

    @property
    def slot_size(self) -> int:
        """Bytes per request and per response (the RPC header and the payload)."""
        ...

    @property
    def device_code(self) -> tuple[Path, ...] | None:
        """The bridge's device hooks as LTO-IR fatbins, or None for the built-in host-ring hooks."""
        ...

    @property
    def transport_ctx(self) -> int:
        """Device address of the transport context (the kernel's first parameter)."""
        ...

    def open(self) -> object:
        """Allocate (idempotent; a CUDA context is current)."""
        ...

    def reset(self) -> None:
        """Bring the transport to its initial state before a kernel starts."""
        ...

    def close(self) -> None:
        """Free everything (idempotent)."""
        ...


class HostRingBridge(Closing):
    """The default bridge: a ring in mapped pinned host memory, served by the GPU.

    ``HostRingBridge(num_slots, slot_size)`` or ``HostRingBridge(layout=RingLayout(...))``
    (the shape is validated by :class:`RingLayout`); the dispatcher calls :meth:`open`
    with its device's context current (or let :class:`Dispatcher` create the bridge
    of its config's layout). :meth:`client` returns the
    :class:`RingClient` that submits requests and collects responses.
    """

    #: The host-ring hooks are part of skbuild-cudaq's own device run time.
    device_code: tuple[Path, ...] | None = None

    def __init__(
        self, num_slots: int = 64, slot_size: int = 256, *, layout: RingLayout | None = None
    ) -> None:
        self.layout = RingLayout(num_slots, slot_size) if layout is None else layout
        self.num_slots = self.layout.num_slots
        self.slot_size = self.layout.slot_size
        self._drv: ModuleType | None = None
        self._context: Any = None  # the context open() allocated in (close() frees there)
        self._host_ptr = 0  # cuMemHostAlloc'd ring (host view)
        self._dev_ptr = 0  # its device view
        self._ctx_ptr = 0  # cudaq_host_ring_ctx_t in device memory
        self._buffer: Any = None
        self._client: RingClient | None = None

    # -- lifetime ---------------------------------------------------------
    @property
    def is_open(self) -> bool:
        return self._host_ptr != 0

    def open(self) -> HostRingBridge:
        """Allocate the ring and the device context (needs a current CUDA context)."""
        if self.is_open:
            return self
        drv = _driver.driver()
        self._drv = drv
        current = _driver.check(drv.cuCtxGetCurrent(), "cuCtxGetCurrent")
        self._context = current if current is not None and int(current) != 0 else None
        total = self.layout.total_bytes
        flags = drv.CU_MEMHOSTALLOC_DEVICEMAP | drv.CU_MEMHOSTALLOC_PORTABLE
        try:
            self._host_ptr = _driver.ptr(
                _driver.check(drv.cuMemHostAlloc(total, flags), "cuMemHostAlloc")
            )
            ctypes.memset(self._host_ptr, 0, total)
            self._dev_ptr = _driver.ptr(
                _driver.check(
                    drv.cuMemHostGetDevicePointer(self._host_ptr, 0), "cuMemHostGetDevicePointer"
                )
            )
            # context + one request staging area per lane (cudaq_host_ring_alloc_bytes)
            alloc = HOST_RING_CTX_SIZE + HOST_RING_MAX_LANES * self.slot_size
            self._ctx_ptr = _driver.ptr(_driver.check(drv.cuMemAlloc(alloc), "cuMemAlloc"))
            ctx = host_ring_ctx_bytes(self.layout, self._dev_ptr, self._ctx_ptr)
            _driver.check(drv.cuMemcpyHtoD(self._ctx_ptr, ctx, len(ctx)), "cuMemcpyHtoD")
        except BaseException:
            self.close()
            raise
        self._buffer = (ctypes.c_uint8 * total).from_address(self._host_ptr)
        return self

    def close(self) -> None:
        """Free the device context and the ring. Idempotent.

        Only call it once no kernel serves the ring (the dispatcher stops first).
        """
        drv = self._drv
        client, self._client = self._client, None
        if client is not None:  # its later use is a ClientError, not a write to freed memory
            client.close()
        self._buffer = None
        if drv is None:
            return
        ctx_ptr, host_ptr = self._ctx_ptr, self._host_ptr
        self._ctx_ptr = self._host_ptr = self._dev_ptr = 0
        # in the context open() allocated in: the caller's may be none or another GPU's
        context = self._context
        where = contextlib.nullcontext() if context is None else _driver.pushed(context)
        with where:
            _driver.release_each(
                (
                    (ctx_ptr, drv.cuMemFree, "cuMemFree(transport context)"),
                    (host_ptr, drv.cuMemFreeHost, "cuMemFreeHost(ring)"),
                )
            )

    def __enter__(self) -> HostRingBridge:
        return self.open()

    def __del__(self) -> None:  # best effort for forgotten bridges
        # getattr: __init__ may have raised before any attribute was set
        if getattr(self, "_host_ptr", 0):
            with contextlib.suppress(Exception):
                self.close()

    # -- views ------------------------------------------------------------
    def _require_open(self) -> None:
        if not self.is_open:
            from skbuild_cudaq.realtime.errors import InvalidArgumentError

            msg = "the host-ring bridge is not open (use it through a Dispatcher or open() it)"
            raise InvalidArgumentError(msg)

    @property
    def transport_ctx(self) -> int:
        """Device address of the ``cudaq_host_ring_ctx_t`` (the kernel's ``transport_ctx``)."""
        self._require_open()
        return self._ctx_ptr

    @property
    def device_ring(self) -> int:
        """Device address of the ring allocation (the mapped view of :attr:`buffer`)."""
        self._require_open()
        return self._dev_ptr

    @property
    def host_address(self) -> int:
        """Host address of the ring allocation (for native load generators)."""
        self._require_open()
        return self._host_ptr

    @property
    def total_bytes(self) -> int:
        return self.layout.total_bytes

    @property
    def buffer(self) -> memoryview:
        """The ring as a writable host buffer (``RingLayout`` byte layout)."""
        self._require_open()
        return memoryview(self._buffer).cast("B")

    def reset(self) -> None:
        """Zero every flag (a fresh ring), rewrite the transport context (a kernel that
        suspended itself left its position there) and rewind the client. Only while no
        kernel runs; a CUDA context is current."""
        self._require_open()
        start = self._host_ptr + self.layout.rx_flags_offset
        ctypes.memset(start, 0, 8 * self.num_slots)  # the ring's request-id source is kept
        drv = self._drv if self._drv is not None else _driver.driver()
        ctx = host_ring_ctx_bytes(self.layout, self._dev_ptr, self._ctx_ptr)
        _driver.check(drv.cuMemcpyHtoD(self._ctx_ptr, ctx, len(ctx)), "cuMemcpyHtoD")
        if self._client is not None and not self._client.closed:
            self._client.reset()

    def client(self) -> RingClient:
        """The host-side client of this ring (one per bridge; rewound by :meth:`reset`;
        a new one once it was closed). Any other :class:`RingClient` over :attr:`buffer`
        continues from the ring's own position and id source (see :mod:`.ring`)."""
        self._require_open()
        if self._client is None or self._client.closed:
            from skbuild_cudaq.realtime.ring.client import RingClient

            self._client = RingClient(self.buffer, self.layout)
        return self._client

    def __repr__(self) -> str:
        state = "open" if self.is_open else "closed"
        return f"HostRingBridge(num_slots={self.num_slots}, slot_size={self.slot_size}, {state})"
