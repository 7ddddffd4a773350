from __future__ import annotations

import random
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from skbuild_cudaq.realtime.errors import (
    ClientError,
    InvalidArgumentError,
    RingError,
    RingProtocolError,
)
from skbuild_cudaq.realtime.ring import (
    HOST_RING_CTX_MAGIC,
    HOST_RING_CTX_SIZE,
    RingClient,
    RingLayout,
    RingServer,
    Ticket,
    host_ring_ctx_bytes,
)
from skbuild_cudaq.realtime.wire import REQUEST_MAGIC, RESPONSE_MAGIC, encode_request, function_id


def _ring(
    num_slots: int = 4, slot_size: int = 64
) -> tuple[RingLayout, bytearray, RingClient, RingServer]:
    layout = RingLayout(num_slots, slot_size)
    buf = bytearray(layout.total_bytes)
    return layout, buf, RingClient(buf, layout, spin=0), RingServer(buf, layout)


def _answer_all(server: RingServer) -> int:
    """Serve what is there: echo with the bytes reversed; returns how many."""
    count = 0
    while (req := server.poll()) is not None:
        server.publish(0, req.args[::-1])
        count += 1
    return count


@pytest.fixture
def consumer() -> Iterator[tuple[RingClient, RingLayout]]:
    """A ring with a RingServer thread answering every request with its bytes reversed."""
    layout = RingLayout(16, 128)
    buf = bytearray(layout.total_bytes)
    server = RingServer(buf, layout)
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            if _answer_all(server) == 0:
                stop.wait(1e-4)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield RingClient(buf, layout, spin=0), layout
    stop.set()
    thread.join()


def test_layout_offsets() -> None:
    lay = RingLayout(3, 32)
    assert (lay.rx_slots_offset, lay.tx_slots_offset) == (0, 96)
    assert (lay.rx_flags_offset, lay.tx_flags_offset, lay.ids_offset) == (192, 204, 216)
    assert lay.total_bytes == 224  # the ring's u64 request-id source ends it
    assert lay.max_payload == 8
    assert (lay.rx_slot_offset(2), lay.tx_slot_offset(2)) == (64, 160)
    assert [lay.position(k) for k in range(7)] == [
        (0, 1),
        (1, 1),
        (2, 1),
        (0, 2),
        (1, 2),
        (2, 2),
        (0, 3),
    ]
    # the device adds one to a u32: the sequence wraps through 0 like it
    assert lay.position(3 * (2**32 - 1)) == (0, 0)
    assert lay.position(3 * 2**32) == (0, 1)


@pytest.mark.parametrize(("n", "size"), [(0, 64), (4, 24), (4, 60), (4, 16), (-1, 64)])
def test_layout_validation(n: int, size: int) -> None:
    with pytest.raises(ValueError, match=r"num_slots|slot_size"):
        RingLayout(n, size)


def test_buffer_checks() -> None:
    lay = RingLayout(2, 32)
    with pytest.raises(RingError, match="needs"):
        RingClient(bytearray(lay.total_bytes - 1), lay)
    with pytest.raises(RingError, match="read-only"):
        RingClient(bytes(lay.total_bytes), lay)
    with pytest.raises(RingError, match="buffer protocol"):
        RingClient(object(), lay)
    RingClient(np.zeros(lay.total_bytes, dtype=np.uint8), lay).close()


