"""The host path: the realtime ring and wire format dispatched by a CPU thread.

:class:`HostDispatcher` owns a ring (ordinary memory, or a buffer you pass, e.g.
shared memory) and a thread that consumes it exactly like the device dispatch
kernels do: take the next request in ring order, validate it, call the
HOST_CALL handler, publish the response. The protocol, the UDP bridge and the
two-process test server thus run without a GPU.

The handlers come as a mapping ``{name: callable}`` or as the dispatcher's
:class:`~skbuild_cudaq.realtime.FunctionTable` (one table for both paths): a
host dispatcher serves the table's HOST_CALL entries (``table.add_host``), and
its DEVICE_CALL entries, which only a GPU can call, are answered as unknown (-2).
Its GRAPH_LAUNCH entries are answered -2 as well (graph handlers are served on the
device path). A device :class:`~skbuild_cudaq.realtime.Dispatcher` answers the
table's HOST_CALL entries -2 likewise. So the path is the choice of dispatcher, not
of table.

A shared ring: ``HostDispatcher(layout, table, buffer=bridge.buffer,
shared_ring=True)`` consumes the ring of a device dispatcher started with
``DispatcherConfig(shared_ring=True)`` and the same table. Both walk every request
in ring order; the host dispatcher answers exactly the well-formed requests for the
table's HOST_CALL entries and leaves every other one to the device, which answers
the rest (bad ones too) -- :func:`owns_on_shared_ring`, the same test the device
kernel makes. Each request is answered once; each side's ``processed`` counts its own.

Handlers are Python callables ``f(args: bytes) -> bytes | tuple[int, bytes]``
(a bare bytes-like result -- ``bytes``, ``bytearray``, ``memoryview`` -- means status 0;
the status is any integer, ``operator.index`` taking it, but not a ``bool``, within
int32). Bad requests are answered with the wire format's status and never stop the
thread: bad magic -1, ``arg_len`` longer than the slot's payload -3, unknown function
id -2 (checked in that order, like ``cudaq_validate_request``). A handler that fails is
answered with a reserved positive status, counted in ``handler_errors`` (what went
wrong last in ``last_handler_error``), and the thread keeps serving:

- :data:`STATUS_HANDLER_EXCEPTION` (0x7FFFFF01): the handler raised; the result
  is ``"ExceptionType: message"`` (UTF-8, truncated to the slot's payload;
  ``"ExceptionType: <exception str() failed>"`` when the message itself raises);
- :data:`STATUS_RESULT_TOO_LONG` (0x7FFFFF02): the result does not fit the slot
  (its size is checked before anything is copied);
- :data:`STATUS_BAD_HANDLER_RESULT` (0x7FFFFF03): the handler returned something
  other than a bytes-like object or ``(int32 status, bytes-like)``, or a result
  that cannot be read (a released ``memoryview``).

Nothing between taking a request and publishing its answer can end the thread:
whatever fails there (a result that cannot be read, an exception whose ``str()``
or a result whose ``repr()`` raises) is answered with one of these statuses and
counted, so no client waits for ever and the ring stays in step.

Applications should keep their own positive statuses below 0x7FFFFF00.

A handler that raises ``SystemExit``, ``KeyboardInterrupt`` or another
``BaseException`` that is not an ``Exception`` asks for the *program* to stop, not
for an answer: the request is still answered (``STATUS_HANDLER_EXCEPTION``, so no
client waits for ever and the ring stays in step), then the serving thread stops
and the exception is raised again on the owner's thread by the next
:meth:`HostDispatcher.stop` (so also ``close()`` and the ``with`` block's exit) or
:meth:`HostDispatcher.start`, once. After that, ``start()`` serves again. Called
directly, :meth:`HostDispatcher.serve_one` answers and then re-raises at once.

``processed`` counts the requests answered since the last :meth:`HostDispatcher.start`
(final after :meth:`HostDispatcher.stop`, reset by the next ``start()``), the same
meaning as ``Dispatcher.processed`` of the device path, whose counter a kernel
launch starts at zero. A dispatcher is closed for good by ``close()``:
``start()`` then raises :class:`HostDispatcherError`.

A handler that hangs: ``stop(timeout)`` and ``close(timeout)`` raise
:class:`HostDispatcherError` after ``timeout`` seconds. The thread (a daemon) is not
killed -- Python cannot stop a thread from outside --: it keeps its views of the ring,
publishes the answer when the handler returns and then stops (the stop was asked
for); a later ``close()`` releases the views. A daemon thread still in a handler when
the interpreter exits is abandoned with it.

A ring that a writer of the same user left in a state no client can use (flags out
of ring order, a response flag ahead of its request's): its owner calls
:meth:`HostDispatcher.reset`, which pauses serving, zeroes every flag, rewinds, and
serves again; clients made before the reset are refused and must be made again.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .errors import HostDispatcherError
from .ring.client import RingClient
from .ring.layout import RingLayout
from .ring.memory import Backoff
from .ring.server import RingServer
from .wire import (
    REQUEST_MAGIC,
    STATUS_ARGS_TOO_LONG,
    STATUS_BAD_MAGIC,
    STATUS_SUCCESS,
    STATUS_UNKNOWN_FUNCTION,
    function_id,
)

if TYPE_CHECKING:
    from .dispatcher.table import FunctionTable

__all__ = [
    "STATUS_BAD_HANDLER_RESULT",
    "STATUS_HANDLER_EXCEPTION",
    "STATUS_RESULT_TOO_LONG",
    "HostDispatcher",
    "HostHandler",
    "echo",
    "owns_on_shared_ring",
    "rpc_increment",
]

STATUS_HANDLER_EXCEPTION = 0x7FFFFF01
STATUS_RESULT_TOO_LONG = 0x7FFFFF02
STATUS_BAD_HANDLER_RESULT = 0x7FFFFF03

HostHandler = Callable[[bytes], bytes | bytearray | memoryview | tuple[int, bytes]]

_INCREMENT = bytes((i + 1) & 0xFF for i in range(256))


def rpc_increment(args: bytes) -> bytes:
    """The example handler: adds one to each byte (mod 256)."""
    return args.translate(_INCREMENT)


def echo(args: bytes) -> bytes:
    """The example handler: returns its arguments."""
    return args


def _describe(exc: BaseException) -> str:
    """``"Type: message"`` of ``exc``, whatever its ``__str__`` does (never raises)."""
    try:
        name = type(exc).__name__
        if type(name) is not str:
            name = "exception"
    except BaseException:
        name = "exception"
    try:
        text = str(exc)
        if type(text) is not str:  # a str subclass could misbehave later: take its text now
            text = str.__str__(text)
    except BaseException:
        text = "<exception str() failed>"
    return f"{name}: {text}"


def _shown(value: object, limit: int = 80) -> str:
    """``type repr`` of a handler's result for an error message (never raises)."""
    try:
        name = type(value).__name__
    except BaseException:
        name = "object"
    try:
        text = str.__str__(repr(value))[:limit]
    except BaseException:
        text = "<repr() failed>"
    return f"{name} {text}"


