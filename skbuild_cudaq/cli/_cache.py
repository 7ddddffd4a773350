"""``python -m skbuild_cudaq cache [--clear | --clear-unused DAYS] [--json]``: the link cache.

Says where the link cache is and what it holds (entries, bytes, temporaries of stores that
never finished), or clears it: every entry, or those unused for ``DAYS`` days (an entry's
last hit or store), and the leftover temporaries. A thin front door over
:class:`skbuild_cudaq.realtime.link.cache.LinkCache` (plain Python: no CUDA, no nvJitLink).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from skbuild_cudaq import _log
from skbuild_cudaq.cli._json import document

if TYPE_CHECKING:
    from skbuild_cudaq.realtime.link.cache import CacheUsage

from skbuild_cudaq.cli._args import command

__all__ = ["add_parser", "render"]

_DAY = 86400.0


def add_parser(sub: Any) -> None:
    p = command(
        sub,
        "cache",
        help="show where the link cache is and what it holds, or clear it",
        description=(
            "Show the link cache's directory ($SKBUILD_CUDAQ_LINK_CACHE, else "
            "$XDG_CACHE_HOME/skbuild-cudaq/link or ~/.cache/skbuild-cudaq/link), its "
            "entries (linked cubins) and their size; with --clear, remove them. An entry "
            "removed is linked again by the next start that needs it."
        ),
    )
    clear = p.add_mutually_exclusive_group()
    clear.add_argument(
        "--clear", action="store_true", help="remove every entry (and leftover temporaries)"
    )
    clear.add_argument(
        "--clear-unused",
        type=_days,
        default=None,
        metavar="DAYS",
        help="remove the entries unused (no hit, no store) for DAYS days (and leftovers)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_run)


def _days(text: str) -> float:
    try:
        days = float(text)
    except ValueError:
        days = -1.0
    if not days >= 0:  # also NaN
        msg = f"a number of days, 0 or more, not {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return days


def render(usage: CacheUsage, cleared: bool) -> str:
    """The text ``cache`` prints for ``usage`` (what the cache holds, or what was removed)."""
    if usage.directory is None:
        return "the link cache is disabled (SKBUILD_CUDAQ_LINK_CACHE=off)"
    noun = "entry" if usage.entries == 1 else "entries"
    what = f"{usage.entries} {noun}, {usage.size / 2**20:.1f} MiB"
    if cleared:
        left = f", {usage.leftovers} leftover temporaries" if usage.leftovers else ""
        return f"{usage.directory}: removed {what}{left}"
    left = (
        f"; {usage.leftovers} leftover temporaries of stores that never finished "
        "(--clear removes them)"
        if usage.leftovers
        else ""
    )
    return f"{usage.directory}: {what}{left}"


def _run(args: argparse.Namespace) -> int:
    from skbuild_cudaq.realtime.link.cache import default_cache

    cache = default_cache()
    cleared = args.clear or args.clear_unused is not None
    if cleared:
        unused_for = None if args.clear_unused is None else args.clear_unused * _DAY
        usage = cache.clear(unused_for=unused_for)  # LinkCacheError -> printed by __main__
    else:
        usage = cache.usage()
    if args.json:
        directory = None if usage.directory is None else str(usage.directory)
        _log.result(
            document(
                {
                    "directory": directory,
                    "entries": usage.entries,
                    "bytes": usage.size,
                    "leftovers": usage.leftovers,
                    "cleared": cleared,
                }
            )
        )
    else:
        _log.result(render(usage, cleared))
    return 0