def test_bytes_in_memory_follow_the_protocol() -> None:
    _, buf, client, server = _ring(2, 32)
    t = client.submit("echo", b"abcd", request_id=9, timestamp=77)
    assert (t.slot, t.seq) == (0, 1)
    head = struct.unpack_from("<IIIIQ", buf, 0)
    assert head == (REQUEST_MAGIC, function_id("echo"), 4, 9, 77)
    assert buf[24:28] == b"abcd"
    rx_flags = struct.unpack_from("<2I", buf, 128)
    assert rx_flags == (1, 0)
    assert client.poll(t) is None
    req = server.poll()
    assert req is not None and req.args == b"abcd" and req.header.request_id == 9
    server.publish(5, b"xy")
    assert struct.unpack_from("<IiIIQ", buf, 64) == (RESPONSE_MAGIC, 5, 2, 9, 77)
    assert struct.unpack_from("<2I", buf, 136) == (1, 0)
    r = client.poll(t)
    assert r is not None and (r.status, r.result, r.request_id) == (5, b"xy", 9)
    with pytest.raises(ClientError, match="already collected"):
        client.poll(t)


def test_wrap_many_rounds_in_order() -> None:
    lay, _, client, server = _ring(4, 64)
    rng = random.Random(1)
    for _ in range(50):  # 200 requests: 50 wraps
        payloads = [
            rng.randbytes(rng.randint(0, lay.max_payload)) for _ in range(rng.randint(1, 4))
        ]
        tickets = client.submit_many([("f", p) for p in payloads])
        assert _answer_all(server) == len(payloads)
        responses = client.collect(tickets[::-1])[::-1]
        assert [r.result for r in responses] == [p[::-1] for p in payloads]
    assert client.submitted == server.published == client.collected


def test_submit_collects_uncollected_responses_for_later() -> None:
    _, _, client, server = _ring(4, 64)
    first = client.submit_many([("f", bytes([i])) for i in range(4)])
    _answer_all(server)
    # the ring is full of uncollected responses; the next submits keep them
    second = client.submit_many([("f", bytes([10 + i])) for i in range(4)])
    assert client.in_flight == 4
    _answer_all(server)
    got = client.collect(second + first)
    assert [r.result for r in got] == [bytes([10 + i]) for i in range(4)] + [
        bytes([i]) for i in range(4)
    ]


def test_submit_times_out_when_the_slot_never_frees() -> None:
    _, _, client, _ = _ring(2, 64)
    client.submit_many([("f", b""), ("f", b"")])
    with pytest.raises(TimeoutError, match=r"slot 0, seq 1.*tx_flags\[0\] = 0"):
        client.submit("f", b"", timeout=0.05)


def test_wait_timeout_names_slot_and_seq() -> None:
    _, _, client, _ = _ring(2, 64)
    client.submit("f")
    t = client.submit("f")
    with pytest.raises(TimeoutError, match=r"slot 1, seq 1"):
        client.wait(t, timeout=0.02)


def test_protocol_errors_are_detected() -> None:
    lay, buf, client, server = _ring(2, 64)
    t = client.submit("f", b"x", request_id=3)
    server.poll()
    server.publish(0, b"")
    struct.pack_into("<I", buf, lay.tx_slot_offset(0) + 12, 4)  # corrupt the echoed id
    with pytest.raises(RingProtocolError, match="request id 4 echoed for request 3"):
        client.wait(t)
    t = client.submit("f")
    server.poll()
    server.publish(0)
    struct.pack_into("<I", buf, lay.tx_slot_offset(1), 0xBAD)
    with pytest.raises(RingProtocolError, match="magic"):
        client.wait(t)


def test_server_misuse() -> None:
    _, _, client, server = _ring(2, 32)
    with pytest.raises(RingError, match="without a polled request"):
        server.publish(0)
    client.submit("f")
    client.submit("f")
    server.poll()
    with pytest.raises(RingError, match="before polling again"):
        server.poll()
    with pytest.raises(ValueError, match="does not fit"):
        server.publish(0, b"x" * 9)
    with pytest.raises(ValueError, match="does not fit"):
        client.submit("f", b"x" * 9)


def test_forged_header_fields_reach_the_consumer() -> None:
    _, _, client, server = _ring(2, 64)
    client.submit(123, b"ab", magic=0x1234, arg_len=1000)
    req = server.poll()
    assert req is not None
    assert (req.header.magic, req.header.function_id, req.header.arg_len) == (0x1234, 123, 1000)
    assert len(req.args) == 40  # capped at the slot's payload


