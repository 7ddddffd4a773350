"""``cudaq-realtime-test-server``: serve a dispatcher over UDP (or a shared-memory ring).

(Over 400 lines: one command, its arguments and its two paths, device and host.)

Runs the whole flow in one process -- link and look up the dispatch kernel and
handlers (device path) or set up the HOST_CALL handlers (host path), install the
launcher, start -- then prints one line and serves::

    CUDAQ_REALTIME_SERVER_READY transport=udp host=127.0.0.1 port=<P> path=<p> \
dispatch=unified dispatcher=<name> slots=<N> slot_size=<B>

(``transport=host-ring shm=<name>`` instead of ``host=... port=...`` for the
shared-memory ring, host path only). On SIGTERM, SIGINT or ``--timeout`` it stops
cleanly and prints ``CUDAQ_REALTIME_SERVER_PROCESSED count=<K>`` (K = requests
the dispatcher answered), preceded by ``CUDAQ_REALTIME_SERVER_BRIDGE ...`` with
the UDP bridge's counters. With ``--transport=host-ring``, SIGHUP resets the
shared ring (``HostDispatcher.reset``) and prints ``CUDAQ_REALTIME_SERVER_RESET
transport=host-ring shm=<name>``.

``--device N`` serves GPU N; ``--devices all`` (or ``0,1,...``) serves several
GPUs at once: one dispatcher and one UDP port per GPU (the READY line gains
``devices=0,1 ports=P0,P1``; ``port=`` is the first GPU's; one BRIDGE line per GPU
with ``device=N``; PROCESSED gains ``counts=K0,K1``).

Bad arguments: one line on stderr, exit status 2; a failure while starting or
serving: one line, exit status 1.

See docs/guides/test-server.md.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

from skbuild_cudaq import _log
from skbuild_cudaq.cli._args import dims, positive
from skbuild_cudaq.errors import CudaqError
from skbuild_cudaq.realtime.errors import RealtimeError
from skbuild_cudaq.realtime.host._shm import ring_size
from skbuild_cudaq.realtime.ring import RingClient, RingLayout

if TYPE_CHECKING:
    from skbuild_cudaq.realtime.host.dispatcher import HostHandler

__all__ = ["main"]

READY = "CUDAQ_REALTIME_SERVER_READY"
PROCESSED = "CUDAQ_REALTIME_SERVER_PROCESSED"
BRIDGE = "CUDAQ_REALTIME_SERVER_BRIDGE"
RESET = "CUDAQ_REALTIME_SERVER_RESET"

DEFAULT_MODULE = "example_app._core"
DEFAULT_DEVICE_HANDLERS = "rpc_increment,echo"
DEFAULT_GRAPH_FACTORY = "example_app.graphs:graph_handler"
BUILTIN_KERNEL = "cudaq_realtime_unified_dispatch"


class _UsageError(Exception):
    """A bad command-line argument (exit status 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _UsageError(message)


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        msg = f"expected a port number 0..65535 (0 = any free port), got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def _ordinal(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        msg = f"expected a CUDA device ordinal (0, 1, ...), got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def _devices(text: str) -> list[int] | None:
    """``all`` (None: every visible GPU) or ``N,M,...`` (distinct ordinals)."""
    if text == "all":
        return None
    try:
        values = [_ordinal(part) for part in text.split(",")]
    except argparse.ArgumentTypeError:
        values = []
    if not values or len(set(values)) != len(values):
        msg = f"expected 'all' or distinct device ordinals N,M,..., got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return values


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        msg = f"expected a positive number of seconds, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def _build_parser() -> _Parser:
    p = _Parser(
        prog="cudaq-realtime-test-server",
        description="Serve a CUDA-Q realtime dispatcher (device or host path) for tests.",
    )
    p.add_argument("--version", action="store_true", help="print the version and exit")
    p.add_argument(
        "--path",
        choices=["device", "host"],
        default="device",
        help="serve on the GPU (device, the default) or with a CPU thread (host: no GPU needed)",
    )
    p.add_argument(
        "--dispatch",
        choices=["unified"],
        default="unified",
        help="the dispatch shape: unified (one function table; the only one)",
    )
    p.add_argument(
        "--dispatcher",
        default="builtin",
        metavar="NAME|builtin",
        help="custom dispatch kernel of --module, or the built-in unified kernel",
    )
    p.add_argument(
        "--transport",
        choices=["udp", "host-ring"],
        default="udp",
        help="how clients reach the ring: UDP datagrams (default), or host-ring (host path "
        "only): the ring in POSIX shared memory, attached with connect_host_ring()",
    )
    p.add_argument("--device", type=_ordinal, default=None, help="GPU to serve (default 0)")
    p.add_argument(
        "--devices",
        type=_devices,
        default=False,
        metavar="all|N,M",
        help="serve several GPUs: one dispatcher and one UDP port per GPU",
    )
    p.add_argument(
        "--num-slots", type=positive, default=8, metavar="N", help="ring slots (default 8)"
    )
    p.add_argument(
        "--slot-size",
        type=positive,
        default=256,
        metavar="B",
        help="bytes per slot: a 24-byte header and the payload (default 256)",
    )
    p.add_argument("--host", default="127.0.0.1", help="UDP address to bind (default loopback)")
    p.add_argument("--port", type=_port, default=0, help="UDP port (default: any free port)")
    p.add_argument(
        "--timeout",
        type=_seconds,
        default=None,
        metavar="S",
        help="stop after S seconds (default: serve until SIGTERM or SIGINT)",
    )
    p.add_argument(
        "--idle-sleep",
        type=_seconds,
        default=None,
        metavar="S",
        help="host path and UDP feeder: sleep up to S seconds when idle instead of spinning",
    )
    p.add_argument(
        "--module",
        default=None,
        metavar="PKG.MOD",
        help=f"the extension module of the handlers (device path default: {DEFAULT_MODULE}; "
        "host path: its native host handlers, else the built-in Python ones)",
    )
    p.add_argument("--handlers", default=None, metavar="A,B", help="handlers to serve")
    p.add_argument(
        "--graphs",
        default=None,
        metavar="A,B",
        help="graph handlers (GRAPH_LAUNCH) to serve too, on either path, built by "
        f"--graph-factory from --module's device code (default {DEFAULT_MODULE})",
    )
    p.add_argument(
        "--graph-factory",
        default=DEFAULT_GRAPH_FACTORY,
        metavar="PKG.MOD:CALLABLE",
        help="builds a graph handler: CALLABLE(name, module, device) -> an object with "
        ".graph, .mailbox and .close()",
    )
    p.add_argument(
        "--grid",
        type=dims,
        default=(1, 1, 1),
        metavar="X[,Y,Z]",
        help="grid of a custom --dispatcher's launch (default 1)",
    )
    p.add_argument(
        "--block",
        type=dims,
        default=(1, 1, 1),
        metavar="X[,Y,Z]",
        help="block of a custom --dispatcher's launch (default 1)",
    )
    p.add_argument(
        "--cluster",
        type=dims,
        default=None,
        metavar="X[,Y,Z]",
        help="thread-block cluster of a custom --dispatcher's launch (sm_90 and newer)",
    )
    p.add_argument(
        "--cooperative",
        action="store_true",
        help="launch a custom --dispatcher as a cooperative grid (grid-wide sync)",
    )
    return p


@dataclass
class _Served:
    """What is running: the ring client, the dispatcher's counter, how to stop."""

    client: RingClient
    processed: Callable[[], int]
    name: str
    close: list[Callable[[], None]] = field(default_factory=list)
    alive: Callable[[], bool] = lambda: True
    extra: dict[str, Any] = field(default_factory=dict)
    reset: Callable[[], None] | None = None  #: the host path's HostDispatcher.reset

    def shutdown(self) -> None:
        errors: list[BaseException] = []
        for fn in reversed(self.close):
            try:
                fn()
            except BaseException as exc:
                errors.append(exc)
        self.close.clear()
        if errors:
            raise errors[0]


def _handler_names(args: argparse.Namespace, default: str) -> list[str]:
    text = args.handlers if args.handlers is not None else default
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        msg = "--handlers needs at least one handler name"
        raise _UsageError(msg)
    return names


def _import(args: argparse.Namespace) -> Any:
    try:
        return importlib.import_module(args.module)
    except ImportError as exc:
        msg = f"--module={args.module}: cannot import it ({exc})"
        raise _UsageError(msg) from exc


def _host_handlers(args: argparse.Namespace) -> dict[str | bytes | int, HostHandler]:
    """The host path's handlers: the native host handlers of ``--module`` (every one it
    exports by default), or the built-in Python ones."""
    from skbuild_cudaq.realtime.host.dispatcher import echo, rpc_increment
    from skbuild_cudaq.realtime.host.handlers import exported_host_handlers, get_host_handler

    if args.module is None:
        available = {"rpc_increment": rpc_increment, "echo": echo}
        names = _handler_names(args, ",".join(available))
        unknown = [n for n in names if n not in available]
        if unknown:
            msg = (
                f"--handlers: the host path serves {', '.join(available)}; "
                f"unknown: {', '.join(unknown)} (or name a --module with native host handlers)"
            )
            raise _UsageError(msg)
        return {n: available[n] for n in names}
    module = _import(args)
    if args.handlers is None:
        exported = exported_host_handlers(module)
        if not exported:
            msg = (
                f"--module={args.module} exports no native host handler "
                "(CUDAQ_REALTIME_EXPORT_HOST_FUNCTION); name the ones to serve with --handlers"
            )
            raise CudaqError(msg)
        args.handlers = ",".join(exported)
    return {name: get_host_handler(module, name) for name in _handler_names(args, "")}


def _host_table(args: argparse.Namespace, served: _Served) -> Any:
    """The host path's handlers, and with ``--graphs`` a table holding them and the graph
    entries (built by the factory from ``--module``, default example_app's, on GPU 0)."""
    handlers = _host_handlers(args)
    if args.graphs is None:
        return handlers
    from skbuild_cudaq.realtime import FunctionTable

    table = FunctionTable()
    for name, handler in handlers.items():
        table.add_host(str(name), handler)
    if args.module is None:
        args.module = DEFAULT_MODULE  # the graphs' device code (the handlers are Python's)
    _add_graphs(args, _import(args), 0, table, served)
    return table


def _start_host(args: argparse.Namespace, layout: RingLayout, buffer: Any) -> _Served:
    from skbuild_cudaq.realtime.host.dispatcher import HostDispatcher

    if args.dispatcher != "builtin":
        msg = f"--dispatcher={args.dispatcher}: the host path has no dispatch kernels (use builtin)"
        raise _UsageError(msg)
    served = _Served(client=None, processed=lambda: 0, name=args.dispatcher)  # type: ignore[arg-type]
    try:
        table = _host_table(args, served)
        dispatcher = HostDispatcher(layout, table, buffer=buffer, idle_sleep=args.idle_sleep)
        served.close.append(dispatcher.close)  # its views of the ring go before the ring
        dispatcher.start()
        served.client = dispatcher.client()
    except BaseException:
        served.shutdown()
        raise
    served.processed = lambda: dispatcher.processed
    served.alive = lambda: dispatcher.running
    served.reset = dispatcher.reset
    return served


def _start_device(args: argparse.Namespace, layout: RingLayout, device: int = 0) -> _Served:
    """Device path, kept small: the realtime API of skbuild_cudaq.realtime does the work."""
    try:
        from skbuild_cudaq.realtime import (
            Dispatcher,
            DispatcherConfig,
            LaunchConfig,
            get_device_handler,
            get_device_kernel,
            launch_kernel,
        )
    except ImportError as exc:
        msg = f"the device path needs the realtime run time (skbuild-cudaq[runtime]): {exc}"
        raise CudaqError(msg) from exc

    if args.module is None:
        args.module = DEFAULT_MODULE
    module = _import(args)
    config_args: dict[str, Any] = {}
    if args.dispatcher == "builtin" and args.block != (1, 1, 1):
        if args.block[1:] != (1, 1) or args.grid != (1, 1, 1):
            msg = "the built-in kernel runs one block of X threads: use --block=X and no --grid"
            raise _UsageError(msg)
        config_args["block_size"] = args.block[0]
    config = DispatcherConfig(
        device=device, num_slots=layout.num_slots, slot_size=layout.slot_size, **config_args
    )
    dispatcher = Dispatcher(config, module=module)
    served = _Served(
        client=None,  # type: ignore[arg-type]  # set once started
        processed=lambda: int(dispatcher.processed),
        name=args.dispatcher,
        close=[dispatcher.close],
    )
    try:
        for name in _handler_names(args, DEFAULT_DEVICE_HANDLERS):
            address = get_device_handler(module, name, device=device)
            dispatcher.function_table.add_device(name, address)
        _add_graphs(args, module, device, dispatcher.function_table, served)
        if args.dispatcher != "builtin":
            kernel = get_device_kernel(module, args.dispatcher, device=device)
            launch = LaunchConfig(
                grid=args.grid, block=args.block, cluster=args.cluster, cooperative=args.cooperative
            )

            def launcher(launch_args: Any) -> None:
                launch_kernel(kernel, launch, launch_args.stream, *launch_args.kernel_args())

            launcher.kernel = kernel  # type: ignore[attr-defined]
            dispatcher.set_unified_launch(launcher)
        dispatcher.start()
        served.client = dispatcher.bridge.client()
        served.close.append(served.client.close)  # release its views before the ring is freed
    except BaseException:
        served.shutdown()
        raise
    return served


def _graph_factory(spec: str) -> Callable[..., Any]:
    module_name, _, attribute = spec.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attribute or "graph_handler")
    except (ImportError, AttributeError) as exc:
        msg = f"--graph-factory={spec}: cannot load it ({exc})"
        raise _UsageError(msg) from exc
    if not callable(factory):
        msg = f"--graph-factory={spec}: not callable"
        raise _UsageError(msg)
    return factory  # type: ignore[no-any-return]


