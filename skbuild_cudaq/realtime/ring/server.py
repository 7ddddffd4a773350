"""The consumer side of a ring, :class:`RingServer`: the Python twin of the device hooks
``cudaq_dev_rx_poll`` / ``cudaq_dev_tx_publish`` (used by the host path)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from skbuild_cudaq.realtime.errors import RingError
from skbuild_cudaq.realtime.ring.layout import RingLayout
from skbuild_cudaq.realtime.ring.memory import RingMemory
from skbuild_cudaq.realtime.wire import (
    _REQUEST,
    _RESPONSE,
    HEADER_SIZE,
    RESPONSE_MAGIC,
    RequestHeader,
)

__all__ = ["PolledRequest", "RingServer"]


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
        self._mem = RingMemory(buffer, layout)
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
        return self._mem.rx_flags.load(slot) == seq

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
        if self._mem.rx_flags.load(slot) != seq:  # acquire: the flag, then the payload
            return None
        mv = self._mem.mv
        off = lay.rx_slot_offset(slot)
        header = RequestHeader(*_REQUEST.unpack_from(mv, off))
        n = min(header.arg_len, lay.max_payload)
        args = bytes(mv[off + HEADER_SIZE : off + HEADER_SIZE + n])
        self._next = k + 1
        self._pending = PolledRequest(k, slot, seq, header, args)
        return self._pending

    def poll_shared(self) -> PolledRequest | None:
        """:meth:`poll` on a ring another consumer shares (the twin of the device hooks'
        ``CUDAQ_POLL_SHARED``): a slot whose request flag is ahead of the sequence this
        server expects held a request the other consumer answered (and the producer
        reused the slot): passed over; a request whose response flag is already set after
        it was read was the other consumer's, answered meanwhile (its bytes may have
        changed under the copy): dropped. Either way the next request is looked at.
        Whether a request it returns is this server's, the caller decides: it answers it
        (:meth:`publish`) or leaves it to the other consumer (:meth:`leave`)."""
        while True:
            if self._pending is not None or self._mem.released:
                return self.poll()  # the errors of poll()
            slot, seq = self._layout.position(self._next)
            seen = self._mem.rx_flags.load(slot)
            if seen != seq and 0 < (seen - seq) % (1 << 32) < 1 << 31:
                self._next += 1  # answered by the other consumer, slot reused: not ours
                continue
            req = self.poll()
            if req is None:
                return None
            if self._mem.tx_flags.load(slot) == seq:  # acquire, after the payload copy
                self._pending = None  # answered by the other consumer while read
                continue
            return req

    def leave(self) -> None:
        """Leave the request last polled to the ring's other consumer: neither answered
        nor counted (a shared ring's host dispatcher, for requests it does not serve)."""
        if self._pending is None:
            msg = "leave() without a polled request"
            raise RingError(msg)
        self._pending = None

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
        self._mem.tx_flags.store(req.slot, req.seq)  # release: after the response bytes

    def reset(self, *, clear_flags: bool = False) -> None:
        """Forget the position (pair with :meth:`RingClient.reset`); with ``clear_flags``,
        zero every request and response flag too (no producer may be writing meanwhile)."""
        if clear_flags:
            if self._mem.released:
                msg = "the ring server is closed"
                raise RingError(msg)
            self._mem.clear_flags()
        self._next = 0
        self._pending = None
        self.published = 0

    @property
    def closed(self) -> bool:
        return self._mem.released

    def close(self) -> None:
        self._mem.release()