def test_reset_gives_a_fresh_ring() -> None:
    lay, buf, client, server = _ring(2, 64)
    old = client.submit("f")
    server.poll()
    server.publish(0)
    client.reset()
    server.reset()
    assert bytes(buf[lay.rx_flags_offset : lay.ids_offset]) == bytes(16)
    with pytest.raises(ClientError, match="reset"):
        client.poll(old)
    t = client.submit("f", b"q")
    assert (t.index, t.seq) == (0, 1)
    assert t.request_id == old.request_id + 1  # ids are never reused in a ring's life
    _answer_all(server)
    assert client.wait(t).result == b"q"


def test_pipelined_against_a_consumer_thread(consumer: tuple[RingClient, RingLayout]) -> None:
    client, lay = consumer
    rng = random.Random(2)
    payloads = [
        rng.randbytes(rng.randint(0, lay.max_payload)) for _ in range(3 * lay.num_slots + 5)
    ]
    tickets = client.submit_many([("f", p) for p in payloads])
    assert [r.result for r in client.collect(tickets)] == [p[::-1] for p in payloads]
    assert client.call("f", b"123") == (0, b"321")


def test_call_batch_vectorised(consumer: tuple[RingClient, RingLayout]) -> None:
    client, lay = consumer
    rng = np.random.default_rng(3)
    arr = rng.integers(0, 256, size=(100, 40), dtype=np.uint8)
    single = client.submit("f", b"before")  # drained, still available afterwards
    res = client.call_batch("f", arr)
    assert len(res) == 100 and res.all_ok
    assert np.array_equal(res.data, arr[:, ::-1])
    assert list(res.request_ids) == list(range(1, 101))
    assert client.wait(single).result == b"erofeb"
    varied = [
        bytes(rng.integers(0, 256, size=int(n), dtype=np.uint8))
        for n in rng.integers(0, lay.max_payload + 1, 70)
    ]
    res2 = client.call_batch("f", varied)
    assert [r for _, r in res2] == [p[::-1] for p in varied]
    assert len(client.call_batch("f", [])) == 0
    with pytest.raises(ValueError, match="does not fit"):
        client.call_batch("f", [b"x" * (lay.max_payload + 1)])


def test_host_ring_ctx_mirror() -> None:
    lay = RingLayout(8, 256)
    data = host_ring_ctx_bytes(lay, 0x7F0000000000, 0x7E0000001000)
    assert len(data) == HOST_RING_CTX_SIZE == 48 + 40 * 32
    fields = struct.unpack_from("<IIIIQQQQ", data)
    base = 0x7F0000000000
    assert fields == (
        HOST_RING_CTX_MAGIC,
        8,
        256,
        0,
        base,
        base + 2048,
        base + 4096,
        base + 4096 + 32,
    )
    for lane in range(32):  # each lane: the context's own address, then zeros
        entry = data[48 + 40 * lane : 48 + 40 * (lane + 1)]
        assert struct.unpack_from("<Q", entry) == (0x7E0000001000,)
        assert entry[8:] == bytes(32)