def _add_graphs(
    args: argparse.Namespace, module: Any, device: int, table: Any, served: _Served
) -> None:
    """The ``--graphs`` entries: each built by the factory, closed after the dispatcher."""
    if args.graphs is None:
        return
    names = [n.strip() for n in args.graphs.split(",") if n.strip()]
    if not names:
        msg = "--graphs needs at least one graph handler name"
        raise _UsageError(msg)
    factory = _graph_factory(args.graph_factory)
    for name in names:
        handler = factory(name, module, device)
        served.close.insert(0, handler.close)  # after the dispatcher (close runs in reverse)
        table.add_graph(name, handler.graph, handler.mailbox)


def _serve_ring(args: argparse.Namespace, layout: RingLayout) -> tuple[_Served, str, Any]:
    """Host path over a shared-memory ring another process attaches to (see
    :mod:`skbuild_cudaq.realtime.host._shm` for the segment's name, checks and lifetime)."""
    from skbuild_cudaq.realtime.host import _shm

    try:
        segment = _shm.create(layout.total_bytes)
    except RealtimeError as exc:  # no /dev/shm to create it in
        msg = f"cannot create the shared-memory ring ({ring_size(layout)}): {exc}"
        raise CudaqError(msg) from None
    except OSError as exc:
        msg = (
            f"cannot create the shared-memory ring ({ring_size(layout)}): "
            f"{exc.strerror or exc}; use fewer or smaller slots"
        )
        raise CudaqError(msg) from None
    try:
        served = _start_host(args, layout, segment.buf)
    except BaseException:
        segment.close()
        raise

    def release() -> None:
        served.client.close()
        segment.close()

    served.close.insert(0, release)
    return served, f"transport=host-ring shm={segment.name}", None


