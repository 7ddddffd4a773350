"""The host path: the realtime ring and wire format dispatched by a CPU thread.

:class:`HostDispatcher` owns a ring (ordinary memory, or a buffer you pass, e.g.
shared memory) and a thread that consumes it exactly like the device dispatch
kernels do: take the next request in ring order, validate it, call the
HOST_CALL handler, publish the response. The protocol, the UDP feeder and the
two-process test server thus run without a GPU.

The serving thread is native (``host/native/``, :mod:`skbuild_cudaq.realtime.host._native`):
it polls the ring without the GIL, calls *native* handlers without the GIL and
takes the GIL only to call a *Python* handler, with one thread state for the
thread's life. It spins while serving (lowest latency, one CPU busy);
``idle_sleep=S`` makes it sleep, with growing delays up to ``S`` seconds, after
100 us with nothing to do (a request that arrives during a sleep waits for its end).

The handlers come as a mapping ``{name: handler}`` or as the dispatcher's
:class:`~skbuild_cudaq.realtime.FunctionTable` (one table for both paths): a
host dispatcher serves the table's HOST_CALL entries (``table.add_host``) and its
GRAPH_LAUNCH entries (``table.add_graph``: below), and its DEVICE_CALL entries, which
only a GPU can call, are answered as unknown (-2). A device
:class:`~skbuild_cudaq.realtime.Dispatcher` answers the table's HOST_CALL entries -2
likewise. So the path is the choice of dispatcher, not of table. A handler is

- a native host handler, :func:`~skbuild_cudaq.realtime.get_host_handler` (a C
  function exported with ``CUDAQ_REALTIME_EXPORT_HOST_FUNCTION``, the device
  handlers' signature): called on the serving thread without the GIL, its
  arguments read in the ring, its result written into the response slot; or
- a Python callable ``f(args: bytes) -> bytes | tuple[int, bytes]`` (a bare
  bytes-like result -- ``bytes``, ``bytearray``, ``memoryview`` -- means status 0;
  the status is any integer, ``operator.index`` taking it, but not a ``bool``,
  within int32).

Bad requests are answered with the wire format's status and never stop the
thread: bad magic -1, ``arg_len`` longer than the slot's payload -3, unknown
function id -2 (checked in that order, like ``cudaq_validate_request``). A handler
that fails is answered with a reserved positive status, counted in
``handler_errors`` (what went wrong last in ``last_handler_error``), and the
thread keeps serving:

- :data:`STATUS_HANDLER_EXCEPTION` (0x7FFFFF01): the handler raised; the result
  is ``"ExceptionType: message"`` (UTF-8, truncated to the slot's payload;
  ``"ExceptionType: <exception str() failed>"`` when the message itself raises);
- :data:`STATUS_RESULT_TOO_LONG` (0x7FFFFF02): the result does not fit the slot
  (its size is checked before anything is copied; a native handler's
  ``*result_len`` above ``max_result_len``);
- :data:`STATUS_BAD_HANDLER_RESULT` (0x7FFFFF03): the handler returned something
  other than a bytes-like object or ``(int32 status, bytes-like)``, or a result
  that cannot be read (a released ``memoryview``).

Nothing between taking a request and publishing its answer can end the thread:
whatever fails there (a result that cannot be read, an exception whose ``str()``
or a result whose ``repr()`` raises) is answered with one of these statuses and
counted, so no client waits for ever and the ring stays in step. A native
handler's own status is answered as it returns it (as on the device path).

Applications should keep their own positive statuses below 0x7FFFFF00.

Graph handlers (GRAPH_LAUNCH entries, :mod:`skbuild_cudaq.realtime.host.graphs`): the
serving thread launches an entry's CUDA graph on a worker stream of its own for each of
its requests (one worker per entry, at most 64), with the I/O context filled as on the
device path, and serves on; the graph writes the response into the ring and publishes
it through its mailbox's I/O context, and the thread counts and publishes it in the ring
once it sees that (exactly once), then launches the entry's next request at once (stream
order runs it after the rest of the graph). A request for a graph that has not answered yet
waits in its worker's queue while every other request is answered. The ring must be memory the
GPU can reach: without ``buffer`` the dispatcher allocates pinned, mapped memory itself;
a ``buffer`` given must be pinned and mapped (a ``HostRingBridge``'s), else
:class:`HostDispatcherError` at construction. A launch the driver refuses or a graph
that fails on the GPU is answered :data:`STATUS_GRAPH_LAUNCH_FAILED` (0x7FFFFF04, the
device path's), a graph that ended without publishing
:data:`STATUS_GRAPH_NOT_PUBLISHED` (0x7FFFFF05); both counted in ``handler_errors``.
``stop()`` waits for the graph requests in hand to be answered (``processed`` is then
final); :meth:`HostDispatcher.graph_stats` says what each graph served. On a shared ring
the graph entries are the device dispatcher's, and ``serve_one()`` serves no graph.

A shared ring: ``HostDispatcher(layout, table, buffer=bridge.buffer,
shared_ring=True)`` consumes the ring of a device dispatcher started with
``DispatcherConfig(shared_ring=True)`` and the same table. Both walk every request
in ring order; the host dispatcher answers exactly the well-formed requests for the
table's HOST_CALL entries and leaves every other one to the device, which answers
the rest (bad ones too) -- :func:`owns_on_shared_ring`, the same test the device
kernel makes (and the native loop's ``owns``). A slot whose request flag is ahead of
the request the loop expects held one the device answered (the producer reused it):
passed over; a request whose response flag is set once its header was read was
answered by the device meanwhile: passed over too. Each request is answered once;
each side's ``processed`` counts its own.

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
``start()``, ``client()`` and ``add_handler()`` then raise :class:`HostDispatcherError`,
and the clients :meth:`HostDispatcher.client` made are closed with it (their later use is
a :class:`~skbuild_cudaq.realtime.errors.ClientError`, not a wait for an answer nobody gives).

A handler that hangs: ``stop(timeout)`` and ``close(timeout)`` raise
:class:`HostDispatcherError` after ``timeout`` seconds. The thread is not killed: it
keeps its views of the ring, publishes the answer when the handler returns and then
stops (the stop was asked for; a ``start()`` meanwhile has it serve on instead); a
later ``close()`` releases the views. Serving threads still running when the
interpreter exits are stopped first (``atexit``). ``fork()`` copies a dispatcher, not its
thread: in the child it is stopped (``stop()`` returns at once; ``start()`` serves the
child's copy of the ring), and so is a :class:`~skbuild_cudaq.realtime.host.udp.UdpFeeder`.

A ring that a writer of the same user left in a state no client can use (flags out
of ring order, a response flag ahead of its request's): its owner calls
:meth:`HostDispatcher.reset`, which pauses serving, zeroes every flag, rewinds, and
serves again; clients made before the reset are refused and must be made again.
"""

