"""``python -m skbuild_cudaq link EXT.so --arch sm_XY -o OUT.cubin``.

Links the binary's device code with the package's device run time (nvJitLink,
``-arch=sm_XY -lto``) and writes the cubin. The binary is not trusted: the
reader validates it, and nvJitLink runs in a child process (``--in-process``
to opt out), so a crash of nvJitLink on malformed code is one error line.
Needs the ``runtime`` extra; the run-time code is imported only when the
command runs. Failures print one
message (with nvJitLink's log) and exit non-zero, never a traceback.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from skbuild_cudaq import _log
from skbuild_cudaq.cli._args import architecture, command, link_timeout, memory_mib
from skbuild_cudaq.errors import ToolchainError

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    p = command(
        sub,
        "link",
        help="link a binary's device code with the run time into a cubin (nvJitLink)",
        description=(
            "Link every fatbin container of the binary's __nv_relfatbin sections together "
            "with skbuild-cudaq's device run time (built-in kernel, bridge hooks) into one "
            "cubin, as the run time does before loading it. Works without a GPU."
        ),
    )
    p.add_argument("binary", type=Path, help="extension module (.so) with device code")
    p.add_argument(
        "--arch", required=True, type=architecture, help="target architecture, e.g. sm_90"
    )
    p.add_argument("-o", "--output", type=Path, required=True, help="cubin file to write")
    p.add_argument(
        "--no-cache", action="store_true", help="do not use the link cache (always run nvJitLink)"
    )
    p.add_argument(
        "--bridge",
        action="append",
        type=Path,
        metavar="FATBIN",
        help=(
            "LTO-IR fatbin of a bridge of your own, linked instead of the host-ring hooks "
            "(repeatable)"
        ),
    )
    p.add_argument(
        "--in-process",
        action="store_true",
        help=(
            "run nvJitLink in this process (default: in a child process, so that a crash of "
            "nvJitLink on malformed device code is reported as an error)"
        ),
    )
    p.add_argument(
        "--timeout",
        type=link_timeout,
        default=None,
        metavar="SECONDS",
        help="give up on a link in a child process that takes longer than this (default: no limit)",
    )
    p.add_argument(
        "--memory-limit",
        type=memory_mib,
        default=4096,
        metavar="MIB",
        help=(
            "address space the link in a child process may use, in MiB (default 4096; 0: no limit)"
        ),
    )
    p.add_argument(
        "-X",
        "--option",
        action="append",
        default=[],
        metavar="OPT",
        help="extra nvJitLink option (repeatable), e.g. -X=-O3",
    )
    p.set_defaults(func=_run)


def _needs_runtime(exc: ImportError) -> ToolchainError:
    """What to do when the run time's packages are missing: the extra brings all of them
    (cuda-bindings, nvidia-nvjitlink) at versions that work together."""
    return ToolchainError(
        f'the link command needs the run-time extra ({exc}); pip install "skbuild-cudaq[runtime]"'
    )


def _run(args: argparse.Namespace) -> int:
    try:
        from skbuild_cudaq.realtime.link.cache import LinkCache, default_cache
        from skbuild_cudaq.realtime.link.linker import LinkOptions, link_device_code
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise _needs_runtime(exc) from None
    cache = LinkCache(None) if args.no_cache else default_cache()
    options = LinkOptions(
        arch=args.arch,
        extra=tuple(args.option),
        bridge=args.bridge,
        isolated=not args.in_process,
        timeout=args.timeout,
        memory_limit=args.memory_limit << 20 if args.memory_limit else None,
    )
    try:
        result = link_device_code(args.binary, options, cache=cache)
    except ImportError as exc:  # cuda-bindings (nvJitLink's Python API) is not installed
        raise _needs_runtime(exc) from None
    output: Path = args.output
    tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(result.cubin)
        tmp.replace(output)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        msg = f"cannot write {output}: {exc.strerror or exc}"
        raise ToolchainError(msg) from None
    source = "link cache" if result.cache_hit else "nvJitLink"
    _log.info(f"wrote {output} ({len(result.cubin)} bytes, {result.arch}, from {source})")
    if result.left_out:
        _log.info(
            f"left out (no code for {result.arch}): {', '.join(map(str, result.left_out))}; "
            "what it defines is not in the cubin"
        )
    return 0
