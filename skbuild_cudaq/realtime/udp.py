"""UDP transport: a host thread moving datagrams between a loopback socket and a ring.

(Over 400 lines: the feeder and its client share one framing and are tested as a pair.)

:class:`UdpFeeder` (a host thread, not a GPU :class:`~skbuild_cudaq.realtime.Bridge`;
``UdpBridge`` is its old name) needs only a :class:`~skbuild_cudaq.realtime.RingClient`,
so it fronts the device path (a GPU bridge's ring in pinned mapped memory) and
the host path (:class:`~skbuild_cudaq.realtime.host_path.HostDispatcher`) alike.
One datagram is one request (24-byte header + arguments, then optional padding:
CUDA-Q realtime's UDP transport sends every request as one full slot-size
datagram); the response (24-byte header + result) goes back to the sender's
address. Up to ``num_slots`` requests are in flight; responses are sent in ring
order as they arrive.

Framing: the datagram's first 24 bytes are the header, the next ``arg_len`` bytes
the arguments; whatever follows, up to the slot size, is padding and ignored.

- from the feeder's own address: dropped and counted (``dropped_own_address``);
  nothing of the feeder's own can be a request;
- shorter than a header: dropped and counted (``dropped``);
- carrying the *response* magic: dropped and counted (``dropped_responses``). An
  answer is never answered: a forged request whose source is a second server (or
  this one) would otherwise make the two answer each other's answers for ever;
- longer than a slot, or shorter than header + ``arg_len``: answered by the
  bridge itself (``rejected``) with -1 if the magic is wrong, else -3 (the
  request id and timestamp are echoed, no result);
- otherwise forwarded (padding stripped); any other bad magic or an unknown
  function id is answered -1 / -2 by the dispatcher like any other request (as
  CUDA-Q realtime does).

Addresses: IPv4 or IPv6 (``host="::1"``); a host name is looked up, IPv4 first.
Binding beyond loopback (``""``, ``0.0.0.0``, an interface's address) logs a
warning: the wire format has no authentication, so anyone who reaches the port
can call the handlers.

Request ids: in the ring, each forwarded request gets an id from the ring's own
id source (unique for the ring's life, see :mod:`.ring`), so requests of different
UDP peers never share one there; the bridge keeps the peer's id and timestamp
and puts them back into the response it sends. :class:`UdpClient` starts its ids
at a random 32-bit value and accepts a response only for a request it sent and
has not collected yet (matched by id and timestamp); anything else is counted in
``unmatched`` and dropped.

:class:`UdpClient` is the client side with the same ``call`` / ``submit`` /
``submit_many`` / ``collect`` API as ``RingClient``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import secrets
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ._logging import get_logger
from .errors import ProtocolError, RingProtocolError, UdpBridgeError, UdpFeederError
from .ring import RingClient, Ticket
from .ring.memory import Backoff
from .wire import (
    _REQUEST,
    _RESPONSE,
    HEADER_SIZE,
    REQUEST_MAGIC,
    RESPONSE_MAGIC,
    STATUS_ARGS_TOO_LONG,
    STATUS_BAD_MAGIC,
    Response,
    decode_response,
    encode_request,
    encode_response,
)

__all__ = ["UdpBridge", "UdpBridgeError", "UdpClient", "UdpFeeder", "UdpFeederError", "UdpTicket"]

_MAX_DATAGRAM = 65535
_SOCKET_BUFFER = 4 << 20
_logger = get_logger(__name__)

#: a socket address: (host, port) for IPv4, (host, port, flowinfo, scope_id) for IPv6
_Address = tuple[Any, ...]
#: a forwarded request: its ring ticket, the peer's request id, the peer's address
_InFlight = tuple[Ticket, int, _Address]


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


class UdpFeeder:
    """A host thread feeding a ring from UDP (formerly ``UdpBridge``, still an alias).

    Moves UDP datagrams on ``host:port`` into a ring and responses back (a thread).

    ``host``: an IPv4 or IPv6 address or a host name (see the module docstring);
    ``port=0`` picks a free port (see :attr:`address`). ``spin`` bounds the busy
    polls before the thread yields while responses are outstanding: large for a
    GPU consumer (lowest latency), small when the consumer is a thread of this
    process (it needs the GIL). :attr:`counters` says what happened to every
    datagram (see the module docstring).
    """

    def __init__(
        self,
        client: RingClient,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        spin: int = 256,
        idle_timeout: float = 0.05,
    ) -> None:
        self._client = client
        self._spin = spin
        self._idle_timeout = idle_timeout
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
        bound_host, bound_port = self.address
        self._own = (bound_host, bound_port)
        self._wildcard = _ip(bound_host).is_unspecified
        if not _is_loopback(bound_host):
            _logger.warning(
                "the UDP feeder listens on %s, beyond loopback: anyone who can reach this port "
                "can call its handlers (the wire format has no authentication)",
                bound_host,
            )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.error: BaseException | None = None  #: what ended the thread, if it failed
        # counters (written by the bridge thread only)
        self.received = 0  #: datagrams read from the socket
        self.forwarded = 0  #: datagrams submitted to the ring
        self.answered = 0  #: ring responses sent back
        self.rejected = 0  #: malformed datagrams answered by the bridge (-1 / -3)
        self.dropped = 0  #: datagrams too short to carry a header (no answer possible)
        self.dropped_responses = 0  #: datagrams carrying the response magic (never answered)
        self.dropped_own_address = 0  #: datagrams whose source is the feeder's own address
        self.send_errors = 0  #: responses the socket refused to send
        self.protocol_errors = 0  #: ring responses that broke the protocol (dropped)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._sock.getsockname()[:2]
        return str(host), int(port)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def counters(self) -> dict[str, int]:
        return {
            "received": self.received,
            "forwarded": self.forwarded,
            "answered": self.answered,
            "rejected": self.rejected,
            "dropped": self.dropped,
            "dropped_responses": self.dropped_responses,
            "dropped_own_address": self.dropped_own_address,
            "send_errors": self.send_errors,
            "protocol_errors": self.protocol_errors,
        }

    def _send(self, data: bytes, addr: _Address) -> None:
        try:
            self._sock.sendto(data, addr)
        except OSError:
            self.send_errors += 1

    def _from_self(self, addr: _Address) -> bool:
        """Whether ``addr`` is the feeder's own address (bound to every interface: its port on
        a loopback address; its other addresses are caught by the response-magic rule)."""
        host, port = addr[0], addr[1]
        own_host, own_port = self._own
        if port != own_port:
            return False
        return host == own_host or (self._wildcard and _is_loopback(host))

    def _handle(self, data: bytes, addr: _Address, inflight: deque[_InFlight]) -> None:
        self.received += 1
        if self._from_self(addr):
            self.dropped_own_address += 1
            return
        size = len(data)
        if size < HEADER_SIZE:
            self.dropped += 1
            return
        magic, fid, arg_len, rid, ts = _REQUEST.unpack_from(data)
        if magic == RESPONSE_MAGIC:  # an answer is never answered (no loops between servers)
            self.dropped_responses += 1
            return
        if size > self._client.layout.slot_size or size - HEADER_SIZE < arg_len:
            self.rejected += 1
            status = STATUS_BAD_MAGIC if magic != REQUEST_MAGIC else STATUS_ARGS_TOO_LONG
            self._send(encode_response(status, request_id=rid, timestamp=ts), addr)
            return
        args = data[HEADER_SIZE : HEADER_SIZE + arg_len]  # what follows is padding
        ticket = self._client.submit(fid, args, timestamp=ts, magic=magic, arg_len=arg_len)
        self.forwarded += 1
        inflight.append((ticket, rid, addr))

    def _run(self) -> None:
        sock = self._sock
        client = self._client
        capacity = client.layout.num_slots
        inflight: deque[_InFlight] = deque()
        backoff = Backoff(self._spin, max_sleep=2e-4)
        stop = self._stop
        try:
            while not stop.is_set():
                progressed = False
                while inflight:
                    ticket, peer_id, addr = inflight[0]
                    try:
                        response = client.poll(ticket)
                    except RingProtocolError:
                        inflight.popleft()
                        self.protocol_errors += 1
                        progressed = True
                        continue
                    if response is None:
                        break
                    inflight.popleft()
                    self.answered += 1  # counted before the client can see it
                    h = response.header  # the peer's own request id goes back to it
                    header = _RESPONSE.pack(
                        h.magic, h.status, h.result_len, peer_id, h.ptp_timestamp
                    )
                    self._send(header + response.result, addr)
                    progressed = True
                while len(inflight) < capacity:
                    try:
                        data, addr = sock.recvfrom(_MAX_DATAGRAM)
                    except (BlockingIOError, InterruptedError):
                        break
                    except OSError:  # e.g. an ICMP error surfaced on the socket
                        continue
                    self._handle(data, addr, inflight)
                    progressed = True
                if progressed:
                    backoff.reset()
                elif inflight:
                    backoff.pause()
                else:
                    select.select([sock], [], [], self._idle_timeout)
        except BaseException as exc:  # keep the reason; stop() reports it
            self.error = exc
            raise

    def start(self) -> UdpFeeder:
        """Start the bridge thread (no-op if it runs)."""
        with self._lock:
            if self.running:
                return self
            if self._sock.fileno() < 0:
                msg = "the UDP bridge is closed"
                raise UdpFeederError(msg)
            self._stop.clear()
            self.error = None
            self._thread = threading.Thread(target=self._run, name="cudaq-udp-bridge", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread (idempotent). Responses still in flight are not sent."""
        with self._lock:
            thread = self._thread
            self._stop.set()
            if thread is not None:
                thread.join(timeout)
                if thread.is_alive():
                    msg = f"UDP bridge thread did not stop within {timeout:g} s"
                    raise UdpFeederError(msg)
            self._thread = None
        if self.error is not None:
            msg = f"UDP bridge thread failed: {type(self.error).__name__}: {self.error}"
            raise UdpFeederError(msg) from self.error

    def close(self, timeout: float = 10.0) -> None:
        """Stop (waiting up to ``timeout`` seconds for the thread) and close the socket."""
        try:
            self.stop(timeout)
        finally:
            self._sock.close()

    def __enter__(self) -> UdpFeeder:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class UdpTicket:
    """One request sent by :class:`UdpClient`; its response is matched by id and timestamp."""

    request_id: int
    timestamp: int


