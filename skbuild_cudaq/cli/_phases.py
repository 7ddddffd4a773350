"""``skbuild-cudaq phases SOURCE.cu ... --handler NAME [--kernel NAME]``: where a round trip
through your dispatch kernel spends its microseconds; ``--graph NAME``: through a graph
handler.

Compiles your device sources (the dispatch kernel and the handlers), the handler switch
over them and the package's device run time with ``-DCUDAQ_REALTIME_PHASES`` (the
measurement build, ``cudaq/realtime/detail/phases.cuh``), links them with nvJitLink for
the GPU, serves ``--requests`` calls of ``--handler`` through the kernel over the host
ring, and prints the median and mean of each step of a request on the device (seen,
staged, looked up, handled, header written, published) next to the round trip seen from
Python. With ``--graph NAME`` the sources are a graph handler's kernels: they are linked
with the graph dispatch kernel and the device runtime, ``--graph-factory`` builds the
graph from that module, and the steps are the graph path's (seen, staged, looked up,
context filled, launch, graph started, done, published). Needs a GPU (sm_90+ for a graph),
the ``runtime`` extra, and nvcc or NVRTC. The numbers are those of the stamped build:
compare steps of one kernel, or kernels built the same way.
"""

from __future__ import annotations

import argparse
import importlib
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skbuild_cudaq import _log
from skbuild_cudaq.cli._args import command, dims, positive
from skbuild_cudaq.cli._json import document
from skbuild_cudaq.errors import CudaqError, ToolchainError

if TYPE_CHECKING:
    from skbuild_cudaq.realtime._phases import PhaseBreakdown

__all__ = [
    "DEFAULT_GRAPH_FACTORY",
    "add_parser",
    "build_cubin",
    "graph_factory",
    "json_document",
    "launch_config",
    "payload_bytes",
]

#: The device run time's sources (shipped in the package), compiled into every measured module.
_RUNTIME_SOURCES = ("unified_dispatch_kernel.cu", "hook_defaults.cu", "host_ring_bridge.cu")
#: ... into a graph handler's module: the graph dispatch kernel in place of the unified ones.
_GRAPH_RUNTIME_SOURCES = ("graph_dispatch_kernel.cu", "hook_defaults.cu", "host_ring_bridge.cu")
#: What builds a ``--graph`` handler (``cudaq-realtime-test-server --graph-factory``'s default).
DEFAULT_GRAPH_FACTORY = "example_app.graphs:graph_handler"
#: The options of a dispatch kernel's launch that the graph dispatch kernel does not take.
_NOT_FOR_GRAPHS = ("kernel", "grid", "cluster", "cooperative", "shared_mem")


def payload_bytes(text: str) -> bytes:
    """``--payload``: hex bytes (``0a0b0c``), or ``N`` bytes counting up from 0 (``32``)."""
    return _counted(_payload(text))


def _payload(text: str) -> bytes | int:
    """``--payload`` as parsed: the hex bytes, or the count ``N`` (made into bytes only once
    it is known to fit a slot: a count typed one digit too long is not allocated)."""
    if text.isdigit():
        return int(text)
    try:
        return bytes.fromhex(text)
    except ValueError:
        msg = f"expected a byte count (32) or hex bytes (0a0b0c), got {text!r}"
        raise argparse.ArgumentTypeError(msg) from None


def _counted(payload: bytes | int) -> bytes:
    return bytes(i % 256 for i in range(payload)) if isinstance(payload, int) else payload


def _fitting_payload(args: argparse.Namespace) -> bytes:
    """``--payload`` as bytes, once it is known to fit a slot of ``--slot-size`` with the
    request's header (checked before anything is compiled)."""
    from skbuild_cudaq.realtime.wire import HEADER_SIZE

    size = args.payload if isinstance(args.payload, int) else len(args.payload)
    if size > args.slot_size - HEADER_SIZE:
        msg = (
            f"phases: a --payload of {size} bytes does not fit a ring slot of --slot-size "
            f"{args.slot_size} bytes ({HEADER_SIZE} of them the request header): use a larger "
            "--slot-size or a smaller --payload"
        )
        raise CudaqError(msg)
    return _counted(args.payload)


