"""``python -m skbuild_cudaq``: the command-line front door.

Sub-commands live with the code they drive; this module only parses, calls,
and turns typed errors into one clear line and an exit status.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import _log
from .errors import CudaqError

__all__ = ["main"]


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m skbuild_cudaq",
        description=(
            "Build and inspect CUDA-Q realtime dispatch kernels shipped in Python packages."
        ),
    )
    parser.add_argument(
        "--cmake-dir",
        action="store_true",
        help="print the directory of the skbuild_cudaq CMake package and exit",
    )
    parser.add_argument(
        "--include-dir", action="store_true", help="print the device header directory and exit"
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    from . import _cli_inspect

    _cli_inspect.add_parser(sub)
    from . import _cli_schema

    _cli_schema.add_parser(sub)
    from . import _cli_link

    _cli_link.add_parser(sub)
    from . import _cli_nvrtc

    _cli_nvrtc.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    _log.show_library_log()
    from . import __version__, cmake_dir, include_dir

    if args.version:
        _log.result(__version__)
        return 0
    if args.cmake_dir:
        _log.result(str(cmake_dir()))
        return 0
    if args.include_dir:
        _log.result(str(include_dir()))
        return 0
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(args.func(args))
    except CudaqError as exc:
        _log.error(str(exc))
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