class _BadResult(Exception):
    """A handler's result that cannot be an answer (the message says why)."""


class _ResultTooLong(Exception):
    """A handler's result longer than the slot's payload (found before it is copied)."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size
def owns_on_shared_ring(header: Any, handlers: Mapping[int, Any], max_payload: int) -> bool:
    """Whether the host dispatcher answers a request on a shared ring: a well-formed one
    (request magic, arguments that fit the slot) for one of its HOST_CALL ``handlers``
    (function id -> handler). Every other request is the device dispatcher's, which
    answers it (bad ones with -1/-3, unknown ids -2): the device kernel's test
    (``cudaq_is_peer_request`` after ``cudaq_validate_request``) is the same, given the
    same table. The native host loop ports this as is."""
    return (
        header.magic == REQUEST_MAGIC
        and header.arg_len <= max_payload
        and header.function_id in handlers
    )


def _host_handlers(
    handlers: Mapping[str | bytes | int, HostHandler] | FunctionTable | None,
) -> list[tuple[str | bytes | int, HostHandler]]:
    """``(name, callable)`` pairs of a mapping, or of a function table's HOST_CALL entries."""
    if handlers is None:
        return []
    if isinstance(handlers, Mapping):
        return list(handlers.items())
    from .dispatcher.table import FunctionTable

    checked: object = handlers  # callers without type checking may pass anything
    if not isinstance(checked, FunctionTable):
        msg = f"handlers must be a mapping or a FunctionTable, got {type(handlers).__name__}"
        raise TypeError(msg)
    return [(e.name, e.callable) for e in handlers.host_entries() if e.callable is not None]


