"""The RPC wire format of CUDA-Q realtime (pure Python, no CUDA).

Request header, 24 bytes, packed, little-endian::

    u32 magic 0x43555152 ('CUQR'), u32 function_id, u32 arg_len, u32 request_id,
    u64 ptp_timestamp, then arg_len argument bytes

Response header, 24 bytes::

    u32 magic 0x43555153 ('CUQS'), i32 status, u32 result_len,
    u32 request_id (echo), u64 ptp_timestamp (echo), then result_len result bytes

``function_id`` is the 32-bit FNV-1a hash of the handler's name. Status 0 is
success, > 0 handler-specific, -1 bad magic, -2 unknown function id, -3
arguments longer than the slot. Mirrors ``cudaq/realtime/unified_dispatch_device.cuh``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from skbuild_cudaq.realtime.errors import ProtocolError, WrongTypeError

__all__ = [
    "FNV1A_32_BASIS",
    "FNV1A_32_PRIME",
    "HEADER_SIZE",
    "REQUEST_MAGIC",
    "RESPONSE_MAGIC",
    "STATUS_ARGS_TOO_LONG",
    "STATUS_BAD_MAGIC",
    "STATUS_SUCCESS",
    "STATUS_UNKNOWN_FUNCTION",
    "Request",
    "RequestHeader",
    "Response",
    "ResponseHeader",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "fnv1a_32",
    "function_id",
]

REQUEST_MAGIC = 0x43555152  # 'CUQR'
RESPONSE_MAGIC = 0x43555153  # 'CUQS'
HEADER_SIZE = 24

STATUS_SUCCESS = 0
STATUS_BAD_MAGIC = -1
STATUS_UNKNOWN_FUNCTION = -2
STATUS_ARGS_TOO_LONG = -3

FNV1A_32_BASIS = 2166136261
FNV1A_32_PRIME = 16777619

_U32 = 0xFFFFFFFF
_U64 = 0xFFFFFFFFFFFFFFFF
_REQUEST = struct.Struct("<IIIIQ")
_RESPONSE = struct.Struct("<IiIIQ")
assert _REQUEST.size == _RESPONSE.size == HEADER_SIZE


def fnv1a_32(name: str | bytes) -> int:
    """32-bit FNV-1a of ``name`` (UTF-8 for ``str``), bytes taken as unsigned."""
    data = name.encode() if isinstance(name, str) else bytes(name)
    h = FNV1A_32_BASIS
    for byte in data:
        h = ((h ^ byte) * FNV1A_32_PRIME) & _U32
    return h


#: function ids of names seen so far: a handler name is hashed once per process
#: (clients call the same few handlers over and over).
_IDS: dict[str, int] = {}
_IDS_MAX = 4096


def function_id(name: str | bytes | int) -> int:
    """The wire ``function_id`` of a handler: FNV-1a of its name; an ``int`` is taken as the id."""
    fid = _IDS.get(name) if type(name) is str else None
    if fid is not None:
        return fid
    if isinstance(name, bool) or not isinstance(name, (str, bytes, int)):
        msg = (
            f"function_id(): a function is named by str, bytes or int id, not "
            f"{type(name).__name__} {name!r:.60}: pass a handler's name or its 32-bit id"
        )
        raise WrongTypeError(msg)
    if isinstance(name, int):
        if not 0 <= name <= _U32:
            msg = f"function id {name} is not an unsigned 32-bit value"
            raise ValueError(msg)
        return name
    fid = fnv1a_32(name)
    if type(name) is str and len(_IDS) < _IDS_MAX:
        _IDS[name] = fid
    return fid


def _check_range(name: str, value: int, lo: int, hi: int) -> None:
    if not lo <= value <= hi:
        msg = f"{name}={value} is out of range [{lo}, {hi}]"
        raise ValueError(msg)


@dataclass(frozen=True)
class RequestHeader:
    """The 24-byte request header."""

    magic: int = REQUEST_MAGIC
    function_id: int = 0
    arg_len: int = 0
    request_id: int = 0
    ptp_timestamp: int = 0

    def pack(self) -> bytes:
        for field in ("magic", "function_id", "arg_len", "request_id"):
            _check_range(field, getattr(self, field), 0, _U32)
        _check_range("ptp_timestamp", self.ptp_timestamp, 0, _U64)
        return _REQUEST.pack(
            self.magic, self.function_id, self.arg_len, self.request_id, self.ptp_timestamp
        )

    @classmethod
    def unpack(cls, data: bytes | bytearray | memoryview, offset: int = 0) -> RequestHeader:
        if len(data) - offset < HEADER_SIZE:
            msg = f"a request header is {HEADER_SIZE} bytes, got {max(len(data) - offset, 0)}"
            raise ProtocolError(msg)
        return cls(*_REQUEST.unpack_from(data, offset))


@dataclass(frozen=True)
class ResponseHeader:
    """The 24-byte response header."""

    magic: int = RESPONSE_MAGIC
    status: int = STATUS_SUCCESS
    result_len: int = 0
    request_id: int = 0
    ptp_timestamp: int = 0

    def pack(self) -> bytes:
        for field in ("magic", "result_len", "request_id"):
            _check_range(field, getattr(self, field), 0, _U32)
        _check_range("status", self.status, -(2**31), 2**31 - 1)
        _check_range("ptp_timestamp", self.ptp_timestamp, 0, _U64)
        return _RESPONSE.pack(
            self.magic, self.status, self.result_len, self.request_id, self.ptp_timestamp
        )

    @classmethod
    def unpack(cls, data: bytes | bytearray | memoryview, offset: int = 0) -> ResponseHeader:
        if len(data) - offset < HEADER_SIZE:
            msg = f"a response header is {HEADER_SIZE} bytes, got {max(len(data) - offset, 0)}"
            raise ProtocolError(msg)
        return cls(*_RESPONSE.unpack_from(data, offset))


@dataclass(frozen=True)
class Request:
    """A decoded request: header and argument bytes."""

    header: RequestHeader
    args: bytes

    def to_bytes(self) -> bytes:
        return self.header.pack() + self.args


@dataclass(frozen=True)
class Response:
    """A decoded response: header and result bytes."""

    header: ResponseHeader
    result: bytes

    @property
    def status(self) -> int:
        return self.header.status

    @property
    def request_id(self) -> int:
        return self.header.request_id

    @property
    def ok(self) -> bool:
        return self.header.status == STATUS_SUCCESS

    def to_bytes(self) -> bytes:
        return self.header.pack() + self.result


def _payload_bytes(payload: object) -> bytes | bytearray:
    """A request's arguments as bytes: ``bytes`` and ``bytearray`` as they are, any other
    object with the buffer protocol (``memoryview``, a numpy array) copied. An int is
    refused (``bytes(5)`` would send five zero bytes), and so are ``str`` and ``None``."""
    if isinstance(payload, (bytes, bytearray)):
        return payload
    try:
        return bytes(memoryview(payload))  # type: ignore[arg-type]
    except TypeError:
        msg = (
            "a request's payload must be bytes-like (bytes, bytearray, memoryview, a uint8 "
            f"array), not {type(payload).__name__}"
        )
        raise TypeError(msg) from None


def encode_request(
    function: str | bytes | int,
    args: bytes | bytearray | memoryview = b"",
    *,
    request_id: int = 0,
    timestamp: int = 0,
    magic: int = REQUEST_MAGIC,
    arg_len: int | None = None,
) -> bytes:
    """Header + arguments of one request. ``magic``/``arg_len`` may be forged (for tests)."""
    data = bytes(_payload_bytes(args))
    header = RequestHeader(
        magic=magic,
        function_id=function_id(function),
        arg_len=len(data) if arg_len is None else arg_len,
        request_id=request_id,
        ptp_timestamp=timestamp,
    )
    return header.pack() + data


def decode_request(data: bytes | bytearray | memoryview) -> Request:
    """Parse a whole request message; ``arg_len`` must match the bytes that follow."""
    header = RequestHeader.unpack(data)
    if len(data) - HEADER_SIZE != header.arg_len:
        msg = f"request says arg_len={header.arg_len} but {len(data) - HEADER_SIZE} bytes follow"
        raise ProtocolError(msg)
    return Request(header, bytes(data[HEADER_SIZE:]))


def encode_response(
    status: int,
    result: bytes | bytearray | memoryview = b"",
    *,
    request_id: int = 0,
    timestamp: int = 0,
) -> bytes:
    """Header + result of one response."""
    data = bytes(result)
    header = ResponseHeader(
        status=status, result_len=len(data), request_id=request_id, ptp_timestamp=timestamp
    )
    return header.pack() + data


def decode_response(data: bytes | bytearray | memoryview) -> Response:
    """Parse a whole response message (magic checked, ``result_len`` bytes must follow)."""
    header = ResponseHeader.unpack(data)
    if header.magic != RESPONSE_MAGIC:
        msg = f"response magic is {header.magic:#010x}, expected {RESPONSE_MAGIC:#010x}"
        raise ProtocolError(msg)
    if len(data) - HEADER_SIZE < header.result_len:
        msg = (
            f"response says result_len={header.result_len} but only "
            f"{len(data) - HEADER_SIZE} bytes follow"
        )
        raise ProtocolError(msg)
    return Response(header, bytes(data[HEADER_SIZE : HEADER_SIZE + header.result_len]))