def _answer_once(
    buf: bytearray, lay: RingLayout, k: int, status: int, result: bytes, **bad: int
) -> threading.Thread:
    """A thread that answers request ``k`` once it is published (``bad``: forged rid/magic)."""
    slot, seq = lay.position(k)
    rx_flags = memoryview(buf)[lay.rx_flags_offset : lay.tx_flags_offset].cast("I")

    def run() -> None:
        while rx_flags[slot] != seq:
            time.sleep(0)
        rid = bad.get("rid", struct.unpack_from("<I", buf, lay.rx_slot_offset(slot) + 12)[0])
        off = lay.tx_slot_offset(slot)
        magic = bad.get("magic", RESPONSE_MAGIC)
        struct.pack_into("<IiIIQ", buf, off, magic, status, len(result), rid, 0)
        buf[off + 24 : off + 24 + len(result)] = result
        struct.pack_into("<I", buf, lay.tx_flags_offset + 4 * slot, seq)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_call_fast_path_reads_the_answer_and_checks_it() -> None:
    lay, buf, _, _ = _ring(2, 64)
    client = RingClient(buf, lay, spin=10**6)
    for k in range(5):  # wraps: seq 1, 1, 2, 2, 3
        thread = _answer_once(buf, lay, k, 7, bytes([k]) * 3)
        assert client.call("f", b"abc") == (7, bytes([k]) * 3)
        thread.join()
        slot = k % 2
        req = struct.unpack_from("<IIIIQ", buf, lay.rx_slot_offset(slot))
        assert req == (REQUEST_MAGIC, function_id("f"), 3, k, 0)
        assert bytes(buf[lay.rx_slot_offset(slot) + 24 : lay.rx_slot_offset(slot) + 27]) == b"abc"
    assert client.collected == 5 and client.in_flight == 0
    thread = _answer_once(buf, lay, 5, 0, b"", rid=99)
    with pytest.raises(RingProtocolError, match="request id 99 echoed for request 5"):
        client.call("f")
    thread.join()
    thread = _answer_once(buf, lay, 6, 0, b"", magic=0xBAD)
    with pytest.raises(RingProtocolError, match="magic"):
        client.call("f")
    thread.join()
    assert client.in_flight == 0  # a bad answer frees its slot


# -- whose response is it (issue 11, item 1) -------------------------------------------------


def _ids_source(buf: bytearray, lay: RingLayout) -> int:
    return int(struct.unpack_from("<Q", buf, lay.ids_offset)[0])


def test_a_second_client_continues_the_ring_and_never_takes_the_first_ones_answers() -> None:
    lay, buf, first, server = _ring(4, 64)
    mine = first.submit_many([("f", bytes([i])) for i in range(3)])
    assert _answer_all(server) == 3  # answered, left in the ring: rid 0..2, timestamp 0
    second = RingClient(buf, lay, spin=0)
    assert second.submitted == 3  # from the request flags, not 0
    t = second.submit("f", b"second")
    assert (t.slot, t.seq) == (3, 1) and t.request_id not in {m.request_id for m in mine}
    assert second.poll(t) is None  # slot 0's answer (id 0, timestamp 0) is not its own
    _answer_all(server)
    assert second.wait(t).result == b"dnoces"
    # the first client's answers are still its own, and only its own
    assert [r.result for r in first.collect(mine)] == [bytes([i]) for i in range(3)]
    with pytest.raises(RingError, match="another producer wrote to the ring"):
        first.submit("f")  # its position is stale: refused, not a wrong answer
    # a third client after a wrap, with the second one's answers uncollected
    second.submit_many([("f", b"x")] * 3)
    _answer_all(server)
    third = RingClient(buf, lay, spin=0)
    assert third.submitted == 7
    t = third.submit("f", b"abc")
    assert _answer_all(server) == 1
    assert third.wait(t).result == b"cba"


def test_new_client_waits_for_the_answer_to_a_request_left_in_its_slot() -> None:
    lay, buf, first, server = _ring(2, 64)
    first.submit_many([("f", b"a"), ("f", b"b")])  # never answered yet
    second = RingClient(buf, lay, spin=0)
    with pytest.raises(TimeoutError, match="an earlier client left there"):
        second.submit("f", b"c", timeout=0.02)
    assert _answer_all(server) == 2  # the old requests are answered (for nobody)
    t = second.submit("f", b"cd")
    _answer_all(server)
    assert second.wait(t).result == b"dc"


