"""The dispatcher on a real GPU: built-in kernel and every example_app dispatch kernel.

Needs a CUDA GPU (``gpu`` marker) and example_app installed (``pip install
./example_app``; its extension ``example_app._core`` holds the handlers
``rpc_increment``, ``echo``, ``block_reverse`` and the custom kernels). The
traffic is written straight into the ring (the documented layout) by
:class:`RawRing`, pipelined over every slot, so 100,000 requests take seconds.
Every wait has a deadline: nothing here can hang.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytestmark = pytest.mark.gpu

REQ_MAGIC = 0x43555152
RESP_MAGIC = 0x43555153
HEADER = 24
DEADLINE = 20.0  # seconds any single wait may take

KINDS = ["builtin", "single_thread", "cooperative_grid", "cluster", "warp_parallel"]


def fnv1a(name: str) -> int:
    h = 2166136261
    for b in name.encode():
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


def launcher_for(kind: str, core: Any) -> Any:
    if kind == "builtin":
        return None
    from example_app import launchers

    return launchers.LAUNCHERS[kind](core)


class RawRing:
    """Producer/consumer of the host ring written against DEVELOPING.md's layout."""

    def __init__(self, bridge: Any) -> None:
        import numpy as np

        self.np = np
        self.n = bridge.num_slots
        self.size = bridge.slot_size
        buf = np.frombuffer(bridge.buffer, dtype=np.uint8)
        slots = self.n * self.size
        self.rx = buf[:slots].reshape(self.n, self.size)
        self.tx = buf[slots : 2 * slots].reshape(self.n, self.size)
        self.rx_flags = buf[2 * slots : 2 * slots + 4 * self.n].view(np.uint32)
        self.tx_flags = buf[2 * slots + 4 * self.n : 2 * slots + 8 * self.n].view(np.uint32)
        self.sent = 0
        self.done = 0

    def submit(
        self,
        function_id: int,
        payload: bytes,
        *,
        magic: int = REQ_MAGIC,
        arg_len: int | None = None,
    ) -> int:
        k = self.sent
        slot, seq = k % self.n, k // self.n + 1
        assert self.done > k - self.n, "slot still holds an uncollected response"
        header = self.np.array(
            [magic, function_id, len(payload) if arg_len is None else arg_len, k & 0xFFFFFFFF],
            dtype=self.np.uint32,
        ).tobytes() + (0x1122334455667788 + k).to_bytes(8, "little")
        room = self.size - HEADER
        self.rx[slot, :HEADER] = self.np.frombuffer(header, dtype=self.np.uint8)
        body = payload[:room]
        self.rx[slot, HEADER : HEADER + len(body)] = self.np.frombuffer(body, dtype=self.np.uint8)
        self.rx_flags[slot] = seq  # publish after the bytes (x86 stores stay in order)
        self.sent += 1
        return k

    def ready(self, k: int) -> bool:
        return int(self.tx_flags[k % self.n]) == k // self.n + 1

    def collect(self, k: int, deadline: float = DEADLINE) -> tuple[int, int, bytes, int]:
        """(status, request_id, result, ptp) of request k, in order."""
        assert k == self.done
        end = time.monotonic() + deadline
        while not self.ready(k):
            if time.monotonic() > end:
                msg = f"no response to request {k} within {deadline} s"
                raise AssertionError(msg)
        slot = k % self.n
        raw = self.tx[slot]
        head = raw[:HEADER].tobytes()
        magic, status, length, rid = (int(x) for x in self.np.frombuffer(head[:16], "<u4"))
        status = status - (1 << 32) if status >= 1 << 31 else status
        ptp = int.from_bytes(head[16:24], "little")
        assert magic == RESP_MAGIC, f"response {k}: magic {magic:#x}"
        assert length <= self.size - HEADER
        result = raw[HEADER : HEADER + length].tobytes()
        self.done += 1
        return status, rid, result, ptp


def expected(name: str, payload: bytes) -> bytes:
    if name in ("rpc_increment", "rpc_increment_thread"):
        import numpy as np

        return (np.frombuffer(payload, dtype=np.uint8) + np.uint8(1)).tobytes()
    if name in ("echo", "echo_thread"):
        return payload
    if name == "block_reverse":
        return payload[::-1]
    raise AssertionError(name)


