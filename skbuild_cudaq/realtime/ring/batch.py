"""The producer's vectorised batch path
(:meth:`~skbuild_cudaq.realtime.RingClient.call_batch`, numpy) and its result,
:class:`BatchResult`."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from skbuild_cudaq.realtime.errors import RingProtocolError
from skbuild_cudaq.realtime.wire import HEADER_SIZE, REQUEST_MAGIC, RESPONSE_MAGIC, function_id

from .layout import RingLayout
from .memory import Backoff, RingMemory

__all__ = ["DEFAULT_TIMEOUT", "BatchResult"]

DEFAULT_TIMEOUT = 10.0
_U32 = 0xFFFFFFFF
_U64 = 0xFFFFFFFFFFFFFFFF


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
        def _claim(self, slot: int, seq: int, timeout: float) -> None: ...
        def drain(self, timeout: float = ...) -> None: ...

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
            backoff = Backoff(self._spin, self._max_sleep)
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
