"""The host ring: layout, producer (:class:`RingClient`) and consumer (:class:`RingServer`).

One module per job: :mod:`.layout` (the ring shape and geometry, :class:`RingLayout`),
:mod:`.device_ctx` (the mirror of ``cudaq_host_ring_ctx_t``), :mod:`.memory` (views
over one allocation, the wait backoff), :mod:`.client` (the producer), :mod:`.batch`
(the producer's vectorised batch path), :mod:`.server` (the consumer). The public
names are exported from :mod:`skbuild_cudaq.realtime`.

Python (numpy only for the vectorised batch path, imported when first used), and the
compiled round trip of ``RingClient.call`` (``ring/fastcall/``, where it was built; see
:mod:`.client`); nothing here touches CUDA. The GPU bridge (``realtime/bridge.py``) and the host
path (``realtime/host/dispatcher.py``) both use this module; the device side is
``skbuild_cudaq/device/host_ring_bridge.cu`` with ``cudaq/realtime/host_ring.cuh``.

API
===

``RingLayout(num_slots, slot_size)`` -- frozen, the one definition of a ring's
shape (validated once, in ``__post_init__``): ``slot_size % 8 == 0`` and greater
than :data:`~skbuild_cudaq.realtime.wire.HEADER_SIZE`, ``num_slots >= 1``.
One allocation of ``total_bytes``::

    rx_slots_offset = 0                         num_slots * slot_size request bytes
    tx_slots_offset = num_slots * slot_size     num_slots * slot_size response bytes
    rx_flags_offset = 2 * num_slots * slot_size u32[num_slots] request sequence numbers
    tx_flags_offset = rx_flags_offset + 4 * num_slots   u32[num_slots] response sequence numbers
    ids_offset = tx_flags_offset + 4 * num_slots        u64 the ring's request-id source

``max_payload = slot_size - HEADER_SIZE``; ``rx_slot_offset(slot)``, ``tx_slot_offset(slot)``,
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
  ask for: :class:`~skbuild_cudaq.realtime.errors.RingProtocolError`. So a matching
  response flag can only have been stored by the consumer *after* this client's request was
  published.
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

Memory order (docs/guides/host-path.md, "The ring's memory-ordering contract"): the
producer writes the payload bytes, then release-stores the request flag; the consumer
acquire-loads the flag, then reads the payload; the response the same way round. The
Python paths touch a flag or the id source only through ``RingMemory``'s
``_atomics.Words`` (compiled C11 atomics: acquire ``load``, release ``store``,
``fetch_add``), so they are correct on a weakly ordered CPU (aarch64) as on x86-TSO;
``tests/test_ring_order.py`` fails on a plain access. The device side pairs this with
``ld.acquire.sys`` / ``st.release.sys``.

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
  ``collect(tickets, timeout) -> list[Response]``. ``compiled=`` (constructor): see
  :data:`COMPILED` and :mod:`.client`.
- ``call_batch(function, payloads, *, timeout) -> BatchResult``: vectorised with
  numpy, up to ``num_slots`` requests in flight per window; payloads are a
  sequence of bytes or a 2-D ``uint8`` array (one row per request).
- ``reset()``: zero every flag and rewind the position (only while no consumer
  runs, or together with a consumer reset); the ring's id source is kept.
- ``close()``: release the views; any later use raises
  :class:`~skbuild_cudaq.realtime.errors.ClientError` (as a closed ``UdpClient`` does).
- ``timeout``: every waiting method's (``call``, ``wait``, ``collect``, ``submit``,
  ``submit_many``, ``drain``, ``call_batch``), with the standard library's meaning: seconds
  ``>= 0`` (``0``: do not wait), ``None`` for no limit; left out, the client's own
  ``timeout`` (constructor keyword and attribute, :data:`DEFAULT_TIMEOUT` by default). A
  bool, a string, a negative number or NaN is refused before anything is written, on the
  compiled path and the Python one alike; ``UdpClient`` takes it the same way.

Every response is checked: response magic, ``result_len <= max_payload``, and
the request id and timestamp echoed; a mismatch raises
:class:`~skbuild_cudaq.realtime.errors.RingProtocolError`.
Timeouts raise :class:`TimeoutError` naming the slot, the sequence number and
the flag value seen. A ``Ticket`` is collected once; polling or waiting for it again raises
:class:`~skbuild_cudaq.realtime.errors.ClientError` at once.

``RingServer(buffer, layout)`` -- consumer, the Python twin of the device hooks
``cudaq_dev_rx_poll`` / ``cudaq_dev_tx_publish``: ``poll() -> PolledRequest |
None`` takes the next request in ring order (never blocks), ``publish(status,
result=b"")`` answers it (exactly once per polled request).

``HOST_RING_CTX_*`` and :func:`host_ring_ctx_bytes` mirror
``cudaq_host_ring_ctx_t`` (the device-memory transport context of the GPU bridge).
"""

from __future__ import annotations

from skbuild_cudaq.realtime.ring.batch import BatchResult
from skbuild_cudaq.realtime.ring.client import COMPILED, DEFAULT_TIMEOUT, RingClient, Ticket
from skbuild_cudaq.realtime.ring.device_ctx import (
    HOST_RING_CTX_MAGIC,
    HOST_RING_CTX_SIZE,
    HOST_RING_LANE_SIZE,
    HOST_RING_MAX_LANES,
    host_ring_ctx_bytes,
)
from skbuild_cudaq.realtime.ring.layout import RingLayout
from skbuild_cudaq.realtime.ring.server import PolledRequest, RingServer

__all__ = [
    "COMPILED",
    "DEFAULT_TIMEOUT",
    "HOST_RING_CTX_MAGIC",
    "HOST_RING_CTX_SIZE",
    "HOST_RING_LANE_SIZE",
    "HOST_RING_MAX_LANES",
    "BatchResult",
    "PolledRequest",
    "RingClient",
    "RingLayout",
    "RingServer",
    "Ticket",
    "host_ring_ctx_bytes",
]