def _devices_to_serve(args: argparse.Namespace) -> list[int] | None:
    """The GPUs of ``--device``/``--devices`` (None: the one GPU of the default mode)."""
    if args.devices is False:
        if args.device is not None and args.path != "device":
            raise _UsageError("--device selects a GPU: it needs --path=device")
        return None
    if args.path != "device":
        raise _UsageError("--devices serves several GPUs: it needs --path=device")
    if args.device is not None:
        raise _UsageError("use --device N for one GPU or --devices all|N,M for several, not both")
    if args.devices is not None:
        return list(args.devices)
    from skbuild_cudaq.realtime._driver import device_count

    count = device_count()
    if count == 0:
        raise CudaqError("--devices all: this process sees no CUDA device")
    return list(range(count))


def _memory_for(args: argparse.Namespace) -> tuple[int, str] | None:
    """The most bytes a ring can have here, and where they come from (None: unknown).

    A shared-memory ring lives in /dev/shm (a tmpfs: a ring larger than its free space
    is created sparse and kills both processes with SIGBUS once written); any other
    ring in this process's memory (pinned, for the device path).
    """
    try:
        if args.transport == "host-ring":
            st = os.statvfs("/dev/shm")
            return st.f_bavail * st.f_frsize, "free in /dev/shm"
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "of physical memory"
    except (OSError, ValueError):
        return None


