"""``skbuild-cudaq check WHEEL... [--arch sm_XY] [--json]``: CI's check of built wheels.

A thin front door over :mod:`skbuild_cudaq.realtime.link.check` (the run-time side: it links,
with nvJitLink in a child process, so a crash of nvJitLink is one problem line): resolves
each argument to a wheel file or an installed distribution, prints one table per target
(module, kernels, handlers, architectures, link time, cubin size; then each source left out of
an architecture's link, having no code for it) or ``--json``, then one
``skbuild-cudaq: error:`` line per problem. Exit status 0 when every module of every target
links for every declared architecture with every declared kernel and handler, 1 otherwise.
Needs the ``runtime`` extra; imported only when the command runs. Never a traceback.
"""

from __future__ import annotations

import argparse
import re
import time
from typing import TYPE_CHECKING, Any

from skbuild_cudaq import _log
from skbuild_cudaq.cli._args import architecture, command, link_timeout
from skbuild_cudaq.cli._json import document
from skbuild_cudaq.errors import ToolchainError

if TYPE_CHECKING:
    from skbuild_cudaq.realtime.link.check import CheckReport, ModuleCheck

__all__ = ["add_parser", "byte_size", "json_document", "render_table"]


def add_parser(sub: Any) -> None:
    p = command(
        sub,
        "check",
        help="check that built wheels link for every declared architecture (no GPU)",
        description=(
            "Open each wheel (or installed distribution, by name), find every binary with "
            "device code, and link each with the run time for every architecture its build "
            "declared (nvJitLink, offline, in a child process): every declared kernel must be "
            "a kernel of the linked module and every exported handler must resolve. A source "
            "without code for an architecture is left out of that link, as the run time leaves "
            "it out, and listed (not a problem). Prints a table (or --json) and one error line "
            "per problem; exit status 0 when there is none. Needs the runtime extra, not a GPU."
        ),
    )
    p.add_argument(
        "targets",
        nargs="+",
        metavar="WHEEL",
        help="a .whl file, or the name of a distribution installed in this environment",
    )
    p.add_argument(
        "--arch",
        action="append",
        type=architecture,
        metavar="SM",
        help="link for this architecture instead of the declared ones (repeatable), e.g. sm_90",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--timeout",
        type=link_timeout,
        default=None,
        metavar="SECONDS",
        help="give up on a link that takes longer than this (default: no limit)",
    )
    p.add_argument(
        "--max-binary-size",
        type=byte_size,
        default=None,
        metavar="SIZE",
        help="refuse a wheel with a binary that unpacks to more than this (default 1G)",
    )
    p.add_argument(
        "--max-unpacked-size",
        type=byte_size,
        default=None,
        metavar="SIZE",
        help="refuse a wheel whose binaries unpack to more than this in all (default 4G)",
    )
    p.set_defaults(func=_run)


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def byte_size(text: str) -> int:
    """``--max-*-size``: a positive number of bytes, with an optional K, M, G or T (binary)."""
    m = re.fullmatch(r"([0-9]+)\s*([KMGT]?)(?:i?B)?", text.strip(), re.IGNORECASE)
    value = int(m[1]) * _UNITS[m[2].upper()] if m else 0
    if value < 1:
        msg = f"expected a positive size in bytes (e.g. 512M, 2G), got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def _needs_runtime(exc: ImportError) -> ToolchainError:
    return ToolchainError(
        f'the check command needs the run-time extra ({exc}); pip install "skbuild-cudaq[runtime]"'
    )


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.0f} ms"


def _size(size: int | None) -> str:
    return "-" if size is None else f"{size / 1024:.1f} KiB"


