"""``skbuild-cudaq phases SOURCE.cu ... --handler NAME [--kernel NAME]``: where a round trip
through your dispatch kernel spends its microseconds.

Compiles your device sources (the dispatch kernel and the handlers), the handler switch
over them and the package's device run time with ``-DCUDAQ_REALTIME_PHASES`` (the
measurement build, ``cudaq/realtime/detail/phases.cuh``), links them with nvJitLink for
the GPU, serves ``--requests`` calls of ``--handler`` through the kernel over the host
ring, and prints the median of each step of a request on the device (seen, staged, looked
up, handled, header written, published) next to the round trip seen from Python. Needs a
GPU, the ``runtime`` extra, and nvcc or NVRTC. The numbers are those of the stamped build:
compare steps of one kernel, or kernels built the same way.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skbuild_cudaq import _log
from skbuild_cudaq.cli._args import command, dims, positive
from skbuild_cudaq.cli._json import document
from skbuild_cudaq.errors import CudaqError, ToolchainError

if TYPE_CHECKING:
    from skbuild_cudaq.realtime._phases import PhaseBreakdown

__all__ = ["add_parser", "json_document", "launch_config", "payload_bytes"]

#: The device run time's sources (shipped in the package), compiled into every measured module.
_RUNTIME_SOURCES = ("unified_dispatch_kernel.cu", "hook_defaults.cu", "host_ring_bridge.cu")


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
            "median of each step of a request on the device (seen -> staged -> looked_up -> "
            "handled -> header -> published) and the round trip seen from Python."
        ),
    )
    p.add_argument("sources", nargs="+", type=Path, help="device sources (.cu): kernel, handlers")
    p.add_argument("--handler", required=True, help="the exported handler to call")
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
        help="default: 1 (128 for the built-in kernel)",
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


def json_document(kernel: str, handler: str, arch: str, result: PhaseBreakdown) -> str:
    """What ``phases --json OUT`` writes."""
    return document({"kernel": kernel, "handler": handler, "arch": arch, **result.as_dict()})


def _run(args: argparse.Namespace) -> int:
    for source in args.sources:
        if not source.is_file():
            msg = f"phases: source {source} does not exist"
            raise CudaqError(msg)
    payload = _fitting_payload(args)
    if args.json is not None and not args.json.resolve().parent.is_dir():
        msg = f"phases: cannot write --json {args.json}: its directory does not exist"
        raise CudaqError(msg)  # said now, not after the measurement
    try:
        from skbuild_cudaq.realtime import _driver
        from skbuild_cudaq.realtime._phases import BUILTIN_KERNEL, measure_phases
        from skbuild_cudaq.realtime.link._nvjitlink import link_blobs
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise _needs_runtime(exc) from None
    from skbuild_cudaq.build._handler_switch import write_switch

    arch = _driver.ordinal_arch(args.device).removeprefix("sm_")
    kernel = args.kernel or BUILTIN_KERNEL
    runtime = Path(__file__).resolve().parent.parent / "device"
    user = [s.resolve() for s in args.sources]
    with tempfile.TemporaryDirectory(prefix="skbuild-cudaq-phases-") as tmp:
        work = Path(tmp)
        switch = work / "handler_switch.cu"
        write_switch(switch, "skbuild-cudaq phases", user)
        sources = [*(runtime / name for name in _RUNTIME_SOURCES), *user, switch]
        fatbins = _compile(args, sources, arch, work)
        with _log.step(f"nvJitLink: {len(fatbins)} inputs for sm_{arch}"):
            cubin = link_blobs(
                [(f.name, f.read_bytes()) for f in fatbins],
                [f"-arch=sm_{arch}", "-lto"],
                sources="skbuild-cudaq phases",
            )
    launch = launch_config(args, kernel == BUILTIN_KERNEL)
    with _log.step(f"serving {args.warmup} + {args.requests} requests of {args.handler!r}"):
        result = measure_phases(
            cubin,
            args.handler,
            kernel=kernel,
            launch=launch,
            payload=payload,
            requests=args.requests,
            warmup=args.warmup,
            slot_size=args.slot_size,
            device=args.device,
        )
    _log.result(f"{kernel} serving {args.handler} on sm_{arch} ({result.requests} requests):")
    for line in result.table():
        _log.result(line)
    if args.json is not None:
        try:
            text = json_document(kernel, args.handler, f"sm_{arch}", result)
            args.json.write_text(text + "\n", encoding="utf-8")
        except OSError as exc:  # the table above is printed: only the file is missing
            msg = f"phases: cannot write --json {args.json}: {exc.strerror or exc}"
            raise CudaqError(msg) from None
    return 0
