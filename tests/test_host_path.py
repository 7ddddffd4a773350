from __future__ import annotations

import ctypes
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from skbuild_cudaq.realtime.errors import ClientError, InvalidArgumentError
from skbuild_cudaq.realtime.host.dispatcher import (
    STATUS_BAD_HANDLER_RESULT,
    STATUS_HANDLER_EXCEPTION,
    STATUS_RESULT_TOO_LONG,
    HostDispatcher,
    HostDispatcherError,
    echo,
    rpc_increment,
)
from skbuild_cudaq.realtime.ring import RingLayout
from skbuild_cudaq.realtime.wire import (
    STATUS_ARGS_TOO_LONG,
    STATUS_BAD_MAGIC,
    STATUS_UNKNOWN_FUNCTION,
    fnv1a_32,
)

HANDLERS = {"rpc_increment": rpc_increment, "echo": echo}


def test_example_handlers() -> None:
    assert rpc_increment(bytes([0, 1, 254, 255])) == bytes([1, 2, 255, 0])
    assert echo(b"abc") == b"abc"


def test_hundred_thousand_random_requests_byte_checked() -> None:
    layout = RingLayout(64, 256)
    rng = np.random.default_rng(0)
    m = 100_000
    lens = rng.integers(0, layout.max_payload + 1, size=m)
    lens[:2] = (0, layout.max_payload)
    data = rng.integers(0, 256, size=(m, layout.max_payload), dtype=np.uint8)
    payloads = [data[i, : lens[i]].tobytes() for i in range(m)]
    with HostDispatcher(layout, HANDLERS) as dispatcher:
        client = dispatcher.client()
        res = client.call_batch("rpc_increment", payloads, timeout=30)
        assert dispatcher.processed == m
    assert res.all_ok
    assert np.array_equal(res.result_lens, lens)
    expected = (data[:, : res.data.shape[1]].astype(np.uint16) + 1) % 256
    mask = np.arange(res.data.shape[1])[None, :] < lens[:, None]
    assert np.array_equal(res.data[mask], expected[mask].astype(np.uint8))


def test_bad_requests_are_answered_and_serving_continues() -> None:
    with HostDispatcher(handlers=HANDLERS, num_slots=8, slot_size=64) as dispatcher:
        client = dispatcher.client()
        good = lambda i: ("echo", bytes([i]) * 3)  # noqa: E731
        tickets = []
        for i in range(5):  # bad ones interleaved with good ones, all in flight
            tickets.append(client.submit(*good(i)))
            tickets.append(client.submit("echo", b"x", magic=0xDEADBEEF))
            tickets.append(client.submit("no_such_handler", b"x"))
            tickets.append(client.submit("echo", b"x", arg_len=41))
            tickets.append(client.submit(*good(100 + i)))
        responses = client.collect(tickets)
        for i in range(5):
            r = responses[5 * i : 5 * i + 5]
            assert (r[0].status, r[0].result) == (0, bytes([i]) * 3)
            assert (r[1].status, r[1].result) == (STATUS_BAD_MAGIC, b"")
            assert (r[2].status, r[2].result) == (STATUS_UNKNOWN_FUNCTION, b"")
            assert (r[3].status, r[3].result) == (STATUS_ARGS_TOO_LONG, b"")
            assert (r[4].status, r[4].result) == (0, bytes([100 + i]) * 3)
        assert [r.request_id for r in responses] == [t.request_id for t in tickets]
        assert client.call("echo", b"x" * 40) == (0, b"x" * 40)  # arg_len == max is fine
        assert dispatcher.processed == 26
        assert dispatcher.rejected == 15


def test_handler_failures_get_reserved_statuses() -> None:
    def boom(args: bytes) -> bytes:
        raise RuntimeError("kaboom " + args.decode())

    handlers = {
        "boom": boom,
        "status": lambda a: (7, a[:1]),
        "bad": lambda a: 42,
        "huge": lambda a: b"z" * 100,
        "bad_tuple": lambda a: ("x", b""),
        "echo": echo,
    }
    with HostDispatcher(RingLayout(4, 64), handlers) as dispatcher:  # type: ignore[arg-type]
        c = dispatcher.client()
        assert c.call("boom", b"now") == (STATUS_HANDLER_EXCEPTION, b"RuntimeError: kaboom now")
        assert c.call("status", b"ab") == (7, b"a")
        assert c.call("bad") == (STATUS_BAD_HANDLER_RESULT, b"")
        assert c.call("bad_tuple") == (STATUS_BAD_HANDLER_RESULT, b"")
        assert c.call("huge") == (STATUS_RESULT_TOO_LONG, b"")
        assert c.call("echo", b"alive") == (0, b"alive")
        assert dispatcher.handler_errors == 4
        assert dispatcher.last_handler_error is not None
        assert dispatcher.running


def test_start_stop_idempotent_and_restart_serves_pending() -> None:
    dispatcher = HostDispatcher(RingLayout(4, 64), HANDLERS)
    dispatcher.stop()  # never started: fine
    dispatcher.start()
    dispatcher.start()
    client = dispatcher.client()
    assert client.call("echo", b"1") == (0, b"1")
    dispatcher.stop()  # shutdown observed while idle (else HostDispatcherError after 10 s)
    dispatcher.stop()
    assert not dispatcher.running
    t = client.submit("echo", b"2")
    assert client.poll(t) is None
    time.sleep(0.01)
    assert client.poll(t) is None  # nobody serves
    with dispatcher:
        assert client.wait(t).result == b"2"
    assert dispatcher.processed == 1  # since the last start()


def test_stop_under_traffic() -> None:
    """stop() while a client keeps 8 requests in flight: every answer the thread published is
    collected (processed == answered), and the rest stay unanswered. A wait that times out
    ends the traffic only once stop() has returned (a slow answer on a loaded machine is
    waited for again; it used to end the traffic early and leave answers uncollected)."""
    dispatcher = HostDispatcher(RingLayout(8, 64), HANDLERS).start()
    client = dispatcher.client()
    answered = 0
    failed: list[BaseException] = []
    go, stopped = threading.Event(), threading.Event()

    def collect(ticket: Any) -> bool:
        """Whether ``ticket`` was answered (False: it never will be: stop() has returned)."""
        while True:
            try:
                response = client.wait(ticket, timeout=0.2)
            except TimeoutError:
                if not stopped.is_set():
                    continue
                response = client.poll(ticket)  # stopped: the ring holds all there will be
                if response is None:
                    return False
            assert response.result == b"\x02\x03"
            return True

    def traffic() -> None:
        nonlocal answered
        try:
            while not stopped.is_set():
                tickets = client.submit_many([("rpc_increment", b"\x01\x02")] * 8, timeout=60)
                for t in tickets:
                    if not collect(t):
                        return  # the thread serves in ring order: none after it is answered
                    answered += 1
                    go.set()  # traffic answered: stop() may come
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=traffic)
    thread.start()
    assert go.wait(60)
    time.sleep(0.05)  # more traffic meanwhile, as much as the machine allows
    dispatcher.stop()
    stopped.set()
    thread.join(60)
    assert not thread.is_alive() and not failed
    assert answered > 0
    assert dispatcher.processed == answered  # every answer published was collected