def add_parser(sub: Any) -> None:
    p = command(
        sub,
        "phases",
        help="break a round trip through your dispatch kernel down into its steps (GPU)",
        description=(
            "Compile your dispatch kernel and handler sources, the handler switch over them and "
            "the device run time with -DCUDAQ_REALTIME_PHASES, link them for the GPU, serve "
            "requests of one handler through the kernel over the host ring, and print the "
            "median and mean of each step of a request on the device (seen -> staged -> "
            "looked_up -> handled -> header -> published) and the round trip seen from Python. "
            "With --graph: a graph handler's kernels, served through the built-in graph "
            "dispatch kernel (seen -> staged -> looked_up -> filled -> launch -> started -> "
            "done -> published)."
        ),
    )
    p.add_argument(
        "sources", nargs="+", type=Path, help="device sources (.cu): kernel, handlers, graphs"
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--handler", help="the exported handler to call (DEVICE_CALL)")
    which.add_argument(
        "--graph",
        metavar="NAME",
        help="the graph handler (GRAPH_LAUNCH) to call, built by --graph-factory (sm_90+)",
    )
    p.add_argument(
        "--graph-factory",
        default=DEFAULT_GRAPH_FACTORY,
        metavar="PKG.MOD:CALLABLE",
        help="builds the --graph handler: CALLABLE(name, library, device) -> an object with "
        ".graph, .mailbox and .close(), its kernels looked up with library.get_kernel(name) "
        "(default %(default)s)",
    )
    p.add_argument(
        "--kernel",
        default=None,
        help="the dispatch kernel to launch (default: the run time's built-in kernel)",
    )
    p.add_argument("--grid", type=dims, default=None, metavar="X[,Y,Z]", help="default: 1")
    p.add_argument(
        "--block",
        type=dims,
        default=None,
        metavar="X[,Y,Z]",
        help="default: 1 (128 for the built-in kernel and the graph dispatch kernel)",
    )
    p.add_argument("--cluster", type=dims, default=None, metavar="X[,Y,Z]")
    p.add_argument("--cooperative", action="store_true", help="a cooperative launch")
    p.add_argument(
        "--shared-mem", type=int, default=0, metavar="BYTES", help="dynamic shared memory"
    )
    p.add_argument("-I", dest="include", action="append", default=[], help="include directory")
    p.add_argument("-D", dest="define", action="append", default=[], help="definition NAME[=VALUE]")
    p.add_argument("--std", default="c++17", help="C++ standard (default %(default)s)")
    p.add_argument(
        "--compiler",
        choices=("auto", "nvcc", "nvrtc"),
        default="auto",
        help="device compiler (auto: nvcc if found, else NVRTC)",
    )
    p.add_argument("--device", type=int, default=0, help="CUDA device ordinal (default 0)")
    p.add_argument(
        "--payload",
        type=_payload,
        default=32,
        metavar="N|HEX",
        help="the request's arguments: N bytes 0, 1, ... or hex bytes (default 32 bytes)",
    )
    p.add_argument(
        "--requests", type=positive, default=10_000, help="measured (default %(default)s)"
    )
    p.add_argument("--warmup", type=positive, default=1_000, help="left out (default %(default)s)")
    p.add_argument("--slot-size", type=positive, default=256, help="ring slot bytes (default 256)")
    p.add_argument("--json", type=Path, default=None, metavar="OUT", help="also write JSON here")
    p.set_defaults(func=_run)


def launch_config(args: argparse.Namespace, builtin: bool) -> Any:
    """The ``LaunchConfig`` the options ask for (None: none given, the default shape).

    The grid defaults to the cluster (one cluster) or 1; the block to 128 threads for the
    built-in kernel, 1 for any other.
    """
    if not (args.grid or args.block or args.cluster or args.cooperative or args.shared_mem):
        return None
    from skbuild_cudaq.realtime.launch import LaunchConfig

    return LaunchConfig(
        grid=args.grid or args.cluster or (1, 1, 1),
        block=args.block or ((128, 1, 1) if builtin else (1, 1, 1)),
        shared_mem=args.shared_mem,
        cluster=args.cluster,
        cooperative=args.cooperative,
    )


def _needs_runtime(exc: ImportError) -> ToolchainError:
    return ToolchainError(
        f'the phases command needs the run-time extra ({exc}); pip install "skbuild-cudaq[runtime]"'
    )


def _compile(args: argparse.Namespace, sources: list[Path], arch: str, work: Path) -> list[Path]:
    """Each source to an LTO-IR fatbin for ``arch`` (``90``), the measurement build's macro on."""
    from skbuild_cudaq.build._toolchain import find_nvcc

    nvcc: Path | None = None
    if args.compiler != "nvrtc":
        try:
            nvcc = find_nvcc()
        except ToolchainError:
            if args.compiler == "nvcc":
                raise
    defines = ["CUDAQ_REALTIME_PHASES", *(d for d in args.define if d)]
    outputs = []
    for i, source in enumerate(sources):
        output = work / f"{i:02d}-{source.stem}.fatbin"
        if nvcc is not None:
            from skbuild_cudaq.build._embed import CompileFlags, fatbin_command, run_compile
            from skbuild_cudaq.build._embed import preprocessor_from_args as macros

            flags = CompileFlags(
                include_dirs=tuple(args.include),
                macros=tuple(macros([f"-D{d}" for d in defines])[0]),
                std=args.std,
            )
            command = fatbin_command(nvcc, source, output, architectures=[arch], flags=flags)
            run_compile(command, output, f"nvcc of {source}", cwd=source.parent)
        else:
            from skbuild_cudaq.build._nvrtc import compile_file

            with _log.step(f"NVRTC: {source}"):
                compile_file(
                    source,
                    output,
                    architectures=[arch],
                    include_dirs=args.include,
                    defines=defines,
                    std=args.std,
                )
        outputs.append(output)
    return outputs


def graph_factory(spec: str) -> tuple[Callable[..., Any], Any]:
    """The callable ``PKG.MOD:CALLABLE`` names (``CALLABLE`` default ``graph_handler``) and its
    module; :class:`CudaqError` when it cannot be loaded."""
    module_name, _, attribute = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
        factory = getattr(module, attribute or "graph_handler")
    except (ImportError, AttributeError, ValueError) as exc:
        msg = f"phases: --graph-factory={spec}: cannot load it ({exc})"
        raise CudaqError(msg) from None
    if not callable(factory):
        msg = f"phases: --graph-factory={spec}: not callable"
        raise CudaqError(msg)
    return factory, module


def _graph_factory_for(args: argparse.Namespace, user: list[Path]) -> Callable[..., Any]:
    """``--graph``'s factory, once the options are known to fit a graph handler (checked
    before anything is compiled): no launch of a dispatch kernel of one's own, a name no
    source exports as a device handler, one the factory's ``GRAPH_HANDLERS`` lists (where
    its module has that list)."""
    from skbuild_cudaq.build._handler_switch import exported_handlers

    if any(getattr(args, option) for option in _NOT_FOR_GRAPHS) or (
        args.block is not None and args.block[1:] != (1, 1)
    ):
        msg = (
            "phases: --graph is served by the built-in graph dispatch kernel in one block: "
            "leave out --kernel, --grid, --cluster, --cooperative and --shared-mem "
            "(--block X sets its threads)"
        )
        raise CudaqError(msg)
    name = args.graph
    for source in user:
        text = source.read_text(encoding="utf-8", errors="replace")
        if name in exported_handlers(text, shape="any"):
            msg = (
                f"phases: --graph {name}: {source.name} exports {name} as a device handler "
                f"(DEVICE_CALL), not a graph handler: measure it with --handler {name}"
            )
            raise CudaqError(msg)
    factory, module = graph_factory(args.graph_factory)
    known = getattr(module, "GRAPH_HANDLERS", None)
    if known is not None and name not in known:
        msg = (
            f"phases: --graph {name}: {args.graph_factory} builds no graph handler {name!r} "
            f"(it builds {', '.join(map(str, known)) or 'none'})"
        )
        raise CudaqError(msg)
    return factory


def build_cubin(
    args: argparse.Namespace, user: list[Path], arch: str, work: Path, *, graph: bool = False
) -> bytes:
    """The measurement build of the sources ``user`` for ``sm_<arch>``: compiled with the
    handler switch over them and the device run time (with ``graph``, the graph dispatch
    kernel's, linked with the device runtime ``libcudadevrt.a``) in ``work``, linked."""
    from skbuild_cudaq.build._handler_switch import write_switch
    from skbuild_cudaq.realtime.link._nvjitlink import link_blobs

    runtime = Path(__file__).resolve().parent.parent / "device"
    switch = work / "handler_switch.cu"
    write_switch(switch, "skbuild-cudaq phases", user)
    names = _GRAPH_RUNTIME_SOURCES if graph else _RUNTIME_SOURCES
    fatbins = _compile(args, [*(runtime / name for name in names), *user, switch], arch, work)
    libraries: list[tuple[str, bytes]] = []
    if graph:
        from skbuild_cudaq.realtime.link.device_runtime import find_device_runtime

        devrt = find_device_runtime()
        libraries.append((devrt.name, devrt.read_bytes()))
    with _log.step(f"nvJitLink: {len(fatbins) + len(libraries)} inputs for sm_{arch}"):
        return link_blobs(
            [(f.name, f.read_bytes()) for f in fatbins],
            [f"-arch=sm_{arch}", "-lto"],
            sources="skbuild-cudaq phases",
            libraries=libraries,
        )


def json_document(kernel: str, handler: str, arch: str, result: PhaseBreakdown) -> str:
    """What ``phases --json OUT`` writes."""
    return document({"kernel": kernel, "handler": handler, "arch": arch, **result.as_dict()})


def _check_args(args: argparse.Namespace) -> tuple[bytes, Callable[..., Any] | None]:
    """Everything said before anything is compiled: the payload, and ``--graph``'s factory."""
    for source in args.sources:
        if not source.is_file():
            msg = f"phases: source {source} does not exist"
            raise CudaqError(msg)
    payload = _fitting_payload(args)
    if args.json is not None and not args.json.resolve().parent.is_dir():
        msg = f"phases: cannot write --json {args.json}: its directory does not exist"
        raise CudaqError(msg)  # said now, not after the measurement
    user = [s.resolve() for s in args.sources]
    factory = _graph_factory_for(args, user) if args.graph is not None else None
    return payload, factory


def _run(args: argparse.Namespace) -> int:
    payload, factory = _check_args(args)
    try:
        from skbuild_cudaq.realtime import _driver
        from skbuild_cudaq.realtime._phases import BUILTIN_KERNEL, check_graph_arch, measure_phases
        from skbuild_cudaq.realtime.graph import GRAPH_DISPATCH_KERNEL
        from skbuild_cudaq.realtime.launch import LaunchConfig
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise _needs_runtime(exc) from None

    arch = _driver.ordinal_arch(args.device).removeprefix("sm_")
    if factory is not None:
        check_graph_arch(f"sm_{arch}", args.device)
        kernel, name = GRAPH_DISPATCH_KERNEL, args.graph
        launch = LaunchConfig(grid=(1, 1, 1), block=args.block) if args.block else None
        what = f"the graph {name}"
    else:
        kernel, name = args.kernel or BUILTIN_KERNEL, args.handler
        launch = launch_config(args, kernel == BUILTIN_KERNEL)
        what = name
    user = [s.resolve() for s in args.sources]
    with tempfile.TemporaryDirectory(prefix="skbuild-cudaq-phases-") as tmp:
        cubin = build_cubin(args, user, arch, Path(tmp), graph=factory is not None)
    with _log.step(f"serving {args.warmup} + {args.requests} requests of {name!r}"):
        result = measure_phases(
            cubin,
            name,
            kernel=kernel,
            launch=launch,
            graph=factory,
            payload=payload,
            requests=args.requests,
            warmup=args.warmup,
            slot_size=args.slot_size,
            device=args.device,
        )
    _log.result(f"{kernel} serving {what} on sm_{arch} ({result.requests} requests):")
    for line in result.table():
        _log.result(line)
    if args.json is not None:
        try:
            text = json_document(kernel, name, f"sm_{arch}", result)
            args.json.write_text(text + "\n", encoding="utf-8")
        except OSError as exc:  # the table above is printed: only the file is missing
            msg = f"phases: cannot write --json {args.json}: {exc.strerror or exc}"
            raise CudaqError(msg) from None
    return 0
