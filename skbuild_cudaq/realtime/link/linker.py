"""Linking a binary's device code with the package's run time into one cubin.

Inputs, each added to nvJitLink separately as ``FATBIN``: skbuild-cudaq's
device run time (the built-in kernel ``cudaq_realtime_unified_dispatch`` and
the bridge hooks, ``runtime_dir()/*.fatbin``) and every fatbin
container of the binary's ``__nv_relfatbin`` sections. Options:
``-arch=sm_XY -lto``. The cubin is cached on disk (see :mod:`.cache`); a cache
hit neither loads libnvJitLink nor touches the GPU (when ``arch`` is given).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import cast

from skbuild_cudaq._architectures import VARIANT_FORM, architecture_number
from skbuild_cudaq.realtime._arguments import typed_arguments
from skbuild_cudaq.realtime._logging import get_logger, timed
from skbuild_cudaq.realtime.errors import LinkError
from skbuild_cudaq.realtime.link import _nvjitlink
from skbuild_cudaq.realtime.link._binary import BridgeCode
from skbuild_cudaq.realtime.link.cache import LinkCache, cache_digest, cache_entry, default_cache
from skbuild_cudaq.realtime.link.device_code import (
    DeviceCode,
    LinkInput,
    bridge_files,
    container_sources,
    device_code_of,
)
from skbuild_cudaq.realtime.link.device_runtime import runtime_device_code

__all__ = [
    "DEFAULT_MEMORY_LIMIT",
    "LeftOut",
    "LinkOptions",
    "LinkResult",
    "PreparedLink",
    "link_device_code",
    "parse_arch",
    "prepare_link",
]

_logger = get_logger(__name__)
_KIND_LTO_IR, _KIND_CUBIN, _KIND_PTX = 8, 2, 1
_MAX_TIMEOUT = 1e6  # seconds; larger (or infinite) timeouts overflow the OS's wait
#: Address space an isolated link may use by default (``LinkOptions.memory_limit``).
DEFAULT_MEMORY_LIMIT = 4 << 30
_MIN_MEMORY = 256 << 20  # Python and libnvJitLink alone need ~160 MB


def parse_arch(arch: str | int) -> tuple[str, int]:
    """``"sm_90"``, ``"90"`` or ``90`` -> (``"sm_90"``, 90): the architecture grammar of
    ``[tool.cudaq]`` (:mod:`skbuild_cudaq._architectures`, so ``lto_90`` and ``compute_90``
    too); a variant (``sm_90a``) is refused, as it is there."""
    text = str(arch).strip()
    number = None if isinstance(arch, bool) else architecture_number(text)
    if number is None:
        variant = VARIANT_FORM.fullmatch(text)
        if variant is not None and not isinstance(arch, bool):
            plain = int(variant.group(1))
            msg = (
                f"invalid architecture {arch!r}: an architecture-specific variant, which "
                f"skbuild-cudaq does not link for (its LTO-IR is built for plain numbers, as "
                f"[tool.cudaq] architectures are); link for sm_{plain}: that cubin runs on "
                "the same GPU"
            )
        else:
            msg = f"invalid architecture {arch!r}: expected sm_XY (e.g. sm_80, sm_90, sm_100)"
        raise LinkError(msg)
    return f"sm_{number}", number


def _is_number(value: object) -> bool:
    """A real number (not a bool or a string)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _extra_options(extra: object) -> tuple[str, ...]:
    """``LinkOptions.extra`` as a tuple of option strings; a bare string is refused (a
    tuple of its characters would reach nvJitLink as one option each)."""
    options: tuple[object, ...] = (extra,)  # refused below unless a sequence of strings
    if not isinstance(extra, (str, bytes)):
        with contextlib.suppress(TypeError):
            options = tuple(cast("Iterable[object]", extra))
    strings = tuple(option for option in options if isinstance(option, str))
    if len(strings) != len(options) or isinstance(extra, (str, bytes)):
        msg = (
            f"LinkOptions.extra={extra!r}: expected a sequence of nvJitLink options, one "
            "string each, e.g. extra=('-O3',) (a bare string would be one option per character)"
        )
        raise LinkError(msg)
    return strings