def test_processed_equals_sent() -> None:
    with HostDispatcher(RingLayout(4, 64), HANDLERS) as dispatcher:
        client = dispatcher.client()
        tickets = client.submit_many([("echo", bytes([i % 256])) for i in range(1000)])
        assert [r.result for r in client.collect(tickets)] == [
            bytes([i % 256]) for i in range(1000)
        ]
        assert dispatcher.processed == client.submitted == 1000


def test_configuration_errors() -> None:
    with pytest.raises(ValueError, match="not both"):
        HostDispatcher(RingLayout(4, 64), num_slots=4)
    d = HostDispatcher(num_slots=2, slot_size=32)
    assert d.layout == RingLayout(2, 32)
    assert d.add_handler("echo", echo) == fnv1a_32("echo")
    with pytest.raises(HostDispatcherError, match=r"'echo' and '[0-9]+' have the same function id"):
        d.add_handler(fnv1a_32("echo"), rpc_increment)
    with pytest.raises(HostDispatcherError, match="named 'echo' is already registered"):
        d.add_handler("echo", rpc_increment)
    assert d.add_handler("echo", echo) == fnv1a_32("echo")  # the same handler again: kept
    with pytest.raises(TypeError, match="not callable"):
        d.add_handler("x", 3)  # type: ignore[arg-type]


# -- issue 11: clients in sequence, lifetime, configuration ----------------------------------


def test_a_second_client_never_gets_the_first_clients_answers() -> None:
    with HostDispatcher(RingLayout(8, 64), HANDLERS) as dispatcher:
        first = dispatcher.client()
        left = first.submit_many([("echo", b"first %d" % i) for i in range(5)])
        deadline = time.monotonic() + 10
        while dispatcher.processed < 5 and time.monotonic() < deadline:
            time.sleep(1e-3)
        second = dispatcher.client()  # the answers of `first` are still in the ring
        for i in range(20):  # wraps the ring twice
            assert second.call("echo", b"second %d" % i) == (0, b"second %d" % i)
        third = dispatcher.client()
        assert third.call("rpc_increment", b"\x01") == (0, b"\x02")
        with pytest.raises(Exception, match="another producer wrote to the ring"):
            first.submit("echo", b"stale")
        assert dispatcher.processed == 26
        del left


@pytest.mark.parametrize("exc_type", [SystemExit, KeyboardInterrupt, GeneratorExit])
def test_a_handler_raising_base_exception_is_answered_then_reraised_on_the_owner(
    exc_type: type[BaseException],
) -> None:
    def quit_handler(args: bytes) -> bytes:
        raise exc_type(3)

    dispatcher = HostDispatcher(RingLayout(4, 64), {**HANDLERS, "quit": quit_handler})
    dispatcher.start()
    client = dispatcher.client()
    expected = (STATUS_HANDLER_EXCEPTION, f"{exc_type.__name__}: 3".encode())
    assert client.call("quit", b"") == expected
    deadline = time.monotonic() + 10
    while dispatcher.running and time.monotonic() < deadline:
        time.sleep(1e-3)
    assert not dispatcher.running  # the thread stopped, it did not die silently
    with pytest.raises(exc_type):
        dispatcher.stop()
    dispatcher.stop()  # raised once
    dispatcher.start()  # recovers: the ring is in step
    assert client.call("echo", b"after") == (0, b"after")
    # start() reports it too when nobody called stop()
    assert client.call("quit", b"")[0] == STATUS_HANDLER_EXCEPTION
    while dispatcher.running and time.monotonic() < deadline:
        time.sleep(1e-3)
    with pytest.raises(exc_type):
        dispatcher.start()
    dispatcher.start()
    assert client.call("echo", b"again") == (0, b"again")
    dispatcher.close()


def test_serve_one_answers_then_reraises_a_keyboard_interrupt() -> None:
    def interrupted(args: bytes) -> bytes:
        raise KeyboardInterrupt

    dispatcher = HostDispatcher(RingLayout(2, 64), {"stop": interrupted, "echo": echo})
    client = dispatcher.client()
    t = client.submit("stop")
    with pytest.raises(KeyboardInterrupt):
        dispatcher.serve_one()
    assert client.wait(t).status == STATUS_HANDLER_EXCEPTION
    t = client.submit("echo", b"next")
    assert dispatcher.serve_one()
    assert client.wait(t).result == b"next"


def test_start_after_close_is_refused() -> None:
    dispatcher = HostDispatcher(RingLayout(2, 64), HANDLERS)
    with dispatcher:
        assert dispatcher.client().call("echo", b"x") == (0, b"x")
    dispatcher.close()
    with pytest.raises(HostDispatcherError, match="the host dispatcher is closed"):
        dispatcher.start()
    with pytest.raises(HostDispatcherError, match="the host dispatcher is closed"), dispatcher:
        pass


def test_processed_counts_since_the_last_start() -> None:
    dispatcher = HostDispatcher(RingLayout(4, 64), HANDLERS).start()
    client = dispatcher.client()
    for _ in range(3):
        client.call("echo", b"a")
    assert dispatcher.processed == 3
    dispatcher.stop()
    assert dispatcher.processed == 3  # final after stop()
    dispatcher.start()
    assert dispatcher.processed == 0
    for _ in range(2):
        client.call("echo", b"b")
    assert dispatcher.processed == 2
    dispatcher.close()
    assert dispatcher.processed == 2


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"num_slots": 0}, "num_slots"), ({"slot_size": 0}, "slot_size"), ({"num_slots": -1}, "num")],
)
def test_zero_sized_rings_are_refused(kwargs: dict[str, int], match: str) -> None:
    from skbuild_cudaq.realtime.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match=match):
        HostDispatcher(handlers=HANDLERS, **kwargs)


