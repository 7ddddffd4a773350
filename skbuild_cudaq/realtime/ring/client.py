"""The producer side of a ring, :class:`RingClient` (protocol: :mod:`skbuild_cudaq.realtime.ring`).

``call()`` (its fast path inline), ``_wait_slot`` and ``_read`` are the measured round-trip
path (microseconds): keep their work as it is. The vectorised batch path is
:mod:`.batch`, mixed in. Over 400 lines: the protocol checks (position, claim, whose
response) are the client's, and the fast path repeats them inline on purpose.

The compiled round trip: unless the package was built with it left out
(``cmake/FastClient.cmake``), ``call()`` hands a free slot's whole round trip to
:mod:`._fastcall` (``ring/fastcall/``, the same steps and checks in C), its bookkeeping too
(``Ring.call_next``: the next request number, the responses collected, whether the slot
holds a ticket, the last function's id; 0.22 us a call with random arrival on the H200
host), and keeps only the general path (waits, errors,
tickets) in Python. ``call`` itself is then compiled code (``_fastcall.call``, a method
descriptor the class takes as its ``call``): ``client.call(...)`` enters C with no Python
frame, and goes back to Python only for what is not a plain answered round trip
(``_call_continue``) or for a client without the compiled ring (``_call_python``, the
Python ``call``). A subclass overriding ``call`` keeps its own. :data:`COMPILED` says
whether it is there; ``RingClient(..., compiled=False)`` or ``SKBUILD_CUDAQ_PURE_CLIENT=1``
in the environment leave it unused.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from skbuild_cudaq.realtime._closing import Closing
from skbuild_cudaq.realtime._timeouts import (
    DEFAULT_TIMEOUT,
    UNSET,
    ClientTimeout,
    Timeout,
    check_timeout,
    collect_each,
    deadline,
)
from skbuild_cudaq.realtime.errors import (
    ClientError,
    InvalidArgumentError,
    RingError,
    RingProtocolError,
)
from skbuild_cudaq.realtime.ring.batch import _BatchPath
from skbuild_cudaq.realtime.ring.layout import RingLayout
from skbuild_cudaq.realtime.ring.memory import Backoff, RingMemory
from skbuild_cudaq.realtime.wire import (
    _RESPONSE,
    HEADER_SIZE,
    REQUEST_MAGIC,
    RESPONSE_MAGIC,
    Response,
    ResponseHeader,
    _payload_bytes,
    function_id,
)

__all__ = ["COMPILED", "DEFAULT_TIMEOUT", "RingClient", "Ticket"]

_U32 = 0xFFFFFFFF

_CompiledRing: type[_fastcall.Ring] | None
_compiled_call: Any  # RingClient.call as compiled code, or None
try:
    from skbuild_cudaq.realtime.ring import _fastcall

    _CompiledRing = _fastcall.Ring
    _compiled_call = _fastcall.call
except ImportError:  # built with SKBUILD_CUDAQ_FAST_CLIENT=OFF (cmake/FastClient.cmake)
    _CompiledRing = None
    _compiled_call = None

#: Whether this installation has the compiled round trip of :meth:`RingClient.call`.
COMPILED: bool = _CompiledRing is not None
#: The compiled round trip spins on the response flag for ``spin`` times this many
#: nanoseconds (about what ``spin`` turns of the Python loop take), at most
#: ``_MAX_SPIN_NS``, before the general path takes over, which waits with a backoff
#: that sleeps. It spins holding the GIL (as Python's own loop does between thread
#: switches), so the bound keeps other threads of the process, a consumer thread of the
#: host path among them, from waiting longer than a thread switch would make them.
_NS_PER_SPIN = 50
_MAX_SPIN_NS = 1_000_000


_NO_FUNCTION = object()  # RingClient._last_function before its first call()


def _buffer_address(mv: memoryview) -> int:
    """The address of a writable, C-contiguous byte view (no export outlives the call)."""
    import ctypes

    return ctypes.addressof(ctypes.c_char.from_buffer(mv))


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


class RingClient(_BatchPath, ClientTimeout, Closing):
    """Producer side of a ring (see the module docstring for the protocol)."""

    def __init__(
        self,
        buffer: Any,
        layout: RingLayout,
        *,
        spin: int = 256,
        max_sleep: float = 1e-3,
        compiled: bool | None = None,
        release_gil: bool = False,
        timeout: float | None = DEFAULT_TIMEOUT,
    ) -> None:
        """``timeout``: how long a waiting method (``call``, ``wait``, ``collect``,
        ``submit``, ``drain``, ``call_batch``) waits when its own ``timeout`` is left out
        (:attr:`timeout`). Everywhere, as in the standard library: seconds ``>= 0`` (``0``:
        do not wait), or ``None`` for no limit; a bool, a string, a negative number or NaN
        is refused before anything is written.
        ``compiled``: use the compiled round trip in :meth:`call` (``None``: where it is
        installed, unless ``SKBUILD_CUDAQ_PURE_CLIENT`` is set; ``True``: raise
        :class:`RingError` where it is not installed; ``False``: pure Python).
        ``release_gil``: the compiled round trip waits for the answer without the GIL, up
        to 1 ms, before the general path's backoff (for a consumer that is a thread of this
        process and needs the GIL: the host path's Python handlers;
        :meth:`HostDispatcher.client` sets it)."""
        self.timeout = timeout
        self._mem = RingMemory(buffer, layout)
        self._layout = layout
        self._spin = spin
        self._max_sleep = max_sleep
        self._pending: list[Ticket | None] = [None] * layout.num_slots
        self._completed: dict[int, Response] = {}
        self._compiled: _fastcall.Ring | None = None
        # the next request number and the responses read: the compiled ring's own
        # (call_next() keeps them) where there is one, else these
        self._next_py = self._ring_position()
        self._collected_py = 0
        self._generation = 0
        # call()'s fast path reads these instead of the layout's properties
        self._num_slots = layout.num_slots
        self._slot_size = layout.slot_size
        self._tx_base = layout.tx_slots_offset
        self._max_payload = layout.max_payload
        # call(): the function id of the last name (none yet: None is no name, refused)
        self._last_function: object = _NO_FUNCTION
        self._last_fid = 0
        self._request_structs: dict[int, struct.Struct] = {}  # header + payload of n bytes
        if compiled is None:
            compiled = COMPILED and not os.environ.get("SKBUILD_CUDAQ_PURE_CLIENT")
        elif compiled and not COMPILED:
            msg = (
                "RingClient(compiled=True): this installation of skbuild-cudaq has no compiled "
                "ring client (built with SKBUILD_CUDAQ_FAST_CLIENT=OFF; see "
                "cmake/FastClient.cmake)"
            )
            raise RingError(msg)
        # without the GIL the spin holds nothing up: it lasts the longest bound
        self._spin_ns = (
            _MAX_SPIN_NS if release_gil else min(max(0, spin) * _NS_PER_SPIN, _MAX_SPIN_NS)
        )
        if compiled:
            assert _CompiledRing is not None
            ring = _CompiledRing(
                _buffer_address(self._mem.mv), layout.num_slots, layout.slot_size,
                layout.max_payload,
            )  # fmt: skip
            ring.next = self._next_py
            ring.spin_ns = self._spin_ns
            ring.release_gil = int(release_gil)
            ring.attach(self._pending)  # the same list for the client's life (reset keeps it)
            self._compiled = ring

    # -- counters (the compiled ring's where there is one) ---------------------
    @property
    def _next(self) -> int:
        ring = self._compiled
        return self._next_py if ring is None else ring.next

    @_next.setter
    def _next(self, value: int) -> None:
        ring = self._compiled
        if ring is None:
            self._next_py = value
        else:
            ring.next = value

    @property
    def collected(self) -> int:
        """Responses read out of the ring."""
        ring = self._compiled
        return self._collected_py if ring is None else ring.collected

    @collected.setter
    def collected(self, value: int) -> None:
        ring = self._compiled
        if ring is None:
            self._collected_py = value
        else:
            ring.collected = value

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

    def __repr__(self) -> str:
        layout = self._layout
        state = "closed" if self.closed else f"submitted={self._next}"
        return f"<RingClient {layout.num_slots}x{layout.slot_size} {state}>"

    @property
    def compiled(self) -> bool:
        """Whether :meth:`call` takes the compiled round trip (see :data:`COMPILED`)."""
        return self._compiled is not None

    def _check_open(self) -> None:
        if self._mem.released:
            msg = "the ring client is closed; make a new one over the ring"
            raise ClientError(msg)

    def _ring_position(self) -> int:
        """The next request number, read from the request flags (see "Whose response is it?")."""
        flags = self._mem.rx_flags.load_all()
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

    def _claim(self, slot: int, seq: int, timeout: float | None) -> None:
        """Check that ``slot`` may take request ``seq`` (see the module docstring); waits
        (up to ``timeout`` seconds, None: no limit) for the answer to another client's
        request still in the slot."""
        mem = self._mem
        prev = (seq - 1) & _U32
        rx = mem.rx_flags.load(slot)
        if rx != prev:
            msg = (
                f"slot {slot}: request flag {rx}, expected {prev}: another producer wrote to "
                "the ring since this client did, or the ring was reset under it (one producer "
                "at a time: make a new client)"
            )
            raise RingError(msg)
        tx = mem.tx_flags.load(slot)
        if tx == prev:
            return
        if tx == (prev - 1) & _U32:  # the previous request of the slot is not answered yet
            backoff = Backoff(self._spin, self._max_sleep)
            end = deadline(timeout, time.monotonic())
            while mem.tx_flags.load(slot) == tx:
                if time.monotonic() >= end:
                    msg = (
                        f"slot {slot}: the request an earlier client left there (seq {prev}) was "
                        f"not answered within {timeout:g} s (tx_flags[{slot}] = {tx}); is the "
                        "consumer running?"
                    )
                    raise TimeoutError(msg)
                backoff.pause()
            tx = mem.tx_flags.load(slot)
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
        timeout: Timeout = UNSET,
    ) -> Ticket:
        """Write one request into the next slot and publish it. Waits (up to ``timeout``)
        only while the slot still holds an earlier request's response."""
        self._check_open()
        seconds = self._seconds(timeout)
        fid = function_id(function)
        payload = _payload_bytes(payload)
        size = self._check_payload(payload)
        ts = 0 if timestamp is None else timestamp
        k = self._next
        slot, seq = self._layout.position(k)
        older = self._pending[slot]
        if older is not None:
            self._completed[older.index] = self._wait_slot(older, seconds, reason="submit")
        self._claim(slot, seq, seconds)
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
            raise InvalidArgumentError(msg)
        return size

    def _new_request_id(self) -> int:
        """The next id of the ring's id source (a u64 in the ring; the wire takes 32 bits)."""
        return self._mem.ids.fetch_add(0, 1) & _U32

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
        off = self._layout.rx_slot_offset(slot)
        self._packer(len(payload)).pack_into(mem.mv, off, *header, payload)
        mem.rx_flags.store(slot, seq)  # release: after every payload store
        self._next = k + 1

    def _packer(self, size: int) -> struct.Struct:
        """The ``Struct`` of a request header followed by ``size`` payload bytes (cached):
        header and payload go into the slot in one store sequence."""
        packer = self._request_structs.get(size)
        if packer is None:
            packer = self._request_structs[size] = struct.Struct(f"<IIIIQ{size}s")
        return packer

    def submit_many(
        self,
        items: Iterable[tuple[str | bytes | int, bytes | bytearray | memoryview]],
        *,
        timeout: Timeout = UNSET,
    ) -> list[Ticket]:
        """Submit ``(function, payload)`` pairs back to back (pipelined); ``timeout`` as
        :meth:`submit`'s, for each."""
        seconds = self._seconds(timeout)
        return [self.submit(f, p, timeout=seconds) for f, p in items]

    # -- collect -----------------------------------------------------------
    def _check_ticket(self, ticket: Ticket) -> None:
        if ticket.generation != self._generation:
            msg = f"ticket of request {ticket.request_id} predates a reset() of this ring client"
            raise ClientError(msg)

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
        if self._mem.released:  # by close() in another thread, while this one waited
            msg = (
                f"the ring client was closed while request {ticket.request_id} waited for "
                "its response"
            )
            raise ClientError(msg)
        return self._mem.tx_flags.load(ticket.slot) == ticket.seq

    def _wait_slot(self, ticket: Ticket, timeout: float | None, *, reason: str) -> Response:
        """Wait up to ``timeout`` seconds (None: no limit) for ``ticket``'s response."""
        backoff = Backoff(self._spin, self._max_sleep)
        end = None
        while not self._ready(ticket):
            now = time.monotonic()
            if end is None:
                end = deadline(timeout, now)
            elif now >= end:
                seen = self._mem.tx_flags.load(ticket.slot)
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
            raise ClientError(msg)
        if not self._ready(ticket):
            return None
        return self._read(ticket)

    def wait(self, ticket: Ticket, timeout: Timeout = UNSET) -> Response:
        """The response of ``ticket``; :class:`TimeoutError` after ``timeout`` seconds."""
        seconds = self._seconds(timeout)
        response = self.poll(ticket)
        if response is not None:
            return response
        return self._wait_slot(ticket, seconds, reason="wait")

    def collect(self, tickets: Sequence[Ticket], timeout: Timeout = UNSET) -> list[Response]:
        """Responses of ``tickets`` in the same order; ``timeout`` bounds the whole call."""
        self._check_open()
        return collect_each(self.wait, tickets, self._seconds(timeout))

    def _call_continue(
        self,
        function: str | bytes | int,
        payload: bytes | bytearray | memoryview,
        out: object,
        timeout: Timeout = UNSET,
    ) -> tuple[int, bytes]:
        """The rest of :meth:`call` after ``Ring.call_next`` gave ``out``, not a tuple.

        False: another function than the last (nothing written): remember its id and
        try again. An int: the request id of a request published but not answered
        within the spin, or answered wrongly: wait for it as a ticket (or raise the
        protocol error). None: nothing written (the slot holds a ticket or is not yet
        free, the payload is no bytes or bytearray or does not fit, or the client is
        closed): the general path, which waits or raises. ``timeout``: the call's, which
        the compiled entry checked (or left out).
        """
        seconds = self._seconds(timeout)
        ring = self._compiled
        if out is False and ring is not None:
            ring.remember(function, function_id(function))
            out = ring.call_next(function, payload)
            if out.__class__ is tuple:
                return out
        if isinstance(out, int) and out is not False and ring is not None:
            k = ring.next - 1
            slot, seq = self._layout.position(k)
            ticket = Ticket(k, slot, seq, out, 0, function_id(function), self._generation)
            self._pending[slot] = ticket
            response = self._wait_slot(ticket, seconds, reason="wait")
            return response.status, response.result
        response = self.wait(self.submit(function, payload, timeout=seconds), seconds)
        return response.status, response.result

    def _call_python(
        self,
        function: str | bytes | int,
        payload: bytes | bytearray | memoryview = b"",
        *,
        timeout: Timeout = UNSET,
    ) -> tuple[int, bytes]:
        """Submit one request and wait for it: ``(status, result)``; ``timeout`` bounds
        the wait (see :mod:`skbuild_cudaq.realtime.ring`), checked before anything is written.

        The round trip's own path: when the next slot is free it writes the
        request, publishes it and spins on the response flag without creating a
        ticket (the same checks as :meth:`wait`); otherwise it goes through
        :meth:`submit` and :meth:`wait`. This is :meth:`call` in Python: what
        ``call`` is where the compiled ring is not installed, and what the compiled
        ``call`` runs for a client without it.
        """
        # Every step inline, every value local: on the H200 host each Python-level call
        # or attribute costs tens of ns, and the ring's memory is the device's too.
        if timeout is not UNSET:  # checked before anything is written
            timeout = check_timeout(timeout)
        ring = self._compiled
        if ring is not None:
            # The compiled round trip: claim, write, publish, spin, check, copy out, and
            # the bookkeeping (next request, collected, whether the slot holds a ticket,
            # the function id of the last function); anything but an answer: the rest.
            out = ring.call_next(function, payload)
            if out.__class__ is tuple:
                return out
            return self._call_continue(function, payload, out, timeout)
        k = self._next
        n = self._num_slots
        slot = k % n
        seq = (k // n + 1) & _U32
        prev = (seq - 1) & _U32
        mem = self._mem
        rx_flags = mem.rx_flags
        tx_flags = mem.tx_flags
        if (
            self._pending[slot] is not None
            or (type(payload) is not bytes and type(payload) is not bytearray)
            or mem.released
            or rx_flags.load(slot) != prev
            or tx_flags.load(slot) != prev
        ):  # the general path checks, waits or raises
            response = self.wait(self.submit(function, payload, timeout=timeout), timeout)
            return response.status, response.result
        size = len(payload)
        if size > self._max_payload:
            self._check_payload(payload)  # raises with the message
        if function is self._last_function:
            fid = self._last_fid
        else:
            fid = function_id(function)
            self._last_function, self._last_fid = function, fid
        rid = mem.ids.fetch_add(0, 1) & _U32
        mv = mem.mv
        packer = self._request_structs.get(size) or self._packer(size)
        # header and payload in one store sequence, then the flag's release store
        packer.pack_into(mv, slot * self._slot_size, REQUEST_MAGIC, fid, size, rid, 0, payload)
        rx_flags.store(slot, seq)
        self._next = k + 1
        spins = self._spin
        while tx_flags.load(slot) != seq:  # the common case: the answer comes while spinning
            spins -= 1
            if spins <= 0:
                ticket = Ticket(k, slot, seq, rid, 0, fid, self._generation)
                self._pending[slot] = ticket
                response = self._wait_slot(ticket, self._seconds(timeout), reason="wait")
                return response.status, response.result
        off = self._tx_base + slot * self._slot_size
        magic, status, rlen, echoed, ts = _RESPONSE.unpack_from(mv, off)
        if magic != RESPONSE_MAGIC or rlen > self._max_payload or echoed != rid or ts != 0:
            ticket = Ticket(k, slot, seq, rid, 0, fid, self._generation)
            self._pending[slot] = ticket
            response = self._read(ticket)  # raises RingProtocolError with the details
            return response.status, response.result
        self.collected += 1
        return status, bytes(mv[off + HEADER_SIZE : off + HEADER_SIZE + rlen])

    # the compiled call where it is installed (it goes back to _call_python for a client
    # without the compiled ring), else the Python one; type checkers see the Python one
    # (two statements: a conditional expression would type it as the union with Any)
    if TYPE_CHECKING:
        call = _call_python
    else:
        call = _call_python if _compiled_call is None else _compiled_call

    def drain(self, timeout: Timeout = UNSET) -> None:
        """Read every outstanding response out of the ring (kept for ``poll``/``wait``);
        ``timeout`` bounds the whole call."""
        self._check_open()
        seconds = self._seconds(timeout)
        end = deadline(seconds, time.monotonic())
        for ticket in sorted((t for t in self._pending if t is not None), key=lambda t: t.index):
            remaining = None if seconds is None else max(0.0, end - time.monotonic())
            self._completed[ticket.index] = self._wait_slot(ticket, remaining, reason="wait")

    # -- lifetime ------------------------------------------------------------
    def reset(self) -> None:
        """Zero every flag and rewind (the consumer must be reset too, or not running).

        The ring's request-id source is kept: ids stay unique for the ring's life.
        """
        self._check_open()
        lay = self._layout
        self._mem.clear_flags()
        self._pending[:] = [None] * lay.num_slots  # the same list: the compiled ring reads it
        self._completed.clear()
        self._next = 0
        self._generation += 1
        self.collected = 0

    def close(self) -> None:
        """Release the views over the buffer (the buffer itself belongs to its owner, who
        may free it once this returns). A call waiting in another thread raises
        :class:`ClientError`."""
        ring = self._compiled
        if ring is not None:  # its counters stay readable
            ring.shut()  # a round trip spinning without the GIL is done with the memory
            self._next_py, self._collected_py = ring.next, ring.collected
        self._compiled = None
        self._mem.release()

    def __enter__(self) -> RingClient:
        return self
