from __future__ import annotations

import contextlib
import os
import random
import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from skbuild_cudaq.realtime.errors import InvalidArgumentError, RealtimeError, UdpFeederError
from skbuild_cudaq.realtime.host.dispatcher import HostDispatcher, echo, rpc_increment
from skbuild_cudaq.realtime.host.udp import UdpClient, UdpFeeder
from skbuild_cudaq.realtime.ring import RingLayout
from skbuild_cudaq.realtime.wire import (
    STATUS_ARGS_TOO_LONG,
    STATUS_BAD_MAGIC,
    STATUS_UNKNOWN_FUNCTION,
    decode_response,
    encode_request,
    encode_response,
)


@pytest.fixture
def served() -> Iterator[tuple[HostDispatcher, UdpFeeder, UdpClient]]:
    dispatcher = HostDispatcher(RingLayout(8, 128), {"echo": echo, "rpc_increment": rpc_increment})
    with (
        dispatcher,
        UdpFeeder(dispatcher.client()) as bridge,
        UdpClient(*bridge.address, timeout=10) as client,
    ):
        yield dispatcher, bridge, client


def test_calls_and_pipelining(served: tuple[HostDispatcher, UdpFeeder, UdpClient]) -> None:
    dispatcher, bridge, client = served
    assert client.call("rpc_increment", b"\x00\x7f\xff") == (0, b"\x01\x80\x00")
    rng = random.Random(5)
    payloads = [rng.randbytes(rng.randint(0, 104)) for _ in range(200)]  # 25 ring wraps
    tickets = client.submit_many([("echo", p) for p in payloads])
    assert [r.result for r in client.collect(tickets)] == payloads
    assert dispatcher.processed == bridge.forwarded == 201


def test_malformed_datagrams(served: tuple[HostDispatcher, UdpFeeder, UdpClient]) -> None:
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
    from skbuild_cudaq.realtime.host.udp import UdpTicket

    got = client.collect([UdpTicket(i + 1, 0) for i in range(len(cases))])
    assert [(r.status, r.request_id, r.result) for r in got] == [
        (status, i + 1, b"") for i, (_, status) in enumerate(cases)
    ]
    assert client.call("echo", b"still here") == (0, b"still here")
    c = bridge.counters
    assert c["dropped"] == 3 and c["rejected"] == 4 and c["forwarded"] == 3
    assert c["received"] == 10 and c["answered"] == 3 == dispatcher.processed


def test_responses_go_to_each_sender(served: tuple[HostDispatcher, UdpFeeder, UdpClient]) -> None:
    _, bridge, first = served
    with UdpClient(*bridge.address) as second:
        t1 = first.submit("echo", b"one", request_id=1)
        t2 = second.submit("echo", b"two", request_id=1)
        assert second.wait(t2).result == b"two"
        assert first.wait(t1).result == b"one"


def test_raw_socket_roundtrip(served: tuple[HostDispatcher, UdpFeeder, UdpClient]) -> None:
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
    bridge = UdpFeeder(dispatcher.client())
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
    served: tuple[HostDispatcher, UdpFeeder, UdpClient],
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
    served: tuple[HostDispatcher, UdpFeeder, UdpClient],
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