def _module_rows(module: ModuleCheck) -> list[list[str]]:
    links = {link.arch: link for link in module.links}
    archs: list[list[str]] = []
    for arch in module.architectures:
        link = links.get(arch)
        if link is None:
            archs.append([arch, "not linked", "-"])
        elif link.cubin_size is None:
            archs.append([arch, "FAILED", "-"])
        else:
            state = "" if link.ok else " (incomplete)"
            archs.append([arch, _ms(link.seconds) + state, _size(link.cubin_size)])
    kernels, handlers = list(module.kernels), list(module.handlers)
    if module.unnamed:
        noun = "container" if module.unnamed == 1 else "containers"
        kernels.append(f"(+{module.unnamed} unnamed {noun})")
    count = max(len(kernels), len(handlers), len(archs), 1)
    rows = []
    for i in range(count):
        name = module.module if i == 0 else ""
        kernel = kernels[i] if i < len(kernels) else ("none" if i == 0 else "")
        handler = handlers[i] if i < len(handlers) else ("none" if i == 0 else "")
        cells = archs[i] if i < len(archs) else ["", "", ""]
        rows.append([name, kernel, handler, *cells])
    return rows


def render_table(report: CheckReport) -> str:
    """The text ``check`` prints for one target: its modules, one table (names from the
    wheel printed escaped, as ``--json`` prints them: a newline or a terminal escape in a
    member's name never reaches the terminal)."""
    from skbuild_cudaq.realtime.link.check import printable

    return "\n".join(printable(line) for line in _table_lines(report))


def _table_lines(report: CheckReport) -> list[str]:
    lines = [f"{report.target}:"]
    if not report.modules:
        lines.append("  no module with device code")
        return lines
    header = ["module", "kernels", "handlers", "arch", "link", "cubin"]
    from skbuild_cudaq.realtime.link.check import printable

    rows = [
        [printable(cell) for cell in row]  # widths of what is printed
        for module in report.modules
        for row in _module_rows(module)
    ]
    widths = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header))]
    for row in [header, *rows]:
        cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        lines.append(("  " + "  ".join(cells)).rstrip())
    for module in report.modules:
        for link in module.links:
            if link.left_out:
                lines.append(
                    f"  {module.module} for {link.arch}: left out {', '.join(link.left_out)} "
                    f"(no code for {link.arch}: what it defines is unavailable on those GPUs)"
                )
    if report.other_binaries:
        noun = "binary" if len(report.other_binaries) == 1 else "binaries"
        lines.append(f"  ({len(report.other_binaries)} {noun} without device code)")
    return lines


def json_document(reports: list[CheckReport]) -> str:
    """What ``check --json`` prints for ``reports``."""
    ok = not any(r.problems for r in reports)
    return document({"ok": ok, "targets": [r.to_json() for r in reports]})


def _run(args: argparse.Namespace) -> int:
    try:
        from skbuild_cudaq.realtime.link.check import check_package
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise _needs_runtime(exc) from None
    start = time.perf_counter()
    reports = []
    for target in args.targets:
        try:
            report = check_package(
                target,
                architectures=args.arch,
                timeout=args.timeout,
                max_binary_size=args.max_binary_size,
                max_unpacked_size=args.max_unpacked_size,
            )
        except ImportError as exc:  # cuda-bindings / nvJitLink not installed
            raise _needs_runtime(exc) from None
        reports.append(report)
        if not args.json and report.kind != "unknown":  # not found: its error line says so
            _log.result(render_table(report))
    problems = [p for r in reports for p in r.problems]
    if args.json:
        _log.result(json_document(reports))
    else:
        modules = sum(len(r.modules) for r in reports)
        links = sum(len(m.links) for r in reports for m in r.modules)
        took = time.perf_counter() - start
        verdict = "ok" if not problems else f"{len(problems)} problem" + "s" * (len(problems) > 1)
        _log.result(
            f"checked {len(reports)} {'target' if len(reports) == 1 else 'targets'}: "
            f"{modules} {'module' if modules == 1 else 'modules'}, "
            f"{links} {'link' if links == 1 else 'links'} in {took:.1f} s: {verdict}"
        )
    for problem in problems:
        _log.error(str(problem))
    return 1 if problems else 0