def _checked(args: argparse.Namespace) -> tuple[RingLayout, list[int] | None]:
    """The ring's layout and the GPUs to serve, once every argument that depends on another
    has been checked (a ``_UsageError`` otherwise)."""
    try:
        layout = RingLayout(args.num_slots, args.slot_size)
    except ValueError as exc:
        raise _UsageError(f"--num-slots/--slot-size: {exc}") from exc
    memory = _memory_for(args)
    if memory is not None and layout.total_bytes > memory[0]:
        raise _UsageError(
            f"--num-slots/--slot-size: the ring needs more memory than there is "
            f"({ring_size(layout)}; {memory[0]} bytes {memory[1]}); use fewer or smaller slots"
        )
    if args.cluster is not None and args.dispatcher == "builtin":
        raise _UsageError(
            "--cluster needs a custom --dispatcher (the built-in kernel is one block)"
        )
    if args.transport == "host-ring" and args.path != "host":
        raise _UsageError(
            "--transport=host-ring is served to other processes for --path=host only; "
            "use --transport=udp for the device path"
        )
    if args.transport == "host-ring" and args.graphs is not None:
        raise _UsageError(
            "--graphs needs --transport=udp: a graph writes its answer into the ring, which "
            "must then be pinned memory the GPU can reach (the shared-memory ring is not)"
        )
    return layout, _devices_to_serve(args)


