"""The host ring: layout, producer (:class:`RingClient`) and consumer (:class:`RingServer`).

Pure Python (numpy only for the vectorised batch path, imported when first used);
nothing here touches CUDA. The GPU bridge (``realtime/bridge.py``) and the host
path (``realtime/host_path.py``) both use this module; the device side is
``skbuild_cudaq/device/host_ring_bridge.cu`` with ``cudaq/realtime/host_ring.cuh``.

API
===

``RingLayout(num_slots, slot_size)`` -- frozen; ``slot_size % 8 == 0`` and
``> 24`` (:data:`~skbuild_cudaq.realtime.wire.HEADER_SIZE`), ``num_slots >= 1``.
One allocation of ``total_bytes``::

    rx_slots_offset = 0                         num_slots * slot_size request bytes
    tx_slots_offset = num_slots * slot_size     num_slots * slot_size response bytes
    rx_flags_offset = 2 * num_slots * slot_size u32[num_slots] request sequence numbers
    tx_flags_offset = rx_flags_offset + 4 * num_slots   u32[num_slots] response sequence numbers
    ids_offset = tx_flags_offset + 4 * num_slots        u64 the ring's request-id source

``max_payload = slot_size - 24``; ``rx_slot_offset(slot)``, ``tx_slot_offset(slot)``,
``position(k) -> (slot, seq)``. The device hooks never touch the id source (their
transport context points at the four areas before it).

Protocol. Request ``k`` (counting from 0 since the ring was fresh) goes to slot
``k % num_slots`` with sequence ``seq = (k // num_slots + 1) mod 2**32`` (exactly
what the device hooks compute: they add one to a ``u32``). The producer writes
the request (24-byte header + arguments) into the slot's rx area, then stores
``rx_flags[slot] = seq``. The consumer waits for that value, reads the request,
writes the response (24-byte header + result) into the slot's tx area, then
stores ``tx_flags[slot] = seq``. The producer reuses a slot only after it has
collected (copied out) that slot's previous response. All-zero flags mean a
fresh ring.

Whose response is it? The producer's state lives in the ring, not in a client
object, so that a response is only ever accepted by the client that sent its
request, whatever the number of clients (one after another, in this process or
another), restarts and resets:

- *Position*: a :class:`RingClient` derives the next request number from the
  request flags (ring order makes them ``seq`` up to some slot and ``seq - 1``
  after it), so a second client continues where the first stopped instead of
  starting again at request 0.
- *Claim*: before it writes request ``seq`` into a slot, a client checks that the
  slot's request flag is ``seq - 1`` (nobody else wrote there since) and its
  response flag is ``seq - 1`` too (the previous request of the slot was
  answered; if it is ``seq - 2`` it waits for that answer, which belongs to
  whoever sent it). A response flag already at ``seq`` is a response it did not
  ask for: :class:`RingProtocolError`. So a matching response flag can only have
  been stored by the consumer *after* this client's request was published.
- *Request ids*: drawn from a 64-bit counter stored in the ring allocation itself
  (``ids_offset``), which :meth:`RingClient.reset` and ``HostRingBridge.reset``
  leave alone; the wire carries its low 32 bits. Two requests of one ring share
  an id only 2**32 requests apart, while a response older than ``num_slots``
  requests can no longer be in its slot: a stale response (left by an earlier
  client, or in the response area after a reset) never echoes the id of a
  request in flight. A counter in the ring rather than a random epoch per
  client: collisions are impossible (not improbable), any producer process
  attached to the ring shares it, and the timestamp stays the caller's. A fresh
  allocation starts at 0 together with zeroed response areas.

An explicit ``request_id=`` (for forging tests, or a bridge keeping a remote
peer's id) bypasses the id source; the position and claim checks still apply.

Memory order. The host side relies on x86-TSO: stores are not reordered with
older stores, loads not with older loads. The producer therefore writes the
payload bytes *before* the flag store, and the reader reads the flag *before*
the payload, each through separate Python-level operations (separate C calls,
which the C compiler cannot reorder either). Flags are aligned 4-byte stores
and loads (single instructions). The device side pairs this with
``ld.acquire.sys`` / ``st.release.sys``. On a weakly ordered host CPU (aarch64)
this module would need explicit fences; it refuses nothing, but is only
validated on x86-64.

``RingClient(buffer, layout)`` -- producer over a writable, C-contiguous buffer
of at least ``layout.total_bytes`` bytes (a ``bytearray``, ``memoryview``, numpy
``uint8`` array, ``mmap``, or pinned mapped memory wrapped through ctypes), as
the *host* sees it. Not thread-safe: one producer thread at a time.

- ``submit(function, payload=b"", *, request_id=None, timestamp=None,
  magic=REQUEST_MAGIC, arg_len=None, timeout=...) -> Ticket``. ``function`` is a
  handler name (hashed with FNV-1a) or a ``u32`` id. ``request_id`` defaults to the
  ring's id source (see above), ``timestamp`` to 0; ``magic``/``arg_len`` may be forged to
  test error answers (the payload bytes must still fit in a slot). If the target
  slot still holds a response the caller has not collected, ``submit`` waits for
  that response (up to ``timeout``) and keeps it for the caller: a later
  ``poll``/``wait`` of that older ticket returns it. So any number of requests
  may be submitted without deadlock as long as the consumer runs.
- ``poll(ticket) -> Response | None`` (never blocks), ``wait(ticket, timeout)
  -> Response``, ``call(function, payload, *, timeout) -> (status, result)``.
- ``submit_many(items) -> list[Ticket]`` (items: ``(function, payload)`` pairs),
  ``collect(tickets, timeout) -> list[Response]``.
- ``call_batch(function, payloads, *, timeout) -> BatchResult``: vectorised with
  numpy, up to ``num_slots`` requests in flight per window; payloads are a
  sequence of bytes or a 2-D ``uint8`` array (one row per request).
- ``reset()``: zero every flag and rewind the position (only while no consumer
  runs, or together with a consumer reset); the ring's id source is kept.
- ``close()``: release the views; any later use raises :class:`RingError`.

Every response is checked: response magic, ``result_len <= max_payload``, and
the request id and timestamp echoed; a mismatch raises :class:`RingProtocolError`.
Timeouts raise :class:`TimeoutError` naming the slot, the sequence number and
the flag value seen. A ``Ticket`` is collected once; polling it again raises
:class:`RingError`.

``RingServer(buffer, layout)`` -- consumer, the Python twin of the device hooks
``cudaq_dev_rx_poll`` / ``cudaq_dev_tx_publish``: ``poll() -> PolledRequest |
None`` takes the next request in ring order (never blocks), ``publish(status,
result=b"")`` answers it (exactly once per polled request).

``HOST_RING_CTX_*`` and :func:`host_ring_ctx_bytes` mirror
``cudaq_host_ring_ctx_t`` (the device-memory transport context of the GPU bridge).
"""