@dataclass(frozen=True)
class LinkOptions:
    """How to link (see :func:`link_device_code`); normalised on construction.

    ``arch``: ``"sm_90"``, ``"90"`` or ``90`` (kept as ``"sm_90"``), None: the current
    GPU's. ``extra``: more nvJitLink options.
    """

    arch: str | int | None = None
    extra: tuple[str, ...] = ()
    #: The device run-time set to link, or None for the installed nvJitLink's
    #: (:func:`~skbuild_cudaq.realtime.link.device_runtime.runtime_dir`).
    runtime_dir: Path | None = None
    #: The LTO-IR fatbins of a bridge of your own, which replace the host-ring hooks (one
    #: path or several, kept as a tuple of resolved paths), or None for the built-in
    #: host-ring hooks; see :doc:`/guides/bridges`.
    bridge: BridgeCode = None
    #: Whether nvJitLink runs in a child process, so that a crash of nvJitLink on
    #: malformed code becomes a :class:`LinkError` instead of killing this process.
    #: For device code you did not build (``python -m skbuild_cudaq link`` does so
    #: by default).
    isolated: bool = False
    #: Seconds an isolated link may take, or None for no limit.
    timeout: float | None = None
    #: Bytes of address space an isolated link may use, or None for no limit. nvJitLink
    #: needs ~160 MB for a small module; damaged code has made it take 23 GB.
    memory_limit: int | None = DEFAULT_MEMORY_LIMIT
    #: Also link the graph dispatch kernel and the device runtime (``libcudadevrt.a``)
    #: it calls: the module of a dispatcher that serves graph handlers (GRAPH_LAUNCH).
    graph_launch: bool = False

    def __post_init__(self) -> None:
        if self.arch is not None:
            object.__setattr__(self, "arch", parse_arch(self.arch)[0])
        object.__setattr__(self, "extra", _extra_options(self.extra))
        if self.runtime_dir is not None:
            object.__setattr__(self, "runtime_dir", Path(self.runtime_dir))
        object.__setattr__(self, "bridge", bridge_files(self.bridge))
        for flag in ("isolated", "graph_launch"):
            if not isinstance(getattr(self, flag), bool):
                msg = f"LinkOptions.{flag}={getattr(self, flag)!r}: expected True or False"
                raise LinkError(msg)
        if self.timeout is not None and not (
            _is_number(self.timeout) and 0 < self.timeout <= _MAX_TIMEOUT
        ):
            msg = (
                f"invalid link timeout {self.timeout!r}: expected a positive number of seconds "
                f"(at most {_MAX_TIMEOUT:g}), or None for no limit"
            )
            raise LinkError(msg)
        if self.memory_limit is not None and not (
            isinstance(self.memory_limit, int)
            and not isinstance(self.memory_limit, bool)
            and _MIN_MEMORY <= self.memory_limit < 1 << 62
        ):
            msg = (
                f"invalid link memory limit {self.memory_limit!r}: expected at least "
                f"{_MIN_MEMORY >> 20} MiB (in bytes), or None for no limit"
            )
            raise LinkError(msg)

    @property
    def bridge_paths(self) -> tuple[Path, ...] | None:
        """:attr:`bridge` as normalised on construction."""
        return cast("tuple[Path, ...] | None", self.bridge)

    def common_options(self) -> list[str]:
        """The nvJitLink options other than ``-arch``."""
        return ["-lto", *self.extra]

    def nvjitlink_options(self, arch: str) -> list[str]:
        return [f"-arch={arch}", *self.common_options()]


@dataclass(frozen=True)
class LeftOut:
    """A container of the binary left out of a link: it has no code for the link's GPU.

    Like a translation unit without code for the device in CUDA itself: what it defines is
    unavailable on that GPU, the rest of the module serves. ``str()`` is what messages say:
    ``"src/cluster.cu (lto-ir sm_90)"``.
    """

    name: str  #: the input's name (``<binary>:<section>:<container>``)
    source: str | None  #: the source its build record names, None without a record
    has: str  #: what the container has, e.g. ``"lto-ir sm_90"``
    #: the oldest GPU it links for (its oldest LTO-IR or PTX entry), None for SASS only
    lowest: int | None = None

    def __str__(self) -> str:
        where = self.source or f"container {self.name}"
        return f"{where} ({self.has})"


