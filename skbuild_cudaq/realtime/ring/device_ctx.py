"""Mirror of ``cudaq_host_ring_ctx_t`` (``cudaq/realtime/host_ring.cuh``, keep in sync):
the device-memory transport context of the GPU host-ring bridge."""

from __future__ import annotations

import struct

from skbuild_cudaq.realtime.ring.layout import RingLayout

__all__ = [
    "HOST_RING_CTX_MAGIC",
    "HOST_RING_CTX_SIZE",
    "HOST_RING_LANE_SIZE",
    "HOST_RING_MAX_LANES",
    "host_ring_ctx_bytes",
]

HOST_RING_CTX_MAGIC = 0x474E4952  # 'RING'
HOST_RING_MAX_LANES = 32
HOST_RING_LANE_SIZE = 40
HOST_RING_CTX_HEADER_SIZE = 48
HOST_RING_CTX_SIZE = HOST_RING_CTX_HEADER_SIZE + HOST_RING_LANE_SIZE * HOST_RING_MAX_LANES
_CTX_HEADER = struct.Struct("<IIIIQQQQ")
assert _CTX_HEADER.size == HOST_RING_CTX_HEADER_SIZE


def host_ring_ctx_bytes(layout: RingLayout, ring_device_address: int, ctx_address: int) -> bytes:
    """The ``cudaq_host_ring_ctx_t`` bytes for a ring whose allocation the device sees
    at ``ring_device_address``, to be copied to device memory at ``ctx_address``.

    Each lane's back pointer (``ring``) is ``ctx_address``: the hooks read it
    through the read-only path and refuse a lane whose pointer is not its
    context's. The rest of each lane is zero (the kernel fills it on entry; a
    zero ``resume_seq`` means no suspended position: the next kernel starts at
    the ring's first slot).
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