@dataclass
class _Unit:
    """One dispatcher being served, and the UDP feeder in front of it (None: a shared ring)."""

    served: _Served
    feeder: Any = None


@dataclass
class _Serving:
    """What the server serves: a unit per GPU (one in every other mode), where, and the
    events its signal handlers set."""

    args: argparse.Namespace
    layout: RingLayout
    devices: list[int] | None
    units: list[_Unit] = field(default_factory=list)
    endpoint: str = ""
    stop: threading.Event = field(default_factory=threading.Event)
    reset: threading.Event = field(default_factory=threading.Event)

    def where(self, index: int, spelled: str = " of device {}") -> str:
        return "" if self.devices is None else spelled.format(self.devices[index])

    def start(self) -> None:
        """Start each unit; ``endpoint`` says where a client reaches them."""
        args, layout = self.args, self.layout
        if args.transport == "host-ring":
            served, self.endpoint, _ = _serve_ring(args, layout)
            self.units.append(_Unit(served))
            return
        from skbuild_cudaq.realtime.host.udp import UdpFeeder

        devices = self.devices
        for index, device in enumerate(devices or [args.device or 0]):
            if args.path == "host":
                served = _start_host(args, layout, None)
            else:
                served = _start_device(args, layout, device)
            unit = _Unit(served)
            self.units.append(unit)
            port = args.port + index if args.port and devices else args.port
            unit.feeder = UdpFeeder(
                served.client, host=args.host, port=port, idle_sleep=args.idle_sleep
            )
            served.close.append(unit.feeder.close)
            unit.feeder.start()
        host, port = self.units[0].feeder.address
        self.endpoint = f"transport=udp host={host} port={port}"

    def ready_line(self) -> str:
        args, layout = self.args, self.layout
        line = (
            f"{READY} {self.endpoint} path={args.path} dispatch={args.dispatch} "
            f"dispatcher={self.units[0].served.name} slots={layout.num_slots} "
            f"slot_size={layout.slot_size}"
        )
        if self.devices is not None:
            ports = ",".join(str(unit.feeder.address[1]) for unit in self.units)
            line += f" devices={','.join(map(str, self.devices))} ports={ports}"
        return line

    def serve(self) -> None:
        """Until a signal or ``--timeout``: resets on SIGHUP, fails if a unit stopped."""
        timeout = self.args.timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.stop.is_set():
            remaining = 0.2 if deadline is None else min(0.2, deadline - time.monotonic())
            if remaining <= 0:
                break
            self.stop.wait(remaining)
            if self.reset.is_set():
                self.reset.clear()
                for unit in self.units:
                    if unit.served.reset is not None:
                        unit.served.reset()
                _log.result(f"{RESET} {self.endpoint}")
            for index, unit in enumerate(self.units):
                feeder_stopped = unit.feeder is not None and not unit.feeder.running
                if not unit.served.alive() or feeder_stopped:
                    msg = (
                        f"the dispatcher or the UDP bridge{self.where(index)} stopped unexpectedly"
                    )
                    raise CudaqError(msg)

    def finish(self) -> None:
        """Stop every unit, then print the feeders' counters and the count answered."""
        for unit in self.units:
            unit.served.shutdown()
        counts = [unit.served.processed() for unit in self.units]
        for index, unit in enumerate(self.units):
            if unit.feeder is not None:
                counters = "".join(f" {k}={v}" for k, v in unit.feeder.counters.items())
                _log.result(BRIDGE + self.where(index, " device={}") + counters)
        line = f"{PROCESSED} count={sum(counts)}"
        if self.devices is not None:
            line += f" counts={','.join(map(str, counts))}"
        _log.result(line)

    def shutdown_quietly(self) -> None:
        for unit in self.units:
            try:
                unit.served.shutdown()
            except BaseException as exc:  # already failing or already closed: report, go on
                _log.warning(f"while shutting down: {exc}")


