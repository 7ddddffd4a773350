"""Types of the compiled round trip of ``RingClient.call`` (``_fastcall.c``)."""

from typing import Any

class Ring:
    next: int
    collected: int
    spin_ns: int
    prefetch_response: int
    release_gil: int
    def __init__(self, address: int, num_slots: int, slot_size: int, max_payload: int) -> None: ...
    def call(
        self, k: int, function_id: int, payload: object, spin_ns: int, /
    ) -> tuple[int, bytes] | int | None: ...
    def call_next(self, function: object, payload: object, /) -> tuple[int, bytes] | int | None: ...
    def call_next_stamped(
        self, function: object, payload: object, /
    ) -> tuple[tuple[int, bytes] | int | bool | None, int, int]: ...
    def call_next_traced(
        self, function: object, payload: object, /
    ) -> tuple[tuple[int, bytes] | int | bool | None, tuple[int, int, int, int, int, int, int]]: ...
    def remember(self, function: object, function_id: int, /) -> None: ...
    def attach(self, pending: list[Any], /) -> None: ...

def call(
    self: Any, /, function: object, payload: object = b"", *, timeout: object = ...
) -> tuple[int, bytes]:
    """``RingClient.call`` as compiled code (a method descriptor the class takes)."""
