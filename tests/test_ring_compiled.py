"""The compiled round trip of ``RingClient.call`` (``skbuild_cudaq/realtime/ring/fastcall/``).

Pure host tests (no GPU): a ``RingServer`` thread or a hand-written answer plays the
consumer. Each behaviour is checked on both paths, compiled and pure Python, and the two
must leave the same bytes in the ring.
"""

from __future__ import annotations

import shutil
import struct
import sysconfig
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skbuild_cudaq.realtime.errors import ClientError, RingError
from skbuild_cudaq.realtime.ring import RingClient, RingLayout, RingServer
from skbuild_cudaq.realtime.ring import client as client_module
from skbuild_cudaq.realtime.wire import REQUEST_MAGIC, RESPONSE_MAGIC, function_id

needs_compiled = pytest.mark.skipif(
    not client_module.COMPILED, reason="skbuild-cudaq was built without its compiled ring client"
)
PATHS = [pytest.param(True, marks=needs_compiled, id="compiled"), pytest.param(False, id="pure")]
#: A hang guard, never a figure: a loop that waits for something ends by this many seconds.
HANG_GUARD_S = 60.0


def _python_headers() -> bool:
    include = sysconfig.get_paths().get("include")
    return bool(include) and (Path(include) / "Python.h").is_file()


@pytest.mark.skipif(
    shutil.which("cc") is None or not _python_headers(),
    reason="no C compiler or no Python headers: the compiled client is left out by design",
)
def test_the_compiled_client_is_built_where_it_can_be() -> None:
    """cmake/FastClient.cmake (AUTO) builds it wherever a C compiler and Python's headers
    are: a silent fallback to pure Python here would cost every caller ~1 us per call."""
    assert client_module.COMPILED


class _Echo:
    """A RingServer thread answering each request with status len(args) and the bytes
    reversed; counts what it served."""

    def __init__(self, buf: bytearray, layout: RingLayout) -> None:
        self.server = RingServer(buf, layout)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            req = self.server.poll()
            if req is None:
                time.sleep(0)
                continue
            self.server.publish(len(req.args), req.args[::-1])

    def close(self) -> None:
        self.stop.set()
        self.thread.join()


@pytest.fixture
def echo_ring() -> Iterator[tuple[bytearray, RingLayout]]:
    layout = RingLayout(8, 96)
    buf = bytearray(layout.total_bytes)
    echo = _Echo(buf, layout)
    yield buf, layout
    echo.close()


@pytest.mark.parametrize("compiled", PATHS)
def test_call_round_trips_every_payload_size(
    echo_ring: tuple[bytearray, RingLayout], compiled: bool
) -> None:
    buf, layout = echo_ring
    client = RingClient(buf, layout, spin=16, compiled=compiled)
    assert client.compiled is compiled
    for k in range(3 * layout.num_slots + 1):  # every slot, wrapping: seq 1..4
        size = k % (layout.max_payload + 1)
        payload = bytes((k + i) & 0xFF for i in range(size))
        arg = bytearray(payload) if k % 3 == 0 else payload
        assert client.call("echo", arg) == (size, payload[::-1])
    assert client.collected == client.submitted == 3 * layout.num_slots + 1
    assert client.in_flight == 0
    # whatever the path, other payload types and oversized payloads take the general path
    assert client.call("echo", memoryview(b"abc")) == (3, b"cba")
    with pytest.raises(ValueError, match="does not fit a slot"):
        client.call("echo", bytes(layout.max_payload + 1))
    assert client.call("echo", b"after") == (5, b"retfa")


def _request_bytes(compiled: bool) -> tuple[bytes, list[tuple[int, bytes]]]:
    """The ring after the same calls on one path, and what they returned."""
    layout = RingLayout(4, 64)
    buf = bytearray(layout.total_bytes)
    echo = _Echo(buf, layout)
    try:
        client = RingClient(buf, layout, spin=16, compiled=compiled)
        out = [client.call(f, p) for f, p in [("a", b"xyz"), (7, b""), ("a", b"q" * 40)] * 3]
    finally:
        echo.close()
    return bytes(buf), out


@needs_compiled
def test_both_paths_leave_the_same_bytes_in_the_ring() -> None:
    assert _request_bytes(True) == _request_bytes(False)


