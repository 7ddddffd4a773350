"""UDP transport: a native thread moving datagrams between a loopback socket and a ring.

(Over 400 lines: the feeder and its client share one framing and are tested as a pair.)

:class:`UdpFeeder` (a host thread, not a GPU :class:`~skbuild_cudaq.realtime.Bridge`)
needs only a :class:`~skbuild_cudaq.realtime.RingClient`,
so it fronts the device path (a GPU bridge's ring in pinned mapped memory) and
the host path (:class:`~skbuild_cudaq.realtime.host.dispatcher.HostDispatcher`) alike.
One datagram is one request (24-byte header + arguments, then optional padding:
CUDA-Q realtime's UDP transport sends every request as one full slot-size
datagram); the response (24-byte header + result) goes back to the sender's
address. Up to ``num_slots`` requests are in flight; responses are sent in ring
order as they arrive.

The feeder's thread is native (``host/native/udp_feeder.c``) and never takes the GIL: it
drains the socket with ``recvmmsg`` (up to 64 datagrams a call, whether or not the ring has
room), validates each, writes the request into the ring, and sends the answers that are
ready with ``sendmmsg``, the result straight from the response slot (with requests in
flight and none answered, it watches the oldest one's response flag for up to 10 us
before its next receive call). It spins while
serving (lowest latency, one CPU busy); ``idle_sleep=S`` makes it wait on the socket
(``poll``, at most ``S`` seconds, or 10 ms, at a time) after 100 us with nothing in
flight and nothing received: a datagram then wakes it (a few microseconds).

Framing: the datagram's first 24 bytes are the header, the next ``arg_len`` bytes
the arguments; whatever follows, up to the slot size, is padding and ignored.

- from the feeder's own address: dropped and counted (``dropped_own_address``);
  nothing of the feeder's own can be a request (bound to every interface: its port
  on a loopback address);
- shorter than a header: dropped and counted (``dropped``);
- carrying the *response* magic: dropped and counted (``dropped_responses``). An
  answer is never answered: a forged request whose source is a second server (or
  this one) would otherwise make the two answer each other's answers for ever;
- longer than a slot, or shorter than header + ``arg_len``: answered by the
  feeder itself (``rejected``) with -1 if the magic is wrong, else -3 (the
  request id and timestamp are echoed, no result);
- otherwise forwarded (padding stripped); any other bad magic or an unknown
  function id is answered -1 / -2 by the dispatcher like any other request (as
  CUDA-Q realtime does).

Overload: a request that finds the ring full waits in the feeder's backlog (up to 4,096
requests or 16 MiB; ``held`` says how many now) and goes into the ring as slots free up, the
sources (address and port) in turn, each source's requests in their order. A full backlog
sheds fairly (longest queue drop): the source holding the most requests in it loses its
newest, so a flood from a few sockets sheds its own requests while a client with one request
at a time waits one turn of the sources and is answered. A shed request
is not answered (its client times out) and is counted in ``shed``, also on the test
server's exit line. ``bench/udp_flood.py`` measures a correct client under a flood.

Addresses: IPv4 or IPv6 (``host="::1"``); a host name is looked up, IPv4 first.
Binding beyond loopback (``""``, ``0.0.0.0``, an interface's address) logs a
warning: the wire format has no authentication, so anyone who reaches the port
can call the handlers.

Request ids: in the ring, each forwarded request gets an id from the ring's own
id source (unique for the ring's life, see :mod:`.ring`), so requests of different
UDP peers never share one there; the feeder keeps the peer's id and timestamp
and puts them back into the response it sends. An answer from the ring that does
not echo the ring's id and the timestamp is dropped (``protocol_errors``).
:class:`UdpClient` starts its ids at a random 32-bit value and accepts a response
only for a request it sent and has not collected yet (matched by id and timestamp);
anything else is counted in ``unmatched`` and dropped.

The ring client is the feeder's while the feeder runs (one producer at a time): it
starts at the client's position and hands the position back when it stops. Requests
still in flight at ``stop()`` are answered after the next ``start()`` (unless the
client was used in between). Closing the ring client (as a bridge does before it
frees the ring) stops the feeder first: its thread never touches freed memory. A
feeder dropped without ``close()`` (or still running at exit) is stopped before its
socket is closed.

:class:`UdpClient` is the client side with the same ``call`` / ``submit`` /
``submit_many`` / ``collect`` API as ``RingClient``.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import secrets
import socket
import threading
import time
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from skbuild_cudaq.realtime._closing import Closing
from skbuild_cudaq.realtime._logging import get_logger
from skbuild_cudaq.realtime._timeouts import (
    DEFAULT_TIMEOUT,
    UNSET,
    ClientTimeout,
    Timeout,
    check_timeout,
    collect_each,
)
from skbuild_cudaq.realtime.errors import ClientError, ProtocolError, UdpFeederError
from skbuild_cudaq.realtime.host import _native
from skbuild_cudaq.realtime.ring import RingClient
from skbuild_cudaq.realtime.ring.client import _buffer_address
from skbuild_cudaq.realtime.ring.memory import _idle_sleep_ns
from skbuild_cudaq.realtime.wire import (
    _REQUEST,
    HEADER_SIZE,
    REQUEST_MAGIC,
    Response,
    decode_response,
    encode_request,
)

__all__ = ["UdpClient", "UdpFeeder", "UdpFeederError", "UdpTicket"]

_MAX_DATAGRAM = 65535
#: the longest one receive call waits (a socket timeout of years overflows; waits loop)
_MAX_RECEIVE_WAIT = 3600.0
_SOCKET_BUFFER = 4 << 20
_logger = get_logger(__name__)

#: a socket address: (host, port) for IPv4, (host, port, flowinfo, scope_id) for IPv6
_Address = tuple[Any, ...]


def _resolve(host: str, port: int) -> tuple[socket.AddressFamily, _Address]:
    """The family and socket address of ``host:port``: an IP literal as it is (IPv4 or IPv6),
    ``""`` every IPv4 interface (as ``bind`` takes it), a host name looked up, IPv4 first
    (so that ``localhost`` is the same address for a feeder and its clients everywhere)."""
    if host == "":
        return socket.AF_INET, ("", port)
    try:
        ip = _ip(host)
    except ValueError:
        ip = None
    if ip is not None and ip.version == 4:
        return socket.AF_INET, (host, port)
    families = (socket.AF_INET6,) if ip is not None else (socket.AF_INET, socket.AF_INET6)
    error: OSError | None = None
    for family in families:
        try:
            infos = socket.getaddrinfo(host, port, family, socket.SOCK_DGRAM)
        except OSError as exc:  # socket.gaierror: no address of this family
            error = error or exc
            continue
        if infos:
            return family, tuple(infos[0][4])
    assert error is not None
    raise error


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The address of a numeric host as a socket reports it (an IPv6 zone, ``%eth0``, dropped)."""
    return ipaddress.ip_address(host.split("%", 1)[0])