from __future__ import annotations

import contextlib
import struct
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from skbuild_cudaq.errors import CudaqError

from .wire import (
    _REQUEST,
    _RESPONSE,
    HEADER_SIZE,
    REQUEST_MAGIC,
    RESPONSE_MAGIC,
    RequestHeader,
    Response,
    ResponseHeader,
    function_id,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "HOST_RING_CTX_MAGIC",
    "HOST_RING_CTX_SIZE",
    "HOST_RING_LANE_SIZE",
    "HOST_RING_MAX_LANES",
    "BatchResult",
    "PolledRequest",
    "RingClient",
    "RingError",
    "RingLayout",
    "RingProtocolError",
    "RingServer",
    "Ticket",
    "host_ring_ctx_bytes",
]

DEFAULT_TIMEOUT = 10.0
_U32 = 0xFFFFFFFF
_U64 = 0xFFFFFFFFFFFFFFFF

# Mirror of cudaq/realtime/host_ring.cuh (keep in sync).
HOST_RING_CTX_MAGIC = 0x474E4952  # 'RING'
HOST_RING_MAX_LANES = 32
HOST_RING_LANE_SIZE = 40
HOST_RING_CTX_HEADER_SIZE = 48
HOST_RING_CTX_SIZE = HOST_RING_CTX_HEADER_SIZE + HOST_RING_LANE_SIZE * HOST_RING_MAX_LANES
_CTX_HEADER = struct.Struct("<IIIIQQQQ")
assert _CTX_HEADER.size == HOST_RING_CTX_HEADER_SIZE


class RingError(CudaqError):
    """Misuse of a ring (bad buffer, ticket collected twice, publish without poll, ...)."""


class RingProtocolError(RingError):
    """The other side of a ring broke the protocol (bad response magic, id not echoed, ...)."""


