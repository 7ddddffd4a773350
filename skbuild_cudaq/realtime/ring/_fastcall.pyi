"""Types of the compiled round trip of ``RingClient.call`` (``_fastcall.c``)."""

class Ring:
    def __init__(self, address: int, num_slots: int, slot_size: int, max_payload: int) -> None: ...
    def call(
        self, k: int, function_id: int, payload: object, spin_ns: int, /
    ) -> tuple[int, bytes] | int | None: ...