@dataclass(frozen=True)
class LinkResult:
    """A linked cubin, the arch it is for and whether it came from the cache."""

    cubin: bytes
    arch: str
    binary: Path
    cache_hit: bool
    cache_path: Path | None
    #: Seconds nvJitLink took (loading the library and, for an isolated link, starting the
    #: child process not included); None for a cubin from the cache.
    seconds: float | None = None
    #: The binary's containers left out of this link, which have no code for :attr:`arch`
    #: while others do (names defined only there are not in the cubin).
    left_out: tuple[LeftOut, ...] = ()


def _linkable(item: LinkInput, arch: int) -> bool:
    """Whether a container has an entry nvJitLink can use for ``sm_<arch>``."""
    for entry in item.container.entries:
        if entry.kind_code in (_KIND_LTO_IR, _KIND_PTX) and entry.arch <= arch:
            return True
        if entry.kind_code == _KIND_CUBIN and entry.arch == arch:
            return True
    return False


def _lowest(item: LinkInput) -> int | None:
    """The oldest GPU any entry of a container links for (LTO-IR / PTX), or None (SASS only)."""
    archs = [e.arch for e in item.container.entries if e.kind_code in (_KIND_LTO_IR, _KIND_PTX)]
    return min(archs) if archs else None


def _has(item: LinkInput) -> str:
    return ", ".join(f"{e.kind} {e.sm}" for e in item.container.entries) or "no entries"


def _check_runtime(runtime: tuple[str, tuple[LinkInput, ...]], sm: str) -> None:
    """Refuse an architecture a file of the run time (or of a bridge) has no code for.

    Below the device run time's floor (sm_80) nothing can help: say so.
    """
    _, number = parse_arch(sm)
    what, inputs = runtime
    floors = [low for low in map(_lowest, inputs) if low is not None]
    floor = min(floors) if floors else None
    for item in inputs:
        if not _linkable(item, number):
            if floor is not None and number < floor:
                msg = (
                    f"cannot link for {sm}: skbuild-cudaq serves GPUs of sm_{floor} and newer "
                    f"(its device run time is LTO-IR for sm_{floor}); {sm} is below that floor "
                    f"and no build setting changes it: link for sm_{floor} or newer"
                )
            else:
                msg = (
                    f"cannot link for {sm}: {item.name} of {what} has no code for it "
                    f"({_has(item)}); LTO-IR built for sm_XY links for sm_XY and newer GPUs only"
                )
            raise LinkError(msg)


def _architectures_advice(sm: str, lowest: int | None) -> str:
    number = parse_arch(sm)[1]
    advice = (
        f'rebuild it for {sm}: add "{number}" to its architectures (pyproject.toml: '
        "[tool.cudaq.dispatch-kernels]; CMake: ARCHITECTURES)"
    )
    return advice if lowest is None else f"link for sm_{lowest} or newer, or {advice}"


def _select(code: DeviceCode, sm: str) -> tuple[tuple[LinkInput, ...], tuple[LeftOut, ...]]:
    """The binary's containers to link for ``sm``, and those left out.

    A container with no code for ``sm`` is left out while another has code (what CUDA does
    per translation unit: the names it defines are unavailable on that GPU, the rest
    serves); when none has, the link is refused, naming the first by the source its build
    record gives (as ``inspect`` does) and the setting that builds it for older GPUs.
    """
    number = parse_arch(sm)[1]
    kept = tuple(item for item in code.inputs if _linkable(item, number))
    if len(kept) == len(code.inputs):
        return kept, ()
    names = container_sources(code)
    out = tuple(
        LeftOut(item.name, names.get(item.name), _has(item), _lowest(item))
        for item in code.inputs
        if not _linkable(item, number)
    )
    if not kept:
        first = out[0]
        where = (
            f"{first.source} (container {first.name})"
            if first.source
            else f"container {first.name} (no build record names its source)"
        )
        advice = _architectures_advice(sm, first.lowest)
        msg = (
            f"cannot link {code.path.name} for {sm}: {where} has no code for {sm} "
            f"({first.has}); LTO-IR built for sm_XY links for sm_XY and newer GPUs only. "
            f"{advice[0].upper()}{advice[1:]}"
        )
        raise LinkError(msg)
    for item in out:
        _logger.info(
            "left out of the link of %s for %s: %s has no code for it; what it defines is "
            "unavailable on this GPU",
            code.path.name,
            sm,
            item,
        )
    return kept, out


