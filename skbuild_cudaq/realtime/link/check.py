"""Checking built wheels without a GPU: does every module link for every declared architecture?

``skbuild-cudaq check WHEEL...`` (:mod:`skbuild_cudaq.cli._check`) and a test suite's
:func:`check_package` run the same steps:

1. find every binary of the wheel (or installed distribution) that carries device code
   (an ``__nv_relfatbin`` section) or says it should (a ``__cudaq_rt_info`` build record,
   see :mod:`skbuild_cudaq.build._device_info`);
2. join the records with the containers, as ``inspect`` does: what the build declared
   (sources, ``extern "C"`` kernels, exported handlers, architectures) and what is still
   there -- a record whose container is gone means the module lost device code after the
   build (``strip --remove-section``, a repair tool);
3. link the module with the run time for every declared architecture, exactly as the run
   time does before it loads anything (:func:`~skbuild_cudaq.realtime.link.linker.prepare_link`),
   with nvJitLink in a child process (``_link_child``: a crash of nvJitLink on a
   damaged module is one problem, not the end of the check) and without the link cache (a
   check links); a container without code for an architecture is left out of that link, as
   the run time leaves it out (:attr:`ArchCheck.left_out`, not a problem), while another
   container has code for it;
4. read the linked cubin's symbols: every kernel and handler the records of the containers
   linked declare must be a kernel of it / an export that resolves.

Every problem is a :class:`CheckProblem`, one line each; nothing here prints or exits. No GPU
is needed; nvJitLink (the ``runtime`` extra) is.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skbuild_cudaq.realtime._arguments import typed_arguments
from skbuild_cudaq.realtime.errors import DeviceCodeError, LinkError

if TYPE_CHECKING:  # importlib.metadata and zipfile load with the first check
    from skbuild_cudaq.realtime.link._packaged import Packaged, PackagedBinary
    from skbuild_cudaq.realtime.link.device_code import DeviceCode
    from skbuild_cudaq.realtime.link.linker import LeftOut

__all__ = [
    "ArchCheck",
    "CheckProblem",
    "CheckReport",
    "ModuleCheck",
    "check_package",
    "printable",
]

#: Kinds of :class:`CheckProblem`.
PROBLEM_KINDS = (
    "not-found",  # the target is neither a readable wheel nor an installed distribution
    "no-device-code",  # no binary of the target carries device code
    "lost-device-code",  # the build recorded device code the module no longer has
    "no-build-record",  # device code, but no build record: not built by skbuild-cudaq
    "unreadable",  # a module's device code or records cannot be read
    "link",  # a module does not link for an architecture
    "missing-kernel",  # a declared kernel is not a kernel of the linked cubin
    "missing-handler",  # a declared handler's export does not resolve in the linked cubin
)


def printable(text: str) -> str:
    """``text`` with every character that is not printable escaped (``\\n``, ``\\x1b``,
    ...), as ``--json`` escapes them: a name from a wheel (a member, a build record's source)
    can neither forge a line of its own nor send escape sequences to the terminal."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


@dataclass(frozen=True)
class CheckProblem:
    """One problem, as one line: ``str(problem)`` names the target, module and architecture
    (what is not printable in them escaped, see :func:`printable`)."""

    kind: str  #: one of ``PROBLEM_KINDS``
    target: str  #: the wheel's file name or the distribution
    message: str  #: what is wrong and what to do, one line
    module: str | None = None  #: the binary's path inside the wheel / distribution
    arch: str | None = None  #: the architecture, for link problems
    log: str = ""  #: nvJitLink's log, for link problems (not part of the line)

    def __str__(self) -> str:
        where = ": ".join(p for p in (self.target, self.module) if p)
        return printable(f"{where}: {self.message}")

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "target": self.target,
            "module": self.module,
            "arch": self.arch,
            "message": self.message,
            "log": self.log,
        }