def _answer_once(buf: bytearray, lay: RingLayout, k: int, **forged: int) -> threading.Thread:
    """Answer request ``k`` once published, with the fields in ``forged`` changed."""
    slot, seq = lay.position(k)
    flags = memoryview(buf)[lay.rx_flags_offset : lay.tx_flags_offset].cast("I")

    def run() -> None:
        while flags[slot] != seq:
            time.sleep(0)
        magic, fid, arg_len, rid, ts = struct.unpack_from("<IIIIQ", buf, lay.rx_slot_offset(slot))
        assert (magic, fid, arg_len) == (REQUEST_MAGIC, function_id("f"), 2)
        off = lay.tx_slot_offset(slot)
        head = {"magic": RESPONSE_MAGIC, "status": 0, "len": 1, "rid": rid, "ts": ts}
        head.update(forged)
        struct.pack_into("<IiIIQ", buf, off, *head.values())
        buf[off + 24] = 0x5A
        struct.pack_into("<I", buf, lay.tx_flags_offset + 4 * slot, seq)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.parametrize("compiled", PATHS)
@pytest.mark.parametrize(
    ("forged", "message"),
    [
        ({"magic": 0xBAD}, "response magic 0x00000bad"),
        ({"rid": 1234}, "request id 1234 echoed for request 0"),
        ({"ts": 5}, "timestamp 5 echoed for 0"),
        ({"len": 41}, "result_len 41 exceeds the slot's max payload 40"),
    ],
)
def test_a_wrong_answer_raises_the_protocol_error_and_frees_the_slot(
    compiled: bool, forged: dict[str, int], message: str
) -> None:
    lay = RingLayout(2, 64)
    buf = bytearray(lay.total_bytes)
    client = RingClient(buf, lay, spin=0, compiled=compiled)
    thread = _answer_once(buf, lay, 0, **forged)
    with pytest.raises(client_module.RingProtocolError, match=message):
        client.call("f", b"ab")
    thread.join()
    assert client.in_flight == 0 and client.submitted == 1
    thread = _answer_once(buf, lay, 1, status=-3)
    assert client.call("f", b"cd") == (-3, b"\x5a")  # a negative status keeps its sign
    thread.join()


@pytest.mark.parametrize("compiled", PATHS)
def test_a_late_answer_is_waited_for_and_a_missing_one_times_out(compiled: bool) -> None:
    lay = RingLayout(4, 64)
    buf = bytearray(lay.total_bytes)
    server = RingServer(buf, lay)
    client = RingClient(buf, lay, spin=8, compiled=compiled)

    def late() -> None:
        while server.poll() is None:
            time.sleep(1e-3)
        time.sleep(0.02)  # long after the spin
        server.publish(3, b"late")

    thread = threading.Thread(target=late)
    thread.start()
    assert client.call("f", b"x") == (3, b"late")
    thread.join()
    assert client.in_flight == 0
    with pytest.raises(TimeoutError, match="did not arrive within"):
        client.call("f", b"y", timeout=0.05)
    # the unanswered request keeps its slot: the next call of that slot waits for it
    assert client.in_flight == 1 and client.submitted == 2


@pytest.mark.parametrize("compiled", PATHS)
def test_call_never_writes_into_a_slot_it_does_not_own(compiled: bool) -> None:
    """The claim: a request flag another producer moved makes call() raise, not overwrite."""
    lay = RingLayout(2, 64)
    buf = bytearray(lay.total_bytes)
    client = RingClient(buf, lay, spin=0, compiled=compiled)
    struct.pack_into("<I", buf, lay.rx_flags_offset, 1)  # someone else published request 0
    before = bytes(buf)
    with pytest.raises(RingError, match="another producer wrote to the ring"):
        client.call("f", b"ab")
    assert bytes(buf) == before and client.submitted == 0


@needs_compiled
def test_compiled_path_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    lay = RingLayout(2, 64)
    buf = bytearray(lay.total_bytes)
    assert RingClient(buf, lay).compiled
    monkeypatch.setenv("SKBUILD_CUDAQ_PURE_CLIENT", "1")
    assert not RingClient(buf, lay).compiled
    assert RingClient(buf, lay, compiled=True).compiled  # an explicit choice wins
    client = RingClient(buf, lay, compiled=True)
    client.close()
    assert not client.compiled  # nothing points at the released buffer any more
    with pytest.raises(ClientError, match="the ring client is closed"):
        client.call("f")