def _signals(serving: _Serving) -> dict[int, Any]:
    """Install the handlers (SIGTERM and SIGINT stop; SIGHUP resets a shared ring); returns
    the previous ones."""

    def on_signal(signum: int, frame: FrameType | None) -> None:
        serving.stop.set()

    def on_reset(signum: int, frame: FrameType | None) -> None:
        serving.reset.set()

    previous: dict[int, Any] = {
        s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)
    }
    if serving.args.transport == "host-ring":  # a ring other processes write to
        previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, on_reset)
    return previous


def _run(args: argparse.Namespace) -> int:
    layout, devices = _checked(args)
    serving = _Serving(args, layout, devices)
    previous = _signals(serving)
    try:
        serving.start()
        _log.result(serving.ready_line())
        serving.serve()
        serving.finish()
        return 0
    except MemoryError:  # the ring or its bookkeeping (a list per slot): what is made is freed
        msg = (
            f"cannot allocate the ring and its bookkeeping ({ring_size(layout)}): out of "
            "memory; use fewer or smaller slots"
        )
        raise CudaqError(msg) from None
    finally:
        serving.shutdown_quietly()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point; returns the exit status."""
    parser = _build_parser()
    _log.show_library_log()
    try:
        args = parser.parse_args(argv)
        if args.version:
            from skbuild_cudaq import __version__

            _log.result(f"cudaq-realtime-test-server (skbuild-cudaq) {__version__}")
            return 0
        return _run(args)
    except _UsageError as exc:
        _log.error(f"cudaq-realtime-test-server: {exc}")
        return 2
    except CudaqError as exc:
        _log.error(f"cudaq-realtime-test-server: {exc}")
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