@dataclass(frozen=True)
class ArchCheck:
    """One module linked for one architecture."""

    arch: str  #: ``sm_XY``
    ok: bool  #: linked, with every declared kernel and handler in the cubin
    seconds: float | None = None  #: seconds nvJitLink took, or None when it did not link
    cubin_size: int | None = None  #: bytes of the linked cubin
    kernels: tuple[str, ...] = ()  #: every kernel of the linked cubin (the built-in one too)
    handlers: tuple[str, ...] = ()  #: every handler export that resolves in it
    #: containers left out of this link (no code for ``arch``), as ``"src/k.cu (lto-ir
    #: sm_90)"``; what they define is unavailable on GPUs of this architecture
    left_out: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "arch": self.arch,
            "ok": self.ok,
            "seconds": self.seconds,
            "cubin_size": self.cubin_size,
            "kernels": list(self.kernels),
            "handlers": list(self.handlers),
            "left_out": list(self.left_out),
        }


@dataclass(frozen=True)
class ModuleCheck:
    """What one binary with device code declares, and how its links went."""

    module: str  #: its path inside the wheel / distribution
    sources: tuple[str, ...] = ()  #: the device sources its build records name
    kernels: tuple[str, ...] = ()  #: the ``extern "C"`` kernels they declare
    handlers: tuple[str, ...] = ()  #: the handlers they export
    architectures: tuple[str, ...] = ()  #: those checked (declared, or as asked)
    containers: int = 0  #: fatbin containers in its ``__nv_relfatbin`` sections
    unnamed: int = 0  #: containers without a build record (linked; names unknown)
    links: tuple[ArchCheck, ...] = ()
    problems: tuple[CheckProblem, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "module": self.module,
            "ok": self.ok,
            "sources": list(self.sources),
            "kernels": list(self.kernels),
            "handlers": list(self.handlers),
            "architectures": list(self.architectures),
            "containers": self.containers,
            "unnamed_containers": self.unnamed,
            "links": [link.to_json() for link in self.links],
            "problems": [p.to_json() for p in self.problems],
        }


@dataclass(frozen=True)
class CheckReport:
    """The check of one wheel or installed distribution. ``ok``: no problem at all."""

    target: str  #: the wheel's file name, or ``"<name> <version> (installed)"``
    kind: str  #: ``"wheel"``, ``"distribution"``, or ``"unknown"`` when it was not found
    modules: tuple[ModuleCheck, ...] = ()  #: binaries with device code
    other_binaries: tuple[str, ...] = ()  #: binaries without any (host code only)
    problems: tuple[CheckProblem, ...] = field(default=())  #: every problem, modules' included

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "kind": self.kind,
            "ok": self.ok,
            "modules": [m.to_json() for m in self.modules],
            "other_binaries": list(self.other_binaries),
            "problems": [p.to_json() for p in self.problems],
        }


@dataclass(frozen=True)
class _Options:
    architectures: tuple[str, ...] | None
    timeout: float | None
    memory_limit: int | None