#: The old name of :class:`UdpFeeder` (it is a host thread, not a GPU :class:`Bridge`).
UdpBridge = UdpFeeder


class UdpClient:
    """Client of a :class:`UdpFeeder` (or any CUDA-Q realtime UDP endpoint).

    ``host``: an IPv4 or IPv6 address or a host name (looked up IPv4 first, like the feeder).

    Responses may arrive in any order; they are matched to requests by
    ``(request_id, timestamp)``. Not thread-safe.
    """

    def __init__(self, host: str, port: int, *, timeout: float = 10.0) -> None:
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
        host, port = self._sock.getpeername()[:2]
        return str(host), int(port)

    def send_raw(self, data: bytes) -> None:
        """Send one datagram as is (for fuzzing); one with a header expects a response."""
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
        ts = 0 if timestamp is None else timestamp
        if request_id is None:
            request_id = self._next_request_id
            while (request_id, ts) in self._outstanding:  # only after 2**32 ids in flight
                request_id = (request_id + 1) & 0xFFFFFFFF
            self._next_request_id = (request_id + 1) & 0xFFFFFFFF
        elif (request_id, ts) in self._outstanding:
            from .errors import InvalidArgumentError  # a ValueError too

            msg = (
                f"request id {request_id} with timestamp {ts} is already in flight on this "
                "client: their responses could not be told apart"
            )
            raise InvalidArgumentError(msg)
        data = encode_request(
            function, payload, request_id=request_id, timestamp=ts, magic=magic, arg_len=arg_len
        )
        self._sock.send(data)
        self._outstanding.add((request_id, ts))
        return UdpTicket(request_id, ts)

    def submit_many(
        self, items: Iterable[tuple[str | bytes | int, bytes | bytearray | memoryview]]
    ) -> list[UdpTicket]:
        return [self.submit(f, p) for f, p in items]

    def _receive(self, timeout: float) -> bool:
        """Read one datagram within ``timeout``; False if none came."""
        self._sock.settimeout(max(timeout, 1e-6))
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

    def poll(self, ticket: UdpTicket) -> Response | None:
        """The response of ``ticket`` if it already arrived (reads what is queued)."""
        key = (ticket.request_id, ticket.timestamp)
        while key not in self._responses and self._receive(0.0):
            pass
        response = self._responses.pop(key, None)
        if response is not None:
            self._outstanding.discard(key)
        return response

    def wait(self, ticket: UdpTicket, timeout: float | None = None) -> Response:
        timeout = self.timeout if timeout is None else timeout
        key = (ticket.request_id, ticket.timestamp)
        deadline = time.monotonic() + timeout
        while key not in self._responses:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                msg = (
                    f"no UDP response to request {ticket.request_id} (timestamp "
                    f"{ticket.timestamp}) from {self.address} within {timeout:g} s"
                )
                raise TimeoutError(msg)
            self._receive(remaining)
        self._outstanding.discard(key)
        return self._responses.pop(key)

    def collect(self, tickets: Sequence[UdpTicket], timeout: float | None = None) -> list[Response]:
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        return [self.wait(t, max(0.0, deadline - time.monotonic())) for t in tickets]

    def call(
        self,
        function: str | bytes | int,
        payload: bytes | bytearray | memoryview = b"",
        *,
        timeout: float | None = None,
    ) -> tuple[int, bytes]:
        response = self.wait(self.submit(function, payload), timeout)
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

    def __exit__(self, *exc: object) -> None:
        self.close()