def left_out_note(left_out: Sequence[LeftOut], arch: str) -> str:
    """What a lookup or link error adds when containers were left out of the link for
    ``arch``: which, and how to serve what they define on that GPU ('' when none was)."""
    if not left_out:
        return ""
    number = parse_arch(arch)[1]
    lowest = [item.lowest for item in left_out if item.lowest is not None]
    newer = f"run on a GPU of sm_{min(lowest)} or newer" if lowest else "run on a newer GPU"
    return (
        f"{', '.join(map(str, left_out))} {'was' if len(left_out) == 1 else 'were'} left out "
        f"of the link for {arch} (no code for it), so a name defined there is unavailable on "
        f'this GPU: add "{number}" to that source\'s architectures (pyproject.toml: '
        f"[tool.cudaq.dispatch-kernels]; CMake: ARCHITECTURES), or {newer}"
    )


_UNRESOLVED = re.compile(r"Unresolved extern (?:function|variable) '([^']+)'")


def _with_left_out(exc: LinkError, left_out: tuple[LeftOut, ...], arch: str) -> LinkError:
    """``exc`` (nvJitLink's failure) saying which containers were left out, when a symbol
    was unresolved and some were: a left-out container may have defined it."""
    found = _UNRESOLVED.search(exc.log)
    if not left_out or found is None:
        return exc
    msg = f"{exc.message}; '{found.group(1)}' is unresolved and {left_out_note(left_out, arch)}"
    return type(exc)(msg, exc.log, exc.result)


@dataclass(frozen=True)
class PreparedLink:
    """A link's inputs read and hashed: everything but the architecture.

    :func:`prepare_link` needs no GPU and no nvJitLink, so it can run while CUDA
    creates its context (see :class:`~skbuild_cudaq.realtime.library.Library`);
    :meth:`finish` then takes the arch and returns the cached or linked cubin.
    """

    code: DeviceCode
    runtime: DeviceCode
    options: LinkOptions
    cache: LinkCache
    digest: str | None  #: the cache key without the arch, or None when the cache is off
    #: the nvJitLink identity the digest covers (see ``_nvjitlink.nvjitlink_identity``)
    identity: str | None = None

    @property
    def inputs(self) -> tuple[LinkInput, ...]:
        return self.runtime.inputs + self.code.inputs

    def finish(self, arch: str | int) -> LinkResult:
        """The cubin for ``arch``: from the cache, else linked (and stored)."""
        sm, _ = parse_arch(arch)
        runtime_name = "skbuild-cudaq's device run time"
        runtime = "run time"
        if self.options.bridge_paths is not None:
            bridge = " with the bridge " + ", ".join(str(f) for f in self.options.bridge_paths)
            runtime_name += bridge
            runtime += bridge
        _check_runtime((runtime_name, self.runtime.inputs), sm)
        # before the cache: a hit reports what was left out too (the key covers every
        # container and the arch, so it decides the selection)
        kept, left_out = _select(self.code, sm)
        groups = [(runtime_name, self.runtime.inputs), (str(self.code.path), kept)]
        inputs = self.runtime.inputs + kept
        key = None
        if self.digest is not None:
            key = cache_entry(self.digest, sm)
            cubin = self.cache.load(key)
            if cubin is not None:
                _logger.info("link cache hit for %s (%s)", self.code.path.name, sm)
                path = self.cache.path_of(key)
                return LinkResult(cubin, sm, self.code.path, True, path, left_out=left_out)

        opts = self.options.nvjitlink_options(sm)
        version = _nvjitlink.nvjitlink_version()  # loads nvJitLink
        _nvjitlink.check_versions(groups, version)
        if not self.options.isolated:
            _nvjitlink.warn_known_defect(version)
        if key is not None:
            # The key named the nvJitLink found without loading it; now that it is
            # loaded, key by the one actually loaded if that is another.
            identity = _nvjitlink.nvjitlink_identity()
            if identity != self.identity:
                _logger.info(
                    "link cache: nvJitLink loaded is not the one the key named (%s vs %s); "
                    "re-keying",
                    identity,
                    self.identity,
                )
                key = cache_entry(self._digest(identity), sm)
                cubin = self.cache.load(key)
                if cubin is not None:
                    _logger.info("link cache hit for %s (%s)", self.code.path.name, sm)
                    path = self.cache.path_of(key)
                    return LinkResult(cubin, sm, self.code.path, True, path, left_out=left_out)
        sources = f"{self.code.path} + {runtime} for {sm}"
        try:
            cubin, seconds = self._run_nvjitlink(inputs, opts, sources, sm)
        except LinkError as exc:
            raise _with_left_out(exc, left_out, sm) from None
        # a location that cannot be written: one warning, the cubin returned uncached
        stored = None if key is None else self.cache.store(key, cubin)
        return LinkResult(cubin, sm, self.code.path, False, stored, seconds, left_out)

    def _run_nvjitlink(
        self, inputs: tuple[LinkInput, ...], opts: list[str], sources: str, sm: str
    ) -> tuple[bytes, float]:
        """nvJitLink on ``inputs`` (in a child process when isolated): cubin and seconds."""
        with timed(_logger, f"nvJitLink {self.code.path.name} for {sm} ({len(inputs)} inputs)"):
            libraries = [(lib.name, lib.data) for lib in self.runtime.libraries]
            if self.options.isolated:
                from skbuild_cudaq.realtime.link._child import link_in_child

                blobs = [(i.name, i.container.data) for i in inputs]
                return link_in_child(
                    blobs,
                    opts,
                    sources,
                    self.options.timeout,
                    self.options.memory_limit,
                    libraries=libraries,
                )
            start = time.perf_counter()
            cubin = _nvjitlink.link(inputs, opts, sources=sources, libraries=libraries)
            return cubin, time.perf_counter() - start

    def _digest(self, identity: str) -> str:
        return link_digest(self.runtime, self.code, self.options, identity)