def _is_loopback(host: str) -> bool:
    try:
        ip = _ip(host)
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)  # ::ffff:127.0.0.1 on an IPv6 socket
    return bool(ip.is_loopback or (mapped is not None and mapped.is_loopback))


def _big_buffers(sock: socket.socket) -> None:
    for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
        with contextlib.suppress(OSError):  # capped by the kernel: not fatal
            sock.setsockopt(socket.SOL_SOCKET, opt, _SOCKET_BUFFER)


#: the feeder's counters, in the order :attr:`UdpFeeder.counters` lists them
COUNTERS = (
    "received",  # datagrams read from the socket
    "forwarded",  # datagrams written into the ring
    "answered",  # ring responses sent back
    "rejected",  # malformed datagrams answered by the feeder (-1 / -3)
    "dropped",  # datagrams too short to carry a header (no answer possible)
    "dropped_responses",  # datagrams carrying the response magic (never answered)
    "dropped_own_address",  # datagrams whose source is the feeder's own address
    "send_errors",  # answers the socket refused to send
    "protocol_errors",  # ring responses that broke the protocol (dropped)
    "shed",  # requests shed with the ring and the backlog full (the fullest source's newest)
    "held",  # requests held in the backlog now, for the ring to have room (not a count)
)


class _Counter:
    """One of the feeder's counters as an attribute (``feeder.forwarded``)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def __get__(self, feeder: UdpFeeder | None, owner: type) -> int:
        if feeder is None:
            return 0
        return int(feeder._core.counters()[self._name])


def _stop_and_close(core: Any, sock: socket.socket) -> None:
    """A feeder's finalizer: stop its thread, then close its socket (if the thread is gone)."""
    if core.stop(10.0):
        sock.close()


