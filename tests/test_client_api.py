"""The two clients side by side: ``RingClient`` (compiled and pure-Python round trip) and
``UdpClient`` give the same answers, waits and errors for the same situations.

Pure host tests (no GPU): a ``HostDispatcher`` is the consumer, a ``UdpFeeder`` fronts it for
the UDP client. A dispatcher that is not started answers nothing: the timeouts' cases.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import pytest

from skbuild_cudaq.realtime.errors import ClientError, InvalidArgumentError
from skbuild_cudaq.realtime.host.dispatcher import HostDispatcher, echo
from skbuild_cudaq.realtime.host.udp import UdpClient, UdpFeeder
from skbuild_cudaq.realtime.ring import RingLayout
from skbuild_cudaq.realtime.ring import client as client_module

needs_compiled = pytest.mark.skipif(
    not client_module.COMPILED, reason="skbuild-cudaq was built without its compiled ring client"
)
KINDS = [
    pytest.param("compiled", marks=needs_compiled),
    pytest.param("pure"),
    pytest.param("udp"),
]


@dataclass
class Served:
    """A client of ``kind`` over a host dispatcher (not started unless ``serving``)."""

    kind: str
    dispatcher: HostDispatcher
    feeder: UdpFeeder | None
    make: Callable[..., Any]  # make(**kwargs) -> a new client


@pytest.fixture(params=KINDS)
def served(request: pytest.FixtureRequest) -> Iterator[Served]:
    kind: str = request.param
    with ExitStack() as stack:
        dispatcher = stack.enter_context(
            HostDispatcher(RingLayout(4, 64), {"echo": echo}, idle_sleep=1e-3)
        )
        dispatcher.stop()  # the with block started it: the tests start it when they want
        feeder = None
        if kind == "udp":
            feeder = stack.enter_context(UdpFeeder(dispatcher.client(), idle_sleep=1e-3))

            def make(**kwargs: Any) -> Any:
                assert feeder is not None
                return stack.enter_context(UdpClient(*feeder.address, **kwargs))
        else:

            def make(**kwargs: Any) -> Any:
                return dispatcher.client(compiled=kind == "compiled", **kwargs)

        yield Served(kind, dispatcher, feeder, make)


def _start_later(dispatcher: HostDispatcher, delay: float) -> threading.Thread:
    thread = threading.Thread(target=lambda: (time.sleep(delay), dispatcher.start()))
    thread.start()
    return thread


@pytest.mark.parametrize("unlimited", [None, math.inf])
def test_a_timeout_of_none_or_inf_waits_without_limit(served: Served, unlimited: float) -> None:
    """``timeout=None`` means no limit (the standard library's meaning), on every client and
    path; it was a bare TypeError deep in RingClient, the UDP client's default on UdpClient,
    and math.inf an OverflowError there."""
    client = served.make()
    thread = _start_later(served.dispatcher, 0.2)
    try:
        assert client.call("echo", b"late", timeout=unlimited) == (0, b"late")
    finally:
        thread.join()
    tickets = [client.submit("echo", b"%d" % i) for i in range(3)]
    assert client.wait(tickets[0], unlimited).result == b"0"
    assert [r.result for r in client.collect(tickets[1:], timeout=unlimited)] == [b"1", b"2"]
    # a client whose own timeout is no limit
    unlimited_client = served.make(timeout=unlimited)
    assert unlimited_client.timeout is None
    assert unlimited_client.call("echo", b"x") == (0, b"x")


BAD = [
    (-1, InvalidArgumentError),
    (-0.001, InvalidArgumentError),
    (float("nan"), InvalidArgumentError),
    (True, TypeError),
    ("1", TypeError),
    (b"1", TypeError),
    ([1.0], TypeError),
]


@pytest.mark.parametrize(("bad", "error"), BAD, ids=[repr(b) for b, _ in BAD])
def test_a_bad_timeout_is_refused_before_anything_is_written(
    served: Served, bad: object, error: type[Exception]
) -> None:
    """The same error, with the same message, on every client and path, and before a request
    is written (RingClient's call took -1 as "time out at once" after writing the request,
    and a string failed only once the answer was late)."""
    served.dispatcher.start()
    client = served.make()
    ticket = client.submit("echo", b"t")
    feeder = served.feeder
    end = time.monotonic() + 10
    while feeder is not None and feeder.received < 1 and time.monotonic() < end:
        time.sleep(1e-3)  # the feeder has read the ticket's datagram
    before = feeder.received if feeder is not None else client.submitted
    match = "a number of seconds >= 0, or None for no limit"
    uses: list[Callable[[], object]] = [
        lambda: client.call("echo", b"x", timeout=bad),
        lambda: client.call("echo", timeout=bad),
        lambda: client.wait(ticket, bad),
        lambda: client.collect([ticket], timeout=bad),
    ]
    if served.kind != "udp":  # waiting for a free slot: only a ring's submit waits
        uses += [
            lambda: client.submit("echo", b"x", timeout=bad),
            lambda: client.submit_many([("echo", b"x")], timeout=bad),
            lambda: client.drain(bad),
            lambda: client.call_batch("echo", [b"x"], timeout=bad),
        ]
    for use in uses:
        with pytest.raises(error, match=match):
            use()
    after = feeder.received if feeder is not None else client.submitted
    assert after == before  # nothing was written
    assert client.wait(ticket).result == b"t"  # and the ticket is still there to collect
    with pytest.raises(error, match=match):
        served.make(timeout=bad)
    with pytest.raises(error, match=match):
        client.timeout = bad
    assert client.timeout == 10.0


def test_zero_does_not_wait_and_the_client_timeout_is_the_default(served: Served) -> None:
    client = served.make(timeout=0.05)
    assert client.timeout == 0.05
    with pytest.raises(TimeoutError, match=r"within 0\.05 s"):
        client.call("echo", b"x")  # nobody serves: the client's own timeout (not 10 s)
    ticket = client.submit("echo", b"y")
    with pytest.raises(TimeoutError, match="within 0 s"):
        client.wait(ticket, 0)  # 0: no wait (the message names the wait it made)
    client.timeout = None  # assignable: no limit from here on
    thread = _start_later(served.dispatcher, 0.1)
    try:
        assert client.wait(ticket).result == b"y"
    finally:
        thread.join()


def test_a_collected_ticket_and_a_closed_client_raise_client_error(served: Served) -> None:
    """Both clients raise ClientError at once: UdpClient waited out its timeout for a ticket
    already collected (then TimeoutError), and its poll() returned None."""
    served.dispatcher.start()
    client = served.make()
    ticket = client.submit("echo", b"a")
    assert client.wait(ticket).result == b"a"
    for use in (lambda: client.wait(ticket), lambda: client.poll(ticket)):
        with pytest.raises(ClientError, match="was already collected"):
            use()  # at once: a wait would end in TimeoutError, a poll in None
    client.close()
    assert client.closed
    for use in (
        lambda: client.call("echo", b"y"),
        lambda: client.submit("echo", b"y"),
        lambda: client.wait(ticket),
        lambda: client.poll(ticket),
        lambda: client.collect([]),
    ):
        with pytest.raises(ClientError, match="client is closed; make a new one"):
            use()
    assert "closed" in repr(client)
    client.close()  # idempotent


def test_a_function_named_by_another_type_is_refused_alike(served: Served) -> None:
    served.dispatcher.start()
    client = served.make()
    for bad in (1.5, None, True, bytearray(b"echo")):
        with pytest.raises(TypeError, match="a function is named by str, bytes or int id"):
            client.call(bad, b"x")
    with pytest.raises(ValueError, match="is not an unsigned 32-bit value"):
        client.call(2**32, b"x")
    assert client.call(b"echo", b"ok") == (0, b"ok")
