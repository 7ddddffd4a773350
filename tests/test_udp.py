from __future__ import annotations

import os
import random
import socket
import struct
from collections.abc import Iterator

import pytest

from skbuild_cudaq.realtime.host_path import HostDispatcher, echo, rpc_increment
from skbuild_cudaq.realtime.ring import RingLayout
from skbuild_cudaq.realtime.udp import UdpBridge, UdpClient
from skbuild_cudaq.realtime.wire import (
    STATUS_ARGS_TOO_LONG,
    STATUS_BAD_MAGIC,
    STATUS_UNKNOWN_FUNCTION,
    decode_response,
    encode_request,
    encode_response,
)


@pytest.fixture
def served() -> Iterator[tuple[HostDispatcher, UdpBridge, UdpClient]]:
    dispatcher = HostDispatcher(RingLayout(8, 128), {"echo": echo, "rpc_increment": rpc_increment})
    with (
        dispatcher,
        UdpBridge(dispatcher.client()) as bridge,
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
    bridge = UdpBridge(dispatcher.client())
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


# -- issue 11: UDP framing of CUDA-Q realtime, whose response is it --------------------------


def test_padded_slot_size_datagrams_are_served(
    served: tuple[HostDispatcher, UdpBridge, UdpClient],
) -> None:
    """CUDA-Q realtime's UDP transport sends header + arguments + padding up to the slot."""
    dispatcher, bridge, _ = served
    slot = dispatcher.layout.slot_size
    rng = random.Random(9)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(10)
        for i in range(50):
            args = rng.randbytes(rng.randint(0, slot - 24))
            request = encode_request("rpc_increment", args, request_id=1000 + i, timestamp=i)
            pad = rng.choice([slot - len(request), rng.randint(0, slot - len(request))])
            s.sendto(request + rng.randbytes(pad), bridge.address)
            response = decode_response(s.recv(2000))
            assert (response.status, response.request_id, response.header.ptp_timestamp) == (
                0,
                1000 + i,
                i,
            )
            assert response.result == bytes((b + 1) & 0xFF for b in args)
        # what truly exceeds the slot, or claims more arguments than it carries: -3
        too_long = encode_request("echo", b"x" * (slot - 24), request_id=7) + b"\0"
        short = encode_request("echo", b"abc", request_id=8, arg_len=40) + bytes(30)
        for data, rid in ((too_long, 7), (short, 8)):
            s.sendto(data, bridge.address)
            response = decode_response(s.recv(2000))
            assert (response.status, response.request_id) == (STATUS_ARGS_TOO_LONG, rid)
    assert bridge.counters["forwarded"] == 50 and bridge.counters["rejected"] == 2


def test_peers_ids_stay_theirs_and_ring_ids_stay_unique(
    served: tuple[HostDispatcher, UdpBridge, UdpClient],
) -> None:
    dispatcher, bridge, first = served
    ids_before = int(struct.unpack_from("<Q", dispatcher.buffer, dispatcher.layout.ids_offset)[0])
    with UdpClient(*bridge.address) as second:
        pairs = [
            (
                first.submit("echo", b"1-%d" % i, request_id=i),
                second.submit("echo", b"2-%d" % i, request_id=i),
            )
            for i in range(20)
        ]
        for i, (a, b) in enumerate(pairs):
            assert first.wait(a).result == b"1-%d" % i and a.request_id == i
            assert second.wait(b).result == b"2-%d" % i and b.request_id == i
    ids_after = int(struct.unpack_from("<Q", dispatcher.buffer, dispatcher.layout.ids_offset)[0])
    assert ids_after - ids_before == 40  # one ring id per forwarded request


def test_client_accepts_only_answers_to_its_own_outstanding_requests() -> None:
    """A peer that answers with foreign, duplicate and late responses."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as peer:
        peer.bind(("127.0.0.1", 0))
        peer.settimeout(10)
        with UdpClient(*peer.getsockname()[:2], timeout=10) as client:
            t = client.submit("echo", b"mine", timestamp=5)
            data, addr = peer.recvfrom(100)
            rid = struct.unpack_from("<I", data, 12)[0]
            for forged in (
                encode_response(0, b"foreign", request_id=rid + 1, timestamp=5),
                encode_response(0, b"foreign", request_id=rid, timestamp=6),
                encode_response(0, b"mine", request_id=rid, timestamp=5),
                encode_response(0, b"second answer", request_id=rid, timestamp=5),
            ):
                peer.sendto(forged, addr)
            assert client.wait(t).result == b"mine"
            late = client.submit("echo", b"late")
            client.discard()  # forgotten: its answer is dropped when it comes
            peer.sendto(encode_response(0, b"late", request_id=late.request_id), addr)
            t2 = client.submit("echo", b"new")
            assert t2.request_id != late.request_id
            peer.sendto(encode_response(0, b"new", request_id=t2.request_id), addr)
            assert client.wait(t2).result == b"new"
            assert client.unmatched >= 3
            client.submit("echo", request_id=77, timestamp=1)
            with pytest.raises(ValueError, match="already in flight"):
                client.submit("echo", request_id=77, timestamp=1)