def test_a_request_longer_than_a_datagram_is_refused_before_anything_is_sent() -> None:
    """The system refuses such a datagram (EMSGSIZE): a typed error naming the sizes, not an
    OSError; nothing is left outstanding and the client keeps working."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as peer:
        peer.bind(("127.0.0.1", 0))
        peer.settimeout(10)
        with UdpClient(*peer.getsockname()[:2], timeout=10) as client:
            with pytest.raises(InvalidArgumentError, match=r"request of 70024 bytes \(70000 of"):
                client.submit("echo", bytes(70_000))
            t = client.submit("echo", b"small")
            data, addr = peer.recvfrom(100)
            assert len(data) == 24 + 5
            peer.sendto(encode_response(0, b"small", request_id=t.request_id), addr)
            assert client.wait(t).result == b"small"
            assert not client._outstanding


# -- issue 40: no answer loops, own address, IPv6, binding beyond loopback --------------------


def _spoofed_udp(source: tuple[str, int], dest: tuple[str, int], payload: bytes) -> None:
    """Send one IPv4 UDP datagram whose source address is ``source`` (a raw socket: root only;
    loopback only). How a server's own address, or a second server's, arrives as a source."""
    try:
        raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    except PermissionError:
        pytest.skip("needs CAP_NET_RAW (root) to send a datagram from another address")
    assert dest[0].startswith("127.")
    udp = struct.pack("!HHHH", source[1], dest[1], 8 + len(payload), 0)  # checksum 0: none
    ip = struct.pack(
        "!BBHHHBBH4s4s",
        0x45, 0, 20 + len(udp) + len(payload), 0, 0, 64, socket.IPPROTO_UDP, 0,
        socket.inet_aton(source[0]), socket.inet_aton(dest[0]),
    )  # fmt: skip  # the kernel fills in the length, id and checksum of the IP header
    with raw:
        raw.sendto(ip + udp + payload, (dest[0], 0))


def _settle(bridge: UdpFeeder, key: str, value: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while bridge.counters[key] < value and time.monotonic() < deadline:
        time.sleep(1e-3)


def test_datagrams_with_the_response_magic_are_dropped_never_answered(
    served: tuple[HostDispatcher, UdpFeeder, UdpClient],
) -> None:
    """An answer is never answered: else two servers (or one, to itself) answer for ever."""
    dispatcher, bridge, client = served
    slot = dispatcher.layout.slot_size
    answers = [
        encode_response(0, b"abc", request_id=1),
        encode_response(STATUS_BAD_MAGIC, request_id=2),
        encode_response(0, b"x" * slot, request_id=3),  # longer than a slot
        encode_response(0, request_id=4) + b"x" * 7,  # shorter than its "arg_len" says
    ]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(0.3)
        for data in answers:
            s.sendto(data, bridge.address)
        with pytest.raises(TimeoutError):
            s.recv(2000)
    assert client.call("echo", b"alive") == (0, b"alive")
    c = bridge.counters
    assert c["dropped_responses"] == 4 and c["received"] == 5
    assert c["rejected"] == 0 and c["forwarded"] == c["answered"] == dispatcher.processed == 1
    # other bad magic is still answered -1, as CUDA-Q realtime does
    bad = client.submit("echo", b"abc", request_id=9, magic=0x12345678)
    assert client.wait(bad).status == STATUS_BAD_MAGIC


def test_datagrams_from_the_feeders_own_address_are_dropped(
    served: tuple[HostDispatcher, UdpFeeder, UdpClient],
) -> None:
    dispatcher, bridge, client = served
    own = bridge.address
    # a request and an answer that claim to come from the feeder itself: before, the request
    # was answered to itself and that answer answered (-1) again, for ever
    _spoofed_udp(own, own, encode_request("echo", b"me", request_id=1))
    _spoofed_udp(own, own, encode_response(0, b"me", request_id=2))
    _settle(bridge, "dropped_own_address", 2)
    time.sleep(0.3)  # a loop would go on meanwhile
    c = bridge.counters
    assert c["dropped_own_address"] == 2 and c["received"] == 2
    assert c["forwarded"] == c["answered"] == dispatcher.processed == 0
    assert client.call("echo", b"alive") == (0, b"alive")


def test_a_feeder_bound_to_every_interface_knows_its_loopback_address() -> None:
    dispatcher = HostDispatcher(RingLayout(2, 64), {"echo": echo})
    with dispatcher, UdpFeeder(dispatcher.client(), host="0.0.0.0") as bridge:
        port = bridge.address[1]
        bridge._sock.sendto(encode_request("echo", b"me"), ("127.0.0.1", port))
        _settle(bridge, "dropped_own_address", 1)
        with UdpClient("127.0.0.1", port, timeout=10) as client:
            assert client.call("echo", b"you") == (0, b"you")
        assert bridge.counters["dropped_own_address"] == 1


def test_two_feeders_do_not_answer_each_others_answers() -> None:
    """A request forged with the second server's address as its source: the first answers the
    second, which must drop that answer (before, they answered each other for ever)."""
    with (
        HostDispatcher(RingLayout(4, 64), {"echo": echo}) as d1,
        HostDispatcher(RingLayout(4, 64), {"echo": echo}) as d2,
        UdpFeeder(d1.client()) as first,
        UdpFeeder(d2.client()) as second,
    ):
        _spoofed_udp(second.address, first.address, encode_request("nope", request_id=7))
        _settle(second, "dropped_responses", 1)
        time.sleep(0.3)
        assert first.counters["answered"] == 1 and first.counters["received"] == 1
        assert second.counters["dropped_responses"] == 1 and second.counters["received"] == 1
        assert second.counters["answered"] == 0 and second.counters["forwarded"] == 0


# -- issue 42: the native feeder ---------------------------------------------------------------


def test_bursts_are_batched_and_every_datagram_is_accounted_for() -> None:
    """Bursts of 256 datagrams (good, malformed, short) in flight at once: recvmmsg takes
    them in batches; every one is forwarded, rejected or dropped, every good one answered."""
    layout = RingLayout(64, 128)
    rng = random.Random(3)
    with (
        HostDispatcher(layout, {"echo": echo, "rpc_increment": rpc_increment}) as dispatcher,
        UdpFeeder(dispatcher.client()) as bridge,
        UdpClient(*bridge.address, timeout=30) as client,
    ):
        good = 0
        for burst in range(8):
            tickets, expected = [], []
            for i in range(256):
                kind = rng.random()
                if kind < 0.1:
                    client.send_raw(os.urandom(rng.randint(0, 23)))
                elif kind < 0.2:
                    client.send_raw(encode_request("echo", b"x", request_id=i, arg_len=50))
                else:
                    p = rng.randbytes(rng.randint(0, layout.max_payload))
                    tickets.append(client.submit("rpc_increment", p))
                    expected.append(bytes((b + 1) % 256 for b in p))
            assert [r.result for r in client.collect(tickets)] == expected, burst
            good += len(tickets)
            client.discard()  # the answers to the malformed ones
        c = bridge.counters
        assert c["received"] == 8 * 256 == c["forwarded"] + c["rejected"] + c["dropped"]
        assert c["forwarded"] == c["answered"] == good == dispatcher.processed
        assert c["send_errors"] == c["protocol_errors"] == 0


def test_requests_in_flight_at_stop_are_answered_after_the_next_start() -> None:
    dispatcher = HostDispatcher(RingLayout(4, 64), {"echo": echo})
    bridge = UdpFeeder(dispatcher.client()).start()  # nobody serves the ring yet
    with UdpClient(*bridge.address, timeout=10) as client:
        tickets = [client.submit("echo", b"%d" % i) for i in range(3)]
        _settle(bridge, "forwarded", 3)
        bridge.stop()
        with dispatcher:
            bridge.start()
            assert [r.result for r in client.collect(tickets)] == [b"0", b"1", b"2"]
            assert client.call("echo", b"next") == (0, b"next")
    bridge.close()
    dispatcher.close()


def test_closing_the_ring_client_stops_the_feeder_first() -> None:
    """A bridge closes its client before it frees the ring: the native thread is stopped
    before the memory can go."""
    dispatcher = HostDispatcher(RingLayout(4, 64), {"echo": echo})
    with dispatcher:
        ring_client = dispatcher.client()
        bridge = UdpFeeder(ring_client).start()
        assert bridge.running
        ring_client.close()
        assert not bridge.running
        with pytest.raises(UdpFeederError, match="the ring client is closed"):
            bridge.start()
        bridge.close()


def test_a_second_producer_on_the_ring_stops_the_feeder_with_the_reason() -> None:
    dispatcher = HostDispatcher(RingLayout(2, 64), {"echo": echo})
    with dispatcher:
        bridge = UdpFeeder(dispatcher.client()).start()
        other = dispatcher.client()  # a second producer: writes where the feeder will
        other.call("echo", b"mine")
        with UdpClient(*bridge.address, timeout=0.5) as client, pytest.raises(TimeoutError):
            client.call("echo", b"lost")
        deadline = time.monotonic() + 10
        while bridge.running and time.monotonic() < deadline:
            time.sleep(1e-3)
        assert not bridge.running
        assert "another producer wrote to the ring" in (bridge.error or "")
        with pytest.raises(UdpFeederError, match="UDP feeder thread failed: slot 0: request flag"):
            bridge.stop()
        bridge._sock.close()


def test_a_ring_client_with_requests_in_flight_is_refused() -> None:
    dispatcher = HostDispatcher(RingLayout(2, 64), {"echo": echo})
    ring_client = dispatcher.client()
    ring_client.submit("echo", b"pending")
    bridge = UdpFeeder(ring_client)
    with pytest.raises(UdpFeederError, match="1 requests in flight"):
        bridge.start()
    bridge.close()
    with pytest.raises(ValueError, match="idle_sleep"):
        UdpFeeder(ring_client, idle_sleep=-1)


def test_an_idle_feeder_waits_on_its_socket_and_wakes_for_a_datagram() -> None:
    with (
        HostDispatcher(RingLayout(4, 64), {"echo": echo}) as dispatcher,
        UdpFeeder(dispatcher.client(), idle_sleep=0.05) as bridge,
        UdpClient(*bridge.address, timeout=10) as client,
    ):
        for i in range(5):
            time.sleep(0.02)  # idle: the feeder waits in poll()
            assert client.call("echo", bytes([i])) == (0, bytes([i]))
        bridge.stop()  # observed in poll() (else an error after stop()'s 10 s)
        assert not bridge.running


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


def test_ipv6_loopback_is_served() -> None:
    if not _ipv6_loopback():
        pytest.skip("this machine has no IPv6 loopback")
    with (
        HostDispatcher(RingLayout(4, 64), {"echo": echo}) as dispatcher,
        UdpFeeder(dispatcher.client(), host="::1") as bridge,
    ):
        assert bridge.address[0] == "::1"
        with UdpClient("::1", bridge.address[1], timeout=10) as client:
            assert client.call("echo", b"six") == (0, b"six")
            assert client.address == bridge.address


def test_binding_beyond_loopback_warns_that_there_is_no_authentication(
    caplog: pytest.LogCaptureFixture,
) -> None:
    dispatcher = HostDispatcher(RingLayout(2, 64), {"echo": echo})
    with caplog.at_level("WARNING", logger="skbuild_cudaq"):
        UdpFeeder(dispatcher.client(), host="127.0.0.2").close()
        UdpFeeder(dispatcher.client(), host="localhost").close()
        assert caplog.records == []
        UdpFeeder(dispatcher.client(), host="").close()
    assert [r.getMessage() for r in caplog.records] == [
        "the UDP feeder listens on 0.0.0.0, beyond loopback: anyone who can reach this port "
        "can call its handlers (the wire format has no authentication)"
    ]
    dispatcher.close()


def test_feeder_close_takes_a_timeout() -> None:
    dispatcher = HostDispatcher(RingLayout(2, 64), {"echo": echo})
    bridge = UdpFeeder(dispatcher.client()).start()
    bridge.close(timeout=5.0)
    assert not bridge.running
    dispatcher.close()


def test_a_feeder_dropped_while_running_stops_before_its_socket_closes() -> None:
    """A running UdpFeeder dropped without close(): its thread is stopped first, then its
    socket closed. It used to be the other way round (the socket was the first attribute to
    go): the thread went on receiving on a closed descriptor -- one the process may already
    have handed to another socket, whose datagrams it then took -- and the socket's finalizer
    warned that it was never closed."""
    import gc
    import warnings

    with HostDispatcher(RingLayout(4, 64), {"echo": echo}) as dispatcher:
        bridge = UdpFeeder(dispatcher.client()).start()
        core = bridge._core  # the native part, to see what became of its thread
        with UdpClient(*bridge.address, timeout=10) as client:
            assert client.call("echo", b"x") == (0, b"x")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            del bridge
            gc.collect()
        assert [str(w.message) for w in caught] == []
        time.sleep(0.05)  # a thread left on a closed descriptor fails within this
        assert (core.running, core.error) == (False, None)


def test_the_host_path_objects_say_what_they_are() -> None:
    d = HostDispatcher(RingLayout(8, 64), {"echo": echo})
    assert repr(d) == "<HostDispatcher 8x64 1 handler stopped>"
    with d:  # starts it
        client = d.client()
        assert repr(d) == "<HostDispatcher 8x64 1 handler running>"
        assert repr(client) == "<RingClient 8x64 submitted=0>"
        with UdpFeeder(d.client()) as feeder, UdpClient(*feeder.address) as udp:
            host, port = feeder.address
            assert repr(feeder) == f"<UdpFeeder {host}:{port} running>"
            assert repr(udp) == f"<UdpClient to {host}:{port}>"
            assert udp.call("echo", b"x") == (0, b"x")
        assert (repr(feeder), repr(udp)) == ("<UdpFeeder closed>", "<UdpClient closed>")
    assert repr(d) == "<HostDispatcher 8x64 1 handler closed>"
    assert repr(client) == "<RingClient 8x64 closed>"


def test_closed_udp_client_and_feeder_say_so() -> None:
    with (
        HostDispatcher(RingLayout(4, 64), {"echo": echo}) as dispatcher,
        UdpFeeder(dispatcher.client()) as feeder,
    ):
        client = UdpClient(*feeder.address, timeout=10)
        assert client.call("echo", b"x") == (0, b"x")
        assert not client.closed
        client.close()
        assert client.closed
        for use in (lambda: client.call("echo", b"y"), lambda: client.address, client.discard):
            with pytest.raises(RealtimeError, match="the UDP client is closed; make a new one"):
                use()
        client.close()  # idempotent
    assert feeder.closed
    with pytest.raises(UdpFeederError, match="the UDP feeder is closed"):
        _ = feeder.address


def test_feeder_idle_sleep_out_of_range_is_refused_before_a_socket_is_made() -> None:
    ring_client = HostDispatcher(RingLayout(2, 64), {"echo": echo}).client()
    for bad in (float("inf"), True, "1"):
        with pytest.raises(InvalidArgumentError, match="idle_sleep="):
            UdpFeeder(ring_client, idle_sleep=bad)  # type: ignore[arg-type]


def test_under_a_flood_a_correct_client_keeps_its_place_and_what_was_shed_is_counted() -> None:
    """Overload (issue 56 item 8): 10 sockets flood the port with valid requests while the ring
    is full (its handler held). The feeder used to stop receiving with the ring full, so the
    socket's buffer filled with the flood and the kernel dropped the correct client's request
    (it timed out). It now drains the socket into its backlog and, the backlog full, sheds the
    newest request of the source holding the most: the client's one request keeps its place,
    is answered, and every datagram is accounted for (``shed`` counted)."""
    gate = threading.Event()

    def held(args: bytes) -> bytes:
        gate.wait(60)
        return args

    layout = RingLayout(8, 64)
    flood_count = 10 * 2000
    with (
        HostDispatcher(layout, {"held": held, "echo": echo}) as dispatcher,
        UdpFeeder(dispatcher.client()) as bridge,
        UdpClient(*bridge.address, timeout=60) as client,
    ):
        flooders = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(10)]
        try:
            for i in range(flood_count):  # more than the socket's buffer and the backlog hold
                request = encode_request("held", b"f", request_id=i)
                with contextlib.suppress(BlockingIOError):
                    flooders[i % 10].sendto(request, bridge.address)
            ticket = client.submit("echo", b"mine")
            gate.set()
            answer = client.wait(ticket)
            assert (answer.header.status, answer.result) == (0, b"mine")
        finally:
            gate.set()
            for s in flooders:
                s.close()
        bridge.stop()  # the counters hold still
        c = bridge.counters
        assert c["shed"] > 0
        assert c["received"] == (
            c["forwarded"] + c["shed"] + c["held"] + c["rejected"] + c["dropped"]
        )
        assert c["received"] <= flood_count + 1