def test_compiled_true_without_the_module_names_the_build_switch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(client_module, "COMPILED", False)
    monkeypatch.setattr(client_module, "_CompiledRing", None)
    lay = RingLayout(2, 64)
    with pytest.raises(RingError, match="SKBUILD_CUDAQ_FAST_CLIENT"):
        RingClient(bytearray(lay.total_bytes), lay, compiled=True)
    assert not RingClient(bytearray(lay.total_bytes), lay).compiled


@needs_compiled
@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((0, 2, 64, 40), "non-null, 8-aligned"),
        ((4, 2, 64, 40), "non-null, 8-aligned"),
        ((8, 0, 64, 40), "not a ring layout"),
        ((8, 2, 20, 0), "not a ring layout"),
        ((8, 2, 64, 41), "not a ring layout"),
    ],
)
def test_the_compiled_ring_refuses_what_is_not_a_ring(args: tuple[int, ...], error: str) -> None:
    from skbuild_cudaq.realtime.ring._fastcall import Ring

    with pytest.raises(ValueError, match=error):
        Ring(*args)
    lay = RingLayout(2, 64)
    buf = bytearray(lay.total_bytes)
    ring = Ring(client_module._buffer_address(memoryview(buf)), 2, 64, 40)
    with pytest.raises(TypeError, match=r"Ring.call\(k, function_id, payload, spin_ns\)"):
        ring.call(0, 1, b"")  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="function_id must fit in 32 bits"):
        ring.call(0, 2**32, b"", 0)
    with pytest.raises(ValueError, match="k must be an integer"):
        ring.call(-1, 1, b"", 0)
    assert bytes(buf) == bytes(lay.total_bytes)  # nothing was written


@pytest.mark.parametrize("compiled", PATHS)
def test_counters_agree_across_calls_submits_and_function_changes(
    echo_ring: tuple[bytearray, RingLayout], compiled: bool
) -> None:
    """The compiled ring keeps call()'s bookkeeping (next request, collected, the last
    function's id): the general path, submit/wait and another function in between must
    see and leave the same counters as the pure path."""
    buf, layout = echo_ring
    client = RingClient(buf, layout, spin=16, compiled=compiled)
    assert client.call("a", b"xy") == (2, b"yx")
    ticket = client.submit("b", b"123")  # a ticket in the next slot
    assert client.call("a", b"q") == (1, b"q")  # another slot: the fast path
    assert client.wait(ticket).result == b"321"
    assert client.call(7, b"") == (0, b"")  # another function: its id, then the fast path
    assert client.call("a", b"zz") == (2, b"zz")
    for _ in range(layout.num_slots):  # a ticket in the slot call() wants: the general path
        client.wait(client.submit("a", b"w"))
    t2 = client.submit("b", b"ab")
    for _ in range(layout.num_slots - 1):
        client.call("a", b"k")
    assert client.call("a", b"ab") == (2, b"ba")  # its slot held t2: collected first
    assert client.wait(t2).result == b"ba"
    total = 5 + layout.num_slots + 1 + layout.num_slots
    assert client.submitted == total and client.collected == total and client.in_flight == 0
    client.close()
    assert client.submitted == total and client.collected == total  # readable after close


@needs_compiled
def test_reset_keeps_the_list_the_compiled_ring_reads() -> None:
    lay = RingLayout(2, 64)
    client = RingClient(bytearray(lay.total_bytes), lay, compiled=True)
    pending = client._pending
    client.reset()
    assert client._pending is pending and client.submitted == 0 and client.collected == 0


@needs_compiled
def test_call_is_the_compiled_entry_and_keeps_the_python_signature(
    echo_ring: tuple[bytearray, RingLayout],
) -> None:
    """RingClient.call is _fastcall.call where it is installed; every way of calling the
    Python method still works (keywords go to it), and its TypeErrors are its own."""
    from skbuild_cudaq.realtime.ring import _fastcall

    assert RingClient.call is _fastcall.call
    buf, layout = echo_ring
    for round_, compiled in enumerate((True, False)):
        client = RingClient(buf, layout, spin=16, compiled=compiled)  # continues the ring
        assert client.call("echo", b"ab") == (2, b"ba")
        assert client.call("echo") == (0, b"")  # the default payload
        assert client.call("echo", b"xyz", timeout=60.0) == (3, b"zyx")
        assert client.call(function="echo", payload=b"kw") == (2, b"wk")
        assert client.call("echo", payload=b"p", timeout=60.0) == (1, b"p")
        with pytest.raises(TypeError, match="missing 1 required positional argument"):
            client.call()  # type: ignore[call-arg]
        with pytest.raises(TypeError, match="unexpected keyword argument 'spin'"):
            client.call("echo", b"", spin=3)  # type: ignore[call-arg]
        with pytest.raises(TypeError, match="positional argument"):
            client.call("echo", b"", 1.0)  # type: ignore[call-arg]
        assert client.collected == 5 and client.submitted == 5 * (round_ + 1)