def test_request_ids_are_unique_for_the_ring_life() -> None:
    """Clients in sequence, resets and restarts (consumer reset too): no id ever repeats."""
    lay, buf, _, server = _ring(4, 64)
    rng = random.Random(11)
    seen: list[int] = []
    client = RingClient(buf, lay, spin=0)
    for _ in range(60):
        action = rng.random()
        if action < 0.3:
            client = RingClient(buf, lay, spin=0)  # another client, same ring
        elif action < 0.45:
            client.reset()
            server.reset()
        payloads = [rng.randbytes(rng.randint(0, 8)) for _ in range(rng.randint(1, 6))]
        for p in payloads:
            t = client.submit("f", p)
            while server.poll() is not None:
                server.publish(0, p)
            seen.append(t.request_id)
            assert client.wait(t).result == p
    assert len(seen) == len(set(seen)) > 100
    assert _ids_source(buf, lay) == len(seen)


def test_call_batch_answers_are_checked_for_the_ring_ids(
    consumer: tuple[RingClient, RingLayout],
) -> None:
    client, _lay = consumer
    client.call("f", b"warm")
    batch = client.call_batch("f", [b"ab"] * 40)
    assert batch.all_ok and batch.request_ids.tolist() == list(range(1, 41))


def test_a_planted_response_with_the_next_id_is_never_accepted() -> None:
    lay, buf, client, server = _ring(2, 64)
    old = client.submit("f", b"old")
    _answer_all(server)
    assert client.wait(old).result == b"dlo"
    client.reset()
    server.reset()
    slot, seq = lay.position(client.submitted)
    next_id = _ids_source(buf, lay) & 0xFFFFFFFF
    off = lay.tx_slot_offset(slot)

    def plant(flag: int) -> None:
        struct.pack_into("<IiIIQ", buf, off, RESPONSE_MAGIC, 0, 5, next_id, 0)
        buf[off + 24 : off + 29] = b"FORGE"
        struct.pack_into("<I", buf, lay.tx_flags_offset + 4 * slot, flag)

    plant(seq)  # "already answered" before the request exists
    with pytest.raises(RingProtocolError, match="a response nobody asked for"):
        client.call("f", b"real")
    with pytest.raises(RingProtocolError, match="a response nobody asked for"):
        client.submit("f", b"real")
    with pytest.raises(RingProtocolError, match="a response nobody asked for"):
        client.call_batch("f", [b"real"])
    plant(seq - 1)  # stale flag: the bytes are not read until the consumer answers
    t = client.submit("f", b"real")
    assert t.request_id == next_id and client.poll(t) is None
    _answer_all(server)
    assert client.wait(t).result == b"laer"


def test_ring_flags_out_of_ring_order_are_refused() -> None:
    lay, buf, _, _ = _ring(4, 64)
    struct.pack_into("<4I", buf, lay.rx_flags_offset, 2, 0, 1, 1)
    with pytest.raises(RingError, match="not in ring order"):
        RingClient(buf, lay)
    struct.pack_into("<4I", buf, lay.rx_flags_offset, 0, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF)
    assert RingClient(buf, lay).submitted == (2**32 - 1) * 4 + 1  # the u32 sequence wraps


def test_a_closed_client_raises_a_ring_error() -> None:
    _, _, client, server = _ring(2, 64)
    t = client.submit("f", b"x")
    client.close()
    client.close()
    assert client.closed
    for use in (
        lambda: client.submit("f"),
        lambda: client.call("f", b"y"),
        lambda: client.poll(t),
        lambda: client.wait(t),
        lambda: client.collect([t]),
        lambda: client.call_batch("f", [b"z"]),
        client.drain,
        client.reset,
    ):
        with pytest.raises(ClientError, match="the ring client is closed"):
            use()
    server.close()
    with pytest.raises(RingError, match="the ring server is closed"):
        server.poll()


