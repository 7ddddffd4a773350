from __future__ import annotations

import struct

import pytest

from skbuild_cudaq.realtime import wire
from skbuild_cudaq.realtime.errors import ProtocolError
from skbuild_cudaq.realtime.wire import (
    RequestHeader,
    ResponseHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    fnv1a_32,
    function_id,
)


def _reference_fnv(data: bytes) -> int:
    h = 0x811C9DC5
    for b in data:
        h ^= b
        h = (h * 0x01000193) % 2**32
    return h


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("rpc_increment", 0x191B6322),  # golden value shared with the device header
        ("", 0x811C9DC5),  # the offset basis
        ("a", 0xE40C292C),  # published FNV-1a test vector
        ("foobar", 0xBF9CF968),  # published FNV-1a test vector
    ],
)
def test_fnv1a_golden(name: str, expected: int) -> None:
    assert fnv1a_32(name) == expected
    assert fnv1a_32(name.encode()) == expected
    assert function_id(name) == expected


def test_fnv1a_bytes_are_unsigned() -> None:
    data = bytes(range(128, 256))
    assert fnv1a_32(data) == _reference_fnv(data)
    assert fnv1a_32("é") == _reference_fnv("é".encode())


def test_function_id_accepts_ids_and_rejects_bad_ones() -> None:
    assert function_id(0x191B6322) == 0x191B6322
    with pytest.raises(ValueError, match="32-bit"):
        function_id(2**32)
    with pytest.raises(TypeError):
        function_id(True)


def test_constants() -> None:
    assert struct.pack(">I", wire.REQUEST_MAGIC) == b"CUQR"
    assert struct.pack(">I", wire.RESPONSE_MAGIC) == b"CUQS"
    assert wire.HEADER_SIZE == 24
    assert (wire.STATUS_SUCCESS, wire.STATUS_BAD_MAGIC) == (0, -1)
    assert (wire.STATUS_UNKNOWN_FUNCTION, wire.STATUS_ARGS_TOO_LONG) == (-2, -3)


def test_request_golden_bytes() -> None:
    data = encode_request(
        "rpc_increment", b"\x01\x02\x03", request_id=7, timestamp=0x0102030405060708
    )
    assert data.hex() == (
        "52515543"  # magic 'CUQR' little-endian
        "22631b19"  # fnv1a("rpc_increment")
        "03000000"  # arg_len
        "07000000"  # request_id
        "0807060504030201"  # ptp_timestamp
        "010203"
    )
    req = decode_request(data)
    assert req.header == RequestHeader(wire.REQUEST_MAGIC, 0x191B6322, 3, 7, 0x0102030405060708)
    assert req.args == b"\x01\x02\x03"
    assert req.to_bytes() == data


def test_response_golden_bytes() -> None:
    data = encode_response(-2, b"", request_id=0xDEADBEEF, timestamp=5)
    assert data.hex() == "53515543feffffff00000000efbeadde0500000000000000"
    resp = decode_response(data)
    assert resp.header == ResponseHeader(wire.RESPONSE_MAGIC, -2, 0, 0xDEADBEEF, 5)
    assert resp.status == -2
    assert not resp.ok
    assert resp.to_bytes() == data
    ok = decode_response(encode_response(0, b"xyz", request_id=1))
    assert ok.ok and ok.result == b"xyz" and ok.request_id == 1


def test_header_roundtrip_and_ranges() -> None:
    h = RequestHeader(wire.REQUEST_MAGIC, 2**32 - 1, 0, 2**32 - 1, 2**64 - 1)
    assert RequestHeader.unpack(h.pack()) == h
    r = ResponseHeader(status=-(2**31), result_len=4)
    assert ResponseHeader.unpack(b"\0\0" + r.pack(), offset=2) == r
    with pytest.raises(ValueError, match="request_id"):
        RequestHeader(request_id=2**32).pack()
    with pytest.raises(ValueError, match="status"):
        ResponseHeader(status=2**31).pack()


def test_decode_errors() -> None:
    with pytest.raises(ProtocolError, match="24 bytes"):
        RequestHeader.unpack(b"\0" * 23)
    with pytest.raises(ProtocolError, match="arg_len=5"):
        decode_request(encode_request(1, b"abc", arg_len=5))
    with pytest.raises(ProtocolError, match="magic"):
        decode_response(encode_request(1, b""))
    with pytest.raises(ProtocolError, match="result_len=3"):
        decode_response(encode_response(0, b"abc")[:-1])
    forged = encode_request("echo", b"ab", magic=0x12345678)
    assert RequestHeader.unpack(forged).magic == 0x12345678
