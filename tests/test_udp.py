from __future__ import annotations

import os
import random
import socket
import struct
from collections.abc import Iterator

import pytest

from skbuild_cudaq.realtime._ring import RingLayout
from skbuild_cudaq.realtime.host_path import HostDispatcher, echo, rpc_increment
from skbuild_cudaq.realtime.udp import UdpBridge, UdpClient
from skbuild_cudaq.realtime.wire import (
    STATUS_ARGS_TOO_LONG,
    STATUS_BAD_MAGIC,
    STATUS_UNKNOWN_FUNCTION,
    decode_response,
    encode_request,
)


@pytest.fixture
def served() -> Iterator[tuple[HostDispatcher, UdpBridge, UdpClient]]:
    dispatcher = HostDispatcher(RingLayout(8, 128), {"echo": echo, "rpc_increment": rpc_increment})
    with (
        dispatcher,
        UdpBridge(dispatcher.client(), spin=16) as bridge,
        UdpClient(*bridge.address, timeout=10) as client,
    ):
        yield dispatcher, bridge, client


def test_calls_and_pipelining(served: tuple[HostDispatcher, UdpBridge, UdpClient]) -> None:
    dispatcher, bridge, client = served
    assert client.call("rpc_increment", b"\x00\x7f\xff") == (0, b"\x01\x80\x00")
    rng = random.Random(5)
    payloads = [rng.randbytes(rng.randint(0, 104)) for _ in range(200)]  # 25 ring wraps
    tickets = client.submit_many([("echo", p) for p in payloads])
    assert [r.result for r in client.collect(tickets)] == payloads
    assert dispatcher.processed == bridge.forwarded == 201


def test_malformed_datagrams(served: tuple[HostDispatcher, UdpBridge, UdpClient]) -> None:
    dispatcher, bridge, client = served
    client.send_raw(b"")
    client.send_raw(b"short")
    client.send_raw(os.urandom(23))
    cases = [
        # (datagram, expected status): bridge-answered, then dispatcher-answered
        (encode_request("echo", b"abc", request_id=1, arg_len=4), STATUS_ARGS_TOO_LONG),
        (encode_request("echo", b"x" * 105, request_id=2), STATUS_ARGS_TOO_LONG),
        (encode_request("echo", b"x" * 104, request_id=3, arg_len=10**6), STATUS_ARGS_TOO_LONG),
        (encode_request("echo", b"abc", request_id=4, magic=7, arg_len=9), STATUS_BAD_MAGIC),
        (encode_request("echo", b"abc", request_id=5, magic=7), STATUS_BAD_MAGIC),
        (encode_request("nope", b"abc", request_id=6), STATUS_UNKNOWN_FUNCTION),
    ]
    for data, _ in cases:
        client.send_raw(data)
    from skbuild_cudaq.realtime.udp import UdpTicket

    got = client.collect([UdpTicket(i + 1, 0) for i in range(len(cases))])
    assert [(r.status, r.request_id, r.result) for r in got] == [
        (status, i + 1, b"") for i, (_, status) in enumerate(cases)
    ]
    assert client.call("echo", b"still here") == (0, b"still here")
    c = bridge.counters
    assert c["dropped"] == 3 and c["rejected"] == 4 and c["forwarded"] == 3
    assert c["received"] == 10 and c["answered"] == 3 == dispatcher.processed


def test_responses_go_to_each_sender(served: tuple[HostDispatcher, UdpBridge, UdpClient]) -> None:
    _, bridge, first = served
    with UdpClient(*bridge.address) as second:
        t1 = first.submit("echo", b"one", request_id=1)
        t2 = second.submit("echo", b"two", request_id=1)
        assert second.wait(t2).result == b"two"
        assert first.wait(t1).result == b"one"


def test_raw_socket_roundtrip(served: tuple[HostDispatcher, UdpBridge, UdpClient]) -> None:
    _, bridge, _ = served
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(10)
        s.sendto(encode_request("echo", b"hi", request_id=42, timestamp=2**63), bridge.address)
        data = s.recv(1000)
    assert len(data) == 26
    assert struct.unpack_from("<IiIIQ", data) == (0x43555153, 0, 2, 42, 2**63)
    assert decode_response(data).result == b"hi"


def test_bridge_lifecycle() -> None:
    dispatcher = HostDispatcher(RingLayout(2, 64), {"echo": echo})
    bridge = UdpBridge(dispatcher.client(), spin=0)
    bridge.stop()
    with dispatcher:
        bridge.start()
        bridge.start()
        with UdpClient(*bridge.address) as c:
            assert c.call("echo", b"a") == (0, b"a")
            bridge.stop()
            bridge.stop()
            assert not bridge.running
            t = c.submit("echo", b"b")
            with pytest.raises(TimeoutError, match="no UDP response"):
                c.wait(t, timeout=0.1)
            bridge.start()  # the queued datagram is served after a restart
            assert c.wait(t).result == b"b"
    bridge.close()
    bridge.close()
