"""The ring's shape and geometry: :class:`RingLayout`, the one value object for
``(num_slots, slot_size)``.

It is validated here and nowhere else (one exception type,
:class:`~skbuild_cudaq.realtime.InvalidArgumentError`, a ``ValueError``), and flows
unchanged from ``DispatcherConfig`` to the bridge, the transport context and the
dispatch kernel's launch arguments. The header size is
:data:`~skbuild_cudaq.realtime.wire.HEADER_SIZE`.
"""

from __future__ import annotations

from dataclasses import dataclass

from skbuild_cudaq.realtime.wire import HEADER_SIZE

__all__ = ["RingLayout"]

_U32 = 0xFFFFFFFF


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # True is no slot count


@dataclass(frozen=True)
class RingLayout:
    """Shape and geometry of one ring allocation (see :mod:`skbuild_cudaq.realtime.ring`)."""

    num_slots: int
    slot_size: int  #: bytes per slot, the RPC header (``HEADER_SIZE``) and the payload

    def __post_init__(self) -> None:
        from skbuild_cudaq.realtime.errors import InvalidArgumentError  # a ValueError too

        if not _is_int(self.num_slots) or self.num_slots < 1:
            msg = (
                f"num_slots={self.num_slots!r}: a ring needs at least 1 slot "
                "(num_slots must be an integer >= 1)"
            )
            raise InvalidArgumentError(msg)
        if not _is_int(self.slot_size) or self.slot_size <= HEADER_SIZE or self.slot_size % 8 != 0:
            msg = (
                f"slot_size={self.slot_size!r}: slot_size must be a multiple of 8 greater than "
                f"the {HEADER_SIZE}-byte RPC header (a slot holds the header and the payload)"
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
