"""The producer's vectorised batch path
(:meth:`~skbuild_cudaq.realtime.RingClient.call_batch`, numpy) and its result,
:class:`BatchResult`."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from skbuild_cudaq.realtime._timeouts import UNSET, Timeout, deadline
from skbuild_cudaq.realtime.errors import RingProtocolError
from skbuild_cudaq.realtime.ring.layout import RingLayout
from skbuild_cudaq.realtime.ring.memory import Backoff, RingMemory
from skbuild_cudaq.realtime.wire import HEADER_SIZE, REQUEST_MAGIC, RESPONSE_MAGIC, function_id

__all__ = ["BatchResult"]

_U32 = 0xFFFFFFFF


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


class _Payloads:
    """A batch's payloads: rows of a 2-D ``uint8`` array, or a list of bytes-like objects;
    their lengths checked against the slot."""

    def __init__(self, payloads: Any, max_payload: int) -> None:
        import numpy as np

        self.array: Any = None
        self.items: list[Any] = []
        if isinstance(payloads, np.ndarray):
            if payloads.ndim != 2 or payloads.dtype != np.uint8:
                msg = "an array of payloads must be 2-D uint8 (one request per row)"
                raise ValueError(msg)
            self.array = payloads
            self.count, self.width = payloads.shape
            self.lens = np.full(self.count, self.width, dtype=np.uint32)
        else:
            self.items = list(payloads)
            self.count = len(self.items)
            self.lens = np.fromiter((len(p) for p in self.items), dtype=np.uint32, count=self.count)
        if self.count and int(self.lens.max()) > max_payload:
            msg = (
                f"a payload of {int(self.lens.max())} bytes does not fit a slot (max {max_payload})"
            )
            raise ValueError(msg)

    def write(self, rx: Any, mv: memoryview, lay: RingLayout, slots: Any, start: int) -> None:
        """Payloads ``start`` on into the request areas of ``slots``."""
        count = len(slots)
        if self.array is not None:
            if self.width:
                rx[slots, HEADER_SIZE : HEADER_SIZE + self.width] = self.array[
                    start : start + count
                ]
            return
        for i in range(count):
            p = self.items[start + i]
            if len(p):
                off = lay.rx_slot_offset(int(slots[i])) + HEADER_SIZE
                mv[off : off + len(p)] = p


class _Window(NamedTuple):
    """Up to ``num_slots`` requests of a batch in flight: request numbers, slots, sequence
    numbers, request ids."""

    ks: Any
    slots: Any
    seqs: Any
    rids: Any


def _check_responses(head: Any, window: _Window, max_payload: int) -> None:
    """Every response header of a window: response magic, request id echoed, result_len."""
    import numpy as np

    slots, rids = window.slots, window.rids
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
    if len(rl) and int(rl.max()) > max_payload:
        msg = f"result_len {int(rl.max())} exceeds the max payload {max_payload}"
        raise RingProtocolError(msg)


class _BatchPath:
    """:meth:`~skbuild_cudaq.realtime.RingClient.call_batch`, mixed into :class:`RingClient`."""

    _layout: RingLayout
    _mem: RingMemory
    _next: int
    _spin: int
    _max_sleep: float
    collected: int

    if TYPE_CHECKING:

        def _check_open(self) -> None: ...
        def _claim(self, slot: int, seq: int, timeout: float | None) -> None: ...
        def _seconds(self, timeout: Timeout) -> float | None: ...
        def drain(self, timeout: Timeout = ...) -> None: ...

    def call_batch(
        self,
        function: str | bytes | int,
        payloads: Any,
        *,
        timeout: Timeout = UNSET,
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
        seconds = self._seconds(timeout)
        lay = self._layout
        fid = function_id(function)
        batch = _Payloads(payloads, lay.max_payload)
        m = batch.count
        self.drain(seconds)
        views = self._mem.numpy()
        statuses = np.empty(m, dtype=np.int32)
        result_lens = np.empty(m, dtype=np.uint32)
        request_ids = np.empty(m, dtype=np.uint32)
        chunks: list[tuple[int, Any]] = []
        for start in range(0, m, lay.num_slots):
            count = min(lay.num_slots, m - start)
            window = self._send_window(views, batch, fid, start, count, timeout=seconds)
            head = self._await_window(views, window, seconds)
            rl = head[:, 2]
            statuses[start : start + count] = head[:, 1].view(np.int32)
            result_lens[start : start + count] = rl
            request_ids[start : start + count] = window.rids
            w = int(rl.max()) if count else 0
            # fancy indexing copies the results out of the slots
            chunks.append((start, views["tx"][window.slots, HEADER_SIZE : HEADER_SIZE + w]))
            self.collected += count
        width_out = max((c.shape[1] for _, c in chunks), default=0)
        data = np.zeros((m, width_out), dtype=np.uint8)
        for start, c in chunks:
            data[start : start + c.shape[0], : c.shape[1]] = c
        return BatchResult(statuses, result_lens, request_ids, data)

    def _send_window(
        self,
        views: dict[str, Any],
        batch: _Payloads,
        fid: int,
        start: int,
        count: int,
        *,
        timeout: float | None,
    ) -> _Window:
        """Claim the next ``count`` slots, write requests ``start`` on and publish them."""
        import numpy as np

        n = self._layout.num_slots
        mem = self._mem
        ks = self._next + np.arange(count, dtype=np.int64)
        slots = ks % n
        seqs = ((ks // n + 1) & _U32).astype(np.uint32)
        prevs = seqs - np.uint32(1)  # wraps like the u32 sequence
        index = slots.tolist()
        rx_seen = np.array(mem.rx_flags.gather(index), dtype=np.uint32)
        tx_seen = np.array(mem.tx_flags.gather(index), dtype=np.uint32)
        unclaimed = (rx_seen != prevs) | (tx_seen != prevs)
        for u in np.flatnonzero(unclaimed).tolist():
            self._claim(int(slots[u]), int(seqs[u]), timeout)
        first_id = mem.ids.fetch_add(0, count)
        rids = ((first_id + np.arange(count, dtype=np.uint64)) & _U32).astype(np.uint32)
        rx32 = views["rx32"]
        rx32[slots, 0] = REQUEST_MAGIC
        rx32[slots, 1] = fid
        rx32[slots, 2] = batch.lens[start : start + count]
        rx32[slots, 3] = rids
        views["rx64"][slots, 2] = 0
        batch.write(views["rx"], mem.mv, self._layout, slots, start)
        mem.rx_flags.scatter(index, seqs.tolist())  # release stores: after every payload
        self._next += count
        return _Window(ks, slots, seqs, rids)

    def _await_window(self, views: dict[str, Any], window: _Window, timeout: float | None) -> Any:
        """Wait (up to ``timeout`` seconds, None: no limit) for every response of
        ``window``; their headers (u32 words), checked."""
        import numpy as np

        tx_flags = self._mem.tx_flags
        slots, seqs = window.slots, window.seqs
        index = slots.tolist()
        backoff = Backoff(self._spin, self._max_sleep)
        end = deadline(timeout, time.monotonic())
        while True:
            seen = np.array(tx_flags.gather(index), dtype=np.uint32)
            if np.array_equal(seen, seqs):
                break
            if time.monotonic() >= end:
                bad = int(np.flatnonzero(seen != seqs)[0])
                msg = (
                    f"batch request {int(window.rids[bad])} (#{int(window.ks[bad])}) in slot "
                    f"{int(slots[bad])}, seq {int(seqs[bad])}: no response within "
                    f"{timeout:g} s (tx_flags = {int(seen[bad])}); is the consumer running?"
                )
                raise TimeoutError(msg)
            backoff.pause()
        head = views["tx32"][slots, :4]
        _check_responses(head, window, self._layout.max_payload)
        return head
