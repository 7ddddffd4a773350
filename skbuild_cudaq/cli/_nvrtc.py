"""``python -m skbuild_cudaq nvrtc SOURCE.cu -o OUT.fatbin --arch 80 [-I DIR] [-D DEF]``.

Compiles device-only CUDA C++ to an LTO-IR fatbin with NVRTC from this Python
environment (no CUDA toolkit): what CMake runs for each dispatch kernel and
side-compiled handler source when the device compiler is NVRTC. Also
``--find`` (print ``<major>.<minor>;<library>`` of the NVRTC that would be
used, or fail saying what to install), for CMake's compiler choice.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skbuild_cudaq import _log
from skbuild_cudaq.errors import CompileError

if TYPE_CHECKING:
    from skbuild_cudaq.build._nvrtc import Nvrtc

__all__ = ["add_parser", "compile_args"]


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "nvrtc",
        help="compile device code to an LTO-IR fatbin with NVRTC (no CUDA toolkit needed)",
        description=(
            "Compile one device-only CUDA C++ source to an LTO-IR fatbin with NVRTC "
            "(-dlto -rdc=true -arch=compute_XX -default-device), one entry per architecture, "
            "in the container layout nvcc -fatbin writes. NVRTC comes from the "
            "nvidia-cuda-nvrtc (CUDA 13) or nvidia-cuda-nvrtc-cu12 (CUDA 12) wheel of this "
            "environment, or SKBUILD_CUDAQ_NVRTC."
        ),
    )
    p.add_argument("source", nargs="*", help="the .cu file (empty arguments are ignored)")
    p.add_argument("-o", "--output", type=Path, help="fatbin file to write")
    p.add_argument("--arch", action="append", default=[], help="architecture, e.g. 80 (repeatable)")
    p.add_argument("-I", dest="include", action="append", default=[], help="include directory")
    p.add_argument("-D", dest="define", action="append", default=[], help="definition NAME[=VALUE]")
    p.add_argument(
        "-std", "--std", dest="std", default="", help="C++ standard, e.g. c++17 (the default)"
    )
    p.add_argument("--depfile", type=Path, help="write a make-style depfile here")
    p.add_argument("--dep-target", help="the depfile's target (default: the output path)")
    p.add_argument("--ptx", type=Path, help="also write the PTX of the first architecture here")
    p.add_argument("--cuda-major", type=int, help="use NVRTC of this CUDA major (12 or 13)")
    p.add_argument("--find", action="store_true", help="print '<major>.<minor>;<library>' and exit")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from skbuild_cudaq.build._nvrtc import find_nvrtc

    if args.find:
        nvrtc = find_nvrtc(args.cuda_major)
        _log.result(f"{nvrtc.version[0]}.{nvrtc.version[1]};{nvrtc.library}")
        return 0
    sources = [s for s in args.source if s]
    if len(sources) != 1 or args.output is None or not args.arch:
        _log.error("nvrtc: give exactly one source, -o OUTPUT and at least one --arch")
        return 2
    compile_args(args)
    return 0


def compile_args(args: argparse.Namespace) -> Nvrtc:
    """Compile what the parsed ``nvrtc`` arguments say; the NVRTC used.

    Raises :class:`~skbuild_cudaq.errors.CompileError` (NVRTC's log in ``log``) or
    :class:`~skbuild_cudaq.errors.ToolchainError`; the CMake package's steps runner
    (:mod:`skbuild_cudaq.build._device_compile`) calls it in its own process.
    """
    from skbuild_cudaq.build._nvrtc import compile_file, find_nvrtc

    nvrtc = find_nvrtc(args.cuda_major)
    sources = [s for s in args.source if s]
    if len(sources) != 1 or args.output is None or not args.arch:
        msg = "nvrtc: give exactly one source, -o OUTPUT and at least one --arch"
        raise CompileError(msg)
    with _log.step(f"{nvrtc.describe()}: {sources[0]}"):
        compile_file(
            Path(sources[0]),
            args.output,
            architectures=[a for a in args.arch if a],
            include_dirs=[d for d in args.include if d],
            defines=[d for d in args.define if d],
            std=args.std.removeprefix("-std=") or None,
            depfile=args.depfile,
            dep_target=args.dep_target,
            ptx=args.ptx,
            nvrtc=nvrtc,
        )
    return nvrtc