def test_fuzz_clients_resets_and_planted_responses_never_give_a_wrong_answer() -> None:
    """Seeded random interleavings of clients made one after another, resets, a consumer and
    an adversary writing response bytes (with the ids the ring will hand out next) into slots
    and response flags ahead of time: every accepted response is the caller's own, every
    refusal is a typed ring error or a timeout."""
    lay = RingLayout(4, 64)
    buf = bytearray(lay.total_bytes)
    server = RingServer(buf, lay)
    tx_flags = memoryview(buf)[lay.tx_flags_offset : lay.ids_offset].cast("I")
    rng = random.Random(20261130)
    client = RingClient(buf, lay, spin=0)
    tickets: list[tuple[RingClient, Ticket, bytes]] = []
    accepted = refused = planted = 0
    for _ in range(6000):
        op = rng.random()
        try:
            if op < 0.08:
                client = RingClient(buf, lay, spin=0)
            elif op < 0.11:
                client.reset()
                server.reset()
                tickets = [x for x in tickets if x[0] is not client]
            elif op < 0.40:
                payload = rng.randbytes(rng.randint(1, 12))
                tickets.append((client, client.submit("f", payload, timeout=0.0), payload))
            elif op < 0.60:
                if (req := server.poll()) is not None:
                    server.publish(0, req.args[::-1])
            elif op < 0.85 and tickets:
                owner, t, payload = tickets[rng.randrange(len(tickets))]
                response = owner.poll(t)
                if response is not None:
                    assert (response.status, response.result) == (0, payload[::-1])
                    assert response.request_id == t.request_id
                    accepted += 1
                    tickets.remove((owner, t, payload))
            else:  # the adversary
                slot = rng.randrange(lay.num_slots)
                answered = [t for o, t, _ in tickets if t.slot == slot and tx_flags[slot] == t.seq]
                if answered:
                    continue  # rewriting a real answer after it was published: undetectable
                ids = struct.unpack_from("<Q", buf, lay.ids_offset)[0]
                off = lay.tx_slot_offset(slot)
                rid = (ids + rng.randint(0, 3)) & 0xFFFFFFFF
                struct.pack_into("<IiIIQ", buf, off, RESPONSE_MAGIC, 0, 5, rid, 0)
                buf[off + 24 : off + 29] = b"FORGE"
                planted += 1
                if rng.random() < 0.3 and not any(t.slot == slot for _, t, _ in tickets):
                    # a flag "answered" ahead of the request
                    tx_flags[slot] = (tx_flags[slot] + 1) & 0xFFFFFFFF
        except (RingError, ClientError, TimeoutError):  # RingProtocolError is a RingError;
            # a ticket whose wrong answer was refused is collected (ClientError after)
            refused += 1
            if rng.random() < 0.5:  # the adversary retreats: a consistent ring again
                server.reset()
                client = RingClient(buf, lay, spin=0)
                client.reset()
                tickets = []
    assert accepted > 250 and refused > 100 and planted > 500  # seed 20261130: 322, 371, 953


@pytest.mark.parametrize("compiled", [False, None])
@pytest.mark.parametrize("payload", [5, "abc", None])
def test_a_payload_that_is_not_bytes_like_is_refused_not_sent_as_zero_bytes(
    payload: Any, compiled: bool | None
) -> None:
    layout = RingLayout(4, 64)
    buf = bytearray(layout.total_bytes)
    client = RingClient(buf, layout, spin=0, compiled=compiled)
    for send in (lambda: client.call("echo", payload), lambda: client.submit("echo", payload)):
        with pytest.raises(TypeError, match="payload must be bytes-like"):
            send()
    assert client.submitted == 0  # nothing reached the ring
    with pytest.raises(TypeError, match="payload must be bytes-like"):
        encode_request("echo", payload)


def test_a_payload_over_the_slot_is_an_invalid_argument(consumer: Any) -> None:
    client, layout = consumer
    with pytest.raises(InvalidArgumentError, match="does not fit a slot"):
        client.call("echo", bytes(layout.max_payload + 1))
    assert client.call("echo", np.arange(3, dtype=np.uint8)) == (0, b"\x02\x01\x00")
