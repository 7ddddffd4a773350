"""``python -m skbuild_cudaq``: the command-line front door.

One module per sub-command here (``inspect``, ``schema``, ``link``, ``cache``, ``check``,
``nvrtc``, ``phases``), each a thin parser over the code it drives; this module only parses,
calls, and turns typed errors into one clear line and an exit status.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType

from skbuild_cudaq import _log
from skbuild_cudaq.errors import CudaqError

__all__ = ["main", "program_name"]


def program_name(argv0: str | None = None) -> str:
    """How the user ran us, for usage lines: ``python -m skbuild_cudaq`` (``argv[0]`` is our
    ``__main__.py``), else the ``skbuild-cudaq`` script."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    if Path(argv0).name == "__main__.py":
        return "python -m skbuild_cudaq"
    return "skbuild-cudaq"


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=program_name(),
        description=(
            "Build and inspect CUDA-Q realtime dispatch kernels shipped in Python packages."
        ),
    )
    one = parser.add_mutually_exclusive_group()  # each prints one thing and exits
    one.add_argument(
        "--cmake-dir",
        action="store_true",
        help="print the directory of the skbuild_cudaq CMake package and exit",
    )
    one.add_argument(
        "--include-dir", action="store_true", help="print the device header directory and exit"
    )
    one.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    from skbuild_cudaq.cli import _inspect

    _inspect.add_parser(sub)
    from skbuild_cudaq.cli import _schema

    _schema.add_parser(sub)
    from skbuild_cudaq.cli import _link

    _link.add_parser(sub)
    from skbuild_cudaq.cli import _cache

    _cache.add_parser(sub)
    from skbuild_cudaq.cli import _check

    _check.add_parser(sub)
    from skbuild_cudaq.cli import _nvrtc

    _nvrtc.add_parser(sub)
    from skbuild_cudaq.cli import _phases

    _phases.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    _log.show_library_log()
    from skbuild_cudaq import __version__, cmake_dir, include_dir

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
        with _terminated_cleanly():
            return int(args.func(args))
    except CudaqError as exc:
        _log.error(str(exc))
        return 1
    except KeyboardInterrupt:
        return 130


class _Terminated(BaseException):
    """SIGTERM arrived (a CI job's timeout): unwinds like Ctrl-C, so that every ``with`` and
    ``finally`` runs (``check`` removes what it extracted)."""


@contextlib.contextmanager
def _terminated_cleanly() -> Iterator[None]:
    """While a command runs, SIGTERM raises :class:`_Terminated`; exit status 143 after the
    clean-up (128 + SIGTERM, what the shell reports for a process SIGTERM ended)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may install signal handlers
        return

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise _Terminated

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    except _Terminated:
        raise SystemExit(128 + signal.SIGTERM) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