class UdpFeeder(Closing):
    """A native thread feeding a ring from UDP.

    Moves UDP datagrams on ``host:port`` into the ring of ``client`` and the answers
    back. ``host``: an IPv4 or IPv6 address or a host name (see the module docstring);
    ``port=0`` picks a free port (see :attr:`address`). ``idle_sleep``: ``None``
    (the default) spins while serving; a number of seconds waits on the socket when
    idle (see the module docstring). :attr:`counters` says what happened to every
    datagram.
    """

    received = _Counter()
    forwarded = _Counter()
    answered = _Counter()
    rejected = _Counter()
    dropped = _Counter()
    dropped_responses = _Counter()
    dropped_own_address = _Counter()
    send_errors = _Counter()
    protocol_errors = _Counter()
    shed = _Counter()
    held = _Counter()

    def __init__(
        self,
        client: RingClient,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        idle_sleep: float | None = None,
    ) -> None:
        sleep_ns = _idle_sleep_ns(idle_sleep)
        if client.closed:
            msg = "the ring client is closed: the UDP feeder needs an open one"
            raise UdpFeederError(msg)
        self._client = client
        try:
            family, where = _resolve(host, port)
            self._sock = socket.socket(family, socket.SOCK_DGRAM)
        except OSError as exc:
            msg = f"cannot bind a UDP socket to {host}:{port}: {exc}"
            raise UdpFeederError(msg) from None
        try:
            _big_buffers(self._sock)
            self._sock.bind(where)
        except OSError as exc:
            self._sock.close()
            msg = f"cannot bind a UDP socket to {host}:{port}: {exc}"
            raise UdpFeederError(msg) from None
        self._sock.setblocking(False)
        bound_host = self.address[0]
        if not _is_loopback(bound_host):
            _logger.warning(
                "the UDP feeder listens on %s, beyond loopback: anyone who can reach this port "
                "can call its handlers (the wire format has no authentication)",
                bound_host,
            )
        layout = client.layout
        mem = client._mem
        self._core = _native.Feeder(
            self._sock.fileno(), _buffer_address(mem.mv), layout.num_slots, layout.slot_size,
            mem.buffer,
        )  # fmt: skip
        self._core.idle_sleep_ns = sleep_ns
        # the ring's memory may go (a bridge frees it after closing its client): stop first
        mem.on_release(weakref.WeakMethod(self._ring_released))
        # dropped without close(), or still running at exit: the thread stops before the
        # socket closes (never receiving on a closed descriptor, maybe another socket's)
        weakref.finalize(self, _stop_and_close, self._core, self._sock)
        self._lock = threading.Lock()

    @property
    def address(self) -> tuple[str, int]:
        if self.closed:
            msg = "the UDP feeder is closed"
            raise UdpFeederError(msg)
        host, port = self._sock.getsockname()[:2]
        return str(host), int(port)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` closed the socket."""
        return self._sock.fileno() < 0

    @property
    def running(self) -> bool:
        return bool(self._core.running)

    def __repr__(self) -> str:
        if self.closed:
            return "<UdpFeeder closed>"
        host, port = self.address
        return f"<UdpFeeder {host}:{port} {'running' if self.running else 'stopped'}>"

    @property
    def error(self) -> str | None:
        """Why the thread stopped on its own (the ring broke the protocol, the socket
        failed), or None."""
        error: str | None = self._core.error
        return error

    @property
    def counters(self) -> dict[str, int]:
        values = self._core.counters()
        return {name: int(values[name]) for name in COUNTERS}

    def start(self) -> UdpFeeder:
        """Start the feeder thread (no-op if it runs)."""
        with self._lock:
            if self.running:
                return self
            if self.closed:
                msg = "the UDP feeder is closed"
                raise UdpFeederError(msg)
            client = self._client
            if client.closed:
                msg = "the ring client is closed: the UDP feeder cannot start"
                raise UdpFeederError(msg)
            if client.in_flight:
                msg = (
                    f"the ring client has {client.in_flight} requests in flight: collect them "
                    "before a UDP feeder starts over its ring (one producer at a time)"
                )
                raise UdpFeederError(msg)
            self._core.start(client.submitted)
        return self

    def stop(self, timeout: float | None = 10.0) -> None:
        """Stop the thread (idempotent), waiting up to ``timeout`` seconds (None: no limit);
        requests in flight are answered after the next :meth:`start`. :class:`UdpFeederError`
        if the thread had failed (see :attr:`error`)."""
        with self._lock:
            seconds = check_timeout(timeout)
            if not self._core.stop(-1.0 if seconds is None else seconds):
                msg = f"UDP feeder thread did not stop within {seconds:g} s"
                raise UdpFeederError(msg)
            if not self._client.closed:
                self._client._next = int(self._core.next)  # the position goes back
        if self.error is not None:
            msg = f"UDP feeder thread failed: {self.error}"
            raise UdpFeederError(msg)

    def _ring_released(self) -> None:
        self._core.stop(60.0)

    def close(self, timeout: float | None = 10.0) -> None:
        """Stop (waiting up to ``timeout`` seconds for the thread) and close the socket."""
        try:
            self.stop(timeout)
        finally:
            if not self.running:
                self._sock.close()

    def __enter__(self) -> UdpFeeder:
        return self.start()


@dataclass(frozen=True)
class UdpTicket:
    """One request sent by :class:`UdpClient`; its response is matched by id and timestamp."""

    request_id: int
    timestamp: int


class UdpClient(ClientTimeout, Closing):
    """Client of a :class:`UdpFeeder` (or any CUDA-Q realtime UDP endpoint).

    ``host``: an IPv4 or IPv6 address or a host name (looked up IPv4 first, like the feeder).
    ``timeout``: how long a waiting method (``call``, ``wait``, ``collect``) waits when its
    own ``timeout`` is left out (:attr:`timeout`), with :class:`RingClient`'s meaning:
    seconds ``>= 0`` (``0``: do not wait), or ``None`` for no limit.

    Responses may arrive in any order; they are matched to requests by
    ``(request_id, timestamp)``. One thread at a time, like :class:`RingClient`.
    """

    def __init__(self, host: str, port: int, *, timeout: float | None = DEFAULT_TIMEOUT) -> None:
        self.timeout = timeout
        family, where = _resolve(host, port)
        self._sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            _big_buffers(self._sock)
            self._sock.connect(where)
        except BaseException:
            self._sock.close()
            raise
        self._responses: dict[tuple[int, int], Response] = {}
        self._outstanding: set[tuple[int, int]] = set()  # sent, response not collected
        self._next_request_id = secrets.randbits(32)
        self.unmatched = 0  #: datagrams received that were not responses to outstanding requests

    @property
    def address(self) -> tuple[str, int]:
        self._check_open()
        host, port = self._sock.getpeername()[:2]
        return str(host), int(port)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` closed the socket."""
        return self._sock.fileno() < 0

    def __repr__(self) -> str:
        if self.closed:
            return "<UdpClient closed>"
        host, port = self.address
        return f"<UdpClient to {host}:{port}>"

    def _check_open(self) -> None:
        if self._sock.fileno() < 0:
            msg = "the UDP client is closed; make a new one"
            raise ClientError(msg)

    def send_raw(self, data: bytes) -> None:
        """Send one datagram as is (for fuzzing); one with a header expects a response."""
        self._check_open()
        self._sock.send(data)
        if len(data) >= HEADER_SIZE:
            _, _, _, rid, ts = _REQUEST.unpack_from(data)
            self._outstanding.add((rid, ts))

    def submit(
        self,
        function: str | bytes | int,
        payload: bytes | bytearray | memoryview = b"",
        *,
        request_id: int | None = None,
        timestamp: int | None = None,
        magic: int = REQUEST_MAGIC,
        arg_len: int | None = None,
    ) -> UdpTicket:
        self._check_open()
        ts = 0 if timestamp is None else timestamp
        if request_id is None:
            request_id = self._next_request_id
            while (request_id, ts) in self._outstanding:  # only after 2**32 ids in flight
                request_id = (request_id + 1) & 0xFFFFFFFF
            self._next_request_id = (request_id + 1) & 0xFFFFFFFF
        elif (request_id, ts) in self._outstanding:
            from skbuild_cudaq.realtime.errors import InvalidArgumentError  # a ValueError too

            msg = (
                f"request id {request_id} with timestamp {ts} is already in flight on this "
                "client: their responses could not be told apart"
            )
            raise InvalidArgumentError(msg)
        data = encode_request(
            function, payload, request_id=request_id, timestamp=ts, magic=magic, arg_len=arg_len
        )
        try:
            self._sock.send(data)
        except OSError as exc:
            if exc.errno != errno.EMSGSIZE:
                raise
            from skbuild_cudaq.realtime.errors import InvalidArgumentError  # a ValueError too

            msg = (
                f"a request of {len(data)} bytes ({len(data) - HEADER_SIZE} of arguments) is "
                f"longer than one UDP datagram to {self.address[0]} can be; nothing was sent "
                "(a server answers arguments longer than its slot with status -3)"
            )
            raise InvalidArgumentError(msg) from None
        self._outstanding.add((request_id, ts))
        return UdpTicket(request_id, ts)

    def submit_many(
        self, items: Iterable[tuple[str | bytes | int, bytes | bytearray | memoryview]]
    ) -> list[UdpTicket]:
        return [self.submit(f, p) for f, p in items]

    def _receive(self, timeout: float) -> bool:
        """Read one datagram within ``timeout`` seconds; False if none came."""
        self._check_open()
        self._sock.settimeout(min(max(timeout, 1e-6), _MAX_RECEIVE_WAIT))
        try:
            data = self._sock.recv(_MAX_DATAGRAM)
        except (TimeoutError, BlockingIOError):
            return False
        try:
            response = decode_response(data)
        except ProtocolError:
            self.unmatched += 1
            return True
        key = (response.header.request_id, response.header.ptp_timestamp)
        if key not in self._outstanding or key in self._responses:
            self.unmatched += 1  # not a request of ours, or a second answer to one
            return True
        self._responses[key] = response
        return True

    def _check_ticket(self, ticket: UdpTicket) -> tuple[int, int]:
        """``ticket``'s key; :class:`ClientError` unless its response is still to collect."""
        self._check_open()
        key = (ticket.request_id, ticket.timestamp)
        if key not in self._outstanding:
            msg = (
                f"request {ticket.request_id} (timestamp {ticket.timestamp}) was already "
                "collected, or forgotten by discard()"
            )
            raise ClientError(msg)
        return key

    def poll(self, ticket: UdpTicket) -> Response | None:
        """The response of ``ticket`` if it already arrived (reads what is queued)."""
        key = self._check_ticket(ticket)
        while key not in self._responses and self._receive(0.0):
            pass
        response = self._responses.pop(key, None)
        if response is not None:
            self._outstanding.discard(key)
        return response

    def wait(self, ticket: UdpTicket, timeout: Timeout = UNSET) -> Response:
        """The response of ``ticket``; :class:`TimeoutError` after ``timeout`` seconds."""
        seconds = self._seconds(timeout)
        key = self._check_ticket(ticket)
        end = None if seconds is None else time.monotonic() + seconds
        while key not in self._responses:
            remaining = _MAX_RECEIVE_WAIT if end is None else end - time.monotonic()
            if remaining <= 0:
                msg = (
                    f"no UDP response to request {ticket.request_id} (timestamp "
                    f"{ticket.timestamp}) from {self.address} within {seconds:g} s"
                )
                raise TimeoutError(msg)
            self._receive(remaining)
        self._outstanding.discard(key)
        return self._responses.pop(key)

    def collect(self, tickets: Sequence[UdpTicket], timeout: Timeout = UNSET) -> list[Response]:
        """Responses of ``tickets`` in the same order; ``timeout`` bounds the whole call."""
        self._check_open()
        return collect_each(self.wait, tickets, self._seconds(timeout))

    def call(
        self,
        function: str | bytes | int,
        payload: bytes | bytearray | memoryview = b"",
        *,
        timeout: Timeout = UNSET,
    ) -> tuple[int, bytes]:
        """Send one request and wait for it: ``(status, result)``; ``timeout`` is checked
        before anything is sent."""
        seconds = self._seconds(timeout)
        response = self.wait(self.submit(function, payload), seconds)
        return response.status, response.result

    def discard(self) -> int:
        """Drop every response received and not collected, and forget every request
        still outstanding (their late responses will be dropped); returns how many
        responses were dropped."""
        while self._receive(0.0):
            pass
        count = len(self._responses)
        self._responses.clear()
        self._outstanding.clear()
        return count

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> UdpClient:
        return self