from __future__ import annotations

import atexit
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from skbuild_cudaq.realtime._closing import Closing
from skbuild_cudaq.realtime._timeouts import check_timeout
from skbuild_cudaq.realtime.errors import HostDispatcherError
from skbuild_cudaq.realtime.graph import STATUS_GRAPH_LAUNCH_FAILED
from skbuild_cudaq.realtime.host import _native
from skbuild_cudaq.realtime.host.handlers import NativeHostHandler
from skbuild_cudaq.realtime.ring.client import RingClient, _buffer_address
from skbuild_cudaq.realtime.ring.layout import RingLayout
from skbuild_cudaq.realtime.ring.memory import RingMemory, _idle_sleep_ns
from skbuild_cudaq.realtime.wire import REQUEST_MAGIC, function_id

if TYPE_CHECKING:
    from skbuild_cudaq.realtime.dispatcher.table import FunctionEntry, FunctionTable
    from skbuild_cudaq.realtime.host.graphs import HostGraphs, PinnedMemory

__all__ = [
    "STATUS_BAD_HANDLER_RESULT",
    "STATUS_GRAPH_LAUNCH_FAILED",
    "STATUS_GRAPH_NOT_PUBLISHED",
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
#: A graph handler's graph ended without publishing its response (host path only; its
#: failures to launch or run are :data:`STATUS_GRAPH_LAUNCH_FAILED`, 0x7FFFFF04).
STATUS_GRAPH_NOT_PUBLISHED = 0x7FFFFF05

HostHandler = Callable[[bytes], bytes | bytearray | memoryview | tuple[int, bytes]]

_INCREMENT = bytes((i + 1) & 0xFF for i in range(256))


def rpc_increment(args: bytes) -> bytes:
    """The example handler: adds one to each byte (mod 256)."""
    return args.translate(_INCREMENT)


def echo(args: bytes) -> bytes:
    """The example handler: returns its arguments."""
    return args


def owns_on_shared_ring(header: Any, handlers: Mapping[int, Any], max_payload: int) -> bool:
    """Whether the host dispatcher answers a request on a shared ring: a well-formed one
    (request magic, arguments that fit the slot) for one of its HOST_CALL ``handlers``
    (function id -> handler). Every other request is the device dispatcher's, which
    answers it (bad ones with -1/-3, unknown ids -2): the device kernel's test
    (``cudaq_is_peer_request`` after ``cudaq_validate_request``) is the same, given the
    same table, and so is the native loop's (``owns`` in ``host/native/loop.c``)."""
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
    from skbuild_cudaq.realtime.dispatcher.table import FunctionTable

    checked: object = handlers  # callers without type checking may pass anything
    if not isinstance(checked, FunctionTable):
        msg = f"handlers must be a mapping or a FunctionTable, got {type(handlers).__name__}"
        raise TypeError(msg)
    return [(e.name, e.callable) for e in handlers.host_entries() if e.callable is not None]


def _graph_entries(handlers: object, shared_ring: bool) -> list[FunctionEntry]:
    """The GRAPH_LAUNCH entries a host dispatcher serves: a table's, except on a shared ring
    (where the device dispatcher serves them)."""
    from skbuild_cudaq.realtime.dispatcher.table import FunctionTable

    if shared_ring or not isinstance(handlers, FunctionTable):
        return []
    return handlers.graph_entries()


#: the native loops whose thread may run (held even when their dispatcher is gone, as a
#: running Python thread outlives its Thread object): stopped at interpreter exit, since a
#: native thread would otherwise try to take the GIL of a finalizing interpreter
_SERVING: set[_native.Loop] = set()
_AT_EXIT: list[bool] = []  # [True] once the atexit hook is registered (under _AT_EXIT_LOCK)
_AT_EXIT_LOCK = threading.Lock()


def _stop_all_at_exit() -> None:
    """Ask every serving loop to stop, then wait for them: 1 s in all, not 1 s a loop."""
    loops = list(_SERVING)
    for loop in loops:
        loop.stop(0.0)
    deadline = time.monotonic() + 1.0
    for loop in loops:
        loop.stop(max(0.0, deadline - time.monotonic()))


class HostDispatcher(Closing):
    """A CPU thread serving HOST_CALL handlers over a ring (see the module docstring).

    ``HostDispatcher(RingLayout(8, 256), {"echo": echo})``,
    ``HostDispatcher(handlers={...}, num_slots=8, slot_size=256)`` or
    ``HostDispatcher(layout, table)`` with a :class:`FunctionTable` (its HOST_CALL
    and GRAPH_LAUNCH entries). Handlers are Python callables or native host handlers
    (:func:`~skbuild_cudaq.realtime.get_host_handler`), side by side. ``buffer``
    (optional) is the ring memory; by default the dispatcher allocates it (pinned and
    mapped to the GPU where the table has graph entries, which need that of a
    ``buffer`` given too).
    ``idle_sleep``: ``None`` (the default) spins while serving; a number of seconds
    sleeps, growing up to it, after 100 us with nothing to do.
    """

    def __init__(
        self,
        layout: RingLayout | None = None,
        handlers: Mapping[str | bytes | int, HostHandler] | FunctionTable | None = None,
        *,
        num_slots: int | None = None,
        slot_size: int | None = None,
        buffer: Any = None,
        idle_sleep: float | None = None,
        shared_ring: bool = False,
    ) -> None:
        if layout is None:  # 0 is refused by RingLayout, never replaced by a default
            layout = RingLayout(
                8 if num_slots is None else num_slots, 256 if slot_size is None else slot_size
            )
        elif num_slots is not None or slot_size is not None:
            msg = "give either a RingLayout or num_slots/slot_size, not both"
            raise ValueError(msg)
        sleep_ns = _idle_sleep_ns(idle_sleep)
        if shared_ring and isinstance(handlers, Mapping):
            refused = (
                "shared_ring=True needs the device dispatcher's FunctionTable as handlers "
                "(both sides decide who answers a request from the same table)"
            )
            raise HostDispatcherError(refused)
        self._layout = layout
        self._handlers: dict[int, tuple[str, HostHandler]] = {}
        self._shared_ring = False
        self._open_ring(buffer, _graph_entries(handlers, shared_ring))
        self._loop.idle_sleep_ns = sleep_ns
        try:
            for name, fn in _host_handlers(handlers):
                self._register(name, fn)
            self._install_table()  # once: a table per handler made construction quadratic
        except BaseException:
            self._free_graphs()
            raise
        self._shared_ring = shared_ring  # add_handler() is refused from here on
        self._loop.shared_ring = int(shared_ring)
        self._lock = threading.Lock()
        self._processed_base = 0  # the loop's published count at the last start()
        self._closed = False

    def _open_ring(self, buffer: Any, graph_entries: list[FunctionEntry]) -> None:
        """The ring's memory and views, the native loop over it and, for graph entries, the
        graph workers (the ring then pinned and mapped: the dispatcher's own without
        ``buffer``). Whatever was made is freed if a step fails."""
        layout = self._layout
        self._graphs: HostGraphs | None = None
        self._pinned: PinnedMemory | None = None
        self._clients: weakref.WeakSet[RingClient] = weakref.WeakSet()
        if graph_entries:
            from skbuild_cudaq.realtime.host.graphs import HostGraphs

            self._graphs = HostGraphs(graph_entries, layout)
            if buffer is None:
                self._pinned = self._graphs.pinned_ring()
                buffer = self._pinned.view()
        self._buffer = bytearray(layout.total_bytes) if buffer is None else buffer
        try:
            self._mem = RingMemory(self._buffer, layout)  # holds an export: the memory stays put
            address = _buffer_address(self._mem.mv)
            self._loop = _native.Loop(address, layout.num_slots, layout.slot_size, self._buffer)
            if self._graphs is not None:
                self._graphs.open(address)
                self._graphs.install(self._loop)
        except BaseException:
            self._free_graphs()
            raise

    def _free_graphs(self) -> None:
        """Free the graph workers and the dispatcher's pinned ring (the loop has stopped)."""
        graphs, pinned = self._graphs, self._pinned
        self._graphs = self._pinned = None
        try:
            if graphs is not None:
                graphs.close()
        finally:
            mem = getattr(self, "_mem", None)
            if pinned is not None:
                for client in list(self._clients):  # later use: ClientError, not freed memory
                    client.close()
                if mem is not None:
                    mem.release()  # no view of the memory outlives it
                pinned.close()

    def _install_table(self) -> None:
        """Give the loop the handlers and the graph entries (each naming its worker)."""
        items: list[tuple[int, str, int, HostHandler | None, int]] = [
            (f, n, h.address, None, -1) if isinstance(h, NativeHostHandler) else (f, n, 0, h, -1)
            for f, (n, h) in self._handlers.items()
        ]
        if self._graphs is not None:
            items += self._graphs.table_items()
        self._loop.set_table(items)

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
        return int(self._loop.published) - self._processed_base

    @property
    def running(self) -> bool:
        return bool(self._loop.running)

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("running" if self.running else "stopped")
        layout, count = self._layout, len(self._handlers)
        return (
            f"<HostDispatcher {layout.num_slots}x{layout.slot_size} "
            f"{count} handler{'' if count == 1 else 's'} {state}>"
        )

    @property
    def handler_errors(self) -> int:
        """Handler failures answered with a reserved status."""
        return int(self._loop.handler_errors)

    @property
    def rejected(self) -> int:
        """Requests answered with -1, -2 or -3."""
        return int(self._loop.rejected)

    @property
    def last_handler_error(self) -> str | None:
        """What went wrong in the last handler failure (``"name: ..."``), or None."""
        error: str | None = self._loop.last_handler_error
        return error

    @property
    def handler_names(self) -> list[str]:
        return [name for name, _ in self._handlers.values()]

    def add_handler(self, name: str | bytes | int, handler: HostHandler) -> int:
        """Register a HOST_CALL handler (a Python callable or a native host handler);
        returns its function id. Takes effect at once, also while serving; adding the same
        handler under the same name again changes nothing (an "ensure registered" loop
        costs no memory). While serving, the tables replaced are freed once the serving
        thread has moved past them."""
        self._check_not_closed()
        known = self._known(name, handler)
        if known is not None:
            return known  # already registered: the serving thread's table stays as it is
        fid = self._register(name, handler)
        self._install_table()
        return fid

    def _known(self, name: str | bytes | int, handler: HostHandler) -> int | None:
        """The function id of ``handler`` if it is registered under ``name`` already."""
        if self._shared_ring or not callable(handler):
            return None  # refused by _register, as before
        fid = function_id(name)
        label = name.decode() if isinstance(name, bytes) else str(name)
        entry = self._handlers.get(fid)
        return fid if entry is not None and entry[0] == label and entry[1] is handler else None

    def _check_not_closed(self) -> None:
        if self._closed:
            msg = "the host dispatcher is closed; make a new one"
            raise HostDispatcherError(msg)

    def _register(self, name: str | bytes | int, handler: HostHandler) -> int:
        """add_handler() without installing the table (the caller installs it)."""
        checked: object = handler  # callers without type checking may pass anything
        if not callable(checked):
            msg = f"handler {name!r} is not callable"
            raise TypeError(msg)
        if self._shared_ring:
            msg = (
                f"add_handler({name!r}) on a shared ring: the device dispatcher would answer "
                "it too; add it to the table (add_host) before both start"
            )
            raise HostDispatcherError(msg)
        fid = function_id(name)
        label = name.decode() if isinstance(name, bytes) else str(name)
        taken = {e.function_id: e.name for e in self._graphs.entries} if self._graphs else {}
        if fid in self._handlers and self._handlers[fid][1] is not handler:
            taken[fid] = self._handlers[fid][0]
        if fid in taken and taken[fid] == label:
            msg = (
                f"a handler named {label!r} is already registered (function id {fid:#010x}): "
                "one name serves one handler; give the new one another name"
            )
            raise HostDispatcherError(msg)
        if fid in taken:
            msg = f"handlers {taken[fid]!r} and {label!r} have the same function id {fid:#010x}"
            raise HostDispatcherError(msg)
        self._handlers[fid] = (label, handler)
        return fid

    def client(self, **kwargs: Any) -> RingClient:
        """A :class:`RingClient` over this dispatcher's ring (one producer at a time).

        Its compiled round trip waits for the answer without the GIL
        (``release_gil=True``), which a Python handler needs; its Python-level waits
        spin only briefly (``spin=16``) before they sleep, for the same reason.
        """
        self._check_not_closed()
        kwargs.setdefault("spin", 16)
        kwargs.setdefault("release_gil", True)
        client = RingClient(self._buffer, self._layout, **kwargs)
        # closed with the dispatcher (before it frees a pinned ring of its own): a later
        # call is a ClientError, not a wait for an answer nobody will give
        self._clients.add(client)
        return client

    # -- serving -------------------------------------------------------------
    def serve_one(self) -> bool:
        """Answer the next request if it is there, on this thread (the serving thread
        must not run); returns whether it was (on a shared ring: whether one of this
        dispatcher's was answered, requests left to the device passed over on the way)."""
        if self._closed:
            msg = "the host dispatcher is closed; make a new one"
            raise HostDispatcherError(msg)
        if self._graphs is not None:
            msg = (
                "serve_one() serves no graph handlers: this host dispatcher has GRAPH_LAUNCH "
                "entries; start() its serving thread"
            )
            raise HostDispatcherError(msg)
        try:
            return bool(self._loop.serve_one())
        except RuntimeError as exc:
            raise HostDispatcherError(str(exc)) from None

    def _raise_exit(self) -> None:
        """Raise (once) what a handler raised to stop the program (see the module docstring)."""
        exc = self._loop.take_exit()
        if exc is not None:
            raise exc

    def start(self) -> HostDispatcher:
        """Start the serving thread (no-op if it runs); the processed count starts at zero.

        Raises first what a handler raised to stop the program, if nobody has yet. After a
        :meth:`stop` that timed out, a thread still running goes on serving.
        """
        with self._lock:
            self._start_locked()
        return self

    def _start_locked(self) -> None:
        """start() under the dispatcher's lock (which reset() holds across its steps)."""
        self._check_not_closed()
        if self.running:  # after a stop() that timed out: it serves on
            self._loop.start()
            return
        self._raise_exit()
        if self._graphs is not None:
            self._graphs.claim()
        self._processed_base = int(self._loop.published)
        with _AT_EXIT_LOCK:
            if not _AT_EXIT:
                atexit.register(_stop_all_at_exit)
                _AT_EXIT.append(True)
        _SERVING.add(self._loop)
        self._loop.start()

    def stop(self, timeout: float | None = 10.0) -> None:
        """Stop the thread after the requests in hand (idempotent): the one it is serving,
        and graph requests already taken, which are answered first. Pending requests stay
        in the ring and are served after a later :meth:`start`. Raises what a handler
        raised to stop the program (see the module docstring), once.

        :class:`HostDispatcherError` if the thread is still in a handler, or graphs are still
        running, after ``timeout`` seconds (None: no limit; read as the clients read it): it
        answers when they have, then stops (see the module docstring).
        """
        with self._lock:
            self._stop_locked(timeout)

    def _stop_locked(self, timeout: float | None) -> None:
        """stop() under the dispatcher's lock (which reset() holds across its steps)."""
        seconds = check_timeout(timeout)
        if not self._loop.stop(-1.0 if seconds is None else seconds):
            msg = f"host dispatcher thread did not stop within {seconds:g} s"
            if self._loop.graphs_outstanding:
                msg += f" ({self._loop.graphs_outstanding} graph request(s) not answered yet)"
            raise HostDispatcherError(msg)
        _SERVING.discard(self._loop)
        if self._graphs is not None:
            self._graphs.release_mailboxes()
        self._raise_exit()

    def close(self, timeout: float | None = 10.0) -> None:
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

    def reset(self, timeout: float | None = 10.0) -> None:
        """Make the ring fresh again, for its owner: after a writer left it in a state no
        client can use (flags out of ring order, a response flag ahead of its request's).

        Stops serving (as :meth:`stop`, waiting up to ``timeout`` seconds), zeroes every
        request and response flag, rewinds to request 0 and, if it was serving, starts
        again. Requests in the ring are dropped unanswered; the ring's request-id source is
        kept (ids stay unique for the ring's life). Clients made before are refused with
        :class:`~skbuild_cudaq.realtime.RingError` ("reset under it"): make new ones.

        One step for other threads: :meth:`start`, :meth:`stop` and :meth:`reset` take the
        dispatcher's lock, and reset() holds it from the stop to the new start, so a start()
        from another thread meanwhile waits and then finds the ring fresh.
        """
        with self._lock:
            self._check_not_closed()
            if self._loop.on_serving_thread():  # its stop() could not wait for itself
                msg = (
                    "reset() from a handler: the serving thread would go on after it with the "
                    "old position; call it from another thread"
                )
                raise HostDispatcherError(msg)
            serving = self.running
            self._stop_locked(timeout)
            self._mem.clear_flags()
            self._loop.next = 0  # the native loop refuses it while a thread serves
            self._processed_base = int(self._loop.published)
            if serving:
                self._start_locked()

    def graph_stats(self) -> dict[str, dict[str, int]]:
        """Per GRAPH_LAUNCH entry served, as ``Dispatcher.graph_stats()``: ``requests``
        handed to its graph (since construction), ``launch_failures`` (answered
        ``STATUS_GRAPH_LAUNCH_FAILED``) and ``launch_error`` (the ``CUresult`` of the last
        failure, 0 if none). Empty without graph entries."""
        return {
            name: {"requests": requests, "launch_failures": failures, "launch_error": error}
            for name, requests, failures, error, _queued, _busy in self._loop.graph_stats()
        }

    def _release(self) -> None:
        self._closed = True
        try:
            self._free_graphs()
        finally:
            for client in list(self._clients):
                client.close()
            self._mem.release()

    def __enter__(self) -> HostDispatcher:
        return self.start()