@needs_compiled
def test_a_subclass_call_and_a_held_call_keep_their_meaning(
    echo_ring: tuple[bytearray, RingLayout],
) -> None:
    buf, layout = echo_ring

    class Counting(RingClient):
        calls = 0

        def call(self, *args: object, **kwargs: object) -> tuple[int, bytes]:
            Counting.calls += 1
            return super().call(*args, **kwargs)  # type: ignore[arg-type]

    sub = Counting(buf, layout, spin=16)
    assert sub.call("echo", b"12") == (2, b"21") and Counting.calls == 1

    # a bound call keeps its client alive (as a Python method does), and no cycle is made:
    # the client goes with its last reference, without the cycle collector
    import gc
    import weakref

    gc.disable()
    try:
        client = RingClient(buf, layout, spin=16)
        client.call("echo", b"")  # continue after the subclass's request
        ref = weakref.ref(client)
        call = client.call
        del client
        assert ref() is not None and call("echo", b"held") == (4, b"dleh")
        del call
        assert ref() is None
    finally:
        gc.enable()


_CONSUMER = """
import mmap, sys
from skbuild_cudaq.realtime.ring import RingLayout, RingServer
lay = RingLayout(8, 96)
with open(sys.argv[1], "r+b") as f:
    mm = mmap.mmap(f.fileno(), lay.total_bytes)
server = RingServer(mm, lay)
print("ready", flush=True)
while True:
    req = server.poll()
    if req is not None:
        server.publish(len(req.args), req.args[::-1])
"""