# A mixed table: launch-wide handlers (the first three) and thread-shaped ones
# (exported with CUDAQ_REALTIME_EXPORT_THREAD_FUNCTION), so every test below runs
# both shapes under every dispatch kernel.
HANDLERS = ("rpc_increment", "echo", "block_reverse", "rpc_increment_thread", "echo_thread")
THREAD_HANDLERS = ("rpc_increment_thread", "echo_thread")


def make_dispatcher(
    kind: str,
    core: Any,
    num_slots: int = 64,
    slot_size: int = 1024,
    handlers: tuple[str, ...] = HANDLERS,
    **config: Any,
) -> Any:
    from skbuild_cudaq.realtime import Dispatcher, DispatcherConfig, get_device_handler

    d = Dispatcher(
        DispatcherConfig(num_slots=num_slots, slot_size=slot_size, stop_timeout=DEADLINE, **config),
        module=core,
    )
    for name in handlers:
        d.function_table.add_device(name, get_device_handler(core, name))
    d.set_unified_launch(launcher_for(kind, core))
    return d


@pytest.fixture(params=KINDS)
def dispatcher(request: pytest.FixtureRequest, core: Any) -> Iterator[Any]:
    d = make_dispatcher(request.param, core)
    try:
        yield d
    finally:
        d.close()


def pipelined(
    ring: RawRing, count: int, make: Callable[[int], tuple[str, bytes]]
) -> tuple[int, int]:
    """Send ``count`` requests keeping every slot busy; check every response byte by byte."""
    sent: dict[int, tuple[str, bytes]] = {}
    errors = 0
    while ring.done < count:
        while ring.sent < count and ring.sent - ring.done < ring.n:
            name, payload = make(ring.sent)
            sent[ring.submit(fnv1a(name), payload)] = (name, payload)
        k = ring.done
        status, rid, result, ptp = ring.collect(k)
        name, payload = sent.pop(k)
        if (status, rid, ptp, result) != (0, k, 0x1122334455667788 + k, expected(name, payload)):
            errors += 1
            assert errors < 5, (k, name, len(payload), status, rid, len(result))
    return ring.sent, errors


def test_100k_random_payloads_checked_byte_by_byte(dispatcher: Any) -> None:
    import numpy as np

    rng = np.random.default_rng(1234)
    room = dispatcher.config.max_payload
    sizes = rng.integers(0, room + 1, size=100_000)
    sizes[:3] = (0, 1, room)  # the edges for sure
    names = rng.integers(0, len(HANDLERS), size=100_000)
    data = rng.integers(0, 256, size=room, dtype=np.uint8).tobytes()
    dispatcher.start()
    ring = RawRing(dispatcher.bridge)

    def make(k: int) -> tuple[str, bytes]:
        start = k % 97
        return HANDLERS[names[k]], (data + data)[start : start + int(sizes[k])]

    sent, errors = pipelined(ring, 100_000, make)
    assert errors == 0
    assert dispatcher.processed == sent
    assert dispatcher.stop() == sent


def test_bad_requests_are_answered_and_the_kernel_keeps_serving(dispatcher: Any) -> None:
    dispatcher.start()
    ring = RawRing(dispatcher.bridge)
    room = dispatcher.config.max_payload
    good = fnv1a("rpc_increment")
    cases = [
        (dict(function_id=good, payload=b"abc", magic=0xDEADBEEF), -1),
        (dict(function_id=fnv1a("no_such_handler"), payload=b"abc"), -2),
        (dict(function_id=good, payload=b"x" * 8, arg_len=room + 1), -3),
        (dict(function_id=good, payload=b"", arg_len=0xFFFFFFFF), -3),
    ]
    for round_ in range(3):  # several times round the ring start
        for kwargs, status in cases:
            k = ring.submit(**kwargs)  # type: ignore[arg-type]
            got_status, rid, result, _ = ring.collect(k)
            assert (got_status, rid, result) == (status, k, b""), (round_, kwargs)
            k = ring.submit(good, b"\x00\x01\xff")
            assert ring.collect(k)[0:3:2] == (0, b"\x01\x02\x00")
    assert dispatcher.stop() == ring.sent