def link_digest(runtime: DeviceCode, code: DeviceCode, options: LinkOptions, identity: str) -> str:
    """The cache digest of linking ``runtime`` and ``code`` with nvJitLink ``identity``."""
    return cache_digest(
        [
            *(i.container.data for i in runtime.inputs + code.inputs),
            *(lib.data for lib in runtime.libraries),
        ],
        options.common_options(),
        identity,
    )


def prepare_link(
    binary: ModuleType | str | os.PathLike[str] | DeviceCode,
    options: LinkOptions | None = None,
    cache: LinkCache | None = None,
) -> PreparedLink:
    """Read ``binary``'s device code and the run time's and hash them (no GPU, no nvJitLink)."""
    options = options or LinkOptions()
    cache = default_cache() if cache is None else cache
    code = binary if isinstance(binary, DeviceCode) else device_code_of(binary)
    runtime = runtime_device_code(
        options.runtime_dir, options.bridge_paths, graph_launch=options.graph_launch
    )
    digest = identity = None
    if cache.enabled:
        identity = _nvjitlink.nvjitlink_identity()
        digest = link_digest(runtime, code, options, identity)
    return PreparedLink(code, runtime, options, cache, digest, identity)


@typed_arguments(
    options="LinkOptions(arch='sm_90') to link for an architecture, or None for this GPU"
)
def link_device_code(
    binary: ModuleType | str | os.PathLike[str] | DeviceCode,
    options: LinkOptions | None = None,
    *,
    cache: LinkCache | None = None,
) -> LinkResult:
    """Link ``binary``'s device code with the package's run time into one cubin.

    ``binary``: an extension module object, a path, or its
    :class:`~skbuild_cudaq.realtime.link.device_code.DeviceCode`. ``options``: how to link
    (default ``LinkOptions()``: for the current GPU, with the host-ring hooks, in this
    process); with ``options.arch`` set (``"sm_90"``) no GPU is needed. ``cache``: a
    :class:`~skbuild_cudaq.realtime.LinkCache` (default: from ``SKBUILD_CUDAQ_LINK_CACHE``;
    ``LinkCache(None)`` disables it). Returns the cubin with what was linked
    (:class:`LinkResult`). Raises :class:`~skbuild_cudaq.realtime.LinkError` (with
    nvJitLink's log), :class:`~skbuild_cudaq.realtime.errors.VersionMismatchError`, or
    :class:`~skbuild_cudaq.realtime.DeviceCodeError`.
    """
    prepared = prepare_link(binary, options, cache)
    arch = prepared.options.arch
    if arch is None:
        from skbuild_cudaq.realtime._driver import current_arch

        arch = current_arch()
    return prepared.finish(arch)