@dataclass(frozen=True)
class RingLayout:
    """Geometry of one ring allocation (see the module docstring)."""

    num_slots: int
    slot_size: int

    def __post_init__(self) -> None:
        from .errors import InvalidArgumentError  # a ValueError too

        if not isinstance(self.num_slots, int) or self.num_slots < 1:
            msg = f"num_slots must be an integer >= 1, got {self.num_slots!r}"
            raise InvalidArgumentError(msg)
        if (
            not isinstance(self.slot_size, int)
            or self.slot_size <= HEADER_SIZE
            or self.slot_size % 8 != 0
        ):
            msg = (
                f"slot_size must be a multiple of 8 greater than the {HEADER_SIZE}-byte header, "
                f"got {self.slot_size!r}"
            )
            raise InvalidArgumentError(msg)
        if self.slot_size > _U32 or self.num_slots > _U32:
            msg = f"num_slots and slot_size must fit in 32 bits, got {self}"
            raise InvalidArgumentError(msg)

    @property
    def rx_slots_offset(self) -> int:
        return 0

    @property
    def tx_slots_offset(self) -> int:
        return self.num_slots * self.slot_size

    @property
    def rx_flags_offset(self) -> int:
        return 2 * self.num_slots * self.slot_size

    @property
    def tx_flags_offset(self) -> int:
        return self.rx_flags_offset + 4 * self.num_slots

    @property
    def ids_offset(self) -> int:
        """Offset of the ring's u64 request-id source (8-aligned, as slot sizes are)."""
        return self.tx_flags_offset + 4 * self.num_slots

    @property
    def total_bytes(self) -> int:
        return self.ids_offset + 8

    @property
    def max_payload(self) -> int:
        return self.slot_size - HEADER_SIZE

    def rx_slot_offset(self, slot: int) -> int:
        return slot * self.slot_size

    def tx_slot_offset(self, slot: int) -> int:
        return (self.num_slots + slot) * self.slot_size

    def position(self, k: int) -> tuple[int, int]:
        """``(slot, seq)`` of request number ``k``."""
        return k % self.num_slots, (k // self.num_slots + 1) & _U32


def host_ring_ctx_bytes(layout: RingLayout, ring_device_address: int, ctx_address: int) -> bytes:
    """The ``cudaq_host_ring_ctx_t`` bytes for a ring whose allocation the device sees
    at ``ring_device_address``, to be copied to device memory at ``ctx_address``.

    Each lane's back pointer (``ring``) is ``ctx_address``: the hooks read it
    through the read-only path and refuse a lane whose pointer is not its
    context's. The rest of each lane is zero (the kernel fills it on entry).
    """
    base = int(ring_device_address)
    header = _CTX_HEADER.pack(
        HOST_RING_CTX_MAGIC,
        layout.num_slots,
        layout.slot_size,
        0,
        base + layout.rx_slots_offset,
        base + layout.tx_slots_offset,
        base + layout.rx_flags_offset,
        base + layout.tx_flags_offset,
    )
    lane = struct.pack("<Q", int(ctx_address)) + bytes(HOST_RING_LANE_SIZE - 8)
    return header + lane * HOST_RING_MAX_LANES


class _Backoff:
    """Spin, then yield, then sleep with growing delays (bounded by ``max_sleep``).

    Spinning gives the lowest latency against a GPU consumer; sleeping releases
    the GIL so that a consumer thread of the same process (the host path) runs.
    """

    __slots__ = ("_n", "_spin", "max_sleep")

    def __init__(self, spin: int, max_sleep: float = 1e-3) -> None:
        self._n = 0
        self._spin = spin
        self.max_sleep = max_sleep

    def reset(self) -> None:
        self._n = 0

    def pause(self) -> None:
        n = self._n = self._n + 1
        if n <= self._spin:
            return
        k = n - self._spin
        if k <= 4:
            time.sleep(0)
            return
        time.sleep(min(self.max_sleep, 5e-6 * (1 << min((k - 4) // 4, 10))))


def _as_bytes_view(buffer: Any, layout: RingLayout) -> memoryview:
    try:
        mv = memoryview(buffer)
    except TypeError as exc:
        msg = f"ring buffer must support the buffer protocol, got {type(buffer).__name__}"
        raise RingError(msg) from exc
    if mv.readonly:
        msg = "ring buffer is read-only"
        raise RingError(msg)
    if not mv.c_contiguous:
        msg = "ring buffer must be C-contiguous"
        raise RingError(msg)
    mv = mv.cast("B")
    if mv.nbytes < layout.total_bytes:
        msg = f"ring buffer has {mv.nbytes} bytes, {layout} needs {layout.total_bytes}"
        raise RingError(msg)
    return mv[: layout.total_bytes]


class _RingMemory:
    """Views over one ring allocation shared by producer and consumer."""

    def __init__(self, buffer: Any, layout: object) -> None:
        if not isinstance(layout, RingLayout):
            msg = f"layout must be a RingLayout, got {type(layout).__name__}"
            raise TypeError(msg)
        self.layout = layout
        self.buffer = buffer  # keeps the owner alive
        self.mv = _as_bytes_view(buffer, layout)
        n = layout.num_slots
        self.rx_flags = self.mv[layout.rx_flags_offset : layout.rx_flags_offset + 4 * n].cast("I")
        self.tx_flags = self.mv[layout.tx_flags_offset : layout.tx_flags_offset + 4 * n].cast("I")
        self.ids = self.mv[layout.ids_offset : layout.ids_offset + 8].cast("Q")
        self.released = False
        self._np: dict[str, Any] | None = None

    def numpy(self) -> dict[str, Any]:
        """numpy views (created on first use)."""
        if self._np is None:
            import numpy as np

            lay = self.layout
            n, size = lay.num_slots, lay.slot_size
            whole = np.frombuffer(self.mv, dtype=np.uint8)
            rx = whole[: n * size].reshape(n, size)
            tx = whole[n * size : 2 * n * size].reshape(n, size)
            self._np = {
                "rx": rx,
                "tx": tx,
                "rx32": rx.view("<u4"),
                "tx32": tx.view("<u4"),
                "rx64": rx.view("<u8"),
                "rx_flags": whole[lay.rx_flags_offset : lay.tx_flags_offset].view("<u4"),
                "tx_flags": whole[lay.tx_flags_offset : lay.ids_offset].view("<u4"),
            }
        return self._np

    def release(self) -> None:
        self.released = True
        self._np = None
        for view in (self.rx_flags, self.tx_flags, self.ids, self.mv):
            with contextlib.suppress(BufferError):  # a numpy view still alive: GC finishes it
                view.release()


@dataclass(frozen=True)
class Ticket:
    """One submitted request: where it went and what must come back."""

    index: int  #: request number k since the ring was fresh
    slot: int
    seq: int
    request_id: int
    timestamp: int
    function_id: int
    generation: int  #: the client's reset count when it was submitted


@dataclass(frozen=True)
class BatchResult:
    """Responses of :meth:`RingClient.call_batch` as numpy arrays (row i = request i)."""

    statuses: Any  #: int32[m]
    result_lens: Any  #: uint32[m]
    request_ids: Any  #: uint32[m]
    data: Any  #: uint8[m, w], w = max(result_lens); row i valid up to result_lens[i]

    def __len__(self) -> int:
        return len(self.statuses)

    def result(self, i: int) -> bytes:
        return bytes(self.data[i, : int(self.result_lens[i])])

    def __iter__(self) -> Any:
        for i in range(len(self)):
            yield int(self.statuses[i]), self.result(i)

    @property
    def all_ok(self) -> bool:
        return bool((self.statuses == 0).all())


class RingClient:
    """Producer side of a ring (see the module docstring for the protocol)."""

    def __init__(
        self, buffer: Any, layout: RingLayout, *, spin: int = 256, max_sleep: float = 1e-3
    ) -> None:
        self._mem = _RingMemory(buffer, layout)
        self._layout = layout
        self._spin = spin
        self._max_sleep = max_sleep
        self._pending: list[Ticket | None] = [None] * layout.num_slots
        self._completed: dict[int, Response] = {}
        self._next = self._ring_position()
        self._generation = 0
        self.collected = 0  #: responses read out of the ring

    # -- properties --------------------------------------------------------
    @property
    def layout(self) -> RingLayout:
        return self._layout

    @property
    def buffer(self) -> Any:
        return self._mem.buffer

    @property
    def submitted(self) -> int:
        """Requests submitted to the ring since it was fresh or reset (by any producer)."""
        return self._next

    @property
    def closed(self) -> bool:
        return self._mem.released

    def _check_open(self) -> None:
        if self._mem.released:
            msg = "the ring client is closed; make a new one over the ring"
            raise RingError(msg)

    def _ring_position(self) -> int:
        """The next request number, read from the request flags (see "Whose response is it?")."""
        flags = self._mem.rx_flags.tolist()
        n = len(flags)
        first = flags[0]
        j = next((i for i, f in enumerate(flags) if f != first), n)
        if j == n:
            return first * n
        before = (first - 1) & _U32
        odd = next((i for i in range(j, n) if flags[i] != before), None)
        if odd is not None:
            msg = (
                f"the ring's request flags are not in ring order (rx_flags[0] = {first}, "
                f"rx_flags[{odd}] = {flags[odd]}): another producer is writing to it, or the "
                "buffer is not a ring of this layout"
            )
            raise RingError(msg)
        return before * n + j

    def _claim(self, slot: int, seq: int, timeout: float) -> None:
        """Check that ``slot`` may take request ``seq`` (see the module docstring); waits
        (up to ``timeout``) for the answer to another client's request still in the slot."""
        mem = self._mem
        prev = (seq - 1) & _U32
        rx = mem.rx_flags[slot]
        if rx != prev:
            msg = (
                f"slot {slot}: request flag {rx}, expected {prev}: another producer wrote to "
                "the ring since this client did, or the ring was reset under it (one producer "
                "at a time: make a new client)"
            )
            raise RingError(msg)
        tx = mem.tx_flags[slot]
        if tx == prev:
            return
        if tx == (prev - 1) & _U32:  # the previous request of the slot is not answered yet
            backoff = _Backoff(self._spin, self._max_sleep)
            deadline = time.monotonic() + timeout
            while mem.tx_flags[slot] == tx:
                if time.monotonic() >= deadline:
                    msg = (
                        f"slot {slot}: the request an earlier client left there (seq {prev}) was "
                        f"not answered within {timeout:g} s (tx_flags[{slot}] = {tx}); is the "
                        "consumer running?"
                    )
                    raise TimeoutError(msg)
                backoff.pause()
            tx = mem.tx_flags[slot]
            if tx == prev:
                return
        msg = (
            f"slot {slot}: response flag {tx} while its request flag is {prev}: a response "
            "nobody asked for (two producers on one ring, or a consumer out of step); "
            "refusing to use the slot"
        )
        raise RingProtocolError(msg)

    @property
    def in_flight(self) -> int:
        """Requests whose responses have not been read out of the ring yet."""
        return sum(t is not None for t in self._pending)

    # -- submit ------------------------------------------------------------
    def submit(
        self,
        function: str | bytes | int,
        payload: bytes | bytearray | memoryview = b"",
        *,
        request_id: int | None = None,
        timestamp: int | None = None,
        magic: int = REQUEST_MAGIC,
        arg_len: int | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> Ticket:
        """Write one request into the next slot and publish it."""
        self._check_open()
        fid = function_id(function)
        if not isinstance(payload, (bytes, bytearray)):
            payload = bytes(payload)
        size = self._check_payload(payload)
        ts = 0 if timestamp is None else timestamp
        k = self._next
        slot, seq = self._layout.position(k)
        older = self._pending[slot]
        if older is not None:
            self._completed[older.index] = self._wait_slot(older, timeout, reason="submit")
        self._claim(slot, seq, timeout)
        if request_id is None:
            request_id = self._new_request_id()
        header = (magic, fid, size if arg_len is None else arg_len, request_id, ts)
        self._post(k, slot, seq, header, payload)
        ticket = Ticket(k, slot, seq, request_id, ts, fid, self._generation)
        self._pending[slot] = ticket
        return ticket

    def _check_payload(self, payload: bytes | bytearray) -> int:
        size = len(payload)
        if size > self._layout.max_payload:
            msg = (
                f"payload of {size} bytes does not fit a slot "
                f"(max payload {self._layout.max_payload})"
            )
            raise ValueError(msg)
        return size

    def _new_request_id(self) -> int:
        """The next id of the ring's id source (a u64 in the ring; the wire takes 32 bits)."""
        ids = self._mem.ids
        value = ids[0]
        ids[0] = (value + 1) & _U64
        return value & _U32

    def _post(
        self,
        k: int,
        slot: int,
        seq: int,
        header: tuple[int, int, int, int, int],
        payload: bytes | bytearray,
    ) -> None:
        """Write request ``k`` (header fields, payload) into its slot, then publish it."""
        mem = self._mem
        mv = mem.mv
        off = self._layout.rx_slot_offset(slot)
        _REQUEST.pack_into(mv, off, *header)
        if payload:
            mv[off + HEADER_SIZE : off + HEADER_SIZE + len(payload)] = payload
        mem.rx_flags[slot] = seq  # the flag store comes after every payload store (x86-TSO)
        self._next = k + 1

    def submit_many(
        self,
        items: Iterable[tuple[str | bytes | int, bytes | bytearray | memoryview]],
        *,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> list[Ticket]:
        """Submit ``(function, payload)`` pairs back to back (pipelined)."""
        return [self.submit(f, p, timeout=timeout) for f, p in items]

    # -- collect -----------------------------------------------------------
    def _check_ticket(self, ticket: Ticket) -> None:
        if ticket.generation != self._generation:
            msg = f"ticket of request {ticket.request_id} predates a reset() of this ring client"
            raise RingError(msg)

    def _read(self, ticket: Ticket) -> Response:
        """Copy the response of ``ticket`` out of its slot (its tx flag already matched)."""
        lay = self._layout
        mv = self._mem.mv
        off = lay.tx_slot_offset(ticket.slot)
        magic, status, rlen, rid, ts = _RESPONSE.unpack_from(mv, off)
        problem = None
        if magic != RESPONSE_MAGIC:
            problem = f"response magic {magic:#010x} (expected {RESPONSE_MAGIC:#010x})"
        elif rlen > lay.max_payload:
            problem = f"result_len {rlen} exceeds the slot's max payload {lay.max_payload}"
        elif rid != ticket.request_id:
            problem = f"request id {rid} echoed for request {ticket.request_id}"
        elif ts != ticket.timestamp:
            problem = f"timestamp {ts} echoed for {ticket.timestamp}"
        if problem is not None:
            self._pending[ticket.slot] = None
            msg = f"slot {ticket.slot} seq {ticket.seq}: {problem}"
            raise RingProtocolError(msg)
        result = bytes(mv[off + HEADER_SIZE : off + HEADER_SIZE + rlen])
        self._pending[ticket.slot] = None
        self.collected += 1
        return Response(ResponseHeader(magic, status, rlen, rid, ts), result)

    def _ready(self, ticket: Ticket) -> bool:
        return bool(self._mem.tx_flags[ticket.slot] == ticket.seq)

    def _wait_slot(self, ticket: Ticket, timeout: float, *, reason: str) -> Response:
        backoff = _Backoff(self._spin, self._max_sleep)
        deadline = None
        while not self._ready(ticket):
            now = time.monotonic()
            if deadline is None:
                deadline = now + timeout
            elif now >= deadline:
                seen = self._mem.tx_flags[ticket.slot]
                what = (
                    "the slot is needed again by submit() and its response"
                    if reason == "submit"
                    else "the response"
                )
                msg = (
                    f"request {ticket.request_id} (#{ticket.index}) in slot {ticket.slot}, "
                    f"seq {ticket.seq}: {what} did not arrive within {timeout:g} s "
                    f"(tx_flags[{ticket.slot}] = {seen}); is the consumer running?"
                )
                raise TimeoutError(msg)
            backoff.pause()
        return self._read(ticket)

    def poll(self, ticket: Ticket) -> Response | None:
        """The response of ``ticket`` if it has arrived, else ``None`` (never blocks)."""
        self._check_open()
        self._check_ticket(ticket)
        done = self._completed.pop(ticket.index, None)
        if done is not None:
            return done
        if self._pending[ticket.slot] is not ticket:
            msg = f"request {ticket.request_id} (#{ticket.index}) was already collected"
            raise RingError(msg)
        if not self._ready(ticket):
            return None
        return self._read(ticket)

    def wait(self, ticket: Ticket, timeout: float = DEFAULT_TIMEOUT) -> Response:
        """The response of ``ticket``; :class:`TimeoutError` after ``timeout`` seconds."""
        response = self.poll(ticket)
        if response is not None:
            return response
        return self._wait_slot(ticket, timeout, reason="wait")

    def collect(
        self, tickets: Sequence[Ticket], timeout: float = DEFAULT_TIMEOUT
    ) -> list[Response]:
        """Responses of ``tickets`` in the same order; ``timeout`` bounds the whole call."""
        deadline = time.monotonic() + timeout
        return [self.wait(t, max(0.0, deadline - time.monotonic())) for t in tickets]

    def call(
        self,
        function: str | bytes | int,
        payload: bytes | bytearray | memoryview = b"",
        *,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> tuple[int, bytes]:
        """Submit one request and wait for it: ``(status, result)``.

        The round trip's own path: when the next slot is free it writes the
        request, publishes it and spins on the response flag without creating a
        ticket (the same checks as :meth:`wait`); otherwise it goes through
        :meth:`submit` and :meth:`wait`.
        """
        lay = self._layout
        k = self._next
        slot, seq = lay.position(k)
        mem = self._mem
        prev = (seq - 1) & _U32
        if (
            self._pending[slot] is not None
            or not isinstance(payload, (bytes, bytearray))
            or mem.released
            or mem.rx_flags[slot] != prev
            or mem.tx_flags[slot] != prev
        ):  # the general path checks, waits or raises
            response = self.wait(self.submit(function, payload, timeout=timeout), timeout)
            return response.status, response.result
        size = self._check_payload(payload)
        fid = function_id(function)
        rid = self._new_request_id()
        self._post(k, slot, seq, (REQUEST_MAGIC, fid, size, rid, 0), payload)
        mv = self._mem.mv
        tx_flags = self._mem.tx_flags
        spins = self._spin
        while tx_flags[slot] != seq:  # the common case: the answer comes while spinning
            spins -= 1
            if spins <= 0:
                ticket = Ticket(k, slot, seq, rid, 0, fid, self._generation)
                self._pending[slot] = ticket
                response = self._wait_slot(ticket, timeout, reason="wait")
                return response.status, response.result
        off = lay.tx_slot_offset(slot)
        magic, status, rlen, echoed, ts = _RESPONSE.unpack_from(mv, off)
        if magic != RESPONSE_MAGIC or rlen > lay.max_payload or echoed != rid or ts != 0:
            ticket = Ticket(k, slot, seq, rid, 0, fid, self._generation)
            self._pending[slot] = ticket
            response = self._read(ticket)  # raises RingProtocolError with the details
            return response.status, response.result
        self.collected += 1
        return status, bytes(mv[off + HEADER_SIZE : off + HEADER_SIZE + rlen])

    def drain(self, timeout: float = DEFAULT_TIMEOUT) -> None:
        """Read every outstanding response out of the ring (kept for ``poll``/``wait``)."""
        self._check_open()
        deadline = time.monotonic() + timeout
        for ticket in sorted((t for t in self._pending if t is not None), key=lambda t: t.index):
            remaining = max(0.0, deadline - time.monotonic())
            self._completed[ticket.index] = self._wait_slot(ticket, remaining, reason="wait")

    # -- vectorised batch path -----------------------------------------------
    def call_batch(
        self,
        function: str | bytes | int,
        payloads: Any,
        *,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> BatchResult:
        """Call ``function`` once per payload, ``num_slots`` requests in flight at a time.

        ``payloads`` is a sequence of bytes-like objects or a 2-D ``uint8`` array (one
        request per row). Headers, flags and responses are handled with numpy, so the
        host side keeps up with a GPU consumer. Outstanding single requests are
        drained first (their responses stay available to ``poll``/``wait``).
        ``timeout`` bounds the wait of each window.
        """
        import numpy as np

        self._check_open()
        lay = self._layout
        n = lay.num_slots
        fid = function_id(function)
        as_array = isinstance(payloads, np.ndarray)
        if as_array:
            if payloads.ndim != 2 or payloads.dtype != np.uint8:
                msg = "an array of payloads must be 2-D uint8 (one request per row)"
                raise ValueError(msg)
            m, width = payloads.shape
            lens = np.full(m, width, dtype=np.uint32)
        else:
            seq_payloads = list(payloads)
            m = len(seq_payloads)
            lens = np.fromiter((len(p) for p in seq_payloads), dtype=np.uint32, count=m)
        if m and int(lens.max()) > lay.max_payload:
            msg = (
                f"a payload of {int(lens.max())} bytes does not fit a slot (max {lay.max_payload})"
            )
            raise ValueError(msg)
        self.drain(timeout)
        views = self._mem.numpy()
        rx, tx, rx32, tx32, rx64 = (views[k] for k in ("rx", "tx", "rx32", "tx32", "rx64"))
        rx_flags, tx_flags = views["rx_flags"], views["tx_flags"]
        statuses = np.empty(m, dtype=np.int32)
        result_lens = np.empty(m, dtype=np.uint32)
        request_ids = np.empty(m, dtype=np.uint32)
        chunks: list[tuple[int, Any]] = []
        mv = self._mem.mv
        for start in range(0, m, n):
            count = min(n, m - start)
            ks = self._next + np.arange(count, dtype=np.int64)
            slots = ks % n
            seqs = ((ks // n + 1) & _U32).astype(np.uint32)
            prevs = seqs - np.uint32(1)  # wraps like the u32 sequence
            unclaimed = (rx_flags[slots] != prevs) | (tx_flags[slots] != prevs)
            for u in np.flatnonzero(unclaimed).tolist():
                self._claim(int(slots[u]), int(seqs[u]), timeout)
            ids = self._mem.ids
            first_id = ids[0]
            ids[0] = (first_id + count) & _U64
            rids = ((first_id + np.arange(count, dtype=np.uint64)) & _U32).astype(np.uint32)
            rx32[slots, 0] = REQUEST_MAGIC
            rx32[slots, 1] = fid
            rx32[slots, 2] = lens[start : start + count]
            rx32[slots, 3] = rids
            rx64[slots, 2] = 0
            if as_array:
                if width:
                    rx[slots, HEADER_SIZE : HEADER_SIZE + width] = payloads[start : start + count]
            else:
                for i in range(count):
                    p = seq_payloads[start + i]
                    if len(p):
                        off = lay.rx_slot_offset(int(slots[i])) + HEADER_SIZE
                        mv[off : off + len(p)] = p
            rx_flags[slots] = seqs  # publish after every payload store (x86-TSO)
            self._next += count
            backoff = _Backoff(self._spin, self._max_sleep)
            deadline = time.monotonic() + timeout
            while True:
                seen = tx_flags[slots]
                if np.array_equal(seen, seqs):
                    break
                if time.monotonic() >= deadline:
                    bad = int(np.flatnonzero(seen != seqs)[0])
                    msg = (
                        f"batch request {int(rids[bad])} (#{int(ks[bad])}) in slot "
                        f"{int(slots[bad])}, seq {int(seqs[bad])}: no response within "
                        f"{timeout:g} s (tx_flags = {int(seen[bad])}); is the consumer running?"
                    )
                    raise TimeoutError(msg)
                backoff.pause()
            head = tx32[slots, :4]
            if not (head[:, 0] == RESPONSE_MAGIC).all():
                bad = int(np.flatnonzero(head[:, 0] != RESPONSE_MAGIC)[0])
                msg = f"slot {int(slots[bad])}: response magic {int(head[bad, 0]):#010x}"
                raise RingProtocolError(msg)
            if not (head[:, 3] == rids).all():
                bad = int(np.flatnonzero(head[:, 3] != rids)[0])
                msg = (
                    f"slot {int(slots[bad])}: request id {int(head[bad, 3])} echoed for "
                    f"request {int(rids[bad])}"
                )
                raise RingProtocolError(msg)
            rl = head[:, 2]
            if count and int(rl.max()) > lay.max_payload:
                msg = f"result_len {int(rl.max())} exceeds the max payload {lay.max_payload}"
                raise RingProtocolError(msg)
            statuses[start : start + count] = head[:, 1].view(np.int32)
            result_lens[start : start + count] = rl
            request_ids[start : start + count] = rids
            w = int(rl.max()) if count else 0
            chunks.append((start, tx[slots, HEADER_SIZE : HEADER_SIZE + w]))  # fancy idx copies
            self.collected += count
        width_out = max((c.shape[1] for _, c in chunks), default=0)
        data = np.zeros((m, width_out), dtype=np.uint8)
        for start, c in chunks:
            data[start : start + c.shape[0], : c.shape[1]] = c
        return BatchResult(statuses, result_lens, request_ids, data)

    # -- lifetime ------------------------------------------------------------
    def reset(self) -> None:
        """Zero every flag and rewind (the consumer must be reset too, or not running).

        The ring's request-id source is kept: ids stay unique for the ring's life.
        """
        self._check_open()
        lay = self._layout
        mv = self._mem.mv
        mv[lay.rx_flags_offset : lay.ids_offset] = bytes(lay.ids_offset - lay.rx_flags_offset)
        self._pending = [None] * lay.num_slots
        self._completed.clear()
        self._next = 0
        self._generation += 1
        self.collected = 0

    def close(self) -> None:
        """Release the views over the buffer (the buffer itself belongs to its owner)."""
        self._mem.release()

    def __enter__(self) -> RingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class PolledRequest:
    """A request taken from the ring by :meth:`RingServer.poll` (header not validated)."""

    index: int
    slot: int
    seq: int
    header: RequestHeader
    args: bytes  #: min(arg_len, max_payload) bytes of the slot


class RingServer:
    """Consumer side of a ring: the Python twin of the device hooks rx_poll / tx_publish."""

    def __init__(self, buffer: Any, layout: RingLayout) -> None:
        self._mem = _RingMemory(buffer, layout)
        self._layout = layout
        self._next = 0
        self._pending: PolledRequest | None = None
        self.published = 0  #: responses published

    @property
    def layout(self) -> RingLayout:
        return self._layout

    @property
    def pending(self) -> PolledRequest | None:
        """The request polled and not yet answered."""
        return self._pending

    def ready(self) -> bool:
        """Whether the next request in ring order has been published by the producer."""
        slot, seq = self._layout.position(self._next)
        return bool(self._mem.rx_flags[slot] == seq)

    def poll(self) -> PolledRequest | None:
        """Take the next request in ring order, or ``None`` if it is not there yet."""
        if self._pending is not None:
            msg = f"publish the response of slot {self._pending.slot} before polling again"
            raise RingError(msg)
        if self._mem.released:
            msg = "the ring server is closed"
            raise RingError(msg)
        lay = self._layout
        k = self._next
        slot, seq = lay.position(k)
        if self._mem.rx_flags[slot] != seq:  # flag first, then the payload (x86-TSO)
            return None
        mv = self._mem.mv
        off = lay.rx_slot_offset(slot)
        header = RequestHeader(*_REQUEST.unpack_from(mv, off))
        n = min(header.arg_len, lay.max_payload)
        args = bytes(mv[off + HEADER_SIZE : off + HEADER_SIZE + n])
        self._next = k + 1
        self._pending = PolledRequest(k, slot, seq, header, args)
        return self._pending

    def publish(self, status: int, result: bytes | bytearray | memoryview = b"") -> None:
        """Answer the request last polled (request id and timestamp echoed)."""
        req = self._pending
        if req is None:
            msg = "publish() without a polled request"
            raise RingError(msg)
        if self._mem.released:
            msg = "the ring server is closed"
            raise RingError(msg)
        lay = self._layout
        if not isinstance(result, (bytes, bytearray)):
            result = bytes(result)
        size = len(result)
        if size > lay.max_payload:
            msg = f"result of {size} bytes does not fit a slot (max payload {lay.max_payload})"
            raise ValueError(msg)
        mv = self._mem.mv
        off = lay.tx_slot_offset(req.slot)
        mv[off : off + HEADER_SIZE] = _RESPONSE.pack(
            RESPONSE_MAGIC, status, size, req.header.request_id, req.header.ptp_timestamp
        )
        if size:
            mv[off + HEADER_SIZE : off + HEADER_SIZE + size] = result
        self._pending = None
        self.published += 1  # counted first: never behind a response a reader can see
        self._mem.tx_flags[req.slot] = req.seq  # after the response bytes (x86-TSO)

    def reset(self) -> None:
        """Forget the position (pair with :meth:`RingClient.reset`)."""
        self._next = 0
        self._pending = None
        self.published = 0

    @property
    def closed(self) -> bool:
        return self._mem.released

    def close(self) -> None:
        self._mem.release()