@typed_arguments()
def check_package(
    target: str | os.PathLike[str],
    *,
    path: Iterable[str] | None = None,
    architectures: Iterable[str | int] | None = None,
    timeout: float | None = None,
    memory_limit: int | None = None,
    max_binary_size: int | None = None,
    max_unpacked_size: int | None = None,
) -> CheckReport:
    """Check every module of a wheel file or of an installed distribution (see the module
    docstring).

    ``target``: a wheel when it is a path (not a ``str``, a name ending ``.whl``, a path with
    a directory, or an existing file), else the name of an installed distribution, found on
    ``path`` (default ``sys.path``) and read where it is installed. ``architectures``: link
    for these (``"sm_90"``, ``"90"``, ``90``) instead of the ones each module's build
    declared. ``timeout``: seconds one link may take (None: no limit); ``memory_limit``:
    bytes of address space a link may use (None: the default limit of an isolated link).
    ``max_binary_size`` / ``max_unpacked_size``: bytes a wheel's binaries may unpack to, one
    and all together (None: ``MAX_BINARY_SIZE``, 1 GiB, and ``MAX_UNPACKED_SIZE``, 4 GiB, of
    :mod:`~skbuild_cudaq.realtime.link._packaged`); a wheel beyond them is refused unread.
    Returns a :class:`CheckReport`; problems are in it, never raised. Raises
    ``ImportError`` when nvJitLink (the ``runtime`` extra) cannot be loaded.
    """
    from skbuild_cudaq.realtime.link._packaged import UnpackLimits, open_distribution, open_wheel

    options = _options(architectures, timeout, memory_limit)
    limits = UnpackLimits(
        **{
            key: value
            for key, value in (("binary", max_binary_size), ("total", max_unpacked_size))
            if value is not None
        }
    )
    text = os.fspath(target)
    if not text:
        return _not_found(
            "''", "an empty argument: pass the path of a .whl file or the name of a distribution"
        )
    try:
        if _is_wheel(target):
            packaged = open_wheel(target, limits)
        else:
            packaged = open_distribution(text, path)
    except DeviceCodeError as exc:
        return _not_found(text, str(exc))
    with packaged:
        return _check_packaged(packaged, options)


def _is_wheel(target: str | os.PathLike[str]) -> bool:
    """Whether ``target`` names a wheel file rather than an installed distribution."""
    text = os.fspath(target)
    return (
        not isinstance(target, str)
        or text.endswith(".whl")
        or os.sep in text
        or (os.altsep is not None and os.altsep in text)
        or Path(text).is_file()
    )


def _options(
    architectures: Iterable[str | int] | None, timeout: float | None, memory_limit: int | None
) -> _Options:
    from skbuild_cudaq.realtime.link.linker import DEFAULT_MEMORY_LIMIT, LinkOptions, parse_arch

    archs = None
    if architectures is not None:
        archs = _sorted_archs(parse_arch(a)[0] for a in architectures)
        if not archs:
            msg = "no architecture to check: name at least one (e.g. sm_90), or pass None"
            raise LinkError(msg)
    limit = DEFAULT_MEMORY_LIMIT if memory_limit is None else memory_limit
    LinkOptions(timeout=timeout, memory_limit=limit)  # the same checks as a link's
    return _Options(archs, timeout, limit)


def _not_found(target: str, message: str) -> CheckReport:
    text = message.removeprefix(f"{target}: ")
    problem = CheckProblem("not-found", target, text)
    return CheckReport(target, "unknown", problems=(problem,))


def _sorted_archs(archs: Iterable[str]) -> tuple[str, ...]:
    from skbuild_cudaq.realtime.link.linker import parse_arch

    return tuple(sorted(set(archs), key=lambda a: (parse_arch(a)[1], a)))


def _check_packaged(packaged: Packaged, options: _Options) -> CheckReport:
    modules: list[ModuleCheck] = []
    others: list[str] = []
    for binary in packaged.binaries:
        checked = _check_binary(packaged.label, binary, options)
        if checked is None:
            others.append(binary.name)
        else:
            modules.append(checked)
    problems = [p for m in modules for p in m.problems]
    if not modules:
        have = f"{len(others)} binaries, none" if others else "no binary at all"
        problems.append(
            CheckProblem(
                "no-device-code",
                packaged.label,
                f"no module carries device code ({have} with an __nv_relfatbin section or a "
                "build record): build it with skbuild-cudaq -- build-backend = "
                '"skbuild_cudaq.build" in pyproject.toml with [tool.cudaq.dispatch-kernels], or '
                "the cudaq_realtime_* CMake functions (another backend, e.g. "
                "scikit_build_core.build, ignores [tool.cudaq]) -- and check that no tool "
                "removed the sections after the build",
            )
        )
    label, kind = packaged.label, packaged.kind
    return CheckReport(label, kind, tuple(modules), tuple(others), tuple(problems))