@needs_compiled
def test_an_answer_within_the_spin_runs_no_python_frame(tmp_path: Path) -> None:
    """The point of the compiled entry: with a consumer in another process (it answers
    while the call spins holding the GIL), a round trip answered within the spin runs
    no Python code at all; only a spin that ran out enters Python (``_call_continue``)."""
    import mmap
    import subprocess
    import sys

    lay = RingLayout(8, 96)
    path = tmp_path / "ring"
    path.write_bytes(bytes(lay.total_bytes))
    proc = subprocess.Popen(
        [sys.executable, "-c", _CONSUMER, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        with path.open("r+b") as f:
            mm = mmap.mmap(f.fileno(), lay.total_bytes)
        client = RingClient(mm, lay, spin=20_000)  # the longest spin: 1 ms
        client.call("echo", b"warm")  # remembers the function id (a Python step)
        frames: list[str] = []

        def profile(frame: Any, event: str, arg: object) -> None:
            if event == "call":
                frames.append(frame.f_code.co_name)

        # Every round trip runs no Python frame or only _call_continue (the spin ran out:
        # the consumer process was not scheduled within 1 ms, which a loaded machine decides);
        # calls go on until 100 were answered within the spin and 300 were made (the
        # deadline is a hang guard: how many fit in the spin is bench/'s business).
        k, frameless, end = 0, 0, time.monotonic() + HANG_GUARD_S
        while frameless < 100 or k < 300:
            assert time.monotonic() < end, f"{frameless} of {k} answered within the spin"
            payload = bytes([k & 0xFF]) * (k % 40)
            frames.clear()
            sys.setprofile(profile)
            try:
                out = client.call("echo", payload)
            finally:
                sys.setprofile(None)
            assert out == (len(payload), payload[::-1])
            assert "_call_python" not in frames and frames[:1] in ([], ["_call_continue"])
            frameless += not frames
            k += 1
        # the benchmark's stamped round trip: the C part's two clock reads, in order
        ring = client._compiled
        assert ring is not None
        stamped, end = 0, time.monotonic() + HANG_GUARD_S
        while stamped < 5:
            assert time.monotonic() < end, "no stamped round trip answered within the spin"
            before = time.monotonic_ns()
            out, written, seen = ring.call_next_stamped("echo", b"st")
            if out.__class__ is tuple:
                assert out == (2, b"ts") and before <= written <= seen <= time.monotonic_ns()
                stamped += 1
            else:  # the spin ran out: written, not seen
                assert written >= before and seen == 0
                client._call_continue("echo", b"st", out)
        # the traced round trip: a clock read at each step, in order, the answer unchanged;
        # with the spin's prefetch of the response off, the same answers
        assert ring.prefetch_response == 1  # on by default
        traced, k, end = [0, 0], 0, time.monotonic() + HANG_GUARD_S
        while min(traced) < 3:  # both settings of the prefetch answered within the spin
            assert time.monotonic() < end, f"traced answers within the spin: {traced}"
            k += 1
            ring.prefetch_response = k % 2
            payload = bytes([k & 0xFF]) * 3
            before = time.monotonic_ns()
            out, points = ring.call_next_traced("echo", payload)
            assert len(points) == 7
            if out.__class__ is tuple:
                assert out == (3, payload[::-1])
                assert before <= points[0] and list(points) == sorted(points)
                assert points[-1] <= time.monotonic_ns()
                traced[k % 2] += 1
            else:  # the spin ran out: published, never seen
                assert 0 not in points[:4] and points[4:] == (0, 0, 0)
                client._call_continue("echo", payload, out)
        ring.prefetch_response = 1
        client.close()
        mm.close()
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


_WITHOUT_MODULE = """
import sys, threading
sys.modules["skbuild_cudaq.realtime.ring._fastcall"] = None  # as if built without a C compiler
from skbuild_cudaq.realtime.ring import RingClient, RingLayout, RingServer, client
assert not client.COMPILED and RingClient.call is RingClient._call_python
lay = RingLayout(4, 64)
buf = bytearray(lay.total_bytes)
server, stop = RingServer(buf, lay), threading.Event()
def serve():
    while not stop.is_set():
        req = server.poll()
        if req is not None:
            server.publish(len(req.args), req.args[::-1])
thread = threading.Thread(target=serve)
thread.start()
c = RingClient(buf, lay, spin=16)
out = [c.call("f", bytes([k]) * k) for k in range(9)] + [c.call("f", payload=b"kw", timeout=60.0)]
stop.set()
thread.join()
assert out == [(k, bytes([k]) * k) for k in range(9)] + [(2, b"wk")], out
print("ok")
"""


def test_without_the_compiled_module_call_is_the_python_method() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_MODULE],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr


@needs_compiled
def test_release_gil_lets_a_consumer_thread_of_this_process_answer_within_the_spin() -> None:
    """Issue 42: with ``release_gil`` the compiled round trip spins without the GIL, so a
    consumer that needs it (a Python thread here; the host path's Python handlers) answers
    while the client spins. Holding the GIL, the spin can never see that answer."""
    lay = RingLayout(4, 64)
    buf = bytearray(lay.total_bytes)
    echo = _Echo(buf, lay)
    try:
        holding = RingClient(buf, lay, compiled=True)
        ring = holding._compiled
        assert ring is not None and ring.release_gil == 0
        ring.spin_ns = 2_000_000  # 2 ms holding the GIL: the consumer thread cannot run
        ring.remember("f", function_id("f"))
        out = ring.call_next("f", b"abc")
        assert isinstance(out, int) and not isinstance(out, bool)  # published, not answered
        ticket_wait = holding._call_continue("f", b"abc", out)  # the general path waits
        assert ticket_wait == (3, b"cba")
        holding.close()
        releasing = RingClient(buf, lay, compiled=True, release_gil=True)
        ring = releasing._compiled
        assert ring is not None and ring.release_gil == 1
        assert ring.spin_ns == client_module._MAX_SPIN_NS  # nothing is held: the longest spin
        ring.spin_ns = 10_000_000_000  # no fallback: the answer must come within the spin
        ring.remember("f", function_id("f"))
        for i in range(200):
            assert ring.call_next("f", bytes([i, 1])) == (2, bytes([1, i]))
        assert releasing.call("f", b"xyz") == (3, b"zyx")
        releasing.close()
    finally:
        echo.close()