_CHILD_CLIENT = """
import mmap, sys
from skbuild_cudaq.realtime.ring import RingClient, RingLayout

layout = RingLayout(4, 64)
with open("/dev/shm/" + sys.argv[1], "r+b") as f:
    client = RingClient(mmap.mmap(f.fileno(), layout.total_bytes), layout, spin=16)
tickets = client.submit_many([("echo", b"child %d" % i) for i in range(6)])
for t in tickets[:4]:
    assert client.wait(t).result == b"child %d" % t.index
client.drain()  # the last two are answered, and stay in the ring uncollected
print(" ".join(str(t.request_id) for t in tickets))
client.close()
"""


def test_clients_of_another_process_continue_the_same_ring() -> None:
    """Request ids and the position live in the (shared) ring: a client in this process after
    one in a child process continues it, and never takes the child's answers."""
    import subprocess
    import sys
    from multiprocessing import shared_memory

    from skbuild_cudaq.realtime.ring import RingClient

    layout = RingLayout(4, 64)
    shm = shared_memory.SharedMemory(create=True, size=layout.total_bytes)
    try:
        with HostDispatcher(layout, HANDLERS, buffer=shm.buf) as dispatcher:
            child = subprocess.run(
                [sys.executable, "-c", _CHILD_CLIENT, shm.name],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert child.returncode == 0, child.stderr
            child_ids = [int(x) for x in child.stdout.split()]
            client = RingClient(shm.buf, layout, spin=16)
            assert client.submitted == 6
            mine = [client.submit("echo", b"parent %d" % i) for i in range(6)]
            assert [client.wait(t).result for t in mine] == [b"parent %d" % i for i in range(6)]
            assert {t.request_id for t in mine}.isdisjoint(child_ids)
            assert sorted(child_ids + [t.request_id for t in mine]) == list(range(12))
            assert dispatcher.processed == 12
            client.close()
    finally:
        shm.close()
        shm.unlink()


# -- issue 16: one function table for both paths ------------------------------------------


def test_host_dispatcher_serves_the_host_entries_of_a_function_table() -> None:
    from skbuild_cudaq.realtime import FunctionTable

    table = FunctionTable()
    table.add_host("echo", echo)
    table.add_host("rpc_increment", rpc_increment)
    table.add_device("gpu_only", 0x1000)  # only a GPU calls it: unknown on the host path
    with HostDispatcher(RingLayout(4, 64), table) as dispatcher:
        client = dispatcher.client()
        assert client.call("echo", b"abc", timeout=10) == (0, b"abc")
        assert client.call("rpc_increment", b"\x01", timeout=10) == (0, b"\x02")
        assert client.call("gpu_only", b"", timeout=10)[0] == STATUS_UNKNOWN_FUNCTION
    assert dispatcher.handler_names == ["echo", "rpc_increment"]


def test_host_dispatcher_refuses_handlers_that_are_neither_a_mapping_nor_a_table() -> None:
    with pytest.raises(TypeError, match="a mapping or a FunctionTable"):
        HostDispatcher(RingLayout(4, 64), [("echo", echo)])  # type: ignore[arg-type]


# -- issue 42: native host handlers, the native serving loop --------------------------------


def test_native_and_python_handlers_are_served_side_by_side(native_handlers: Path) -> None:
    from skbuild_cudaq.realtime import FunctionTable, get_host_handler

    def reverse(args: bytes) -> bytes:
        return args[::-1]

    table = FunctionTable()
    for name in ("rpc_increment", "echo", "status_of_first", "too_long"):
        table.add_host(name, get_host_handler(native_handlers, name))
    table.add_host("reverse", reverse)
    layout = RingLayout(16, 128)
    rng = np.random.default_rng(42)
    with HostDispatcher(layout, table) as dispatcher:
        c = dispatcher.client()
        for i in range(3000):
            args = rng.integers(0, 256, size=rng.integers(0, layout.max_payload + 1)).astype(
                np.uint8
            )
            data = args.tobytes()
            name = ("rpc_increment", "echo", "reverse")[i % 3]
            expected = {
                "rpc_increment": ((args.astype(np.uint16) + 1) % 256).astype(np.uint8).tobytes(),
                "echo": data,
                "reverse": data[::-1],
            }[name]
            assert c.call(name, data) == (0, expected), (i, name)
        tickets = c.submit_many([("rpc_increment", bytes([i])) for i in range(100)])
        assert [r.result for r in c.collect(tickets)] == [bytes([i + 1]) for i in range(100)]
        # a native handler's own status goes back as it returns it, negative ones too
        assert c.call("status_of_first", b"\x05") == (5, b"")
        assert c.call("status_of_first", b"\x07\x01") == (-7, b"")
        assert dispatcher.handler_errors == 0 and dispatcher.rejected == 0
        assert c.call("too_long", b"") == (STATUS_RESULT_TOO_LONG, b"")
        assert dispatcher.handler_errors == 1
        assert dispatcher.last_handler_error == (
            "too_long: result_len 105 exceeds the max payload 104"
        )
        assert c.call("echo", b"alive") == (0, b"alive")
        assert dispatcher.processed == 3000 + 100 + 4
    assert dispatcher.handler_names == [
        "rpc_increment", "echo", "status_of_first", "too_long", "reverse",
    ]  # fmt: skip


def test_native_handlers_run_without_the_gil(native_handlers: Path) -> None:
    from skbuild_cudaq.realtime import get_host_handler

    holds_gil = get_host_handler(native_handlers, "holds_gil")
    dispatcher = HostDispatcher(RingLayout(2, 64), {"holds_gil": holds_gil})
    client = dispatcher.client()
    ticket = client.submit("holds_gil")
    assert dispatcher.serve_one()  # on this thread, which holds the GIL
    assert client.wait(ticket).status == 1
    with dispatcher:
        assert client.call("holds_gil") == (0, b"")  # the serving thread: no GIL
    assert holds_gil(b"") == (0, b"")  # a direct call from Python releases it too


_GIL_HOLDER_CLIENT = """
import sys
from skbuild_cudaq.realtime.host.udp import UdpClient

client = UdpClient("127.0.0.1", int(sys.argv[1]), timeout=30)
assert client.call("rpc_increment", b"\\x01") == (0, b"\\x02")
print("ready", flush=True)
sys.stdin.readline()  # the parent holds the GIL from now on, until it reads "done"
for n in range(200):
    assert client.call("rpc_increment", bytes([n % 255])) == (0, bytes([n % 255 + 1]))
print("done", flush=True)
"""

_CALLS_UNDER_HELD_GIL = 200


class _PollFd(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_int), ("events", ctypes.c_short), ("revents", ctypes.c_short)]