def _check_binary(target: str, binary: PackagedBinary, options: _Options) -> ModuleCheck | None:
    """The check of one binary, or None when it has no device code and claims none."""
    from skbuild_cudaq._elf import read_sections
    from skbuild_cudaq._records import SECTION as RECORDS
    from skbuild_cudaq._records import container_digest, records_of_sections
    from skbuild_cudaq.fatbin import SECTION_NAME, relfatbin_sections
    from skbuild_cudaq.realtime.link.device_code import device_code_of_sections

    name = binary.name

    def problem(kind: str, message: str, **more: Any) -> CheckProblem:
        for where in {str(binary.path.resolve()), str(binary.path)}:
            message = message.replace(where, name)
        return CheckProblem(kind, target, message, name, **more)

    try:  # the one read of the binary: both sections at once
        found = read_sections(binary.path, (SECTION_NAME, RECORDS), may_be_empty=(RECORDS,))
        if not found[SECTION_NAME] and not found[RECORDS]:
            return None
        records = records_of_sections(binary.path, found[RECORDS])
    except (DeviceCodeError, OSError) as exc:
        return ModuleCheck(name, problems=(problem("unreadable", str(exc)),))
    sources = tuple(str(r.get("source")) for r in records)
    if not records:
        return ModuleCheck(name, problems=(problem("no-build-record", _NO_RECORD),))
    if not found[SECTION_NAME]:
        return ModuleCheck(
            name,
            sources=sources,
            kernels=_union(r.get("kernels") for r in records),
            handlers=_union(r.get("handlers") for r in records),
            architectures=options.architectures or _declared(records),
            problems=(
                problem(
                    "lost-device-code",
                    f"lost its device code: no {SECTION_NAME} section, though its build "
                    f"recorded {_count(len(records), 'source')} ({', '.join(sources)}); a tool "
                    "that rewrote the module after the build (strip --remove-section, a repair "
                    f"tool) removed it: keep {SECTION_NAME} (and {RECORDS}) when you post-process "
                    "the wheel",
                ),
            ),
        )
    try:
        code = device_code_of_sections(
            binary.path, relfatbin_sections(binary.path, found[SECTION_NAME])
        )
    except DeviceCodeError as exc:
        return ModuleCheck(name, sources=sources, problems=(problem("unreadable", str(exc)),))
    digests = {container_digest(i.container.data) for i in code.inputs}
    present: list[dict[str, Any]] = []
    lost: list[dict[str, Any]] = []
    recorded: set[str] = set()
    for record in records:
        containers = {str(d) for d in record.get("containers", [])}
        recorded |= containers
        (present if containers and containers <= digests else lost).append(record)
    problems = [
        problem(
            "lost-device-code",
            f"lost the device code of {r.get('source')}: its build recorded it, its "
            f"{SECTION_NAME} section no longer holds it (a tool rewrote the module after the "
            "build); rebuild the wheel and keep the section whole when you post-process it",
        )
        for r in lost
    ]
    kernels = _union(r.get("kernels") for r in present)
    handlers = _union(r.get("handlers") for r in present)
    unnamed = len(digests - recorded)
    if options.architectures is not None:
        archs = options.architectures
    elif present:
        archs = _declared(present)
    else:  # no record: what the code itself was built for
        archs = _sorted_archs(
            e.sm for i in code.inputs for e in i.container.entries if e.kind_code in (1, 8)
        )
    links = []
    if not problems:
        for arch in archs:
            link, link_problems = _link(
                code, arch, records=present, options=options, problem=problem
            )
            links.append(link)
            problems += link_problems
    return ModuleCheck(
        name,
        sources=sources,
        kernels=kernels,
        handlers=handlers,
        architectures=archs,
        containers=len(code.inputs),
        unnamed=unnamed,
        links=tuple(links),
        problems=tuple(problems),
    )