def test_ring_wrap_with_a_small_ring(core: Any) -> None:
    with make_dispatcher("builtin", core, num_slots=32, slot_size=64) as d:
        d.start()
        ring = RawRing(d.bridge)
        sent, errors = pipelined(
            ring, 32 * 50 + 7, lambda k: ("rpc_increment", bytes([k % 256]) * 40)
        )
        assert errors == 0
        assert d.stop() == sent
        # a second start over the same bridge begins at a fresh ring
        d.start()
        ring = RawRing(d.bridge)
        sent, errors = pipelined(ring, 100, lambda k: ("echo", b"again"))
        assert (errors, d.stop()) == (0, 100)


def test_stop_under_traffic(dispatcher: Any) -> None:
    dispatcher.start()
    ring = RawRing(dispatcher.bridge)
    stop_producer = threading.Event()
    failures: list[BaseException] = []

    def produce() -> None:
        try:
            while not stop_producer.is_set():
                while ring.sent - ring.done < ring.n and not stop_producer.is_set():
                    ring.submit(fnv1a("echo"), b"traffic")
                if ring.ready(ring.done):
                    assert ring.collect(ring.done)[2] == b"traffic"
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    time.sleep(0.3)
    started = time.monotonic()
    processed = dispatcher.stop(timeout=DEADLINE)
    assert time.monotonic() - started < DEADLINE
    stop_producer.set()
    producer.join(DEADLINE)
    assert not producer.is_alive()
    assert not failures, failures
    answered = sum(1 for k in range(ring.done, ring.sent) if ring.ready(k)) + ring.done
    assert processed == answered > 0
    assert processed <= ring.sent


class Failing:
    """A launcher that fails before enqueueing or after its kernel is enqueued."""

    def __init__(self, inner: Any, when: str) -> None:
        self.inner, self.when = inner, when
        self.library = getattr(inner, "library", None)

    def __call__(self, args: Any) -> bool:
        if self.when == "before":
            raise RuntimeError("refusing before the launch")
        self.inner(args)
        raise RuntimeError("failing after the launch")


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("kind", ["single_thread", "cooperative_grid", "warp_parallel"])
def test_failing_launcher_fails_start_without_hanging(core: Any, kind: str, when: str) -> None:
    from cuda.bindings import driver as drv

    from skbuild_cudaq.realtime import RealtimeError

    with make_dispatcher(kind, core) as d:
        d.set_unified_launch(Failing(launcher_for(kind, core), when))
        started = time.monotonic()
        with pytest.raises(RealtimeError, match=f"failing {when}|refusing {when}"):
            d.start()
        assert time.monotonic() - started < DEADLINE
        assert not d.running
        # The kernel has exited before the dispatcher let go of the module and its memory.
        assert drv.cuStreamQuery(d._stream)[0] == drv.CUresult.CUDA_SUCCESS
        assert d._served.library is None
        # The same dispatcher still serves with a good launcher.
        d.set_unified_launch(launcher_for(kind, core))
        d.start()
        ring = RawRing(d.bridge)
        sent, errors = pipelined(ring, 500, lambda k: ("rpc_increment", b"\x10" * (k % 50)))
        assert (errors, d.stop()) == (0, sent)


def test_python_client_round_trip(core: Any) -> None:
    """The bridge's RingClient against the GPU (call(name, payload) -> (status, result))."""
    with make_dispatcher("single_thread", core) as d:
        d.start()
        client = d.bridge.client()
        for payload in (b"", b"\x00\x7f\xff", bytes(range(200))):
            status, result = client.call("rpc_increment", payload)
            assert (status, bytes(result)) == (0, expected("rpc_increment", payload))
        assert d.stop() == 3


@pytest.mark.parametrize("kind", KINDS)
def test_thread_shaped_handlers_alone(core: Any, kind: str) -> None:
    """A table of thread-shaped handlers only: one request per lane in the warp kernel,
    the leader alone (no barrier) in the block, grid and cluster kernels."""
    import numpy as np

    d = make_dispatcher(kind, core, handlers=THREAD_HANDLERS)
    try:
        d.start()
        ring = RawRing(d.bridge)
        rng = np.random.default_rng(7)
        data = rng.integers(0, 256, size=2 * d.config.max_payload, dtype=np.uint8).tobytes()

        def make(k: int) -> tuple[str, bytes]:
            return THREAD_HANDLERS[k % 2], data[k % 61 : k % 61 + int(rng.integers(0, 1001))]

        sent, errors = pipelined(ring, 20_000, make)
        assert errors == 0
        assert d.stop() == sent
    finally:
        d.close()


