"""Argument types the commands share (``argparse`` ``type=`` callables)."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = [
    "MAX_LINK_TIMEOUT",
    "MIN_LINK_MEMORY_MIB",
    "architecture",
    "command",
    "dims",
    "link_timeout",
    "memory_mib",
    "positive",
]


def dims(text: str) -> tuple[int, int, int]:
    """``X[,Y,Z]`` of positive integers (a grid, block or cluster); Y and Z default to 1."""
    parts = text.split(",")
    try:
        values = [int(p) for p in parts]
    except ValueError:
        values = []
    if not 1 <= len(values) <= 3 or any(v < 1 for v in values):
        msg = f"expected X[,Y,Z] with positive integers, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    values += [1] * (3 - len(values))
    return values[0], values[1], values[2]


def positive(text: str) -> int:
    """A positive integer."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        msg = f"expected a positive integer, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


#: What :class:`skbuild_cudaq.realtime.link.linker.LinkOptions` accepts (``tests/test_cli_args.py``
#: keeps these equal to it; not imported here, so that parsing needs no run-time extra).
MAX_LINK_TIMEOUT = 1e6
MIN_LINK_MEMORY_MIB = 256


def architecture(text: str) -> str:
    """``--arch``: ``sm_XY``, in the grammar of ``[tool.cudaq]`` architectures (``90`` and
    ``lto_90`` too, no ``sm_90a`` variant), as the run time names it."""
    from skbuild_cudaq._architectures import VARIANT_FORM
    from skbuild_cudaq.realtime.errors import LinkError
    from skbuild_cudaq.realtime.link.linker import parse_arch

    try:
        return parse_arch(text)[0]
    except LinkError:
        msg = f"expected an architecture sm_XY (e.g. sm_80, sm_90, sm_100), got {text!r}"
        if variant := VARIANT_FORM.fullmatch(text.strip()):
            msg += (
                f": a variant, which skbuild-cudaq does not link for ([tool.cudaq] "
                f"architectures refuse it too); link for sm_{int(variant.group(1))}: that "
                "cubin runs on the same GPU"
            )
        raise argparse.ArgumentTypeError(msg) from None


def link_timeout(text: str) -> float:
    """``--timeout SECONDS`` of a link: a positive number, at most :data:`MAX_LINK_TIMEOUT`."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= MAX_LINK_TIMEOUT:  # also NaN
        msg = (
            f"expected a positive number of seconds (at most {MAX_LINK_TIMEOUT:g}; leave the "
            f"option out for no limit), got {text!r}"
        )
        raise argparse.ArgumentTypeError(msg)
    return value


def memory_mib(text: str) -> int:
    """``--memory-limit MIB`` of a link in a child process: 0 (no limit) or at least
    :data:`MIN_LINK_MEMORY_MIB`."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value != 0 and not MIN_LINK_MEMORY_MIB <= value < 1 << 42:
        msg = (
            f"expected a number of MiB, at least {MIN_LINK_MEMORY_MIB} (0: no limit), got {text!r}"
        )
        raise argparse.ArgumentTypeError(msg)
    return value


def command(sub: Any, name: str, *, help: str, description: str) -> argparse.ArgumentParser:
    """A subcommand of ``skbuild-cudaq``: its one-line ``help`` in the command list and its
    ``description`` on its own ``--help`` page (every command's parser starts here)."""
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help, description=description)
    return parser