_NO_RECORD = (
    "has device code (an __nv_relfatbin section) but no build record of skbuild-cudaq's: it "
    "was not built through skbuild-cudaq, so no dispatch kernel of yours was added to it "
    '(nvcc -rdc handlers alone); build it with build-backend = "skbuild_cudaq.build" and '
    "[tool.cudaq.dispatch-kernels], or cudaq_realtime_add_dispatch_kernel() in CMake"
)


def _declared(records: Iterable[dict[str, Any]]) -> tuple[str, ...]:
    """The architectures the build records declare, as ``sm_XY``, oldest first."""
    return _sorted_archs(f"sm_{a}" for r in records for a in r.get("architectures") or [])


def _union(lists: Iterable[Any]) -> tuple[str, ...]:
    return tuple(sorted({str(n) for names in lists for n in names or []}))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _first_line_of(log: str) -> str:
    """The line of nvJitLink's log that says what failed (an error or fatal line first)."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for line in lines:
        if "error" in line.lower() or "fatal" in line.lower():
            return line
    return lines[0] if lines else ""


def _linked_records(
    code: DeviceCode, records: Sequence[dict[str, Any]], left_out: Sequence[LeftOut]
) -> list[dict[str, Any]]:
    """The ``records`` of containers a link kept (those ``left_out`` declare nothing there)."""
    if not left_out:
        return list(records)
    from skbuild_cudaq._records import container_digest

    names = {item.name for item in left_out}
    gone = {container_digest(i.container.data) for i in code.inputs if i.name in names}
    return [r for r in records if not {str(d) for d in r.get("containers", [])} <= gone]


def _link(
    code: DeviceCode,
    arch: str,
    *,
    records: Sequence[dict[str, Any]],
    options: _Options,
    problem: Any,
) -> tuple[ArchCheck, list[CheckProblem]]:
    """Link ``code`` for ``arch`` and look for the kernels and handlers the records of the
    containers linked declare."""
    from skbuild_cudaq.realtime.library.symbols import cubin_symbols
    from skbuild_cudaq.realtime.link.cache import LinkCache
    from skbuild_cudaq.realtime.link.linker import LinkOptions, prepare_link

    link_options = LinkOptions(
        arch=arch, isolated=True, timeout=options.timeout, memory_limit=options.memory_limit
    )
    try:
        result = prepare_link(code, link_options, LinkCache(None)).finish(arch)
    except LinkError as exc:
        # "cannot link [<file>] for <arch>: " says again what the problem line says
        message = re.sub(r"^cannot link (\S+ )?for \S+: ", "", exc.message)
        message += f" [{exc.result}]" if exc.result else ""
        said = _first_line_of(exc.log)
        if said:
            message += f": {said}"
        return ArchCheck(arch, False), [
            problem("link", f"does not link for {arch}: {message}", arch=arch, log=exc.log)
        ]
    symbols = cubin_symbols(result.cubin)
    linked = _linked_records(code, records, result.left_out)
    kernels = _union(r.get("kernels") for r in linked)
    handlers = _union(r.get("handlers") for r in linked)
    found = []
    for kernel in kernels:
        if kernel not in symbols.kernels:
            found.append(
                problem(
                    "missing-kernel",
                    f"kernel {kernel} (declared by its build record) is not a kernel of the "
                    f"module linked for {arch} (it has {', '.join(symbols.kernels) or 'none'})",
                    arch=arch,
                )
            )
    for handler in handlers:
        if handler not in symbols.handlers:
            found.append(
                problem(
                    "missing-handler",
                    f"handler {handler} (exported, by its build record) does not resolve in "
                    f"the module linked for {arch} (it exports "
                    f"{', '.join(symbols.handlers) or 'none'})",
                    arch=arch,
                )
            )
    link = ArchCheck(
        arch,
        not found,
        result.seconds,
        len(result.cubin),
        symbols.kernels,
        symbols.handlers,
        tuple(map(str, result.left_out)),
    )
    return link, found