class HostDispatcher:
    """A CPU thread serving HOST_CALL handlers over a ring (see the module docstring).

    ``HostDispatcher(RingLayout(8, 256), {"echo": echo})``,
    ``HostDispatcher(handlers={...}, num_slots=8, slot_size=256)`` or
    ``HostDispatcher(layout, table)`` with a :class:`FunctionTable` (its HOST_CALL
    entries). ``buffer`` (optional) is the ring memory; by default the dispatcher
    allocates it.
    """

    def __init__(
        self,
        layout: RingLayout | None = None,
        handlers: Mapping[str | bytes | int, HostHandler] | FunctionTable | None = None,
        *,
        num_slots: int | None = None,
        slot_size: int | None = None,
        buffer: Any = None,
        idle_sleep: float = 1e-3,
        shared_ring: bool = False,
    ) -> None:
        if layout is None:  # 0 is refused by RingLayout, never replaced by a default
            layout = RingLayout(
                8 if num_slots is None else num_slots, 256 if slot_size is None else slot_size
            )
        elif num_slots is not None or slot_size is not None:
            msg = "give either a RingLayout or num_slots/slot_size, not both"
            raise ValueError(msg)
        self._layout = layout
        self._buffer = bytearray(layout.total_bytes) if buffer is None else buffer
        self._server = RingServer(self._buffer, layout)
        self._handlers: dict[int, tuple[str, HostHandler]] = {}
        if shared_ring and isinstance(handlers, Mapping):
            refused = (
                "shared_ring=True needs the device dispatcher's FunctionTable as handlers "
                "(both sides decide who answers a request from the same table)"
            )
            raise HostDispatcherError(refused)
        for name, fn in _host_handlers(handlers):
            self.add_handler(name, fn)
        self._shared_ring = shared_ring  # add_handler() is refused from here on
        self._idle_sleep = idle_sleep
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.handler_errors = 0  #: handler failures answered with a reserved status
        self.rejected = 0  #: requests answered with -1, -2 or -3
        self.last_handler_error: str | None = None
        self._processed_base = 0  # the server's published count at the last start()
        self._exit: BaseException | None = None  # raised by a handler, not yet re-raised
        self._closed = False

    # -- configuration -------------------------------------------------------
    @property
    def layout(self) -> RingLayout:
        return self._layout

    @property
    def buffer(self) -> Any:
        return self._buffer

    @property
    def processed(self) -> int:
        """Requests answered (good and bad) since the last :meth:`start`."""
        return self._server.published - self._processed_base

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def handler_names(self) -> list[str]:
        return [name for name, _ in self._handlers.values()]

    def add_handler(self, name: str | bytes | int, handler: HostHandler) -> int:
        """Register a HOST_CALL handler; returns its function id."""
        checked: object = handler  # callers without type checking may pass anything
        if not callable(checked):
            msg = f"handler {name!r} is not callable"
            raise TypeError(msg)
        if getattr(self, "_shared_ring", False):
            msg = (
                f"add_handler({name!r}) on a shared ring: the device dispatcher would answer "
                "it too; add it to the table (add_host) before both start"
            )
            raise HostDispatcherError(msg)
        fid = function_id(name)
        label = name.decode() if isinstance(name, bytes) else str(name)
        if fid in self._handlers and self._handlers[fid][1] is not handler:
            msg = (
                f"handlers {self._handlers[fid][0]!r} and {label!r} have the same "
                f"function id {fid:#010x}"
            )
            raise HostDispatcherError(msg)
        self._handlers[fid] = (label, handler)
        return fid

    def client(self, **kwargs: Any) -> RingClient:
        """A :class:`RingClient` over this dispatcher's ring (one producer at a time).

        Its waits spin only briefly (``spin=16``): the consumer is a thread of this
        process and needs the GIL to make progress.
        """
        kwargs.setdefault("spin", 16)
        return RingClient(self._buffer, self._layout, **kwargs)

    # -- serving -------------------------------------------------------------
    def _answer(self, magic: int, fid: int, arg_len: int, args: bytes) -> tuple[int, bytes]:
        """The status and result of one request; never raises (see the module docstring)."""
        try:
            return self._try_answer(magic, fid, arg_len, args)
        except BaseException as exc:  # a last guard: the answer is published all the same
            try:
                self.handler_errors += 1
                self.last_handler_error = f"cannot form the answer: {_describe(exc)}"
                text = _describe(exc).encode(errors="replace")[: self._layout.max_payload]
            except BaseException:
                text = b""
            return STATUS_HANDLER_EXCEPTION, text

    def _try_answer(self, magic: int, fid: int, arg_len: int, args: bytes) -> tuple[int, bytes]:
        if magic != REQUEST_MAGIC:
            self.rejected += 1
            return STATUS_BAD_MAGIC, b""
        if arg_len > self._layout.max_payload:
            self.rejected += 1
            return STATUS_ARGS_TOO_LONG, b""
        entry = self._handlers.get(fid)
        if entry is None:
            self.rejected += 1
            return STATUS_UNKNOWN_FUNCTION, b""
        name, handler = entry
        max_payload = self._layout.max_payload
        try:
            out: Any = handler(args)
        except BaseException as exc:  # SystemExit & co: answered too, re-raised by serve_one
            self.handler_errors += 1
            text = _describe(exc)
            self.last_handler_error = f"{name}: {text}"
            if not isinstance(exc, Exception):
                self._exit = exc
            return STATUS_HANDLER_EXCEPTION, text.encode(errors="replace")[:max_payload]
        try:
            return self._result(out, max_payload)
        except _ResultTooLong as exc:
            self.handler_errors += 1
            self.last_handler_error = (
                f"{name}: result of {exc.size} bytes exceeds the max payload {max_payload}"
            )
            return STATUS_RESULT_TOO_LONG, b""
        except _BadResult as exc:
            self.handler_errors += 1
            self.last_handler_error = f"{name}: {exc}"
            return STATUS_BAD_HANDLER_RESULT, b""
        except BaseException as exc:  # the result cannot be read: a released view, ...
            self.handler_errors += 1
            self.last_handler_error = f"{name}: its result cannot be read ({_describe(exc)})"
            return STATUS_BAD_HANDLER_RESULT, b""

    @staticmethod
    def _result(out: Any, max_payload: int) -> tuple[int, bytes]:
        """``(status, bytes)`` of a handler's return value: :class:`_ResultTooLong` when it is
        too long (checked before anything is copied), :class:`_BadResult` when it is no
        answer."""
        status = STATUS_SUCCESS
        if isinstance(out, tuple):
            if len(out) != 2:
                msg = f"returned {_shown(out)}, expected bytes or (status, bytes)"
                raise _BadResult(msg)
            value, out = out
            if isinstance(value, bool):
                msg = f"returned the status {value!r}, a bool: return an integer status"
                raise _BadResult(msg)
            try:
                status = operator.index(value)
            except TypeError:
                msg = f"returned the status {_shown(value)}, expected an integer"
                raise _BadResult(msg) from None
            if not -(2**31) <= status < 2**31:
                msg = f"returned the status {status}, which does not fit an int32"
                raise _BadResult(msg)
        if isinstance(out, memoryview):
            size = out.nbytes  # a released view raises here
        elif isinstance(out, (bytes, bytearray)):
            size = len(out)
        else:
            msg = f"returned {_shown(out)}, expected bytes"
            raise _BadResult(msg)
        if size > max_payload:
            raise _ResultTooLong(size)
        result = out if type(out) is bytes else bytes(out)
        if len(result) != size:  # a subclass or a view that changed while it was read
            msg = f"returned {type(out).__name__} of {size} bytes that read as {len(result)}"
            raise _BadResult(msg)
        return status, result

    def serve_one(self) -> bool:
        """Answer the next request if it is there (no thread needed); returns whether it was
        (on a shared ring: whether one was taken, answered or left to the device)."""
        if self._shared_ring:
            req = self._server.poll_shared()
            if req is not None and not owns_on_shared_ring(
                req.header, self._handlers, self._layout.max_payload
            ):
                self._server.leave()  # the device dispatcher's to answer
                return True
        else:
            req = self._server.poll()
        if req is None:
            return False
        h = req.header
        status, result = self._answer(h.magic, h.function_id, h.arg_len, req.args)
        self._server.publish(status, result)
        if self._exit is not None and threading.current_thread() is not self._thread:
            self._raise_exit()
        return True

    def _raise_exit(self) -> None:
        """Raise (once) what a handler raised to stop the program (see the module docstring)."""
        exc, self._exit = self._exit, None
        if exc is not None:
            raise exc

    def _run(self) -> None:
        backoff = Backoff(spin=64, max_sleep=self._idle_sleep)
        stop = self._stop
        try:
            while not stop.is_set() and self._exit is None:
                if self.serve_one():
                    backoff.reset()
                else:
                    backoff.pause()
        except BaseException as exc:  # never die silently: the owner's stop()/start() raises it
            self._exit = exc

    def start(self) -> HostDispatcher:
        """Start the serving thread (no-op if it runs); the processed count starts at zero.

        Raises first what a handler raised to stop the program, if nobody has yet. After a
        :meth:`stop` that timed out, a thread still running goes on serving.
        """
        with self._lock:
            if self._closed:
                msg = "the host dispatcher is closed; make a new one"
                raise HostDispatcherError(msg)
            if self.running:
                self._stop.clear()
                return self
            self._raise_exit()
            self._processed_base = self._server.published
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, name="cudaq-host-dispatcher", daemon=True
            )
            self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread after the request in hand (idempotent). Pending requests stay
        in the ring and are served after a later :meth:`start`. Raises what a handler
        raised to stop the program (see the module docstring), once.

        :class:`HostDispatcherError` if the thread is still in a handler after ``timeout``
        seconds: it answers when the handler returns, then stops (see the module docstring).
        """
        with self._lock:
            thread = self._thread
            self._stop.set()
            if thread is not None:
                thread.join(timeout)
                if thread.is_alive():
                    msg = f"host dispatcher thread did not stop within {timeout:g} s"
                    raise HostDispatcherError(msg)
            self._thread = None
            self._raise_exit()

    def close(self, timeout: float = 10.0) -> None:
        """Stop and release the dispatcher's views of the ring memory (idempotent).

        Waits up to ``timeout`` seconds for the thread, like :meth:`stop`; if it is still in
        a handler then, :class:`HostDispatcherError` and the views are kept (the thread
        still answers): call ``close()`` again to release them.
        """
        try:
            self.stop(timeout)
        finally:
            if not self.running:  # else the thread still runs: keep its views of the ring
                self._release()

    def reset(self, timeout: float = 10.0) -> None:
        """Make the ring fresh again, for its owner: after a writer left it in a state no
        client can use (flags out of ring order, a response flag ahead of its request's).

        Stops serving (as :meth:`stop`, waiting up to ``timeout`` seconds), zeroes every
        request and response flag, rewinds to request 0 and, if it was serving, starts
        again. Requests in the ring are dropped unanswered; the ring's request-id source is
        kept (ids stay unique for the ring's life). Clients made before are refused with
        :class:`~skbuild_cudaq.realtime.RingError` ("reset under it"): make new ones.
        """
        with self._lock:
            if self._closed:
                msg = "the host dispatcher is closed; make a new one"
                raise HostDispatcherError(msg)
            serving = self.running
        self.stop(timeout)
        self._server.reset(clear_flags=True)
        self._processed_base = 0
        if serving:
            self.start()

    def _release(self) -> None:
        self._closed = True
        self._server.close()

    def __enter__(self) -> HostDispatcher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
