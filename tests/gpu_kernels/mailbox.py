"""A bridge of one's own, as a third party would write it: a one-request mailbox.

The host half of ``mailbox_bridge.cu``, written only against the public API
(:class:`skbuild_cudaq.realtime.Bridge`, ``cuda.bindings``, the wire helpers):
one pinned, mapped allocation holds ``request[slot_size]``,
``response[slot_size]``, ``u32 posted`` and ``u32 answered``; the transport
context (56 bytes, layout in the .cu file) lives in device memory.
"""

from __future__ import annotations

import ctypes
import struct
import time
from pathlib import Path
from typing import Any

from skbuild_cudaq.realtime import wire

MAGIC = 0x584F424D  # 'MBOX'
_CTX = struct.Struct("<IIQQQQQII")  # magic, slot_size, request, response, posted, answered,
#                                     shutdown (set by the kernel), taken, reserved
assert _CTX.size == 56


def _check(ret: Any) -> Any:
    err, *values = ret if isinstance(ret, tuple) else (ret,)
    if int(err) != 0:
        msg = f"CUDA call failed: {err!r}"
        raise RuntimeError(msg)
    return values[0] if len(values) == 1 else values


class MailboxBridge:
    """Host half: satisfies :class:`skbuild_cudaq.realtime.Bridge`."""

    num_slots = 1

    def __init__(self, device_code: Path, slot_size: int = 128) -> None:
        self.slot_size = slot_size
        self.device_code = (Path(device_code),)
        self._host = 0
        self._dev = 0
        self._ctx = 0
        self._sent = 0

    @property
    def _posted(self) -> ctypes.c_uint32:
        return ctypes.c_uint32.from_address(self._host + 2 * self.slot_size)

    @property
    def _answered(self) -> ctypes.c_uint32:
        return ctypes.c_uint32.from_address(self._host + 2 * self.slot_size + 4)

    def open(self) -> MailboxBridge:
        from cuda.bindings import driver as d

        if self._host:
            return self
        total = 2 * self.slot_size + 8
        flags = d.CU_MEMHOSTALLOC_DEVICEMAP | d.CU_MEMHOSTALLOC_PORTABLE
        self._host = int(_check(d.cuMemHostAlloc(total, flags)))
        self._dev = int(_check(d.cuMemHostGetDevicePointer(self._host, 0)))
        self._ctx = int(_check(d.cuMemAlloc(_CTX.size)))
        self.reset()
        return self

    def reset(self) -> None:
        from cuda.bindings import driver as d

        ctypes.memset(self._host, 0, 2 * self.slot_size + 8)
        base, size = self._dev, self.slot_size
        ctx = _CTX.pack(MAGIC, size, base, base + size, base + 2 * size, base + 2 * size + 4,
                        0, 0, 0)  # fmt: skip
        _check(d.cuMemcpyHtoD(self._ctx, ctx, len(ctx)))
        self._sent = 0

    @property
    def transport_ctx(self) -> int:
        return self._ctx

    def close(self) -> None:
        from cuda.bindings import driver as d

        if self._ctx:
            _check(d.cuMemFree(self._ctx))
        if self._host:
            _check(d.cuMemFreeHost(self._host))
        self._ctx = self._host = self._dev = 0

    # -- the client side ----------------------------------------------------
    def call(self, function: str, payload: bytes, timeout: float = 20.0) -> wire.Response:
        """One request: write it, post it, wait for the answer, decode it."""
        message = wire.encode_request(
            function, payload, request_id=self._sent, timestamp=0x5EED0000 + self._sent
        )
        if len(message) > self.slot_size:
            msg = f"{len(message)} bytes do not fit a {self.slot_size}-byte slot"
            raise ValueError(msg)
        ctypes.memmove(self._host, message, len(message))
        self._sent += 1
        self._posted.value = self._sent  # after the bytes: x86 stores stay in order
        end = time.monotonic() + timeout
        while self._answered.value != self._sent:
            if time.monotonic() > end:
                msg = f"no answer to request {self._sent - 1} within {timeout} s"
                raise TimeoutError(msg)
        raw = ctypes.string_at(self._host + self.slot_size, self.slot_size)
        head = wire.ResponseHeader.unpack(raw)
        return wire.decode_response(raw[: wire.HEADER_SIZE + head.result_len])
