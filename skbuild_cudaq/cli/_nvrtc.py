"""``python -m skbuild_cudaq nvrtc SOURCE.cu -o OUT.fatbin --arch 80 [-I DIR] [-D DEF]``.

Compiles device-only CUDA C++ to an LTO-IR fatbin with NVRTC from this Python
environment (no CUDA toolkit): what CMake runs for each dispatch kernel and
side-compiled handler source when the device compiler is NVRTC. Also
``--find`` (print ``<major>.<minor>;<library>`` of the NVRTC that would be
used, or fail saying what to install), for CMake's compiler choice.
"""

from __future__ import annotations

import argparse
from typing import Any

from skbuild_cudaq import _log
from skbuild_cudaq._cuda_majors import cuda_majors
from skbuild_cudaq.build._nvrtc import add_compile_arguments, compile_args
from skbuild_cudaq.cli._args import command

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    p = command(
        sub,
        "nvrtc",
        help="compile device code to an LTO-IR fatbin with NVRTC (no CUDA toolkit needed)",
        description=(
            "Compile one device-only CUDA C++ source to an LTO-IR fatbin with NVRTC "
            "(-dlto -rdc=true -arch=compute_XX -default-device), one entry per architecture, "
            "in the container layout nvcc -fatbin writes. NVRTC comes from the "
            + " or ".join(f"{m.nvrtc_wheel} (CUDA {m.major})" for m in cuda_majors())
            + " wheel of this environment, or SKBUILD_CUDAQ_NVRTC."
        ),
    )
    add_compile_arguments(p)
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