def test_the_loop_and_the_feeder_serve_native_handlers_while_python_holds_the_gil(
    native_handlers: Path,
) -> None:
    """The serving thread and the UDP feeder never wait for the GIL for a native handler:
    another process's 200 calls are all answered while this process's main thread holds
    the GIL, waiting in poll() for the child's "done" (C calls made through ctypes.PyDLL,
    which keeps the GIL). Were the GIL needed, nothing would be answered and the child's
    calls would time out; the 60 s of the poll() are a hang guard."""
    import select
    import subprocess
    import sys

    from skbuild_cudaq.realtime import get_host_handler
    from skbuild_cudaq.realtime.host.udp import UdpFeeder

    handler = get_host_handler(native_handlers, "rpc_increment")
    libc = ctypes.PyDLL(None)  # the GIL stays held during each call
    libc.write.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
    libc.poll.argtypes = [ctypes.POINTER(_PollFd), ctypes.c_ulong, ctypes.c_int]
    with (
        HostDispatcher(RingLayout(8, 64), {"rpc_increment": handler}) as dispatcher,
        UdpFeeder(dispatcher.client()) as feeder,
    ):
        child = subprocess.Popen(
            [sys.executable, "-c", _GIL_HOLDER_CLIENT, str(feeder.address[1])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert child.stdin is not None and child.stdout is not None
        try:
            assert child.stdout.readline().strip() == "ready"
            wait = _PollFd(child.stdout.fileno(), select.POLLIN, 0)
            assert libc.write(child.stdin.fileno(), b"go\n", 3) == 3
            ready = libc.poll(ctypes.byref(wait), 1, 60_000)
            line = child.stdout.readline().strip()
        finally:
            child.kill()
            _, errors = child.communicate()
        assert (ready, line) == (1, "done"), errors
        assert dispatcher.processed == _CALLS_UNDER_HELD_GIL + 1


def test_python_handlers_run_in_one_thread_state_for_the_threads_life() -> None:
    """One thread state for the serving thread's life (a PyGILState_Ensure/Release per
    call would make a new one each time, and lose thread-local data)."""
    local = threading.local()
    idents = set()

    def count(args: bytes) -> bytes:
        local.n = getattr(local, "n", 0) + 1
        idents.add(threading.get_ident())
        return local.n.to_bytes(4, "little")

    with HostDispatcher(RingLayout(4, 64), {"count": count}) as dispatcher:
        c = dispatcher.client()
        got = [int.from_bytes(c.call("count")[1], "little") for _ in range(500)]
    assert got == list(range(1, 501))
    assert len(idents) == 1 and threading.get_ident() not in idents


def test_idle_sleep_backs_off_and_still_serves() -> None:
    with pytest.raises(ValueError, match="idle_sleep"):
        HostDispatcher(RingLayout(2, 64), HANDLERS, idle_sleep=0)
    with HostDispatcher(RingLayout(4, 64), HANDLERS, idle_sleep=0.002) as dispatcher:
        c = dispatcher.client()
        for i in range(5):
            time.sleep(0.02)  # idle: the thread sleeps
            assert c.call("echo", bytes([i])) == (0, bytes([i]))
        dispatcher.stop()  # observed in the back-off (else HostDispatcherError after 10 s)
        assert not dispatcher.running


def test_serve_one_while_the_thread_serves_is_refused_and_handlers_can_be_added() -> None:
    with HostDispatcher(RingLayout(4, 64), {"echo": echo}) as dispatcher:
        with pytest.raises(HostDispatcherError, match="serving thread runs"):
            dispatcher.serve_one()
        c = dispatcher.client()
        assert c.call("rpc_increment", b"\x01")[0] == STATUS_UNKNOWN_FUNCTION
        dispatcher.add_handler("rpc_increment", rpc_increment)  # while serving
        assert c.call("rpc_increment", b"\x01") == (0, b"\x02")
    dispatcher.close()
    with pytest.raises(HostDispatcherError, match="closed"):
        dispatcher.serve_one()


# -- issue 40 (rules 2, 3, 7), in the native loop: nothing wedges the host path ---------------
# -- issue 40: nothing between taking a request and answering it can wedge the host path -----


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise ValueError("no text for you")


class _NoRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr either")


def _released() -> memoryview:
    view = memoryview(b"gone")
    view.release()
    return view


def test_results_and_errors_that_cannot_be_turned_into_answers_are_answered() -> None:
    """Each used to kill the serving thread after it took the request and before it answered:
    the client timed out, ``handler_errors`` stayed 0, every later start() died on the
    unanswered slot and close() raised the handler's error."""

    def unprintable(args: bytes) -> bytes:
        raise _Unprintable

    handlers = {
        "released": lambda a: _released(),
        "released_in_tuple": lambda a: (3, _released()),
        "unprintable": unprintable,
        "no_repr": lambda a: (1, b"", _NoRepr()),
        "no_repr_result": lambda a: _NoRepr(),
        "view": lambda a: (4, memoryview(b"abcdef")[::2]),  # not contiguous: read all the same
        "echo": echo,
    }
    with HostDispatcher(RingLayout(4, 64), handlers) as dispatcher:  # type: ignore[arg-type]
        c = dispatcher.client()
        assert c.call("released", timeout=10) == (STATUS_BAD_HANDLER_RESULT, b"")
        assert dispatcher.last_handler_error == (
            "released: its result cannot be read (ValueError: operation forbidden on released "
            "memoryview object)"
        )
        assert c.call("released_in_tuple", timeout=10) == (STATUS_BAD_HANDLER_RESULT, b"")
        assert c.call("unprintable", timeout=10) == (
            STATUS_HANDLER_EXCEPTION,
            b"_Unprintable: <exception str() failed>",
        )
        assert c.call("no_repr", timeout=10) == (STATUS_BAD_HANDLER_RESULT, b"")
        assert dispatcher.last_handler_error == (
            "no_repr: returned tuple <repr() failed>, expected bytes or (status, bytes)"
        )
        assert c.call("no_repr_result", timeout=10) == (STATUS_BAD_HANDLER_RESULT, b"")
        assert dispatcher.last_handler_error == (
            "no_repr_result: returned _NoRepr <repr() failed>, expected bytes"
        )
        assert c.call("view", timeout=10) == (4, b"ace")
        assert c.call("echo", b"alive", timeout=10) == (0, b"alive")
        assert dispatcher.handler_errors == 5
        assert dispatcher.running
        dispatcher.stop()  # nothing left unanswered: stop() and start() raise nothing
        dispatcher.start()
        assert c.call("released", timeout=10)[0] == STATUS_BAD_HANDLER_RESULT
        assert c.call("echo", b"again", timeout=10) == (0, b"again")


def test_a_failure_while_forming_the_answer_over_udp_is_answered_and_serving_goes_on() -> None:
    from skbuild_cudaq.realtime.host.udp import UdpClient, UdpFeeder

    def unprintable(args: bytes) -> bytes:
        raise _Unprintable

    handlers = {"released": lambda a: _released(), "unprintable": unprintable, "echo": echo}
    with (
        HostDispatcher(RingLayout(4, 64), handlers) as dispatcher,  # type: ignore[arg-type]
        UdpFeeder(dispatcher.client()) as feeder,
        UdpClient(*feeder.address, timeout=10) as client,
    ):
        for _ in range(3):  # more than once round the ring: every slot stays in step
            assert client.call("released")[0] == STATUS_BAD_HANDLER_RESULT
            assert client.call("unprintable")[0] == STATUS_HANDLER_EXCEPTION
        assert client.call("echo", b"ok") == (0, b"ok")
        assert dispatcher.handler_errors == 6 and dispatcher.processed == 7


_BIG_RESULT = """
import mmap, resource, sys
from skbuild_cudaq.realtime.host.dispatcher import HostDispatcher, STATUS_RESULT_TOO_LONG
from skbuild_cudaq.realtime.ring import RingLayout

big = mmap.mmap(-1, 1 << 30)  # 1 GiB, never touched: no memory until someone copies it
handlers = {"big": lambda a: memoryview(big), "ba": lambda a: (2, bytearray(100))}
d = HostDispatcher(RingLayout(2, 64), handlers)
c = d.client()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = c.submit("big")
assert d.serve_one()
assert c.wait(t).status == STATUS_RESULT_TOO_LONG, c
t = c.submit("ba")
assert d.serve_one()
assert c.wait(t).status == STATUS_RESULT_TOO_LONG
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print((after - before) * 1024)
print(d.last_handler_error)
"""


def test_a_result_too_long_is_refused_before_it_is_copied() -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", _BIG_RESULT],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    grown, error = proc.stdout.splitlines()
    assert int(grown) < 64 << 20  # was 1 GiB: the whole buffer copied before the length check
    assert error == "ba: result of 100 bytes exceeds the max payload 40"


def test_any_integer_is_a_status_but_bool_is_not() -> None:
    handlers = {
        "np32": lambda a: (np.int32(5), b"x"),
        "np64": lambda a: (np.uint64(2**31 - 1), b""),
        "negative": lambda a: (-(2**31), bytearray(b"y")),
        "true": lambda a: (True, b"x"),
        "too_big": lambda a: (np.int64(2**31), b""),
        "huge": lambda a: (10**30, b""),
        "float": lambda a: (1.0, b""),
    }
    with HostDispatcher(RingLayout(4, 64), handlers) as dispatcher:  # type: ignore[arg-type]
        c = dispatcher.client()
        assert c.call("np32", timeout=10) == (5, b"x")
        assert c.call("np64", timeout=10) == (2**31 - 1, b"")
        assert c.call("negative", timeout=10) == (-(2**31), b"y")
        assert c.call("true", timeout=10) == (STATUS_BAD_HANDLER_RESULT, b"")
        assert dispatcher.last_handler_error == (
            "true: returned the status True, a bool: return an integer status"
        )
        assert c.call("too_big", timeout=10) == (STATUS_BAD_HANDLER_RESULT, b"")
        assert dispatcher.last_handler_error == (
            "too_big: returned the status 2147483648, which does not fit an int32"
        )
        assert c.call("huge", timeout=10) == (STATUS_BAD_HANDLER_RESULT, b"")
        assert c.call("float", timeout=10) == (STATUS_BAD_HANDLER_RESULT, b"")
        assert dispatcher.last_handler_error == (
            "float: returned the status float 1.0, expected an integer"
        )
        assert dispatcher.handler_errors == 4


def test_stop_timeouts_mean_what_the_clients_do() -> None:
    """stop()/close() of a HostDispatcher and a UdpFeeder: None or inf waits without limit
    (inf reached the native wait as an overflowing cast), a huge number too; a negative
    number or NaN is an InvalidArgumentError and a string a TypeError, before stopping."""
    import math

    from skbuild_cudaq.realtime.host.udp import UdpFeeder

    def slow(args: bytes) -> bytes:
        time.sleep(0.3)
        return args

    for timeout in (None, math.inf, 1e300):
        dispatcher = HostDispatcher(RingLayout(2, 64), {"slow": slow}).start()
        fed = HostDispatcher(RingLayout(2, 64), {"slow": slow}).start()
        feeder = UdpFeeder(fed.client()).start()
        dispatcher.client().submit("slow", b"x")
        time.sleep(0.05)  # the thread is in the handler
        feeder.stop(timeout)
        dispatcher.stop(timeout)  # waits for the handler: no limit
        assert not dispatcher.running and not feeder.running
        dispatcher.start()
        dispatcher.close(timeout)
        feeder.close(timeout)
        fed.close(timeout)
    dispatcher = HostDispatcher(RingLayout(2, 64), {"slow": slow}).start()
    fed = HostDispatcher(RingLayout(2, 64), {"slow": slow}).start()
    feeder = UdpFeeder(fed.client()).start()
    try:
        for bad, error in ((-1, InvalidArgumentError), (math.nan, InvalidArgumentError),
                           ("1", TypeError), (True, TypeError)):  # fmt: skip
            for target in (dispatcher, feeder):
                with pytest.raises(error, match="a number of seconds >= 0, or None"):
                    target.stop(bad)
                assert target.running
    finally:
        feeder.close()
        fed.close()
        dispatcher.close()


def test_close_of_a_hung_handler_takes_a_timeout_and_the_thread_answers_later() -> None:
    started, release = threading.Event(), threading.Event()

    def hung(args: bytes) -> bytes:
        started.set()
        release.wait(60)
        return b"late"

    dispatcher = HostDispatcher(RingLayout(2, 64), {"hung": hung}).start()
    client = dispatcher.client()
    ticket = client.submit("hung")
    assert started.wait(10)
    with pytest.raises(HostDispatcherError, match=r"did not stop within 0\.1 s"):
        dispatcher.stop(timeout=0.1)
    with pytest.raises(HostDispatcherError, match=r"did not stop within 0\.2 s"):
        dispatcher.close(timeout=0.2)  # the one wait is the 0.2 s given (was 10 s more)
    assert dispatcher.running  # the thread still runs the handler and keeps the ring's views
    release.set()
    assert client.wait(ticket, timeout=10).result == b"late"  # it answers, then stops
    dispatcher.close(timeout=10)
    assert not dispatcher.running
    with pytest.raises(HostDispatcherError, match="closed"):
        dispatcher.start()


def test_the_owner_resets_a_ring_a_foreign_writer_left_unusable() -> None:
    from skbuild_cudaq.realtime.errors import RingError

    layout = RingLayout(4, 64)
    buffer = bytearray(layout.total_bytes)
    with HostDispatcher(layout, HANDLERS, buffer=buffer) as dispatcher:
        client = dispatcher.client()
        assert client.call("echo", b"before", timeout=10) == (0, b"before")
        client.close()
        ids = bytes(buffer[layout.ids_offset :])
        # a same-user writer scribbles over the flags: no client can take the ring any more
        flags = np.frombuffer(buffer, dtype="<u4", count=2 * 4, offset=layout.rx_flags_offset)
        flags[:] = [7, 1, 9, 3, 2, 8, 0, 5]
        with pytest.raises(RingError, match="not in ring order"):
            dispatcher.client()
        dispatcher.reset()  # serving: paused, reset, resumed
        assert dispatcher.running and dispatcher.processed == 0
        assert bytes(buffer[layout.ids_offset :]) == ids  # request ids stay unique
        fresh = dispatcher.client()
        for i in range(10):
            assert fresh.call("rpc_increment", bytes([i]), timeout=10) == (0, bytes([i + 1]))
        assert dispatcher.processed == 10
        dispatcher.stop()
        flags[:] = [3, 3, 3, 3, 3, 3, 3, 1]  # a response flag ahead of its request's
        dispatcher.reset()  # stopped: reset, left stopped
        assert not dispatcher.running
        dispatcher.start()
        assert dispatcher.client().call("echo", b"after", timeout=10) == (0, b"after")
    with pytest.raises(HostDispatcherError, match="closed"):
        dispatcher.reset()


def test_start_after_a_stop_that_timed_out_has_the_same_thread_serve_on() -> None:
    started, release = threading.Event(), threading.Event()

    def hung(args: bytes) -> bytes:
        started.set()
        release.wait(60)
        return b"late"

    with HostDispatcher(RingLayout(2, 64), {"hung": hung, "echo": echo}) as dispatcher:
        client = dispatcher.client()
        ticket = client.submit("hung")
        assert started.wait(10)
        with pytest.raises(HostDispatcherError, match="did not stop within"):
            dispatcher.stop(timeout=0.1)
        dispatcher.start()  # the thread, still in the handler, is asked to go on
        release.set()
        assert client.wait(ticket, timeout=10).result == b"late"
        time.sleep(0.05)
        assert dispatcher.running
        assert client.call("echo", b"on", timeout=10) == (0, b"on")


_LEFT_RUNNING = """
import gc
from skbuild_cudaq.realtime.host.dispatcher import HostDispatcher, echo
from skbuild_cudaq.realtime.ring import RingLayout

d = HostDispatcher(RingLayout(2, 64), {"echo": echo}).start()
c = d.client()
assert c.call("echo", b"x") == (0, b"x")
t = c.submit("echo", b"y")  # in flight while the interpreter exits
del d, c, t
gc.collect()
print("bye", flush=True)
"""


def test_a_serving_thread_left_running_is_stopped_at_interpreter_exit() -> None:
    """Never stopped, its dispatcher dropped: the native thread (which takes the GIL for the
    Python handler) is stopped before the interpreter finalizes, and the process exits."""
    import subprocess
    import sys

    for _ in range(3):
        proc = subprocess.run(
            [sys.executable, "-X", "dev", "-c", _LEFT_RUNNING], capture_output=True, text=True,
            timeout=60, check=False,
        )  # fmt: skip
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, "bye\n", "")


_STUCK_AT_EXIT = """
import atexit, sys, time
from skbuild_cudaq.realtime.host.dispatcher import HostDispatcher
from skbuild_cudaq.realtime.ring import RingLayout

atexit.register(lambda: print("hook done", time.monotonic(), flush=True))  # runs last

entered = []

def stuck(args):
    entered.append(args)
    time.sleep(120)
    return args

keep = []
for _ in range(int(sys.argv[1])):
    d = HostDispatcher(RingLayout(2, 64), {"stuck": stuck}).start()
    keep.append((d, d.client().submit("stuck", b"x")))
end = time.monotonic() + 120
while len(entered) < len(keep):  # every thread inside its handler
    assert time.monotonic() < end, "a serving thread never took its request"
    time.sleep(0.01)
atexit.register(lambda: print("hook starts", time.monotonic(), flush=True))  # runs first
print("bye", flush=True)
"""


def test_the_exit_waits_for_stuck_handlers_once_not_once_a_dispatcher() -> None:
    """Sixteen serving threads stuck in a handler at interpreter exit: the atexit hook asks
    all to stop, then waits 1 s in all (it waited 1 s for each in turn: 16 s here). The
    child times the hook itself (two more atexit functions, one on each side of it), so
    neither its start-up nor a loaded machine's scheduling counts: half the regression's
    time is the bound, eight times the hook's own second."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", _STUCK_AT_EXIT, "16"], capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    bye, starts, done = proc.stdout.splitlines()
    assert bye == "bye" and starts.startswith("hook starts") and done.startswith("hook done")
    hook_s = float(done.split()[-1]) - float(starts.split()[-1])
    assert 0.9 <= hook_s < 8.0, f"the exit hook took {hook_s:.1f} s for 16 stuck threads"


def _thread_states() -> int:
    """How many thread states the interpreter has (the serving thread holds one while alive)."""
    import ctypes

    api = ctypes.pythonapi
    api.PyInterpreterState_Get.restype = ctypes.c_void_p
    api.PyInterpreterState_ThreadHead.restype = ctypes.c_void_p
    api.PyInterpreterState_ThreadHead.argtypes = [ctypes.c_void_p]
    api.PyThreadState_Next.restype = ctypes.c_void_p
    api.PyThreadState_Next.argtypes = [ctypes.c_void_p]
    count, state = 0, api.PyInterpreterState_ThreadHead(api.PyInterpreterState_Get())
    while state:
        count, state = count + 1, api.PyThreadState_Next(state)
    return count


def test_stop_returns_once_the_serving_thread_is_done_with_python() -> None:
    """When stop() returns, the serving thread has deleted its thread state and will not
    take the GIL again: at interpreter exit (the atexit hook stops it) it is never left
    waiting for the GIL while the interpreter finalizes, where Python ends such a thread
    with pthread_exit (and leaves it hanging since 3.14). It used to publish that it had
    stopped first and take the GIL after: AddressSanitizer saw the thread's stack left
    poisoned by that pthread_exit, and here its thread state was often still there."""
    with HostDispatcher(RingLayout(2, 64), {"echo": echo}) as dispatcher:
        client = dispatcher.client()
        dispatcher.stop()  # the with block started it
        for _ in range(300):  # counts taken around each step only: other threads may come and go
            before = _thread_states()
            dispatcher.start()
            assert client.call("echo", b"x") == (0, b"x")  # a Python handler: the GIL taken
            running = _thread_states()
            dispatcher.stop()
            assert (running, _thread_states()) == (before + 1, before)


_FORKED = """
import gc, os, sys, weakref
import numpy as np
from skbuild_cudaq.realtime.host.dispatcher import HostDispatcher, echo
from skbuild_cudaq.realtime.ring import RingLayout
from skbuild_cudaq.realtime.host.udp import UdpClient, UdpFeeder

layout = RingLayout(4, 64)
ring = np.zeros(layout.total_bytes, dtype=np.uint8)  # the loop's owner, weakly referenceable
d = HostDispatcher(layout, {"echo": echo}, buffer=ring, idle_sleep=1e-3).start()
feeder = UdpFeeder(d.client(), idle_sleep=1e-3).start()
with UdpClient(*feeder.address) as peer:
    assert peer.call("echo", b"parent") == (0, b"parent")
pid = os.fork()
if pid == 0:  # the serving and feeder threads are the parent's: none runs here
    assert not d.running and not feeder.running
    feeder.close(30.0)  # a wait for a thread not here would end in an error, after 30 s
    d.stop(30.0)
    d.start()  # the child's own thread over its copy of the ring
    assert d.client().call("echo", b"child", timeout=60) == (0, b"child")
    d.stop(30.0)
    ring = weakref.ref(ring)
    del d, feeder
    gc.collect()
    assert ring() is None  # the parent's thread's reference to the loop is not kept here
    print("child ok", flush=True)
    sys.exit(0)  # at exit: nothing waits for a thread that is not here
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0
with UdpClient(*feeder.address) as peer:  # the parent's threads serve on
    assert peer.call("echo", b"again") == (0, b"again")
feeder.close()
d.close()
print("parent ok", flush=True)
"""


def test_a_forked_child_finds_the_parents_threads_gone() -> None:
    """fork() copies a HostDispatcher and a UdpFeeder, not their native threads: in the
    child they are stopped (stop() returns at once, start() serves the child's copy), and
    dropping the feeder there does not wait for ever for a thread that is not there (its
    dealloc did), nor the exit for the serving thread (the atexit hook waited 1 s a loop)."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", _FORKED], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr
    child, parent = proc.stdout.splitlines()
    assert (child, parent) == ("child ok", "parent ok")


def test_adding_handlers_one_by_one_keeps_one_table() -> None:
    """Each handler added makes a new table for the loop (the serving thread may still read
    the old one). Old tables used to be kept for the dispatcher's life, one per handler:
    memory quadratic in the number of handlers (5,000 of them took 4.5 GB and 35 s to
    construct a dispatcher). Now the constructor installs one table, and old ones are freed
    at once while stopped, and while serving once the thread has moved past them (see
    test_handler_tables_replaced_while_serving_are_freed_once_the_loop_moved_on), the rest
    at stop()."""
    import tracemalloc

    def grown(step: Any) -> int:
        before = tracemalloc.get_traced_memory()[0]
        step()
        return tracemalloc.get_traced_memory()[0] - before

    handlers = {f"h{i}": echo for i in range(1000)}
    tracemalloc.start()
    try:
        made: list[HostDispatcher] = []
        assert grown(lambda: made.append(HostDispatcher(RingLayout(2, 64), handlers))) < 1 << 20
        dispatcher = made[0]
        client = dispatcher.client()

        def add(prefix: str) -> None:
            for i in range(300):
                dispatcher.add_handler(f"{prefix}{i}", echo)

        assert grown(lambda: add("stopped")) < 1 << 20
        dispatcher.start()
        add("serving")  # the serving thread may read the latest old tables: kept for now
        assert client.call("serving299", b"x") == (0, b"x")
        dispatcher.stop()
        assert dispatcher._loop.tables == 1  # ... and freed once it has stopped
        dispatcher.close()
    finally:
        tracemalloc.stop()


def test_a_closed_host_dispatcher_closes_its_clients_and_makes_no_more() -> None:
    dispatcher = HostDispatcher(RingLayout(4, 64), HANDLERS).start()
    client = dispatcher.client()
    assert client.call("echo", b"a") == (0, b"a")
    dispatcher.close()
    with pytest.raises(ClientError, match="closed"):
        client.call("echo", b"b", timeout=5)  # not a wait for an answer nobody gives (Timeout)
    with pytest.raises(HostDispatcherError, match="closed; make a new one"):
        dispatcher.client()
    with pytest.raises(HostDispatcherError, match="closed; make a new one"):
        dispatcher.add_handler("later", echo)


def test_reset_from_a_handler_is_refused_and_the_dispatcher_serves_on() -> None:
    """A handler on the serving thread cannot reset the ring under itself: stop() from there
    returns at once (the thread stops after the handler), so the reset would zero the flags
    while the thread goes on with the old position, and the ring would be out of step."""
    seen: list[BaseException] = []

    def resetting(payload: bytes) -> bytes:
        try:
            dispatcher.reset()
        except HostDispatcherError as exc:
            seen.append(exc)
        return payload

    dispatcher = HostDispatcher(RingLayout(4, 64), {"echo": echo, "reset": resetting})
    with dispatcher.start():
        client = dispatcher.client()
        assert client.call("reset", b"r", timeout=10) == (0, b"r")
        assert [str(e) for e in seen] == [
            "reset() from a handler: the serving thread would go on after it with the old "
            "position; call it from another thread"
        ]
        assert dispatcher.running
        for i in range(10):  # the ring is in step: more round trips than slots
            assert client.call("echo", b"%d" % i, timeout=10) == (0, b"%d" % i)
        dispatcher.reset()  # from this thread: fine
        client = dispatcher.client()
        assert client.call("echo", b"after", timeout=10) == (0, b"after")


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_a_call_waiting_in_another_thread_when_its_client_is_closed_raises_client_error(
    compiled: bool,
) -> None:
    """The shutdown of a program whose worker thread waits in ``call()`` while the main thread
    closes the client (as ``HostDispatcher.close()`` does before it frees a pinned ring):
    ``close()`` returns once no round trip uses the ring's memory, and the waiting call
    raises ``ClientError`` at once. The compiled round trip spins without the GIL; here its
    spin is made long, so that the close comes during it."""
    from skbuild_cudaq.realtime.ring import COMPILED

    if compiled and not COMPILED:
        pytest.skip("no compiled ring client in this installation")
    release = threading.Event()
    dispatcher = HostDispatcher(
        RingLayout(4, 64), {"echo": echo, "hang": lambda p: release.wait(30) and p}
    )
    with dispatcher.start():
        client = dispatcher.client(compiled=compiled)
        assert client.call("echo", b"a") == (0, b"a")
        if compiled:
            client._compiled.spin_ns = 60 * 10**9  # type: ignore[union-attr]
        raised: list[BaseException] = []

        def worker() -> None:
            try:
                client.call("hang", b"b", timeout=30)
            except BaseException as exc:  # handed to the main thread
                raised.append(exc)

        thread = threading.Thread(target=worker)
        thread.start()
        time.sleep(0.2)  # in its spin (compiled) or its backoff (Python)
        client.close()
        thread.join(20)  # a hang guard (a 60 s spin, a 30 s handler): only the close ends it
        alive = thread.is_alive()
        release.set()
    assert not alive
    (exc,) = raised
    assert isinstance(exc, ClientError), repr(exc)
    assert "closed" in str(exc)


@pytest.mark.parametrize("idle_sleep", [0, -1, True, "0.01", float("nan"), float("inf"), 1e12])
def test_idle_sleep_out_of_range_is_refused_with_its_name(idle_sleep: Any) -> None:
    with pytest.raises(InvalidArgumentError, match=r"idle_sleep=.*: None \(spin while serving\)"):
        HostDispatcher(RingLayout(2, 64), HANDLERS, idle_sleep=idle_sleep)


# -- issue 56 items 5-7 --------------------------------------------------------------------------
def test_a_start_from_another_thread_during_reset_waits_and_the_dispatcher_answers() -> None:
    """reset(), start() and stop() are one state machine under the dispatcher's lock: a start()
    from another thread between reset()'s stop and its rewind used to start the serving thread
    at the old position (request 5) while the ring and its clients went back to request 0 --
    a dispatcher that runs and answers nothing. Now that start() waits for the reset."""
    dispatcher = HostDispatcher(RingLayout(8, 64), HANDLERS)
    with dispatcher.start():
        client = dispatcher.client()
        for i in range(5):  # the serving thread at request 5
            assert client.call("echo", b"%d" % i, timeout=10) == (0, b"%d" % i)
        clear_flags = dispatcher._mem.clear_flags
        racer = threading.Thread(target=dispatcher.start)

        def clear_with_a_start_racing() -> None:  # reset()'s step after its stop
            racer.start()
            racer.join(timeout=1.0)  # done at once before; now it waits for the lock
            clear_flags()

        dispatcher._mem.clear_flags = clear_with_a_start_racing  # type: ignore[method-assign]
        dispatcher.reset()
        racer.join()
        assert dispatcher.running
        client = dispatcher.client()
        for i in range(12):  # more round trips than slots: the thread is at request 0 too
            assert client.call("echo", b"%d" % i, timeout=10) == (0, b"%d" % i)
        assert dispatcher._loop.next == 12


def test_the_native_loop_refuses_a_new_position_while_its_thread_serves() -> None:
    """The rewind reset() makes is refused by the native loop while a thread serves (it
    would go on from where it is): one more guard of the state machine above."""
    with (
        HostDispatcher(RingLayout(4, 64), HANDLERS) as dispatcher,
        pytest.raises(RuntimeError, match="while the serving thread runs: stop"),
    ):
        dispatcher._loop.next = 0
    dispatcher._loop.next = 0  # stopped: fine


def test_handler_tables_replaced_while_serving_are_freed_once_the_loop_moved_on() -> None:
    """add_handler() while serving kept every table it replaced until stop() (an "ensure
    registered" loop: +260 MB for 1 M re-adds). Re-adding the same handler makes no table;
    a new handler's table replaces the old one, which is freed once the serving thread has
    passed a point where it holds none (counted: tables alive, not memory or time)."""
    with HostDispatcher(RingLayout(8, 64), HANDLERS) as dispatcher:
        loop = dispatcher._loop
        client = dispatcher.client()
        fid = dispatcher.add_handler("echo", echo)
        for _ in range(10_000):
            assert dispatcher.add_handler("echo", echo) == fid
        assert loop.tables == 1
        most = 0
        for i in range(300):
            dispatcher.add_handler(f"handler {i}", rpc_increment)
            assert client.call(f"handler {i}", b"\x01", timeout=10) == (0, b"\x02")
            most = max(most, loop.tables)
        assert most <= 3, f"{most} tables alive"  # the current one, and at most two retired
        assert len(dispatcher.handler_names) == 302
    assert loop.tables == 1  # stopped: every retired one freed


def test_a_native_handler_writing_past_max_result_len_is_named_and_the_ring_stays_whole(
    native_handlers: Path,
) -> None:
    """A native handler that writes past ``max_result_len`` wrote into the next slot or the
    ring's flags, and the UDP feeder then blamed "another producer wrote to the ring". Its
    result now goes to the loop's result area, followed by a guard checked after the call:
    the write is answered STATUS_RESULT_TOO_LONG, named, and nothing of the ring is touched."""
    from skbuild_cudaq.realtime import FunctionTable, get_host_handler
    from skbuild_cudaq.realtime.host.udp import UdpClient, UdpFeeder

    writes_past = get_host_handler(native_handlers, "writes_past")
    assert writes_past(b"", 8) == (STATUS_RESULT_TOO_LONG, b"")  # the direct call: guarded too
    table = FunctionTable()
    table.add_host("writes_past", writes_past)
    table.add_host("echo", echo)
    layout = RingLayout(4, 64)
    with HostDispatcher(layout, table) as dispatcher:
        with UdpFeeder(dispatcher.client()) as feeder, UdpClient(*feeder.address) as udp:
            for i in range(3):
                assert udp.call("writes_past", b"x", timeout=10) == (STATUS_RESULT_TOO_LONG, b"")
                for j in range(2 * layout.num_slots):  # every slot, past the one written
                    assert udp.call("echo", b"%d" % j, timeout=10) == (0, b"%d" % j), (i, j)
            assert feeder.error is None and feeder.running
            assert feeder.protocol_errors == 0
        assert dispatcher.handler_errors == 3
        assert dispatcher.last_handler_error == (
            "writes_past: wrote past its result region of max_result_len = 40 bytes (a native "
            "handler writes at most max_result_len bytes at result): answered "
            "STATUS_RESULT_TOO_LONG"
        )