def test_exported_shapes_reach_the_device_table(core: Any) -> None:
    import ctypes

    from skbuild_cudaq.realtime import get_library

    shapes = get_library(core).handler_shapes()
    from skbuild_cudaq.realtime import get_device_handler

    assert shapes[get_device_handler(core, "echo_thread")] == 1
    assert shapes[get_device_handler(core, "echo")] == 0
    d = make_dispatcher("single_thread", core)
    try:
        d.start()
        from cuda.bindings import driver

        table = (ctypes.c_uint8 * (16 * len(HANDLERS)))()
        err = driver.cuMemcpyDtoH(ctypes.addressof(table), d._launch_args.table, len(table))[0]
        assert int(err) == 0
        assert [table[16 * i + 13] for i in range(len(HANDLERS))] == [0, 0, 0, 1, 1]
    finally:
        d.close()


# -- issue 11 -------------------------------------------------------------------------------


def test_builtin_block_size_1024_serves_or_is_refused_before_launch(core: Any) -> None:
    """DispatcherConfig accepts 1..1024: the built-in kernel runs it or start() says why,
    from the kernel's own limit, before any launch (never LAUNCH_OUT_OF_RESOURCES)."""
    import re

    from skbuild_cudaq.realtime import Dispatcher, DispatcherConfig, get_device_handler
    from skbuild_cudaq.realtime.errors import InvalidArgumentError

    def make(block_size: int) -> Any:
        d = Dispatcher(
            DispatcherConfig(num_slots=8, slot_size=256, block_size=block_size),
            module=core,
        )
        d.function_table.add_device("rpc_increment", get_device_handler(core, "rpc_increment"))
        return d

    with make(1024) as d:
        try:
            d.start()
        except InvalidArgumentError as exc:
            text = str(exc)
            assert "block_size=1024" in text and "MAX_THREADS_PER_BLOCK" in text, text
            limit = int(re.search(r"at most (\d+) threads", text).group(1))  # type: ignore[union-attr]
            assert 0 < limit < 1024
            assert not d.running
        else:
            limit = 1024
            client = d.bridge.client()
            assert client.call("rpc_increment", b"\x01\x02") == (0, b"\x02\x03")
            assert d.stop() == 1
    with make(limit) as d:  # the largest block the kernel can run does run
        d.start()
        client = d.bridge.client()
        assert client.call("rpc_increment", b"\x05") == (0, b"\x06")
        assert d.stop() == 1


def test_processed_counts_since_the_last_start(core: Any) -> None:
    """The same meaning as the host path's: each start() counts from zero."""
    with make_dispatcher("builtin", core, num_slots=8, slot_size=256) as d:
        d.start()
        client = d.bridge.client()
        for _ in range(3):
            assert client.call("echo", b"a") == (0, b"a")
        assert d.stop() == 3 and d.processed == 3
        d.start()
        assert d.processed == 0
        client = d.bridge.client()
        for _ in range(2):
            assert client.call("echo", b"b") == (0, b"b")
        assert d.stop() == 2 and d.processed == 2


def test_ring_ids_unique_across_restarts_and_clients(core: Any) -> None:
    """Clients one after another and restarts (the ring is reset at each start()): every
    request id is new, every answer is the caller's own."""
    from skbuild_cudaq.realtime.ring import RingClient

    with make_dispatcher("single_thread", core, num_slots=4, slot_size=128) as d:
        seen: list[int] = []
        for restart in range(3):
            d.start()
            for c in range(2):  # the bridge's own client, then one made after it
                client = (
                    d.bridge.client() if c == 0 else RingClient(d.bridge.buffer, d.bridge.layout)
                )
                assert client.submitted == 3 * c
                tickets = [
                    client.submit("rpc_increment", bytes([restart, c, i])) for i in range(3)
                ]  # their answers stay in the ring memory for the next client to find
                for i, t in enumerate(tickets):
                    r = client.wait(t, DEADLINE)
                    assert (r.status, r.result) == (0, bytes([restart + 1, c + 1, i + 1]))
                    seen.append(r.request_id)
            assert d.stop() == 6
        assert len(seen) == len(set(seen)) == 18
